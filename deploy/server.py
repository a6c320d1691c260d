"""The local Triton Inference Server: one object that starts, waits for ready, stops and cleans up.

The server is the real ``tritonserver`` 2.51 shipped in the ``nvidia-pytriton`` wheel. This module
assembles a backend folder for it (the wheel's Python backend with the stub matching this
interpreter, plus every folder of the project's ``backends/``), sets what the stub needs to find
the virtual environment, and makes sure that stopping leaves no stub process and no ``/dev/shm``
region behind. The pytest fixtures use it directly; the commands hold it through ``deploy/lifecycle.py``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil

from deploy import security
from deploy.client import ModelControl, one_line
from deploy.errors import ServerError, ServerStartError, ServerStopRequested

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PROJECT_BACKENDS = PROJECT_ROOT / "backends"
DEFAULT_REPOSITORY = PROJECT_ROOT / "model_repository"
MODEL_CONTROL_MODES = ("none", "poll", "explicit")


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer port") from None


def completes_its_config(repository: Path) -> bool:
    """Whether a Python model of ``repository`` defines ``auto_complete_config`` (in a .py file of one of its
    model's version folders, where the Python backend looks for ``model.py``): only then does Triton's
    auto-completion, and the stub it starts per load, do anything."""
    for source in Path(repository).glob("*/*/*.py"):
        try:
            if "def auto_complete_config" in source.read_text(encoding="utf-8", errors="replace"):
                return True
        except OSError:
            continue
    return False


def free_ports(count: int = 3) -> list[int]:
    """``count`` distinct loopback ports free right now (all held open together, so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclasses.dataclass
class ServerConfig:
    """How to run the local server. Defaults come from the environment where the design says so."""

    model_repository: Path = dataclasses.field(
        default_factory=lambda: Path(os.environ.get("MODEL_REPOSITORY", DEFAULT_REPOSITORY))
    )
    """The Triton model repository (``MODEL_REPOSITORY``)."""
    address: str = "127.0.0.1"
    """Address for all three endpoints; loopback unless you mean to expose the server, which then needs
    ``TRITON_ADMIN_KEY``: the admin APIs of :data:`deploy.security.RESTRICTED_APIS` require it."""
    http_port: int = dataclasses.field(default_factory=lambda: _env_int("HTTP_PORT", 8000))
    """KServe v2 HTTP/REST port (``HTTP_PORT``)."""
    grpc_port: int = dataclasses.field(default_factory=lambda: _env_int("GRPC_PORT", 8001))
    """KServe v2 gRPC port (``GRPC_PORT``)."""
    metrics_port: int = dataclasses.field(default_factory=lambda: _env_int("METRICS_PORT", 8002))
    """Prometheus metrics port (``METRICS_PORT``)."""
    model_control_mode: str = "explicit"
    """``none`` | ``poll`` | ``explicit``; explicit lets load tests swap configs without a restart."""
    load_models: tuple[str, ...] = ("*",)
    """Models loaded at start in explicit mode; ``*`` loads the whole repository."""
    response_cache_bytes: int = 0
    """Size of the local response cache; 0 disables it. Models opt in with ``response_cache``."""
    summary_latencies: bool = True
    """Export latency quantile summaries (p50/p90/p95/p99) next to the counters."""
    exit_timeout_s: int = 30
    """How long shutdown waits for in-flight requests before giving up."""
    log_verbose: int = 0
    """Triton's ``--log-verbose`` level."""
    ready_timeout_s: float = 420.0
    """How long :meth:`LocalServer.start` waits for ``/v2/health/ready``."""
    extra_args: tuple[str, ...] = ()
    """Further ``tritonserver`` flags, passed through unchanged."""
    cpus: frozenset[int] = frozenset()
    """CPUs the server and its backend stubs may run on (Linux affinity; empty = all). Measurements pin the
    server and the load generator to different CPUs so neither steals the other's time."""
    supervise: bool = False
    """Run a :class:`deploy.supervisor.Supervisor`: reload a model whose Python-backend stub died
    (explicit model-control mode only). ``tritonkit serve`` turns it on unless ``--no-supervise``."""
    strict: bool = True
    """Every model must load, or the server does not start (Triton's default, and the containers'). False:
    the server comes up with the models that loaded (``--exit-on-error=false --strict-readiness=false``) and
    :meth:`LocalServer.unavailable_models` says which did not and why; ``tritonkit serve`` without ``--strict``."""
    auto_complete: bool | None = None
    """Triton's config auto-completion. The Python backend completes a config by starting one more stub per
    model load (an interpreter that imports the model's packages, then a one-second health check): about 3 s
    of every load and reload here, spent for nothing when no model defines ``auto_complete_config`` (the
    project's runtimes do not; its export writes every field). None: on only when a Python file of a model's
    version folder defines it (:func:`completes_its_config`); False adds ``--disable-auto-complete-config``."""

    def __post_init__(self) -> None:
        self.model_repository = Path(self.model_repository).resolve()
        if not self.model_repository.is_dir():
            raise ValueError(f"model_repository {str(self.model_repository)!r} is not a directory")
        if self.model_control_mode not in MODEL_CONTROL_MODES:
            raise ValueError(f"model_control_mode {self.model_control_mode!r} is not one of {MODEL_CONTROL_MODES}")
        ports = {"http_port": self.http_port, "grpc_port": self.grpc_port, "metrics_port": self.metrics_port}
        for name, port in ports.items():
            if not 0 < port < 65536:
                raise ValueError(f"{name}={port} is not a TCP port")
        if len(set(ports.values())) != 3:
            raise ValueError(f"http, grpc and metrics ports must differ, got {ports}")
        if self.supervise and self.model_control_mode != "explicit":
            raise ValueError("supervise needs model_control_mode='explicit' (it reloads through model control)")
        security.flags_for(self.address)  # beyond loopback, refuse to start with the admin APIs open
        if self.response_cache_bytes < 0:
            raise ValueError(f"response_cache_bytes={self.response_cache_bytes} is negative")
        self.cpus = frozenset(self.cpus)
        if self.cpus and not self.cpus <= os.sched_getaffinity(0):
            raise ValueError(
                f"cpus {sorted(self.cpus)} are not all among this process's CPUs {sorted(os.sched_getaffinity(0))}"
            )

    @property
    def http_url(self) -> str:
        return f"{self.address}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.address}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.address}:{self.metrics_port}/metrics"


@dataclasses.dataclass(frozen=True)
class TritonDistribution:
    """Where the ``nvidia-pytriton`` wheel keeps the server, its libraries and the stubs."""

    root: Path

    @classmethod
    def find(cls) -> TritonDistribution:
        try:
            import pytriton
        except ImportError as exc:
            raise ServerStartError("nvidia-pytriton is not installed: run `make setup`") from exc
        root = Path(pytriton.__file__).resolve().parent / "tritonserver"
        if not (root / "bin" / "tritonserver").exists():
            raise ServerStartError(f"no tritonserver binary under {root}")
        return cls(root)

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "tritonserver"

    @property
    def libs(self) -> Path:
        return self.root.parent.parent / "nvidia_pytriton.libs"

    @property
    def python_backend(self) -> Path:
        return self.root / "backends" / "python"

    @property
    def caches(self) -> Path:
        return self.root / "caches"

    def stub(self, python_version: str) -> Path:
        stub = self.root / "python_backend_stubs" / python_version / "triton_python_backend_stub"
        if not stub.exists():
            raise ServerStartError(f"no Python-backend stub for Python {python_version} in {stub.parent.parent}")
        return stub


def assemble_backends(dist: TritonDistribution, target: Path, project_backends: Path = PROJECT_BACKENDS) -> Path:
    """Build the ``--backend-directory``: the wheel's Python backend plus the project's backends."""
    target.mkdir(parents=True, exist_ok=True)
    python_dir = target / "python"
    python_dir.mkdir(exist_ok=True)
    # Copies, not symlinks: Triton refuses a backend library whose real path leaves the folder.
    for item in ("libtriton_python.so", "triton_python_backend_utils.py"):
        shutil.copy2(dist.python_backend / item, python_dir / item)
    shutil.copy2(
        dist.stub(f"{sys.version_info.major}.{sys.version_info.minor}"), python_dir / "triton_python_backend_stub"
    )
    # A folder holding model.py is a Python-based backend: backends/pytorch serves pytorch_libtorch models.
    for backend in sorted(project_backends.iterdir()) if project_backends.is_dir() else []:
        if (backend / "model.py").is_file():
            shutil.copytree(
                backend, target / backend.name, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__")
            )
    return target


class LocalServer:
    """A running ``tritonserver``; use as a context manager or call :meth:`start` and :meth:`stop`."""

    def __init__(self, config: ServerConfig | None = None, workdir: Path | None = None):
        self.config = config or ServerConfig()
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="tritonkit-server-"))
        self.log_path = self.workdir / "tritonserver.log"
        self.trace_file = self.workdir / "trace" / "trace.json"
        """Where Triton writes request traces, ``trace.json.N`` beside it (none until a trace level is set)."""
        self.process: subprocess.Popen | None = None
        self._shm_seen: set[str] = set()
        self.supervisor = None
        """The running :class:`deploy.supervisor.Supervisor` when ``config.supervise``; its ``events``."""
        self.left_behind: list[str] = []
        """What the last :meth:`stop` could not clean up (processes, ``/dev/shm`` regions)."""

    # -- lifecycle ---------------------------------------------------------------------------
    def command(self) -> list[str]:
        cfg = self.config
        dist = TritonDistribution.find()
        backends = assemble_backends(dist, self.workdir / "backends")
        args = [
            str(dist.binary),
            f"--model-repository={cfg.model_repository}",
            f"--backend-directory={backends}",
            f"--model-control-mode={cfg.model_control_mode}",
            f"--http-address={cfg.address}",
            f"--http-port={cfg.http_port}",
            f"--grpc-address={cfg.address}",
            f"--grpc-port={cfg.grpc_port}",
            f"--metrics-address={cfg.address}",
            f"--metrics-port={cfg.metrics_port}",
            "--allow-gpu-metrics=false",
            f"--exit-timeout-secs={cfg.exit_timeout_s}",
            f"--log-verbose={cfg.log_verbose}",
            f"--metrics-config=summary_latencies={'true' if cfg.summary_latencies else 'false'}",
            # Tracing off, its file set: a file can only be named at start, and a measurement samples each
            # request's server-side times by turning a model's trace level on for its run (loadtest's trace).
            f"--trace-config=triton,file={self.trace_file}",
            "--trace-config=level=OFF",
        ]
        if cfg.model_control_mode == "explicit":
            args += [f"--load-model={name}" for name in cfg.load_models]
        if cfg.response_cache_bytes:
            args += [f"--cache-directory={dist.caches}", f"--cache-config=local,size={cfg.response_cache_bytes}"]
        if not cfg.strict:  # ready = the server is up; a model that failed to load stays UNAVAILABLE
            args += ["--exit-on-error=false", "--strict-readiness=false"]
        auto_complete = (
            cfg.auto_complete if cfg.auto_complete is not None else completes_its_config(cfg.model_repository)
        )
        if not auto_complete:
            args.append("--disable-auto-complete-config")
        return args + security.flags_for(cfg.address) + list(cfg.extra_args)

    def environment(self) -> dict[str, str]:
        dist = TritonDistribution.find()
        env = dict(os.environ)
        # The stub ignores PYTHONPATH; it finds the venv through the first python3 on PATH.
        env["PATH"] = f"{Path(sys.prefix) / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        # The stub links libpython3.X by name; an interpreter built with a shared libpython (pyenv's) puts its
        # own first, else the stub takes the system's, whose C API can lag the interpreter's standard library
        # (seen: the system's 3.11.2 under pyenv's 3.11.7 fails to import ssl, so neither could transformers).
        own = sysconfig.get_config_var("LIBDIR") if sysconfig.get_config_var("Py_ENABLE_SHARED") else None
        paths = (str(dist.libs), own, env.get("LD_LIBRARY_PATH"))
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in paths if p)
        env.pop("PYTHONPATH", None)
        return env

    def start(self, should_stop: Callable[[], bool] | None = None) -> LocalServer:
        """Start the server and wait until it is ready; ``should_stop()`` turning true while it loads stops it
        and raises :class:`ServerStopRequested` (a signal before ready: nothing is left running)."""
        if self.process is not None:
            raise ServerError("server already started")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.trace_file.parent.mkdir(exist_ok=True)
        log = open(self.log_path, "wb")
        try:
            self.process = subprocess.Popen(
                self.command(),
                env=self.environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                # Set in the child before exec: every thread and stub of the server inherits it.
                preexec_fn=(lambda: os.sched_setaffinity(0, self.config.cpus)) if self.config.cpus else None,
            )
        finally:
            log.close()
        try:
            self.wait_ready(self.config.ready_timeout_s, should_stop)
            if self.config.supervise:
                from deploy.supervisor import Supervisor

                self.supervisor = Supervisor(self.process.pid, self.config.http_url, headers=self._admin_headers())
                self.supervisor.start()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout_s: float, should_stop: Callable[[], bool] | None = None) -> None:
        deadline = time.monotonic() + timeout_s
        url = f"http://{self.config.http_url}/v2/health/ready"
        while time.monotonic() < deadline:
            if should_stop is not None and should_stop():
                raise ServerStopRequested("asked to stop before the server was ready")
            if self.process.poll() is not None:
                raise ServerStartError(
                    f"tritonserver exited with code {self.process.returncode} before it was ready",
                    self.log_excerpt(),
                )
            if _http_ok(url):
                self._remember_shm()
                return
            time.sleep(0.2)
        raise ServerStartError(f"tritonserver was not ready at {url} within {timeout_s:.0f} s", self.log_excerpt())

    def stop(self) -> list[str]:
        """Stop the server (SIGINT, then SIGKILL after the exit timeout) and clean up after it.

        Returns what could not be cleaned up (empty when no process and no region is left).
        """
        if self.supervisor is not None:
            self.supervisor.stop()  # first: the stubs that stopping ends are no crash to repair
        if self.process is None:
            return []
        proc, self.process = self.process, None
        family = self._process_family(proc.pid)
        self._remember_shm(family)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=self.config.exit_timeout_s + 15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        # Stubs of a server that was killed, or that died, can outlive it.
        for child in family:
            try:
                child.kill()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(family, timeout=10)
        for region in self._shm_seen:
            Path(region).unlink(missing_ok=True)
        if self._own_workdir:
            shutil.rmtree(self.workdir / "backends", ignore_errors=True)
            shutil.rmtree(self.trace_file.parent, ignore_errors=True)
        left = [f"process {p.pid}" for p in alive] + [r for r in self._shm_seen if Path(r).exists()]
        self.left_behind = left
        return left

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- introspection -----------------------------------------------------------------------
    def _admin_headers(self) -> dict[str, str] | None:
        """The admin key header when the server's repository API is behind one (an address beyond loopback)."""
        key = os.environ.get(security.KEY_ENV) if security.flags_for(self.config.address) else None
        return {security.KEY_HEADER: key} if key else None

    def unavailable_models(self) -> list[tuple[str, str]]:
        """(model, Triton's reason on one line) for each model whose load failed, from the repository index."""
        index = ModelControl(self.config.http_url, headers=self._admin_headers()).index()
        return [(m["name"], one_line(m.get("reason", ""))) for m in index if m.get("state") == "UNAVAILABLE"]

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stub_pids(self) -> list[int]:
        if self.process is None:
            return []
        return [p.pid for p in self._process_family(self.process.pid) if p.pid != self.process.pid]

    def shm_regions(self) -> set[str]:
        """``/dev/shm`` files mapped by the server and its stubs (the Python backend's regions)."""
        self._remember_shm()
        return set(self._shm_seen)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_excerpt(self, lines: int = 25) -> str:
        """The error lines of the log (model load failures first), else its tail."""
        text = self.log_text().splitlines()
        errors = [
            line for line in text if (re.match(r"^E\d{4} ", line) or "failed to load" in line) and not _harmless(line)
        ]
        return "\n".join((errors or text)[-lines:])

    def _process_family(self, pid: int) -> list[psutil.Process]:
        try:
            root = psutil.Process(pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def _remember_shm(self, family: list[psutil.Process] | None = None) -> None:
        if family is None:
            family = self._process_family(self.process.pid) if self.process else []
        for proc in family:
            try:
                self._shm_seen.update(m.path for m in proc.memory_maps() if m.path.startswith("/dev/shm/"))
            except psutil.Error:
                pass


def _harmless(line: str) -> bool:
    # Printed at every start on a machine without a GPU; not a cause of anything.
    return "CudaDriverHelper has not been initialized" in line


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False
