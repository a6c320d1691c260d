"""A burst of SIGTERM/SIGINT at a random moment stops `tritonkit serve` (and a measurement's local server)
cleanly, every time: the process exits and no tritonserver, stub or /dev/shm region is left.

Docker, Kubernetes, `timeout` and a person pressing Ctrl-C twice all send more than one signal. A hang shows
as the test running into its pytest-timeout; the assertions are about behaviour, never about time.
"""

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from deploy.server import PROJECT_ROOT, free_ports
from tests.conftest import read_until

ROUNDS = 6
SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _repository_with_digits(tmp_path: Path, repository: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "digits").symlink_to(repository / "digits", target_is_directory=True)
    return repo


def _burst(proc: subprocess.Popen, rng: random.Random, seen: dict[int, psutil.Process]) -> int:
    """Send 5-40 stop signals with gaps from none to 50 ms; note every descendant seen meanwhile."""
    count = rng.randint(5, 40)
    for _ in range(count):
        _note_family(proc.pid, seen)
        try:
            os.kill(proc.pid, rng.choice(SIGNALS))
        except ProcessLookupError:
            break
        gap = rng.choice((0.0, 0.0, rng.uniform(0, 0.002), rng.uniform(0, 0.05)))
        if gap:
            time.sleep(gap)
    return count


def _note_family(pid: int, seen: dict[int, psutil.Process]) -> None:
    try:
        for child in psutil.Process(pid).children(recursive=True):
            seen.setdefault(child.pid, child)
    except psutil.Error:
        pass


def _alive(processes) -> list[str]:
    out = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} {' '.join(p.cmdline())[:80]}")
        except psutil.NoSuchProcess:
            pass
    return out


def _stop_everything(proc: subprocess.Popen, seen: dict[int, psutil.Process]) -> None:
    """Whatever the outcome (a hang ends in the timeout, an assertion fails): leave nothing running."""
    _note_family(proc.pid, seen)
    for p in [*seen.values(), proc]:
        try:
            p.kill()
        except (psutil.Error, ProcessLookupError, OSError):
            pass
    proc.wait()


@pytest.mark.timeout(420)
def test_serve_stops_cleanly_on_a_burst_of_signals_at_any_moment(tmp_path, repository):
    repo = _repository_with_digits(tmp_path, repository)
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    for round_ in range(ROUNDS):
        moment = "loading" if round_ % 2 == 0 else "ready"
        http, grpc, metrics = free_ports()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tritonkit_cli",
                "serve",
                "--repository",
                str(repo),
                "--http-port",
                str(http),
                "--grpc-port",
                str(grpc),
                "--metrics-port",
                str(metrics),
                "--exit-timeout",
                "5",
            ],
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        seen: dict[int, psutil.Process] = {}
        try:
            # The handlers are in place once the command says it is starting the server.
            lines = read_until(proc, "serve: starting" if moment == "loading" else "serve: ready", 240)
            assert ("serve: starting" if moment == "loading" else "serve: ready") in lines[-1], "".join(lines)
            time.sleep(rng.uniform(0, 2.5) if moment == "loading" else rng.uniform(0, 0.5))
            sent = _burst(proc, rng, seen)
            rest, _ = proc.communicate()  # no timeout: a hang is the failure, caught by pytest-timeout
            output = "".join(lines) + rest
            where = f"round {round_} (seed {seed}, {moment}, {sent} signals):\n{output}"
            assert proc.returncode == 0, where
            assert "no stub process or /dev/shm region left" in output, where
            assert _alive(seen.values()) == [], where
        finally:
            _stop_everything(proc, seen)


RUN_WITH_SERVER = textwrap.dedent("""
    import argparse, sys, time
    from loadtest.drive.target import add_server_arguments, run_with_server

    parser = argparse.ArgumentParser()
    add_server_arguments(parser, local_only=True)
    args = parser.parse_args(sys.argv[1:])

    def work(endpoints, server):
        print("working", flush=True)
        while True:  # a measurement that polls nothing: only the signal's SystemExit ends it
            time.sleep(0.05)

    run_with_server(args, ("digits",), work)
""")


@pytest.mark.timeout(300)
def test_a_measurements_local_server_is_stopped_on_a_burst_of_signals(tmp_path, repository):
    repo = _repository_with_digits(tmp_path, repository)
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    for round_ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", RUN_WITH_SERVER, "--repository", str(repo)],
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        seen: dict[int, psutil.Process] = {}
        try:
            lines = read_until(proc, "working", 240)
            assert "working" in lines[-1], "".join(lines)
            _note_family(proc.pid, seen)
            assert any("tritonserver" in " ".join(p.cmdline()) for p in seen.values()), "".join(lines)
            time.sleep(rng.uniform(0, 0.5))
            sent = _burst(proc, rng, seen)
            rest, _ = proc.communicate()
            where = f"round {round_} (seed {seed}, {sent} signals):\n{''.join(lines)}{rest}"
            assert proc.returncode in (128 + signal.SIGTERM, 128 + signal.SIGINT), where
            assert "Traceback" not in rest, where
            assert _alive(seen.values()) == [], where
        finally:
            _stop_everything(proc, seen)
