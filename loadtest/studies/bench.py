"""The side-by-side benchmark: the same model under the same load, served five ways, in repeated rounds.

Rows (throughput in inferences/s; one request = one item for rows 2-5):

1. in-process: the exported file (``model.pt``, or ``model.onnx`` through onnxruntime) called directly at its
   best batch size (``loadtest.measure.inprocess.limit``) on the server's cores with as many threads, the
   ceiling of those cores (items/s; p50 is the median call at that batch);
2. Triton plain: one instance, no dynamic batching, no warmup, applied through model control;
3. Triton tuned: the repository's config (for a catalog model, what ``make export`` writes from
   ``export/models.toml`` with the auto-tuner's ``export/tuned.toml`` over it; the output quotes its note);
4. FastAPI + uvicorn serving the same file once per request, JSON shaped by its config in and out;
5. the same FastAPI server with its asyncio micro-batcher.

Any TorchScript or ONNX model of the repository can be benchmarked (``--models NAME``, ``make bench
MODEL=NAME``) with the requests of ``tritonkit loadtest --model`` (the payload flags; a catalog model sends its
own real data). Rows 2-5 run the same closed-loop Locust load (same users, duration, warm-up and processes).

Trials: the rows are measured round by round, ``--trials`` rounds (default 3; row 1 too, so every ratio pairs
up): 1 2 3 4 5, 5 4 3 2 1, ... (``loadtest.measure.trials.run_trials``), never all trials of one row first, so
the machine's drift falls on every row alike. Each row reports throughput, p50 and p99 with 95% intervals over
its trials; each ratio is paired by round (``bench_report.paired_ratio``); a target whose interval straddles
its threshold is inconclusive. One trial is allowed and labelled "1 trial, no interval".

Servers: Triton (rows 2 and 3 are one model, reloaded through model control and primed before each of their
trials) and both FastAPI servers stay up side by side on the server's cores for all rounds rather than being
restarted per round: an idle server takes next to no CPU, a restart costs seconds of start and priming per row
and round. Row 1 runs beside them while they idle.

Once, after the rounds, on row 3's config (one run each, and labelled so): the perf_analyzer cross-check (gRPC,
the same payloads, a concurrency range) and the serving overhead at one client (perf_analyzer's p50 at
concurrency 1 over gRPC, the C++ client, minus row 1's batch-1 median, with the server's queue/compute split;
Locust's one-user p50 over HTTP is a second figure); then the first request after ready against the steady
p50, warmup on and off (``loadtest.measure.first_request``). Targets are printed as met, missed or
inconclusive, never asserted.

Cores: the servers and the load generator run on cores of their own (``--server-cpus``, ``--client-cpus``; by
default the upper and the lower half of this machine's), and row 1 on the servers', so no load generator
takes cores from the model and every row computes on the same cores.

Run: ``python -m loadtest.studies.bench [--models digits minilm] [--trials 3] [--duration 15] [--out reports/bench]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import sys
import tempfile
import time
import tomllib
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from deploy.client import connect, infer
from deploy.server import DEFAULT_REPOSITORY, PROJECT_ROOT, LocalServer, ServerConfig, free_ports
from export import catalog
from loadtest.campaign import Candidate, Scenario
from loadtest.drive import apply, perf, target
from loadtest.drive.payloads import (
    PayloadOptions,
    add_payload_arguments,
    default_options,
    payload_options,
    payloads,
    stack,
)
from loadtest.drive.runner import run_locust
from loadtest.drive.target import Endpoints
from loadtest.errors import LoadTestError
from loadtest.measure.first_request import measure
from loadtest.measure.inprocess import ModelFile, limit, model_file
from loadtest.measure.run import measure_run
from loadtest.measure.trials import Arm, run_trials
from loadtest.studies.baselines.fastapi_app import serve_in_subprocess, stop_subprocess
from loadtest.studies.bench_report import (
    P99_BUDGET_MS,
    RATIOS,
    ROWS,
    TARGETS,
    Trial,
    default_users,
    describe,
    evaluate_targets,
    finish,
    inprocess_row,
    locust_trial,
    ratio,
    ratio_intervals,
    ratios,
    render,
    row_summary,
    throughput,
)
from tritonkit_errors import ExitStatus

__all__ = [
    "Options",
    "run",
    "main",
    "ROWS",
    "RATIOS",
    "TARGETS",
    "ratio",
    "ratios",
    "ratio_intervals",
    "throughput",
    "render",
    "describe",
    "evaluate_targets",
    "tuned_source",
    "perf_levels",
    "options",
    "P99_BUDGET_MS",
    "default_users",
    "Trial",
]

DEFAULT_TRIALS = 3


@dataclasses.dataclass
class Options:
    models: tuple[str, ...] = ("digits", "minilm")
    trials: int = DEFAULT_TRIALS
    """Rounds of rows 1-5 (every row once a round)."""
    duration_s: float = 15.0
    warmup_s: float = 2.0
    users: dict[str, int] = dataclasses.field(default_factory=dict)
    processes: int = 1
    out: Path = PROJECT_ROOT / "reports" / "bench"
    repository: Path = DEFAULT_REPOSITORY
    inprocess_s: float = 2.0  # row 1: seconds per batch size
    perf_ms: int = 1500  # perf_analyzer's measurement window
    steady: int = 200  # first-request check: sequential requests for the steady p50
    payload: PayloadOptions = dataclasses.field(default_factory=PayloadOptions)
    """The requests (the payload flags); a catalog model without data options sends its own real data."""
    server_cpus: frozenset[int] | None = None
    client_cpus: frozenset[int] | None = None
    """Cores of the servers and row 1, and of the load generators; None: the halves of this machine's
    (``loadtest.drive.target.split_cpus``); empty sets: no pinning."""

    def users_for(self, model: str, config: dict | None = None) -> int:
        """``--users`` for ``model``, else enough for its served ``config`` (:func:`default_users`)."""
        return int(self.users.get(model) or default_users(config or {}))

    def cpus(self) -> tuple[frozenset[int], frozenset[int]]:
        """(client, server) cores."""
        if self.server_cpus is None and self.client_cpus is None:
            return target.split_cpus()
        return frozenset(self.client_cpus or ()), frozenset(self.server_cpus or ())


@dataclasses.dataclass
class Bench:
    """One model's inputs to every row: its exported file and config, the requests and the closed-loop users."""

    model: str
    spec: ModelFile
    samples: list
    server_cpus: frozenset[int]
    users: int

    def batch(self, n: int):
        return stack(self.samples, n)


# -- rows -----------------------------------------------------------------------------------------
def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"[:300]


def _guarded(fn, *args) -> dict:
    """``fn(*args)``, or ``{"throughput": None, "error": ...}``: one failed check must not lose the others."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001
        return {"throughput": None, "error": _error(exc)}


def _trial_of(fn: Callable[[], Trial], generator: str = "locust") -> Callable[[], Trial]:
    """``fn`` as an arm's measure: a failed trial is recorded as such and the rounds go on."""

    def measure_once() -> Trial:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - reported in its row, the other trials still count
            return Trial.failed(generator, _error(exc))

    return measure_once


def tuned_source(model: str, tuned_path: Path = catalog.TUNED) -> str:
    """Where row 3's config comes from: the repository's, which ``make export`` writes from
    ``export/models.toml`` overlaid with the auto-tuner's ``export/tuned.toml``."""
    table = tomllib.loads(tuned_path.read_text()).get(model) if tuned_path.is_file() else None
    where = tuned_path.relative_to(PROJECT_ROOT) if tuned_path.is_relative_to(PROJECT_ROOT) else tuned_path
    if not table:
        return f"the repository's config as exported ({where} has no [{model}] table)"
    return f"the repository's config as exported with {where} [{model}]" + (
        f" ({table['note']})" if table.get("note") else ""
    )


def measure_inprocess(bench: Bench, opts: Options) -> Trial:
    got = limit(
        bench.spec,
        bench.batch,
        seconds_per_size=opts.inprocess_s,
        max_batch=bench.spec.max_batch_size or None,
        cpus=bench.server_cpus or None,
    )
    best = next(r for r in got.table if r.batch == got.best_batch)
    return Trial(
        got.best_items_per_s,
        best.median_ms,
        math.nan,
        0.0,
        "in-process",
        detail={
            "batch1_median_ms": got.batch1_median_ms,
            "best_batch": got.best_batch,
            "threads": got.threads,
            "p90_ms": best.p90_ms,
            "table": [dataclasses.asdict(r) for r in got.table],
        },
    )


def _scenario(model: str, protocol: str, users: int, opts: Options, name: str):
    return Scenario(
        name,
        model,
        protocol,
        {"kind": "users", "users": users},
        opts.duration_s,
        min(opts.warmup_s, opts.duration_s / 3),
        opts.processes,
        payload=opts.payload.to_table(),
    )


def prime(bench: Bench, url: str, users: int, batching: bool, fastapi: bool = False) -> float:
    """Untimed requests before a row, with the batch sizes the row's traffic will form (1, or 1, 2, 4 ... up
    to the users when a batcher joins requests), so that TorchScript's profiling executor has specialised
    (seconds for minilm) before Locust measures."""
    started, client = time.monotonic(), None if fastapi else connect("http", url)
    try:
        for batch in [b for b in (perf_levels(users) if batching else [1]) for _ in range(3)]:
            arrays = bench.batch(min(batch, bench.spec.max_batch_size or 1))
            if client is not None:
                infer(client, bench.model, arrays)
                continue
            body = json.dumps({"inputs": {k: v.tolist() for k, v in arrays.items()}}).encode()
            request = urllib.request.Request(f"http://{url}/infer", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as response:
                response.read()
    finally:
        if client is not None:
            client.close()
    return time.monotonic() - started


def triton_arms(bench: Bench, endpoints, opts: Options, work: Path, log) -> tuple[list[Arm], dict, dict]:
    """Rows 2 and 3 as arms: each loads its config through model control and primes it before its trial.
    Also the configs (plain, tuned)."""
    model, users = bench.model, bench.users
    # The server was started from config.pbtxt (for a catalog model: export's, with the tuned settings); rows 2
    # and 3 are loaded as explicit configs (a plain reload would keep serving the last override).
    tuned = apply.served_config(endpoints.http, model)
    plain = apply.override(tuned, Candidate.of("plain", dynamic_batching=False, instances=1, warmup=False))
    arms = []
    for key, config in (("triton_plain", plain), ("triton_tuned", tuned)):
        failed = {"why": ""}  # a config that did not load fails its trial (the server serves the other one)

        def load(key: str = key, config: dict = config, failed: dict = failed) -> None:
            log(f"[{model}] {key}: loading {describe(config)} through model control")
            try:
                apply.load(endpoints.http, model, config)
                failed["why"] = ""
                took = prime(bench, endpoints.http, users, "dynamic_batching" in config)
                log(f"[{model}] {key}: primed in {took:.1f} s")
            except Exception as exc:  # noqa: BLE001 - its trial then fails and says why
                failed["why"] = f"loading the config failed: {_error(exc)}"

        labels = (f"{model}-{key}-{n}" for n in itertools.count(1))

        def one(labels=labels, failed: dict = failed) -> Trial:
            if failed["why"]:
                return Trial.failed("locust", failed["why"])
            label = next(labels)
            client, s = measure_run(_scenario(model, "http", users, opts, label), model, endpoints, work, label, log)
            return locust_trial(client, avg_batch=s.avg_batch, breakdown_ms=s.breakdown_ms)

        arms.append(Arm(key, _trial_of(one), load))
    return arms, plain, tuned


def measure_once_on_tuned(bench: Bench, endpoints, tuned: dict, opts: Options, work: Path, log) -> dict:
    """After the rounds, on row 3's config: the one-client figures and the perf_analyzer cross-check (one run
    each)."""
    model, out = bench.model, {}
    try:
        apply.load(endpoints.http, model, tuned)
        prime(bench, endpoints.http, bench.users, "dynamic_batching" in tuned)
    except Exception as exc:  # noqa: BLE001
        log(f"[{model}] reloading row 3's config failed: {_error(exc)}")
    with tempfile.TemporaryDirectory(prefix="bench-perf-") as tmp:
        data = perf.write_input_data(Path(tmp) / "input.json", bench.samples, bench.spec.config)
        out["one_client"] = measure_one_client(model, endpoints.grpc, data, opts, log)

        def one_user() -> dict:
            log(f"[{model}] one user: Locust, HTTP, {opts.duration_s:g} s")
            label = f"{model}-one_user"
            client, _ = measure_run(_scenario(model, "http", 1, opts, label), model, endpoints, work, label, log)
            return {"p50_ms": client.latency_ms.get("p50")}

        row = _guarded(one_user)
        out["one_user"] = {
            "triton_p50_ms": row.get("p50_ms"),
            "error": row.get("error"),
            "client": "Locust, 1 user, HTTP",
        }
        out["perf"] = measure_perf(model, endpoints.grpc, bench.users, data, opts, log)
    return out


PERF_SETTINGS = {"timeout_s": 120.0, "stability_percentage": 30.0, "max_trials": 6}
"""Loosely stable: this shared machine is never steady to perf_analyzer's default 10%."""


def _perf(model: str, grpc_url: str, level: int, data: Path, window_ms: int):
    return perf.run(model, grpc_url, "grpc", level, input_data=data, measurement_ms=window_ms, **PERF_SETTINGS)


def measure_one_client(model: str, grpc_url: str, data: Path, opts: Options, log) -> dict:
    """perf_analyzer at concurrency 1 over gRPC on row 3's config: the client's p50 and the server's split."""
    log(f"[{model}] one client: perf_analyzer, gRPC, concurrency 1")
    try:
        got = _perf(model, grpc_url, 1, data, max(opts.perf_ms, 1000)).rows[0]
    except Exception as exc:  # noqa: BLE001 - reported in its row, the other rows still count
        return {"error": _error(exc)}
    parts = ("server_compute_input_ms", "server_compute_infer_ms", "server_compute_output_ms")
    compute = [getattr(got, k) for k in parts if getattr(got, k) is not None]
    return {
        "client": "perf_analyzer, gRPC, concurrency 1",
        **{k: getattr(got, k) for k in ("throughput", "p50_ms", "p99_ms", "server_queue_ms", *parts)},
        "server_compute_ms": sum(compute) if compute else None,
    }


def perf_levels(users: int) -> list[int]:
    """1, 2, 4, ... up to the Locust users (and the users themselves)."""
    levels = [1 << i for i in range(max(1, users).bit_length()) if 1 << i < users]
    return levels + [users]


def measure_perf(model: str, grpc_url: str, users: int, data: Path, opts: Options, log) -> dict:
    """perf_analyzer against row 3's config: one run per concurrency level (a level that fails to
    settle on this noisy machine is reported as such, the others still count)."""
    levels, rows, failed = perf_levels(users), [], {}
    log(f"[{model}] perf_analyzer on row 3 (gRPC, concurrency {levels})")
    for level in levels:
        try:
            rows += [
                {"concurrency": r.concurrency, "throughput": r.throughput, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms}
                for r in _perf(model, grpc_url, level, data, opts.perf_ms).rows
            ]
        except Exception as exc:  # noqa: BLE001
            failed[level] = _error(exc)
    if not rows:
        return {"error": f"every level failed: {failed}", "failed": failed}
    under = [r for r in rows if r["p99_ms"] is not None and r["p99_ms"] < P99_BUDGET_MS]
    return {
        "range": ",".join(map(str, levels)),
        "levels": rows,
        "failed": failed,
        "best": max(rows, key=lambda r: r["throughput"]),
        "best_under_p99": max(under, key=lambda r: r["throughput"]) if under else None,
    }


FASTAPI_ROWS = (("fastapi", False), ("fastapi_batcher", True))


def fastapi_arms(bench: Bench, opts: Options, work: Path, log, procs: list) -> list[Arm]:
    """Rows 4 and 5 as arms: both uvicorn servers start now on the server's cores (``procs`` collects them for
    the caller to stop), are primed once and stay up for the rounds."""
    model, users, arms = bench.model, bench.users, []
    for key, batcher in FASTAPI_ROWS:
        (port,) = free_ports(1)
        url, failed = f"127.0.0.1:{port}", ""
        try:
            procs.append(
                serve_in_subprocess(
                    model, port, batcher, opts.repository, timeout_s=120, cpus=bench.server_cpus or None
                )
            )
            log(f"[{model}] {key}: uvicorn on {url}, primed in {prime(bench, url, users, batcher, True):.1f} s")
        except Exception as exc:  # noqa: BLE001 - every trial of the row then fails and says why
            failed = _error(exc)
            log(f"[{model}] {key}: the server did not start: {failed}")

        labels = (f"{model}-{key}-{n}" for n in itertools.count(1))

        def one(url: str = url, failed: str = failed, labels=labels) -> Trial:
            if failed:
                return Trial.failed("locust", failed)
            label = next(labels)
            client = run_locust(
                _scenario(model, "fastapi", users, opts, label),
                model,
                url,
                work / f"{label}.json",
                work / f"{label}.log",
                progress=log,
                config=bench.spec.config,
                samples=bench.samples,
            )
            return locust_trial(client)

        arms.append(Arm(key, _trial_of(one)))
    return arms


def measure_model(bench: Bench, endpoints, opts: Options, work: Path, log) -> dict:
    """Rows 1-5 round by round (Triton up, both FastAPI servers up beside it), then the one-run figures on
    row 3's config."""
    model = bench.model
    procs: list = []
    try:
        served, plain, tuned = triton_arms(bench, endpoints, opts, work, log)
        inprocess = Arm("inprocess", _trial_of(lambda: measure_inprocess(bench, opts), "in-process"))
        arms = [inprocess, *served, *fastapi_arms(bench, opts, work, log, procs)]
        log(f"[{model}] {opts.trials} round(s) of rows 1-5, {bench.users} users, {opts.duration_s:g} s per served row")
        results = run_trials(arms, opts.trials, log=lambda line: log(f"[{model}]{line}"))
    finally:
        for proc in procs:
            stop_subprocess(proc)
    cores = f" on CPUs {_cpu_text(bench.server_cpus)}" if bench.server_cpus else ""
    rows = {
        "inprocess": inprocess_row(results["inprocess"], f"{bench.spec.model_path.name}, {{threads}} threads{cores}")
    }
    for key, config in (("triton_plain", plain), ("triton_tuned", tuned)):
        batches = [
            t.detail["avg_batch"] for t in results[key].usable if isinstance(t, Trial) and "avg_batch" in t.detail
        ]
        mean = f"{sum(batches) / len(batches):.1f}" if batches else "-"
        rows[key] = row_summary(results[key], note=f"{describe(config)}; avg batch {mean}")
    for key, batcher in FASTAPI_ROWS:
        how = "asyncio micro-batcher (max wait 2 ms)" if batcher else "one forward per request"
        rows[key] = row_summary(results[key], note=f"uvicorn, JSON, {bench.spec.model_path.name}, {how}")
    return {
        "rows": rows,
        "tuned_source": tuned_source(model),
        **measure_once_on_tuned(bench, endpoints, tuned, opts, work, log),
    }


def measure_first_request(bench: Bench, opts: Options) -> list[dict]:
    def one(warmup: bool) -> dict:
        got = measure(opts.repository, bench.model, bench.batch(1), warmup, opts.steady, "grpc")
        return {k: getattr(got, k) for k in ("first_ms", "steady_p50_ms", "ratio", "ready_s", "warmup_entries")}

    return [{"warmup": warmup, **_guarded(one, warmup)} for warmup in (True, False)]


def _cpu_text(cpus) -> str:
    return ",".join(map(str, sorted(cpus))) if cpus else "all"


# -- the whole run ---------------------------------------------------------------------------------
def prepare(opts: Options, server_cpus: frozenset[int]) -> dict[str, Bench]:
    """Every model's file, config and requests, checked before anything runs (LoadTestError, FileNotFoundError
    or ValueError naming the model and what is wrong)."""
    if isinstance(opts.trials, bool) or not isinstance(opts.trials, int) or opts.trials < 1:
        raise ValueError(f"--trials {opts.trials!r} must be an integer >= 1")
    benches = {}
    for model in opts.models:
        spec = model_file(model, opts.repository)
        benches[model] = Bench(
            model,
            spec,
            payloads(spec.config, default_options(model, opts.payload)),
            server_cpus,
            opts.users_for(model, spec.config),
        )
    return benches


def run(opts: Options, log=None) -> dict:
    """Every row for every model, round by round; writes ``bench.json`` and ``bench.md`` under ``opts.out``."""
    began = time.monotonic()
    log = log or (lambda line: print(f"[{time.monotonic() - began:5.0f} s] {line}", file=sys.stderr, flush=True))
    client_cpus, server_cpus = opts.cpus()
    benches = prepare(opts, server_cpus)
    opts.out.mkdir(parents=True, exist_ok=True)
    work = opts.out / "runs"
    work.mkdir(exist_ok=True)
    import torch  # only for the machine line; the rows import what their file needs

    result = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{len(os.sched_getaffinity(0))} CPUs, torch {torch.__version__}",
        "cpus": {"server": sorted(server_cpus), "client": sorted(client_cpus)},
        "settings": {
            "trials": opts.trials,
            "duration_s": opts.duration_s,
            "warmup_s": opts.warmup_s,
            "processes": opts.processes,
            "payload": opts.payload.to_table(),
        },
        "models": {
            m: {
                "users": benches[m].users,
                "trials": opts.trials,
                "duration_s": opts.duration_s,
                "warmup_s": min(opts.warmup_s, opts.duration_s / 3),
                "rows": {},
                "format": benches[m].spec.model_path.name,
            }
            for m in opts.models
        },
    }
    models = result["models"]
    log(f"servers and row 1 on CPUs {_cpu_text(server_cpus)}, load generators on CPUs {_cpu_text(client_cpus)}")
    affinity = os.sched_getaffinity(0)
    try:
        http, grpc, metrics = free_ports(3)
        server = LocalServer(
            ServerConfig(
                model_repository=opts.repository,
                http_port=http,
                grpc_port=grpc,
                metrics_port=metrics,
                model_control_mode="explicit",
                load_models=tuple(opts.models),
                exit_timeout_s=10,
                cpus=server_cpus,
            )
        )
        log(f"starting tritonserver (HTTP {http}, gRPC {grpc}) with {', '.join(opts.models)}")
        server.start()
        if client_cpus:  # after the server started on its own: Locust and perf_analyzer, started from here, inherit it
            os.sched_setaffinity(0, client_cpus)
        try:
            for model in opts.models:
                measured = measure_model(benches[model], Endpoints.of(server), opts, work, log)
                models[model]["rows"].update(measured.pop("rows"))
                models[model].update(measured)
        finally:
            left = server.stop()
            result["server_left"] = left
            if left:
                log(f"WARNING: stopping tritonserver left behind: {left}")
    finally:
        os.sched_setaffinity(0, affinity)
    for model in opts.models:
        log(f"[{model}] first request after ready, warmup on and off (a server of its own each)")
        models[model]["first_request"] = measure_first_request(benches[model], opts)
    finish(result)
    (opts.out / "bench.json").write_text(json.dumps(result, indent=1))
    (opts.out / "bench.md").write_text(render(result))
    return result


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.studies.bench",
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:-1]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--models",
        nargs="+",
        default=["digits", "minilm"],
        help="TorchScript or ONNX models of the repository (default: digits minilm)",
    )
    parser.add_argument(
        "--trials",
        type=int,
        default=DEFAULT_TRIALS,
        help=f"rounds of rows 1-5, every row once a round (default {DEFAULT_TRIALS}; 1: no intervals)",
    )
    parser.add_argument("--duration", type=float, default=15.0, help="seconds of Locust load per row (rows 2-5)")
    parser.add_argument("--warmup", type=float, default=2.0, help="leading seconds of each row left out")
    parser.add_argument(
        "--users",
        nargs="+",
        default=[],
        metavar="[MODEL=]N",
        help="closed-loop Locust users (default: enough for the served config to form its largest "
        "batch on every instance, 8 to 32)",
    )
    parser.add_argument("--processes", type=int, default=1, help="Locust processes")
    parser.add_argument("--out", type=Path, default=Path("reports/bench"), help="writes bench.json and bench.md")
    parser.add_argument(
        "--repository",
        type=Path,
        default=target.default_repository(),
        help="model repository (default: $MODEL_REPOSITORY or the project's model_repository/)",
    )
    parser.add_argument("--inprocess-s", type=float, default=2.0, help="row 1: seconds per batch size")
    parser.add_argument("--perf-ms", type=int, default=1500, help="perf_analyzer measurement window, ms")
    parser.add_argument("--steady", type=int, default=200, help="first-request check: steady sequential requests")
    parser.add_argument(
        "--server-cpus",
        type=target.parse_cpus,
        help="the servers' and row 1's cores (default: the upper half of this machine's)",
    )
    parser.add_argument(
        "--client-cpus", type=target.parse_cpus, help="the load generators' cores (default: the lower half)"
    )
    parser.add_argument(
        "--no-split-cpus", action="store_true", help="let servers and load generators share every core (no pinning)"
    )
    add_payload_arguments(parser)
    return parser


def options(argv: list[str] | None = None) -> Options:
    """The command line as :class:`Options` (``PayloadError``/``ValueError`` for contradicting flags)."""
    args = parser().parse_args(argv)
    users = {}
    for value in args.users:  # "32" for every model, "digits=32" for one
        model, _, number = value.rpartition("=")
        try:
            users.update({model: int(number)} if model else dict.fromkeys(args.models, int(number)))
        except ValueError:
            raise ValueError(f"--users {value!r} is not N or MODEL=N") from None
    none = frozenset() if args.no_split_cpus else None
    return Options(
        models=tuple(args.models),
        trials=args.trials,
        duration_s=args.duration,
        warmup_s=args.warmup,
        users=users,
        processes=args.processes,
        out=args.out.resolve(),
        repository=args.repository.resolve(),
        inprocess_s=args.inprocess_s,
        perf_ms=args.perf_ms,
        steady=args.steady,
        payload=payload_options(args),
        server_cpus=args.server_cpus if args.server_cpus else none,
        client_cpus=args.client_cpus if args.client_cpus else none,
    )


def main(argv: list[str] | None = None) -> int:
    try:
        opts = options(argv)
        result = run(opts)
    except (LoadTestError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitStatus.USAGE
    print(render(result), end="")
    print(f"\nwrote {opts.out / 'bench.json'} and {opts.out / 'bench.md'}")
    return ExitStatus.FAILED if result.get("server_left") else ExitStatus.OK


if __name__ == "__main__":
    sys.exit(main())
