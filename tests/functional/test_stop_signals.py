"""A burst of SIGTERM/SIGINT at a random moment stops `tritonkit serve` (and a measurement's local server)
cleanly, every time: the process exits and no tritonserver, stub or /dev/shm region is left. So does one
SIGTERM or SIGINT, once its server is ready, to each long-running command that starts a server (its own or
Model Analyzer's), and
an exception raised inside the one lifecycle (deploy/lifecycle.py).

Docker, Kubernetes, `timeout` and a person pressing Ctrl-C twice all send more than one signal. A hang shows
as the test running into its pytest-timeout; the assertions are about behaviour, never about time.
"""

import concurrent.futures
import dataclasses
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from deploy.lifecycle import local_server
from deploy.server import PROJECT_ROOT, free_ports
from loadtest.generators.locust import runner
from tests.conftest import read_until, server_config

# A server start (~8 s on CI) per run: while it loads or once it is ready (drawn), at a moment and with a burst
# drawn from a fresh seed, so every CI run tries another (the per-command test below sends one signal to each
# long-running command once ready, and the measurement's burst test a burst once its server is ready).
SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _repository_with_digits(tmp_path: Path, repository: Path) -> Path:
    """A repository of digits alone, one instance (a stub that imports torch fewer per server start: the signals
    are the subject here, not the instances), its files linked to the session's."""
    served = repository / "digits"
    digits = tmp_path / "repo" / "digits"
    digits.mkdir(parents=True)
    for entry in served.iterdir():
        if entry.name != "config.pbtxt":
            (digits / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    config = (served / "config.pbtxt").read_text()
    one = config.replace("instance_group {\n  count: 2\n", "instance_group {\n  count: 1\n", 1)
    assert one != config, "digits' committed config no longer has 2 instances: update this helper"
    (digits / "config.pbtxt").write_text(one)
    return digits.parent


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
    for round_ in range(1):
        moment = rng.choice(("loading", "ready"))
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
    from loadtest.cli.flags import add_server_flags
    from loadtest.target.endpoints import run_with_server

    parser = argparse.ArgumentParser()
    add_server_flags(parser, urls=False)
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
    for round_ in range(1):  # a server start (~11 s on CI); the seed varies the moment from run to run
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


# Each long-running tritonkit command that starts a server of its own, as a user runs it, on digits (the
# generation studies: the tiny generator steps), with its shortest settings; durations and counts keep it at work
# when the signal comes (it ends at the signal, so they cost nothing). Per command: what `python -m` runs, the
# flags, the stop signal: SIGTERM (Docker, Kubernetes, `timeout`) or SIGINT (Ctrl-C), half each, since both go
# through the one handler (deploy/signals.py), the burst tests above send both; and the load generator the signal
# waits for (a word of its command line: Locust, perf_analyzer, GenAI-Perf, AIPerf), which must be gone too, or None
# (in-process work). capacity imports torch after its server is ready: a signal then must wait for the import.
# demo and gpu-check export digits into a folder of their own first; analyzer's server is Model Analyzer's.
REPO, OUT, TINY = ("--repository", "{repo}"), ("--out", "{out}"), ("--repository", "{tiny}")
TERM, INT = signal.SIGTERM, signal.SIGINT
LOCUST = runner.LAUNCHER  # in every Locust process's command line
LONG_RUNNING = {
    "loadtest": (
        ["tritonkit_cli", "loadtest"],
        ["--model", "digits", "--users", "1", "--duration", "600", *REPO, *OUT],
        TERM,
        LOCUST,
    ),
    "capacity": (
        ["tritonkit_cli", "capacity"],
        ["digits", "--slo-p99-ms", "1000", "--duration", "600", *REPO, *OUT],
        INT,
        "perf_analyzer",  # capacity's generator for a tensor model
    ),
    "tune": (
        ["tritonkit_cli", "tune"],
        ["digits", "--slo-p99-ms", "1000", "--users", "1", "--measurement-ms", "600000", "--dry-run", *REPO, *OUT],
        TERM,
        "perf_analyzer",
    ),
    "compare": (
        ["tritonkit_cli", "compare"],
        ["digits", "--aa", "--users", "1", "--trials", "2", "--duration", "600", *REPO, *OUT],
        INT,
        "perf_analyzer",
    ),
    "bench": (
        ["tritonkit_cli", "bench"],
        ["--models", "digits", "--trials", "1", "--duration", "60", *REPO, *OUT],
        TERM,
        None,
    ),
    "overload": (
        ["tritonkit_cli", "overload"],
        ["--model", "digits", "--saturation-rps", "50", "--factors", "1", "--trials", "1", "--duration", "600"]
        + ["--max-queue-size", "1", "--budget-ms", "1000", *REPO, *OUT],
        INT,
        LOCUST,
    ),
    "soak": (
        ["tritonkit_cli", "soak"],
        ["--model", "digits", "--saturation-rps", "20", "--minutes", "10", "--no-split-cpus", *REPO, *OUT],
        TERM,
        LOCUST,
    ),
    "bench-generation": (
        ["tritonkit_cli", "bench-generation"],
        ["--tiny", "--streams", "1", "--no-step-modes"],
        INT,
        None,
    ),
    "genai-perf": (
        ["tritonkit_cli", "genai-perf"],
        ["--requests", "100000", "--input-tokens", "16", "--output-tokens", "8", *TINY, *OUT],
        TERM,
        ".venv-genai-perf",
    ),
    "aiperf": (
        ["tritonkit_cli", "aiperf"],
        ["--requests", "100000", "--input-tokens", "16", "--output-tokens", "8", *TINY, *OUT],
        INT,
        ".venv-aiperf",
    ),
    "first-request": (
        ["tritonkit_cli", "first-request"],
        ["--model", "digits", "--model-warmup", "on", "--steady", "1000000", *REPO],
        INT,
        None,
    ),
    "demo": (
        ["tritonkit_cli", "demo"],
        ["--models", "digits", "--campaign-seconds", "600", "--repository", "{fresh}", "--reports", "{out}"],
        TERM,
        LOCUST,
    ),
    "gpu-check": (["tritonkit_cli", "gpu-check"], ["{out}", "--dry-run"], INT, None),
    "analyzer": (
        ["tritonkit_cli", "analyzer"],
        ["digits", "--budget-ms", "1000", "--max-instances", "1", "--max-batch-size", "8", *REPO, *OUT],
        TERM,
        "perf_analyzer",
    ),
}


@dataclasses.dataclass
class Stopped:
    """One long-running command stopped by one signal once its server was ready: what the test judges."""

    failure: str = ""
    """Why the command could not be brought to the signal (it exited first, or never started its server)."""
    returncode: int | None = None
    output: str = ""
    server_left: list[str] = dataclasses.field(default_factory=list)
    regions_seen: int = 0
    regions_left: list[str] = dataclasses.field(default_factory=list)
    family_left: list[str] = dataclasses.field(default_factory=list)


STOP_TIMEOUT_S = 240
"""A command still running this long after its signal hangs: the failure (and the server start's limit too)."""
AT_ONCE = 3
"""Commands run side by side: most of each one's time is its server's start and stop, idle on a 2-core machine."""


def _stop_once(study: str, tmp_path: Path, repository: Path, tiny: Path | None) -> Stopped:
    repo = _repository_with_digits(tmp_path, repository)
    how, flags, signum, generator = LONG_RUNNING[study]
    values = {"repo": repo, "out": tmp_path / "out", "tiny": tiny, "fresh": tmp_path / "fresh"}
    values["fresh"].mkdir()  # an empty repository: the command exports into it
    argv = [sys.executable, "-m", *how, *(a.format(**values) for a in flags)]
    output = tmp_path / "output.txt"
    with open(output, "w") as sink:  # a file, not a pipe: nobody reads the output while the study runs
        proc = subprocess.Popen(argv, cwd=PROJECT_ROOT, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    seen: dict[int, psutil.Process] = {}
    try:
        failure = _wait_for_its_server(proc, seen, output)
        if not failure and generator:
            failure = _wait_for(proc, seen, output, generator)
        if failure:
            return Stopped(failure=failure)
        time.sleep(0.5)  # the study's own ready poll (every 0.2 s) sees it too: the signal lands in its work
        _note_family(proc.pid, seen)
        server = [p for p in seen.values() if _in_a_tritonserver_family(p)]  # the server and its stubs
        regions = _shm_regions(server)
        os.kill(proc.pid, signum)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return Stopped(failure=f"still running {STOP_TIMEOUT_S} s after the signal:\n{output.read_text()[-4000:]}")
        stopped = Stopped(returncode=proc.returncode, output=output.read_text(), regions_seen=len(regions))
        stopped.server_left = _alive(server)
        stopped.regions_left = [r for r in regions if Path(r).exists()]
        # The load generator and anything else it started; helpers that end once their parent has (such as
        # multiprocessing's resource tracker) get the time to notice.
        psutil.wait_procs(list(seen.values()), timeout=10)
        stopped.family_left = _alive(seen.values())
        return stopped
    finally:
        _stop_everything(proc, seen)


@pytest.fixture(scope="module")
def stopped_commands(repository, tiny_generator_repo, tmp_path_factory) -> dict[str, Stopped]:
    """Every long-running command, ``AT_ONCE`` at a time, each stopped once its server is ready; an unexpected
    error in one is its test's failure, not the others'."""

    def one(study: str) -> Stopped:
        try:
            return _stop_once(study, tmp_path_factory.mktemp(study), repository, tiny_generator_repo)
        except Exception as exc:  # noqa: BLE001 - reported by the study's own test
            return Stopped(failure=f"{type(exc).__name__}: {exc}")

    with concurrent.futures.ThreadPoolExecutor(AT_ONCE) as pool:
        return dict(zip(LONG_RUNNING, pool.map(one, LONG_RUNNING), strict=True))


@pytest.mark.timeout(900)  # the first of them waits for all (about 15 x 15 s / AT_ONCE on CI)
@pytest.mark.parametrize("study", LONG_RUNNING)
def test_a_long_running_command_stopped_once_its_server_is_ready_leaves_nothing(study, stopped_commands):
    got = stopped_commands[study]
    signum = LONG_RUNNING[study][2]
    where = f"{study} ({signal.Signals(signum).name}): {got.failure or got.output[-4000:]}"
    assert not got.failure, where
    assert got.regions_seen, "the Python-backend stubs map /dev/shm regions; none were found"
    assert got.returncode == 128 + signum, where
    assert "Traceback" not in got.output, where
    assert got.server_left == [], where
    assert got.regions_left == [], where
    assert got.family_left == [], where


@pytest.mark.timeout(300)
def test_an_exception_inside_the_lifecycle_passes_through_and_leaves_nothing(tmp_path, repository):
    repo = _repository_with_digits(tmp_path, repository)
    with pytest.raises(RuntimeError, match="the work failed"):
        with local_server(server_config(repo, load_models=("digits",))) as server:
            family = [psutil.Process(pid) for pid in (server.process.pid, *server.stub_pids())]
            regions = server.shm_regions()
            raise RuntimeError("the work failed")
    assert len(family) > 1 and regions, "the server's stubs and their /dev/shm regions were not seen"
    assert _alive(family) == [] and [r for r in regions if Path(r).exists()] == []
    assert server.left_behind == []


def _wait_for_its_server(proc: subprocess.Popen, seen: dict[int, psutil.Process], output: Path) -> str:
    """Until a tritonserver under ``proc`` answers ready (``proc``'s descendants noted meanwhile); why not, else ""."""
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while proc.poll() is None and time.monotonic() < deadline:
        _note_family(proc.pid, seen)
        servers = [p for p in seen.values() if _is_tritonserver(p)]
        if servers and all(_ready(p) for p in servers):
            return ""
        time.sleep(0.1)
    return f"{_ended(proc)} before its server was ready:\n{output.read_text()[-4000:]}"


def _wait_for(proc: subprocess.Popen, seen: dict[int, psutil.Process], output: Path, word: str) -> str:
    """Until a process under ``proc`` whose command line holds ``word`` runs (the command's load generator); why
    not, else ""."""
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while proc.poll() is None and time.monotonic() < deadline:
        _note_family(proc.pid, seen)
        if any(word in " ".join(_cmdline(p)) for p in seen.values() if p.is_running()):
            return ""
        time.sleep(0.1)
    return f"{_ended(proc)} before {word} ran:\n{output.read_text()[-4000:]}"


def _ended(proc: subprocess.Popen) -> str:
    code = proc.poll()
    return f"still running after {STOP_TIMEOUT_S} s" if code is None else f"exited with {code}"


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:  # it exited between the listing and the read
        return []


def _is_tritonserver(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.name() == "tritonserver"
    except psutil.Error:
        return False


def _in_a_tritonserver_family(p: psutil.Process) -> bool:
    try:
        return _is_tritonserver(p) or any(_is_tritonserver(parent) for parent in p.parents())
    except psutil.Error:
        return False


def _ready(server: psutil.Process) -> bool:
    try:
        port = _http_port(server.cmdline())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2) as response:
            return response.status == 200
    except (psutil.Error, ValueError, OSError):
        return False


def _http_port(cmdline: list[str]) -> str:
    """``--http-port=N`` (LocalServer) or ``--http-port N`` (Model Analyzer's local launch)."""
    for flag, value in zip(cmdline, [*cmdline[1:], ""], strict=True):
        if flag.startswith("--http-port="):
            return flag.split("=", 1)[1]
        if flag == "--http-port":
            return value
    raise ValueError("no --http-port")


def _shm_regions(processes) -> set[str]:
    regions = set()
    for p in processes:
        try:
            regions.update(m.path for m in p.memory_maps() if m.path.startswith("/dev/shm/"))
        except psutil.Error:
            pass
    return regions
