"""A small server of its own for tests that crash, reload or stop it: a repository holding only ``digits``
and the scans to send it (test_stub_crash.py, test_reload_shutdown.py)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np

from deploy.server import DEFAULT_REPOSITORY, LocalServer, ServerConfig, free_ports


def digits_repository(root: Path) -> Path:
    """A repository holding only a copy of ``digits`` (exported first when ``make export`` has not run)."""
    repo = root / "repo"
    repo.mkdir(parents=True, exist_ok=True)
    source = DEFAULT_REPOSITORY / "digits"
    if not (source / "1" / "model.pt").is_file():
        from export.catalog import entry
        from export.pipeline import export_entry

        staging = root / "export"
        for done in export_entry(entry("digits"), staging):
            assert done.result.ok, done.result.summary()
        source = staging / "digits"
    shutil.copytree(source, repo / "digits", ignore=shutil.ignore_patterns("__pycache__"))
    # These tests are about crashes, reloads and shutdown, not overload: no queue policy that refuses
    # requests (a tuned or campaign export may have written one into the shared repository).
    config = repo / "digits" / "config.pbtxt"
    config.write_text(re.sub(r"\n\s*default_queue_policy \{[^}]*\}", "", config.read_text()))
    return repo


def small_server(repo: Path, **kwargs) -> LocalServer:
    http, grpc, metrics = free_ports()
    config = ServerConfig(
        model_repository=repo,
        http_port=http,
        grpc_port=grpc,
        metrics_port=metrics,
        ready_timeout_s=180,
        exit_timeout_s=kwargs.pop("exit_timeout_s", 10),
        **kwargs,
    )
    return LocalServer(config).start()


def scans(n: int = 32) -> np.ndarray:
    from sklearn.datasets import load_digits

    return load_digits().data[:n].astype(np.float32)
