"""The deployment tools the tests run offline: ``docker-compose`` (renders docker-compose.yml, no engine) and
``promtool`` (checks the Prometheus config and rules). Each one missing fails the test, naming ``make setup``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from deploy.server import PROJECT_ROOT


def compose(
    *args: str, password: str | None = "not-a-real-password", admin_key: str | None = "not-a-real-admin-key"
) -> subprocess.CompletedProcess:
    tool = shutil.which("docker-compose")
    if tool is None:
        pytest.fail("docker-compose is missing: run `make setup` (it installs Debian's docker-compose)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAFANA_", "COMPOSE_", "NGC_", "TRITON"))}
    if password is not None:
        env["GRAFANA_ADMIN_PASSWORD"] = password
    if admin_key is not None:
        env["TRITON_ADMIN_KEY"] = admin_key
    return subprocess.run([tool, *args], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=60)


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool is not installed: run `make setup` (deploy/setup.sh installs Prometheus)", pytrace=False)
    done = subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"promtool {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done
