"""Triton Model Analyzer on the local server: profile one model under a p99 budget and return its pick.

Model Analyzer (MA) 1.44 lives in its own venv, ``.venv-analyzer`` (``deploy/setup.sh analyzer``, run on its first
use), because it wants ``tritonclient[all]``; it drives ``.venv/bin/perf_analyzer`` (the 2.51 binary) and, in local
launch mode, starts our tritonserver through a wrapper script written here. The pick it returns can
be compared with the project's own tuner and applied as :meth:`AnalyzerPick.changes` (``ServingChanges``).

    tritonkit analyzer digits --budget-ms 5

Exit status: 0 a pick within the budget; 1 no profiled config meets it; 2 a bad argument; 3 Model Analyzer
missing, failed or past ``--timeout-s``; 128 + the signal (130 Ctrl-C, 143 SIGTERM) when stopped by one, Model
Analyzer, its server, their stubs and /dev/shm regions ended first.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import yaml

from deploy import tools
from deploy.server import PROJECT_ROOT, TritonDistribution, assemble_backends, completes_its_config, free_ports
from export.changes import ServingChanges
from loadtest.errors import TuneError

ANALYZER_BIN = PROJECT_ROOT / ".venv-analyzer" / "bin" / "model-analyzer"
PERF_ANALYZER = PROJECT_ROOT / ".venv" / "bin" / "perf_analyzer"
FIRST_USE = {ANALYZER_BIN: ("analyzer", "Model Analyzer"), PERF_ANALYZER: ("perf-analyzer", "perf_analyzer")}
"""The project's own tools, by set-up layer: installed on first use; any other path is only checked."""
RESULTS_CSV = Path("results") / "metrics-model-inference.csv"
# A small brute search, ~3-4 min for digits on 2 cores: 2 max_batch_size x instance counts
# (+ MA's copy of the model's own config) x 4 concurrencies.
MAX_BATCH_SIZES = (8, 32)
QUEUE_DELAYS_US = (500,)
CONCURRENCIES = (1, 2, 4, 8)
# Forgiving windows (MA's count_windows mode): a shared 2-core machine is never stable to 10 %.
PERF_ANALYZER_FLAGS = {"stability-percentage": 50, "max-trials": 6}


class AnalyzerError(TuneError):
    """Model Analyzer could not produce a pick; ``log_tail`` holds the end of its log."""

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(message)
        self.log_tail = log_tail

    def __str__(self) -> str:
        tail = f"\n--- model-analyzer log (tail) ---\n{self.log_tail}" if self.log_tail else ""
        return f"{self.args[0]}{tail}"


class AnalyzerNotInstalled(AnalyzerError):
    """``.venv-analyzer`` or ``.venv/bin/perf_analyzer`` is missing."""


class AnalyzerTimeout(AnalyzerError):
    """MA ran past its time; it and its tritonserver were killed."""


class AnalyzerFailed(AnalyzerError):
    """``model-analyzer profile`` exited non-zero."""


class NoConfigMeetsBudget(AnalyzerError):
    """Every measured config's p99 is above the budget."""


@dataclasses.dataclass
class AnalyzerPick:
    model: str
    config_name: str
    max_batch_size: int
    instance_count: int
    dynamic_batching: dict | None  # {"max_queue_delay_us": int, "preferred_batch_sizes": [int]} or None
    concurrency: int
    throughput_infer_s: float
    p99_ms: float

    def changes(self) -> ServingChanges:
        """The pick as serving changes over the served config (applied through ``export.config``: the
        warmup samples follow the new max_batch_size)."""
        if self.dynamic_batching is None:
            return ServingChanges(
                max_batch_size=self.max_batch_size, instances=self.instance_count, dynamic_batching=False
            )
        return ServingChanges(
            max_batch_size=self.max_batch_size,
            instances=self.instance_count,
            dynamic_batching=True,
            max_queue_delay_us=self.dynamic_batching["max_queue_delay_us"],
            preferred_batch_sizes=tuple(self.dynamic_batching["preferred_batch_sizes"]),
        )


# -- the pieces MA needs on disk -----------------------------------------------------------------
def write_server_wrapper(target: Path, backends: Path | None = None, *, auto_complete: bool = True) -> Path:
    """An executable MA can launch as ``triton_server_path``: our binary, environment and backends.
    ``auto_complete`` False: ``--disable-auto-complete-config``, as the project's local server runs when no
    model completes its own config (deploy/server.py: a stub per load saved)."""
    dist = TritonDistribution.find()
    skip = "" if auto_complete else " --disable-auto-complete-config"
    backends = assemble_backends(dist, backends or target.parent / "backends")
    venv_bin = Path(sys.prefix) / "bin"  # the stub finds the venv (torch, backends.*) via python3 on PATH
    target.write_text(f"""#!/usr/bin/env bash
# tritonserver 2.51 (nvidia-pytriton) for Model Analyzer's local launch mode, written by loadtest.tune.analyzer
export PATH={shlex.quote(str(venv_bin))}:"$PATH"
export LD_LIBRARY_PATH={shlex.quote(str(dist.libs))}"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"
unset PYTHONPATH
exec {shlex.quote(str(dist.binary))} --backend-directory={shlex.quote(str(backends))} \\
    --allow-gpu-metrics=false --http-address=127.0.0.1 --grpc-address=127.0.0.1 \\
    --metrics-address=127.0.0.1{skip} "$@"
""")
    target.chmod(0o755)
    return target


def stage_model(repository: Path, model: str, target: Path) -> Path:
    """A repository holding ``model`` with no warmup and no preferred batch sizes.

    MA sweeps max_batch_size below the exported one, and Triton rejects a warmup batch or a
    preferred size above it; the version folders are symlinked, not copied.
    """
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    source = (repository / model).resolve()
    if not (source / "config.pbtxt").is_file():
        raise AnalyzerError(f"no {source / 'config.pbtxt'}")
    config = text_format.Parse((source / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    del config.model_warmup[:]
    if config.HasField("dynamic_batching"):
        del config.dynamic_batching.preferred_batch_size[:]
    staged = target / model
    staged.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        link = staged / item.name
        if item.name != "config.pbtxt" and not item.name.startswith(".") and not link.is_symlink():
            link.symlink_to(item)
    (staged / "config.pbtxt").write_text(text_format.MessageToString(config))
    return target


def analyzer_config(
    model: str,
    repository: Path,
    p99_budget_ms: float,
    out_dir: Path,
    server: Path,
    *,
    max_instances: int = 2,
    max_batch_size: int | None = None,
    max_batch_sizes: tuple[int, ...] = MAX_BATCH_SIZES,
    concurrency: tuple[int, ...] = CONCURRENCIES,
    request_rate: tuple[float, ...] = (),
) -> dict:
    """MA's profile config: local launch, CPU only, throughput under a p99 constraint, small brute search.
    ``concurrency`` (or ``request_rate``, an open loop) is the load MA measures each config at."""
    http, grpc, metrics = free_ports(3)
    return {
        "model_repository": str(repository),
        "output_model_repository_path": str(out_dir / "output_model_repository"),
        "override_output_model_repository": True,
        "checkpoint_directory": str(out_dir / "checkpoints"),
        "export_path": str(out_dir),
        "triton_launch_mode": "local",
        "triton_server_path": str(server),
        "triton_output_path": str(out_dir / "tritonserver.log"),
        "triton_http_endpoint": f"127.0.0.1:{http}",
        "triton_grpc_endpoint": f"127.0.0.1:{grpc}",
        "triton_metrics_url": f"http://127.0.0.1:{metrics}/metrics",
        "perf_analyzer_path": str(PERF_ANALYZER),
        "perf_analyzer_flags": dict(PERF_ANALYZER_FLAGS),
        "perf_output": True,
        "perf_output_path": str(out_dir / "perf_analyzer.log"),
        "client_protocol": "grpc",
        "run_config_search_mode": "brute",
        "skip_detailed_reports": True,
        "profile_models": {
            model: {
                "cpu_only": True,
                "objectives": {"perf_throughput": 10},
                "constraints": {"perf_latency_p99": {"max": p99_budget_ms}},
                "model_config_parameters": {
                    "max_batch_size": [max_batch_size] if max_batch_size else list(max_batch_sizes),
                    "instance_group": [{"kind": "KIND_CPU", "count": list(range(1, max_instances + 1))}],
                    "dynamic_batching": {"max_queue_delay_microseconds": list(QUEUE_DELAYS_US)},
                },
                "parameters": {"request_rate": list(request_rate)}
                if request_rate
                else {"concurrency": list(concurrency)},
            }
        },
    }


# -- running MA ------------------------------------------------------------------------------------
def _log_tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""


def _kill_family(proc: subprocess.Popen) -> None:
    """MA, its tritonserver and the server's stubs, and the /dev/shm regions they mapped."""
    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.Error:
        family = []
    regions: set[str] = set()
    for p in family:  # the Python backend's regions outlive a killed server
        try:
            regions.update(m.path for m in p.memory_maps() if m.path.startswith("/dev/shm/"))
        except psutil.Error:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # MA runs in its own session; its children stay in it
    except ProcessLookupError:
        pass
    for p in family:  # a child that started a session of its own
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(family, timeout=10)
    proc.wait(timeout=10)
    for region in regions:
        Path(region).unlink(missing_ok=True)


def profile(
    model: str,
    repository: Path,
    p99_budget_ms: float,
    out_dir: Path,
    *,
    max_instances: int = 2,
    max_batch_size: int | None = None,
    timeout_s: float = 600,
    **search,
) -> AnalyzerPick:
    """Run ``model-analyzer profile`` on ``model`` and return the best config within the p99 budget.
    ``search``: ``analyzer_config``'s ``max_batch_sizes``, ``concurrency`` or ``request_rate``."""
    for tool in (ANALYZER_BIN, PERF_ANALYZER):
        if tool in FIRST_USE:
            try:
                tools.ensure(tool, *FIRST_USE[tool], "first use of tritonkit analyzer")
            except tools.ToolMissing as exc:
                raise AnalyzerNotInstalled(str(exc)) from None
        elif not tool.is_file():
            raise AnalyzerNotInstalled(f"{tool} is missing: run `bash deploy/setup.sh analyzer`")
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    staged = stage_model(Path(repository).resolve(), model, out_dir / "model_repository")
    server = write_server_wrapper(out_dir / "tritonserver-wrapper.sh", auto_complete=completes_its_config(staged))
    config = analyzer_config(
        model,
        staged,
        p99_budget_ms,
        out_dir,
        server,
        max_instances=max_instances,
        max_batch_size=max_batch_size,
        **search,
    )
    config_path = out_dir / "config.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    # MA resumes from any checkpoint it finds: a new run must not mix in an earlier run's measurements.
    for stale in (out_dir / "checkpoints").glob("*.ckpt"):
        stale.unlink()
    log = out_dir / "model-analyzer.log"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            [str(ANALYZER_BIN), "profile", "-f", str(config_path)],
            cwd=out_dir,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_family(proc)
            raise AnalyzerTimeout(f"model-analyzer ran past {timeout_s:.0f} s; killed", _log_tail(log)) from None
        except BaseException:
            _kill_family(proc)
            raise
    if code != 0:
        raise AnalyzerFailed(f"model-analyzer profile exited with {code}", _log_tail(log))
    try:
        return pick_from_results(out_dir, p99_budget_ms, model=model)
    except NoConfigMeetsBudget as exc:
        raise NoConfigMeetsBudget(exc.args[0], _log_tail(log)) from None


# -- reading MA's checkpoint -----------------------------------------------------------------------
def _field(config: dict, name: str, default=None):
    """A model-config field under its proto name or the camelCase name MA's checkpoint also uses."""
    camel = name.split("_")[0] + "".join(part.title() for part in name.split("_")[1:])
    return config.get(name, config.get(camel, default))


def _checkpoint(path: Path) -> Path:
    if path.is_file():
        return path
    found = sorted((path / "checkpoints").glob("*.ckpt"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1)
    if not found:
        raise AnalyzerError(f"no Model Analyzer checkpoint (checkpoints/*.ckpt) under {path}")
    return found[-1]


def measurements(path: Path, model: str | None = None) -> list[AnalyzerPick]:
    """Every (config, concurrency) MA measured, from its checkpoint (a ``*.ckpt`` file or its work folder).

    The checkpoint is JSON that MA rewrites after each measurement; it holds each variant's full
    model config next to perf_analyzer's figures, which the summary CSVs do not.
    """
    data = json.loads(_checkpoint(Path(path)).read_text())
    rows: list[AnalyzerPick] = []
    for model_name, variants in data["ResultManager.results"]["_results"].items():
        if model is not None and model_name != model:
            continue
        for variant, (run_config, by_key) in variants.items():
            config = run_config["_model_run_configs"][0]["_model_config_variant"]["model_config"]
            batching = _field(config, "dynamic_batching")
            dynamic = (
                None
                if batching is None
                else {
                    "max_queue_delay_us": int(_field(batching, "max_queue_delay_microseconds", 0)),
                    "preferred_batch_sizes": [int(b) for b in _field(batching, "preferred_batch_size", [])],
                }
            )
            instances = sum(int(g.get("count", 1)) for g in _field(config, "instance_group", [{}]))
            for measurement in by_key.values():
                for per_model in measurement["_model_config_measurements"]:
                    figures = {tag: value["_value"] for tag, value in per_model["_non_gpu_data"]}
                    rows.append(
                        AnalyzerPick(
                            model=model_name,
                            config_name=variant,
                            max_batch_size=int(_field(config, "max_batch_size", 0)),
                            instance_count=instances,
                            dynamic_batching=dynamic,
                            concurrency=int(per_model["_model_specific_pa_params"].get("concurrency-range") or 0),
                            throughput_infer_s=float(figures["perf_throughput"]),
                            p99_ms=float(figures["perf_latency_p99"]),
                        )
                    )
    return rows


def pick_from_results(path: Path, p99_budget_ms: float, *, model: str | None = None) -> AnalyzerPick:
    """MA's objective under its constraint: the highest throughput whose p99 is within the budget."""
    rows = measurements(path, model)
    if not rows:
        raise AnalyzerError(f"the checkpoint under {path} holds no measurement" + (f" of {model}" if model else ""))
    within = [r for r in rows if r.p99_ms <= p99_budget_ms]
    if not within:
        best = min(rows, key=lambda r: r.p99_ms)
        raise NoConfigMeetsBudget(
            f"no config meets p99 <= {p99_budget_ms} ms; the lowest p99 was {best.p99_ms:.2f} ms "
            f"({best.config_name}, concurrency {best.concurrency}, {len(rows)} measurements)"
        )
    return max(within, key=lambda r: (r.throughput_infer_s, -r.p99_ms))
