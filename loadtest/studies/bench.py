"""The side-by-side benchmark: the same model under the same load, served five ways, in one run.

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
MODEL=NAME``); the requests are those of ``tritonkit loadtest --model`` (the payload flags; a catalog model
sends its own real data). Rows 2-5 run the same closed-loop Locust load (``loadtest.drive.runner.run_locust``:
same users, duration, warm-up and processes). Row 3 is cross-checked with perf_analyzer (gRPC, the same
payloads, a concurrency range). The serving overhead at one client is perf_analyzer's p50 at concurrency 1
over gRPC (the C++ client) minus the in-process batch-1 median, printed with the server's queue/compute split;
Locust's one-user p50 (HTTP, a Python client) is the second figure, labelled as such. The first request after
the server reports ready is timed against the steady p50, with the model's warmup on and off
(``loadtest.measure.first_request``). Targets are printed as met/missed, never asserted.

Cores: the server (Triton, or FastAPI) and the load generator run on cores of their own (``--server-cpus``,
``--client-cpus``; by default the upper and the lower half of this machine's), and row 1 runs on the server's,
so no row's load generator takes cores from the model, and every row has the same cores to compute on.

Run: ``python -m loadtest.studies.bench [--models digits minilm] [--duration 15] [--out reports/bench]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
import tomllib
import urllib.request
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
from loadtest.studies.baselines.fastapi_app import serve_in_subprocess, stop_subprocess
from loadtest.studies.bench_report import (
    P99_BUDGET_MS,
    RATIOS,
    ROWS,
    TARGETS,
    describe,
    evaluate_targets,
    ratio,
    ratios,
    render,
    throughput,
)

__all__ = [
    "Options",
    "run",
    "main",
    "ROWS",
    "RATIOS",
    "TARGETS",
    "ratio",
    "ratios",
    "throughput",
    "render",
    "describe",
    "evaluate_targets",
    "tuned_source",
    "perf_levels",
    "options",
    "P99_BUDGET_MS",
    "default_users",
]

MIN_USERS, MAX_USERS = 8, 32
"""Bounds of the default closed-loop users (:func:`default_users`)."""


@dataclasses.dataclass
class Options:
    models: tuple[str, ...] = ("digits", "minilm")
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


def default_users(config: dict) -> int:
    """Closed-loop users enough for the served config to form its largest batch on every instance at once
    (instances x the largest preferred batch size, or ``max_batch_size`` without one; 1 per instance without
    a batcher), within [8, 32]: a closed loop of fewer users than that caps the batches below the config's, so
    the served rows could not reach the in-process limit at its best batch whatever the config."""
    instances = sum(int(g.get("count", 1)) for g in config.get("instance_group") or [{}])
    batching = config.get("dynamic_batching")
    if batching is None:
        batch = 1
    else:
        batch = max(
            [int(b) for b in batching.get("preferred_batch_size") or []] or [int(config.get("max_batch_size") or 1)]
        )
    return max(MIN_USERS, min(MAX_USERS, instances * batch))


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
def _client_row(client, **extra) -> dict:
    return {
        "throughput": client.throughput_rps,
        "p50_ms": client.latency_ms.get("p50"),
        "p99_ms": client.latency_ms.get("p99"),
        "requests": client.requests,
        "failures": client.failures,
        **extra,
    }


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"[:300]


def _guarded(fn, *args) -> dict:
    """``fn(*args)``, or ``{"throughput": None, "error": ...}``: one failed row must not lose the others."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001
        return {"throughput": None, "error": _error(exc)}


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


def measure_inprocess(bench: Bench, opts: Options) -> dict:
    got = limit(
        bench.spec,
        bench.batch,
        seconds_per_size=opts.inprocess_s,
        max_batch=bench.spec.max_batch_size or None,
        cpus=bench.server_cpus or None,
    )
    best = next(r for r in got.table if r.batch == got.best_batch)
    cores = f" on CPUs {_cpu_text(bench.server_cpus)}" if bench.server_cpus else ""
    return {
        "throughput": got.best_items_per_s,
        "p50_ms": best.median_ms,
        "p99_ms": None,
        "batch1_median_ms": got.batch1_median_ms,
        "best_batch": got.best_batch,
        "threads": got.threads,
        "note": f"{bench.spec.model_path.name}, batch {got.best_batch}, {got.threads} threads{cores}; "
        f"p90 {best.p90_ms:.3f} ms per call",
        "table": [dataclasses.asdict(r) for r in got.table],
    }


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


def measure_triton(bench: Bench, endpoints, opts: Options, work: Path, log) -> dict:
    """Rows 2 and 3, the one-client figures and the perf_analyzer cross-check of row 3, on a running server."""
    model = bench.model
    users, out = bench.users, {"rows": {}}
    # The server was started from config.pbtxt (for a catalog model: export's, with the tuned settings); rows 2
    # and 3 are loaded as explicit configs (a plain reload would keep serving the last override).
    tuned = apply.served_config(endpoints.http, model)
    out["tuned_source"] = tuned_source(model)
    plain = apply.override(tuned, Candidate.of("plain", dynamic_batching=False, instances=1, warmup=False))
    steps = [("triton_plain", plain, users), ("triton_tuned", tuned, users), ("one_user", tuned, 1)]

    def one(key: str, config: dict, n: int) -> dict:
        if key != "one_user":
            log(f"[{model}] {key}: loading {describe(config)} through model control")
            apply.load(endpoints.http, model, config)
            took = prime(bench, endpoints.http, users, "dynamic_batching" in config)
            log(f"[{model}] {key}: primed in {took:.1f} s")
        log(f"[{model}] {key}: {n} user(s), HTTP, {opts.duration_s:g} s")
        client, s = measure_run(
            _scenario(model, "http", n, opts, f"{model}-{key}"), model, endpoints, work, f"{model}-{key}", log
        )
        return _client_row(
            client,
            note=f"{describe(config)}; avg batch {s.avg_batch:.1f}",
            server={"avg_batch": s.avg_batch, "batch_histogram": s.batch_histogram, "breakdown_ms": s.breakdown_ms},
        )

    with tempfile.TemporaryDirectory(prefix="bench-perf-") as tmp:
        data = perf.write_input_data(Path(tmp) / "input.json", bench.samples, bench.spec.config)
        for key, config, n in steps:
            if key == "one_user":  # row 3 is loaded: the C++ client's one-client figure first
                out["one_client"] = measure_one_client(model, endpoints.grpc, data, opts, log)
            row = _guarded(one, key, config, n)
            if key == "one_user":
                out["one_user"] = {
                    "triton_p50_ms": row.get("p50_ms"),
                    "error": row.get("error"),
                    "client": "Locust, 1 user, HTTP",
                }
            else:
                out["rows"][key] = row
        out["perf"] = measure_perf(model, endpoints.grpc, users, data, opts, log)
    return out


def measure_one_client(model: str, grpc_url: str, data: Path, opts: Options, log) -> dict:
    """perf_analyzer at concurrency 1 over gRPC on row 3's config: the client's p50 and the server's split."""
    log(f"[{model}] one client: perf_analyzer, gRPC, concurrency 1")
    try:
        got = perf.run(
            model,
            grpc_url,
            "grpc",
            1,
            input_data=data,
            measurement_ms=max(opts.perf_ms, 1000),
            timeout_s=120.0,
            stability_percentage=30.0,
            max_trials=6,
        ).rows[0]
    except Exception as exc:  # noqa: BLE001 - reported in its row, the other rows still count
        return {"error": _error(exc)}
    compute = [got.server_compute_input_ms, got.server_compute_infer_ms, got.server_compute_output_ms]
    return {
        "client": "perf_analyzer, gRPC, concurrency 1",
        "throughput": got.throughput,
        "p50_ms": got.p50_ms,
        "p99_ms": got.p99_ms,
        "server_queue_ms": got.server_queue_ms,
        "server_compute_ms": sum(c for c in compute if c is not None) if any(c is not None for c in compute) else None,
        "server_compute_input_ms": got.server_compute_input_ms,
        "server_compute_infer_ms": got.server_compute_infer_ms,
        "server_compute_output_ms": got.server_compute_output_ms,
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
            got = perf.run(
                model,
                grpc_url,
                "grpc",
                level,
                input_data=data,
                measurement_ms=opts.perf_ms,
                timeout_s=120.0,
                stability_percentage=30.0,
                max_trials=6,
            )
            rows += [
                {"concurrency": r.concurrency, "throughput": r.throughput, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms}
                for r in got.rows
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


def measure_fastapi(bench: Bench, opts: Options, work: Path, log) -> dict:
    """Rows 4 and 5: the baseline in a uvicorn subprocess on the server's cores, per request then with the
    micro-batcher."""
    model, rows, users = bench.model, {}, bench.users
    for key, batcher in (("fastapi", False), ("fastapi_batcher", True)):
        (port,) = free_ports(1)
        log(f"[{model}] {key}: uvicorn on 127.0.0.1:{port}, {users} users, {opts.duration_s:g} s")
        procs = []

        def one(key: str = key, port: int = port, batcher: bool = batcher, procs: list = procs) -> dict:
            procs.append(
                serve_in_subprocess(
                    model, port, batcher, opts.repository, timeout_s=120, cpus=bench.server_cpus or None
                )
            )
            log(f"[{model}] {key}: primed in {prime(bench, f'127.0.0.1:{port}', users, batcher, True):.1f} s")
            client = run_locust(
                _scenario(model, "fastapi", users, opts, f"{model}-{key}"),
                model,
                f"127.0.0.1:{port}",
                work / f"{model}-{key}.json",
                work / f"{model}-{key}.log",
                progress=log,
                config=bench.spec.config,
                samples=bench.samples,
            )
            return _client_row(
                client,
                note=f"uvicorn, JSON, {bench.spec.model_path.name}, "
                + ("asyncio micro-batcher (max wait 2 ms)" if batcher else "one forward per request"),
            )

        try:
            rows[key] = _guarded(one)
        finally:
            for proc in procs:
                stop_subprocess(proc)
    return rows


def measure_first_request(bench: Bench, opts: Options) -> list[dict]:
    def one(warmup: bool) -> dict:
        got = measure(opts.repository, bench.model, bench.batch(1), warmup, opts.steady, "grpc")
        return {
            "first_ms": got.first_ms,
            "steady_p50_ms": got.steady_p50_ms,
            "ratio": got.ratio,
            "ready_s": got.ready_s,
            "warmup_entries": got.warmup_entries,
        }

    return [{"warmup": warmup, **_guarded(one, warmup)} for warmup in (True, False)]


def _cpu_text(cpus) -> str:
    return ",".join(map(str, sorted(cpus))) if cpus else "all"


# -- the whole run ---------------------------------------------------------------------------------
def prepare(opts: Options, server_cpus: frozenset[int]) -> dict[str, Bench]:
    """Every model's file, config and requests, checked before anything runs (LoadTestError, FileNotFoundError
    or ValueError naming the model and what is wrong)."""
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
    """Every row for every model, one after another; writes ``bench.json`` and ``bench.md`` under ``opts.out``."""
    began = time.monotonic()
    log = log or (lambda line: print(f"[{time.monotonic() - began:5.0f} s] {line}", file=sys.stderr, flush=True))
    opts.out.mkdir(parents=True, exist_ok=True)
    work = opts.out / "runs"
    work.mkdir(exist_ok=True)
    client_cpus, server_cpus = opts.cpus()
    benches = prepare(opts, server_cpus)
    import torch  # only for the machine line; the rows import what their file needs

    result = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{len(os.sched_getaffinity(0))} CPUs, torch {torch.__version__}",
        "cpus": {"server": sorted(server_cpus), "client": sorted(client_cpus)},
        "settings": {
            "duration_s": opts.duration_s,
            "warmup_s": opts.warmup_s,
            "processes": opts.processes,
            "payload": opts.payload.to_table(),
        },
        "models": {
            m: {
                "users": benches[m].users,
                "duration_s": opts.duration_s,
                "warmup_s": min(opts.warmup_s, opts.duration_s / 3),
                "rows": {},
                "format": benches[m].spec.model_path.name,
            }
            for m in opts.models
        },
    }
    models = result["models"]
    log(f"server and row 1 on CPUs {_cpu_text(server_cpus)}, load generators on CPUs {_cpu_text(client_cpus)}")
    for model in opts.models:  # row 1, no server running
        log(f"[{model}] in-process limit, {opts.inprocess_s:g} s per batch size")
        models[model]["rows"]["inprocess"] = _guarded(measure_inprocess, benches[model], opts)
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
                triton = measure_triton(benches[model], Endpoints.of(server), opts, work, log)
                models[model]["rows"].update(triton.pop("rows"))
                models[model].update(triton)
        finally:
            left = server.stop()
            result["server_left"] = left
            if left:
                log(f"WARNING: stopping tritonserver left behind: {left}")
        for model in opts.models:
            models[model]["rows"].update(measure_fastapi(benches[model], opts, work, log))
    finally:
        os.sched_setaffinity(0, affinity)
    for model in opts.models:
        batch1 = models[model]["rows"]["inprocess"].get("batch1_median_ms")
        for key, p50 in (("one_client", "p50_ms"), ("one_user", "triton_p50_ms")):
            one = models[model].setdefault(key, {})
            one["inprocess_batch1_ms"] = batch1
            one["overhead_ms"] = (one[p50] - batch1) if one.get(p50) and batch1 else None
    for model in opts.models:
        log(f"[{model}] first request after ready, warmup on and off (a server of its own each)")
        models[model]["first_request"] = measure_first_request(benches[model], opts)
    for model in opts.models:
        models[model]["ratios"] = ratios(models[model])
    result["targets"] = evaluate_targets(result)
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
        return 2
    print(render(result), end="")
    print(f"\nwrote {opts.out / 'bench.json'} and {opts.out / 'bench.md'}")
    return 1 if result.get("server_left") else 0


if __name__ == "__main__":
    sys.exit(main())
