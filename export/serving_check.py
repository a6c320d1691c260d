"""Optional variants that cannot take the server down: the serving runtime itself loads each one once, between
the export and the server, and one that does not load leaves the repository before the server reads it.

The production server runs ``--exit-on-error=true --strict-readiness=true`` (docker-compose.yml, deploy/k8s):
a model that does not load stops it, which is right for a required one. An optional variant (Torch-TensorRT,
ONNX Runtime on CUDA or TensorRT: ``export.variants.REQUIRED_FORMATS``) passed its export check in the export
image, whose onnxruntime (PyPI) and libraries are not the ones Triton serves with (its onnxruntime backend,
its TensorRT), so it may still fail there. In the serving image, after the export::

    python3 -m export.serving_check --repository /models

starts ``tritonserver`` on loopback (explicit model control, HTTP only), loads each optional variant the export
listed in ``.export-complete`` (``optional``), and removes the folder of each that does not load, one line
naming it and Triton's reason. The marker then lists them under ``not_exported`` and the check under
``serving_check``. Required models are not loaded here: the server's own fail-fast start covers them. With
nothing optional in the repository (``--target cpu``) no server starts.

Exit status: 0 checked (whether or not a variant was removed), 2 no finished export in the repository, 3 the
check's server did not start (the real one could not either).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from export.seed import COMPLETE_MARKER

START_TIMEOUT_S = 300.0
LOAD_TIMEOUT_S = 3600.0
"""One variant's load; ONNX Runtime's TensorRT accelerator builds its engines while loading (warmup)."""

Loader = Callable[[str], "str | None"]
"""Loads one model: None when it is ready, else Triton's reason."""


class CheckError(Exception):
    """The check's server did not start."""

    status = 3


class NoExport(CheckError):
    """No finished export to check."""

    status = 2


def read_marker(repository: Path) -> dict:
    path = Path(repository) / COMPLETE_MARKER
    try:
        marker = json.loads(path.read_text())
    except FileNotFoundError:
        raise NoExport(f"{path} is missing: the export has not finished; run the check after it") from None
    except json.JSONDecodeError as exc:
        raise NoExport(f"{path} is not JSON ({exc}): run the export again") from None
    if not isinstance(marker, dict):
        raise NoExport(f"{path} is not a JSON object: run the export again")
    return marker


def optional_models(repository: Path, marker: dict) -> list[str]:
    """The optional variants the export delivered that are still in the repository."""
    names = {str(n) for n in marker.get("optional", [])}
    return sorted(n for n in names if (Path(repository) / n / "config.pbtxt").is_file())


def check(repository: Path, marker: dict, load: Loader, log=print) -> dict[str, str]:
    """Load each optional variant with ``load``; remove those that do not load and record the outcome in the
    marker. Returns {removed model: reason}."""
    repository = Path(repository)
    names = optional_models(repository, marker)
    removed: dict[str, str] = {}
    for name in names:
        reason = load(name)
        if reason is None:
            log(f"serving-check: {name}: loads")
            continue
        shutil.rmtree(repository / name)
        removed[name] = reason
        log(f"serving-check: {name}: removed (optional; it does not load in this server): {reason}")
    write_outcome(repository, marker, names, removed)
    return removed


def write_outcome(repository: Path, marker: dict, checked: Sequence[str], removed: dict[str, str]) -> None:
    marker = {
        **marker,
        "optional": [n for n in marker.get("optional", []) if n not in removed],
        "not_exported": [
            *marker.get("not_exported", []),
            *(n for n in removed if n not in marker.get("not_exported", [])),
        ],
        "serving_check": {
            "loaded": [n for n in checked if n not in removed],
            "removed": removed,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    }
    path = Path(repository) / COMPLETE_MARKER
    staged = path.with_name(f"{COMPLETE_MARKER}.incoming")
    staged.write_text(json.dumps(marker) + "\n")
    staged.replace(path)  # a reader (the server's wait) never sees half a marker


class CheckServer:
    """``tritonserver`` on loopback with explicit model control, for the check only; a context manager."""

    def __init__(self, repository: Path, command: Sequence[str] = ("tritonserver",), env: dict | None = None):
        self.repository, self.command, self.env = Path(repository), list(command), env
        self.port = _free_port()
        self.process: subprocess.Popen | None = None
        self.log = tempfile.TemporaryFile()

    def arguments(self) -> list[str]:
        return [
            *self.command,
            f"--model-repository={self.repository}",
            "--model-control-mode=explicit",
            "--http-address=127.0.0.1",
            f"--http-port={self.port}",
            "--allow-grpc=false",
            "--allow-metrics=false",
            "--exit-on-error=false",
            "--strict-readiness=false",
            "--exit-timeout-secs=10",
        ]

    def __enter__(self) -> CheckServer:
        self.process = subprocess.Popen(
            self.arguments(), stdout=self.log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise CheckError(f"tritonserver exited with {self.process.returncode} at start: {self._tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v2/health/live", timeout=2):
                    return self
            except OSError:
                time.sleep(0.5)
        self.__exit__()
        raise CheckError(f"tritonserver was not live after {START_TIMEOUT_S:.0f} s: {self._tail()}")

    def load(self, model: str) -> str | None:
        url = f"http://127.0.0.1:{self.port}/v2/repository/models/{model}/load"
        request = urllib.request.Request(url, data=b"{}", method="POST", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=LOAD_TIMEOUT_S):
                return None
        except urllib.error.HTTPError as exc:
            return _first_line(_error_of(exc.read()))
        except OSError as exc:  # the server died or the load outlasted the timeout: the variant is not safe
            return _first_line(f"no answer to its load ({exc}); server log: {self._tail()}")

    def __exit__(self, *_exc) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()

    def _tail(self) -> str:
        self.log.seek(0)
        lines = [line for line in self.log.read().decode(errors="replace").splitlines() if line.strip()]
        return " | ".join(lines[-3:]) or "no output"


def run(repository: Path, command: Sequence[str] = ("tritonserver",), env: dict | None = None, log=print) -> int:
    """The check as the command runs it; returns the exit status."""
    try:
        marker = read_marker(repository)
        names = optional_models(repository, marker)
        if not names:
            write_outcome(repository, marker, [], {})
            log(f"serving-check: no optional variant in {repository}: nothing to load")
            return 0
        log(f"serving-check: loading {len(names)} optional variant(s) in this server: {', '.join(names)}")
        with CheckServer(repository, command, env) as server:
            removed = check(repository, marker, server.load, log)
    except CheckError as exc:
        print(f"serving-check: error: {exc}", file=sys.stderr)
        return exc.status
    log(f"serving-check: {len(names) - len(removed)} loaded, {len(removed)} removed")
    return 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _error_of(body: bytes) -> str:
    try:
        return str(json.loads(body).get("error") or body.decode(errors="replace"))
    except (ValueError, AttributeError):
        return body.decode(errors="replace")


def _first_line(text: str) -> str:
    line = next((s.strip() for s in text.splitlines() if s.strip()), "no reason given")
    return line if len(line) <= 500 else line[:497] + "..."


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m export.serving_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repository", type=Path, required=True, help="the exported model repository (writable)")
    parser.add_argument("--tritonserver", default="tritonserver", help="the server binary (default: on PATH)")
    args = parser.parse_args(argv)
    # A stop (docker compose down, a pod deleted) unwinds like an error, so the check's server is stopped too.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    return run(args.repository, (args.tritonserver,))


if __name__ == "__main__":
    sys.exit(main())
