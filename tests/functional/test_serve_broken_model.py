"""One broken model does not take the local server down: `tritonkit serve` serves the models that load and
prints one line per model that did not, with Triton's reason; `--strict` keeps the all-or-nothing start
that the containers use (docs/production.md)."""

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from deploy.client import connect, infer
from deploy.server import PROJECT_ROOT, free_ports
from tests.conftest import start_serve_command


def _repository_with_a_broken_copy(tmp_path: Path, repository: Path) -> Path:
    """``digits`` and ``broken``, a copy of it whose model.pt is cut to 1,000 bytes."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "digits").symlink_to(repository / "digits", target_is_directory=True)
    broken = repo / "broken"
    (broken / "1").mkdir(parents=True)
    config = (repository / "digits" / "config.pbtxt").read_text().replace('name: "digits"', 'name: "broken"')
    (broken / "config.pbtxt").write_text(config)
    shutil.copy(repository / "digits" / "labels.txt", broken / "labels.txt")
    (broken / "1" / "model.pt").write_bytes((repository / "digits" / "1" / "model.pt").read_bytes()[:1000])
    return repo


def test_serve_serves_the_models_that_load_and_names_the_one_that_did_not(tmp_path, repository):
    repo = _repository_with_a_broken_copy(tmp_path, repository)
    proc, lines, (http, _, _) = start_serve_command(repo, "--exit-timeout", "5", "--no-supervise")
    try:
        not_loaded = [line for line in lines if line.startswith("serve: not loaded:")]
        assert len(not_loaded) == 1, "".join(lines)
        assert not_loaded[0].startswith("serve: not loaded: broken: ")
        assert "PytorchStreamReader failed reading zip archive" in not_loaded[0], not_loaded[0]
        client = connect("http", f"127.0.0.1:{http}")
        probabilities = infer(client, "digits", {"PIXELS": np.zeros((1, 64), np.float32)})["PROBABILITIES"]
        assert probabilities.shape == (1, 10) and abs(float(probabilities.sum()) - 1) < 1e-4
        assert client.is_model_ready("digits") and not client.is_model_ready("broken")
        os.kill(proc.pid, signal.SIGTERM)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "no stub process or /dev/shm region left" in rest, rest


def test_strict_serve_fails_the_start_with_the_broken_models_reason(tmp_path, repository):
    repo = _repository_with_a_broken_copy(tmp_path, repository)
    http, grpc, metrics = free_ports()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tritonkit_cli",
            "serve",
            "--strict",
            "--repository",
            str(repo),
            "--http-port",
            str(http),
            "--grpc-port",
            str(grpc),
            "--metrics-port",
            str(metrics),
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "exited with code" in done.stderr and "before it was ready" in done.stderr
    assert "broken" in done.stderr and "PytorchStreamReader failed reading zip archive" in done.stderr, done.stderr
