"""The side-by-side benchmark: the same model under the same load, served five ways, in one run.

Rows (throughput in inferences/s; one request = one item for rows 2-5):

1. in-process: the TorchScript module called directly at its best batch size (``loadtest.measure.inprocess.limit``),
   the ceiling of this machine (items/s; p50 is the median call at that batch);
2. Triton plain: one instance, no dynamic batching, no warmup, applied through model control;
3. Triton tuned: the repository's config, which ``make export`` writes from ``export/models.toml`` with the
   auto-tuner's ``export/tuned.toml`` over it (the output quotes the tuned table's note);
4. FastAPI + uvicorn calling the module once per request, JSON in and out;
5. the same FastAPI server with its asyncio micro-batcher.

Rows 2-5 run the same closed-loop Locust load (``loadtest.drive.runner.run_locust``: same users, duration,
warm-up and processes). Row 3 is cross-checked with perf_analyzer (gRPC, real inputs, a concurrency
range) and run again with one user for the serving overhead (its p50 minus the in-process batch-1
median). The first request after the server reports ready is timed against the steady p50, with the
model's warmup on and off (``loadtest.measure.first_request``). Targets are printed as met/missed, never asserted.

Run: ``python -m loadtest.studies.bench [--models digits minilm] [--duration 15] [--out reports/bench]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import operator
import os
import sys
import tempfile
import time
import tomllib
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import torch

from deploy.client import connect, infer
from deploy.server import DEFAULT_REPOSITORY, PROJECT_ROOT, LocalServer, ServerConfig, free_ports
from export import catalog
from loadtest.campaign import Candidate, Scenario
from loadtest.drive import apply, perf
from loadtest.drive.payloads import real_batch, real_samples
from loadtest.drive.runner import run_locust
from loadtest.drive.target import Endpoints
from loadtest.measure.first_request import measure
from loadtest.measure.inprocess import limit, model_spec
from loadtest.measure.run import measure_run
from loadtest.studies.baselines.fastapi_app import serve_in_subprocess, stop_subprocess

DEFAULT_USERS = {"digits": 32, "minilm": 8}
SEQ_LEN = 32  # minilm: payloads.minilm_tokens pads every request to 32 tokens
P99_BUDGET_MS = 5.0
ROWS = (("inprocess", "1. in-process, best batch"), ("triton_plain", "2. Triton plain"),
        ("triton_tuned", "3. Triton tuned"), ("fastapi", "4. FastAPI per request"),
        ("fastapi_batcher", "5. FastAPI + micro-batcher"))
RATIOS = (("3/1", "triton_tuned", "inprocess"), ("3/2", "triton_tuned", "triton_plain"),
          ("3/4", "triton_tuned", "fastapi"), ("3/5", "triton_tuned", "fastapi_batcher"))


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

    def users_for(self, model: str) -> int:
        return int(self.users.get(model) or DEFAULT_USERS.get(model, 16))


# -- pure parts: ratios, targets, rendering ---------------------------------------------------------
def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b and a > 0 and b > 0 and not math.isnan(a) and not math.isnan(b) else None


def throughput(entry: dict, row: str) -> float | None:
    return (entry.get("rows", {}).get(row) or {}).get("throughput")


def ratios(entry: dict) -> dict[str, float | None]:
    return {name: ratio(throughput(entry, a), throughput(entry, b)) for name, a, b in RATIOS}


def _first_request_ratio(entry: dict, warmup: bool = True) -> float | None:
    return next((i.get("ratio") for i in entry.get("first_request", []) if i.get("warmup") == warmup), None)


def _perf_under_budget(entry: dict) -> float | None:
    return ((entry.get("perf") or {}).get("best_under_p99") or {}).get("throughput")


# (model or "*", target, how it is measured, value getter, comparison, threshold, unit)
TARGETS = (
    ("minilm", "tuned Triton >= 0.95x the in-process limit (3/1)", lambda e: ratios(e)["3/1"], ">=", 0.95, "x"),
    ("minilm", "tuned Triton >= 2x FastAPI (3/4)", lambda e: ratios(e)["3/4"], ">=", 2.0, "x"),
    ("digits", f">= 10k infer/s at p99 < {P99_BUDGET_MS:g} ms (perf_analyzer)", _perf_under_budget, ">=",
     10000.0, " infer/s"),
    ("digits", "tuned Triton >= 2.5x FastAPI (3/4)", lambda e: ratios(e)["3/4"], ">=", 2.5, "x"),
    ("digits", "tuned Triton >= 1.2x FastAPI + batcher (3/5)", lambda e: ratios(e)["3/5"], ">=", 1.2, "x"),
    ("*", "first request after ready <= 1.5x steady p50 (warmup on)", _first_request_ratio, "<=", 1.5, "x"),
    ("digits", "p50 serving overhead at one client < 0.4 ms",
     lambda e: (e.get("one_user") or {}).get("overhead_ms"), "<", 0.4, " ms"),
)


def evaluate_targets(result: dict) -> list[dict]:
    """One entry per target that applies to a model of ``result``: the measured value and met/missed.

    A value that could not be measured counts as missed (and says so)."""
    out = []
    for model, entry in result.get("models", {}).items():
        for applies, text, getter, op, threshold, unit in TARGETS:
            if applies not in ("*", model):
                continue
            value = getter(entry)
            met = value is not None and {">=": operator.ge, "<=": operator.le, "<": operator.lt}[op](value, threshold)
            out.append({"model": model, "target": text, "value": value, "op": op, "threshold": threshold,
                        "unit": unit, "status": "met" if met else "missed",
                        "measured": "not measured" if value is None else _number(value, unit)})
    return out


def _number(value: float | None, unit: str = "") -> str:
    if value is not None and unit == "x" and 0 < abs(value) < 0.1:  # e.g. Triton over an in-process MLP: 0.0040x
        return f"{value:.2g}x"
    formats = {"x": "{:.2f}x", " ms": "{:.3f} ms"}
    return "-" if value is None else formats.get(unit, "{:,.0f}" + unit).format(value)


def _ms(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3f}"


def render_model(model: str, entry: dict) -> str:
    lines = [f"### {model}: {entry['users']} closed-loop users, {entry['duration_s']:g} s per row "
             f"({entry['warmup_s']:g} s warm-up left out)", "",
             f"Tuned config: {entry.get('tuned_source', '?')}", "",
             "| row | throughput (infer/s) | p50 ms | p99 ms | notes |", "|---|---|---|---|---|"]
    for key, label in ROWS:
        row = entry.get("rows", {}).get(key) or {}
        note = row.get("error") or row.get("note", "")
        tp = row.get("throughput")
        lines.append(f"| {label} | {'-' if tp is None else f'{tp:,.0f}'} | {_ms(row.get('p50_ms'))} | "
                     f"{_ms(row.get('p99_ms'))} | {note} |")
    lines.append("")
    lines.append("Ratios (throughput): " + ", ".join(f"{k} = {_number(v, 'x')}" for k, v in ratios(entry).items()))
    perf = entry.get("perf") or {}

    def level(r: dict | None) -> str:
        return f"{r['throughput']:,.0f} infer/s at concurrency {r['concurrency']} (p99 {_ms(r['p99_ms'])} ms)" \
            if r else "no level"
    lines.append(f"perf_analyzer (row 3, gRPC, real data): failed: {perf.get('error')}" if "best" not in perf else
                 f"perf_analyzer (row 3, gRPC, real data, concurrency {perf['range']}): best {level(perf['best'])}; "
                 f"best with p99 < {P99_BUDGET_MS:g} ms: {level(perf.get('best_under_p99'))}"
                 + (f"; no stable figure at concurrency {', '.join(map(str, perf['failed']))}" if perf.get("failed") else ""))
    one = entry.get("one_user") or {}
    lines.append("Serving overhead at one client: " + (f"failed: {one['error']}" if one.get("error") else
                 f"Triton tuned p50 {_ms(one.get('triton_p50_ms'))} ms (1 user, HTTP) - in-process batch-1 median "
                 f"{_ms(one.get('inprocess_batch1_ms'))} ms = {_ms(one.get('overhead_ms'))} ms"))
    for item in entry.get("first_request", []):
        lines.append(f"First request after ready, warmup {'on' if item['warmup'] else 'off'}: " + (
            f"failed: {item['error']}" if item.get("error") else f"{item['first_ms']:.2f} ms vs steady p50 "
            f"{item['steady_p50_ms']:.2f} ms = {item['ratio']:.2f}x (ready after {item['ready_s']:.1f} s)"))
    return "\n".join(lines)


def render_targets(targets: list[dict]) -> str:
    lines = ["### targets (measured figures, not assertions)", "", "| model | target | measured | status |",
             "|---|---|---|---|"]
    lines += [f"| {t['model']} | {t['target']} | {t['measured']} | {t['status']} |" for t in targets]
    return "\n".join(lines)


def render(result: dict) -> str:
    head = (f"## tritonkit side-by-side benchmark ({result.get('started', '')}; {result.get('machine', '')})\n\n"
            "Throughput in inferences/s (rows 2-5: batch-1 requests/s; row 1: items/s). "
            "Latencies: client side; row 1: per call at its best batch.")
    parts = [head] + [render_model(m, e) for m, e in result.get("models", {}).items()]
    parts.append(render_targets(result.get("targets") or evaluate_targets(result)))
    return "\n\n".join(parts) + "\n"


# -- measuring ------------------------------------------------------------------------------------
def _client_row(client, **extra) -> dict:
    return {"throughput": client.throughput_rps, "p50_ms": client.latency_ms.get("p50"),
            "p99_ms": client.latency_ms.get("p99"), "requests": client.requests, "failures": client.failures,
            **extra}


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"[:300]


def _guarded(fn, *args) -> dict:
    """``fn(*args)``, or ``{"throughput": None, "error": ...}``: one failed row must not lose the others."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001
        return {"throughput": None, "error": _error(exc)}


def describe(config: dict) -> str:
    """Instances, batching and warmup of a Triton JSON config, in a few words."""
    count = sum(g.get("count", 1) for g in config.get("instance_group") or [{}])
    batching = config.get("dynamic_batching")
    text = f"{count} instance{'s' if count > 1 else ''}, " + (
        f"dynamic batching ({batching.get('max_queue_delay_microseconds', 0)} us, preferred "
        f"{batching.get('preferred_batch_size') or '-'})" if batching is not None else "no dynamic batching")
    return text + f", {len(config.get('model_warmup') or [])} warmup samples"


def tuned_source(model: str, tuned_path: Path = catalog.TUNED) -> str:
    """Where row 3's config comes from: the repository's, which ``make export`` writes from
    ``export/models.toml`` overlaid with the auto-tuner's ``export/tuned.toml``."""
    table = tomllib.loads(tuned_path.read_text()).get(model) if tuned_path.is_file() else None
    where = tuned_path.relative_to(PROJECT_ROOT) if tuned_path.is_relative_to(PROJECT_ROOT) else tuned_path
    if not table:
        return f"the repository's config as exported ({where} has no [{model}] table)"
    return f"the repository's config as exported with {where} [{model}]" + (
        f" ({table['note']})" if table.get("note") else "")


def measure_inprocess(model: str, opts: Options) -> dict:
    spec = model_spec(model, opts.repository)
    got = limit(spec.model_path, lambda n: real_batch(model, n, SEQ_LEN), seconds_per_size=opts.inprocess_s,
                max_batch=spec.max_batch_size or None)
    best = next(r for r in got.table if r.batch == got.best_batch)
    return {"throughput": got.best_items_per_s, "p50_ms": best.median_ms, "p99_ms": None,
            "batch1_median_ms": got.batch1_median_ms, "best_batch": got.best_batch, "threads": got.threads,
            "note": f"batch {got.best_batch}, {got.threads} threads; p90 {best.p90_ms:.3f} ms per call",
            "table": [dataclasses.asdict(r) for r in got.table]}


def _scenario(model: str, protocol: str, users: int, opts: Options, name: str):
    return Scenario(name, model, protocol, {"kind": "users", "users": users}, opts.duration_s,
                    min(opts.warmup_s, opts.duration_s / 3), opts.processes)


def prime(model: str, url: str, users: int, batching: bool, fastapi: bool = False) -> float:
    """Untimed requests before a row, with the batch sizes the row's traffic will form (1, or 1, 2, 4 ... up
    to the users when a batcher joins requests), so that TorchScript's profiling executor has specialised
    (seconds for minilm) before Locust measures."""
    started, client = time.monotonic(), None if fastapi else connect("http", url)
    try:
        for batch in [b for b in (perf_levels(users) if batching else [1]) for _ in range(3)]:
            arrays = real_batch(model, batch, SEQ_LEN)
            if client is not None:
                infer(client, model, arrays)
                continue
            body = json.dumps({"inputs": {k: v.tolist() for k, v in arrays.items()}}).encode()
            request = urllib.request.Request(f"http://{url}/infer", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as response:
                response.read()
    finally:
        if client is not None:
            client.close()
    return time.monotonic() - started


def measure_triton(model: str, endpoints, opts: Options, work: Path, log) -> dict:
    """Rows 2 and 3, the one-user run of row 3 and the perf_analyzer cross-check, on a running server."""
    users, out = opts.users_for(model), {"rows": {}}
    # The server was started from config.pbtxt, which export generates with the tuned settings; rows 2 and 3
    # are loaded as explicit configs (a plain reload would keep serving the last override).
    tuned = apply.served_config(endpoints.http, model)
    out["tuned_source"] = tuned_source(model)
    plain = apply.override(tuned, Candidate.of("plain", dynamic_batching=False, instances=1, warmup=False))
    steps = [("triton_plain", plain, users), ("triton_tuned", tuned, users), ("one_user", tuned, 1)]

    def one(key: str, config: dict, n: int) -> dict:
        if key != "one_user":
            log(f"[{model}] {key}: loading {describe(config)} through model control")
            apply.load(endpoints.http, model, config)
            took = prime(model, endpoints.http, users, "dynamic_batching" in config)
            log(f"[{model}] {key}: primed in {took:.1f} s")
        log(f"[{model}] {key}: {n} user(s), HTTP, {opts.duration_s:g} s")
        client, s = measure_run(_scenario(model, "http", n, opts, f"{model}-{key}"), model, endpoints, work,
                                f"{model}-{key}", log)
        return _client_row(client, note=f"{describe(config)}; avg batch {s.avg_batch:.1f}", server={
            "avg_batch": s.avg_batch, "batch_histogram": s.batch_histogram, "breakdown_ms": s.breakdown_ms})

    for key, config, n in steps:
        row = _guarded(one, key, config, n)
        if key == "one_user":
            out["one_user"] = {"triton_p50_ms": row.get("p50_ms"), "error": row.get("error")}
        else:
            out["rows"][key] = row
    out["perf"] = measure_perf(model, endpoints.grpc, users, opts, log)
    return out


def perf_levels(users: int) -> list[int]:
    """1, 2, 4, ... up to the Locust users (and the users themselves)."""
    levels = [1 << i for i in range(max(1, users).bit_length()) if 1 << i < users]
    return levels + [users]


def measure_perf(model: str, grpc_url: str, users: int, opts: Options, log) -> dict:
    """perf_analyzer against row 3's config: one run per concurrency level (a level that fails to
    settle on this noisy machine is reported as such, the others still count)."""
    levels, rows, failed = perf_levels(users), [], {}
    log(f"[{model}] perf_analyzer on row 3 (gRPC, concurrency {levels})")
    with tempfile.TemporaryDirectory(prefix="bench-perf-") as tmp:
        data = perf.write_input_data(Path(tmp) / "input.json", real_samples(model, 64, SEQ_LEN))
        for level in levels:
            try:
                got = perf.run(model, grpc_url, "grpc", level, input_data=data, measurement_ms=opts.perf_ms,
                               timeout_s=120.0, stability_percentage=30.0, max_trials=6)
                rows += [{"concurrency": r.concurrency, "throughput": r.throughput, "p50_ms": r.p50_ms,
                          "p99_ms": r.p99_ms} for r in got.rows]
            except Exception as exc:  # noqa: BLE001
                failed[level] = _error(exc)
    if not rows:
        return {"error": f"every level failed: {failed}", "failed": failed}
    under = [r for r in rows if r["p99_ms"] is not None and r["p99_ms"] < P99_BUDGET_MS]
    return {"range": ",".join(map(str, levels)), "levels": rows, "failed": failed,
            "best": max(rows, key=lambda r: r["throughput"]),
            "best_under_p99": max(under, key=lambda r: r["throughput"]) if under else None}


def measure_fastapi(model: str, opts: Options, work: Path, log) -> dict:
    """Rows 4 and 5: the baseline in a uvicorn subprocess, per request then with the micro-batcher."""
    rows, users = {}, opts.users_for(model)
    for key, batcher in (("fastapi", False), ("fastapi_batcher", True)):
        (port,) = free_ports(1)
        log(f"[{model}] {key}: uvicorn on 127.0.0.1:{port}, {opts.users_for(model)} users, {opts.duration_s:g} s")
        procs = []

        def one() -> dict:
            procs.append(serve_in_subprocess(model, port, batcher, opts.repository, timeout_s=120))
            log(f"[{model}] {key}: primed in {prime(model, f'127.0.0.1:{port}', users, batcher, True):.1f} s")
            client = run_locust(_scenario(model, "fastapi", opts.users_for(model), opts, f"{model}-{key}"), model,
                                f"127.0.0.1:{port}", work / f"{model}-{key}.json", work / f"{model}-{key}.log",
                                progress=log)
            return _client_row(client, note="uvicorn, JSON, " + (
                "asyncio micro-batcher (max wait 2 ms)" if batcher else "one forward per request"))
        try:
            rows[key] = _guarded(one)
        finally:
            for proc in procs:
                stop_subprocess(proc)
    return rows


def measure_first_request(model: str, opts: Options) -> list[dict]:
    def one(warmup: bool) -> dict:
        got = measure(opts.repository, model, real_batch(model, 1, SEQ_LEN), warmup, opts.steady, "grpc")
        return {"first_ms": got.first_ms, "steady_p50_ms": got.steady_p50_ms, "ratio": got.ratio,
                "ready_s": got.ready_s, "warmup_entries": got.warmup_entries}

    return [{"warmup": warmup, **_guarded(one, warmup)} for warmup in (True, False)]


def run(opts: Options, log=None) -> dict:
    """Every row for every model, one after another; writes ``bench.json`` and ``bench.md`` under ``opts.out``."""
    began = time.monotonic()
    log = log or (lambda line: print(f"[{time.monotonic() - began:5.0f} s] {line}", file=sys.stderr, flush=True))
    opts.out.mkdir(parents=True, exist_ok=True)
    work = opts.out / "runs"
    work.mkdir(exist_ok=True)
    missing = [m for m in opts.models if not (opts.repository / m / "1" / "model.pt").is_file()]
    if missing:
        raise SystemExit(f"no exported model for {missing} in {opts.repository}: run `make export`")
    result = {"started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": f"{len(os.sched_getaffinity(0))} CPUs, torch {torch.__version__}",
              "settings": {"duration_s": opts.duration_s, "warmup_s": opts.warmup_s, "processes": opts.processes},
              "models": {m: {"users": opts.users_for(m), "duration_s": opts.duration_s,
                             "warmup_s": min(opts.warmup_s, opts.duration_s / 3), "rows": {}} for m in opts.models}}
    models = result["models"]
    for model in opts.models:  # row 1, no server running
        log(f"[{model}] in-process limit, {opts.inprocess_s:g} s per batch size")
        models[model]["rows"]["inprocess"] = _guarded(measure_inprocess, model, opts)
    http, grpc, metrics = free_ports(3)
    server = LocalServer(ServerConfig(model_repository=opts.repository, http_port=http, grpc_port=grpc,
                                      metrics_port=metrics, model_control_mode="explicit",
                                      load_models=tuple(opts.models), exit_timeout_s=10))
    log(f"starting tritonserver (HTTP {http}, gRPC {grpc}) with {', '.join(opts.models)}")
    server.start()
    try:
        for model in opts.models:
            triton = measure_triton(model, Endpoints.of(server), opts, work, log)
            models[model]["rows"].update(triton.pop("rows"))
            models[model].update(triton)
    finally:
        left = server.stop()
        result["server_left"] = left
        if left:
            log(f"WARNING: stopping tritonserver left behind: {left}")
    for model in opts.models:
        models[model]["rows"].update(measure_fastapi(model, opts, work, log))
        one = models[model].get("one_user") or {}
        batch1 = models[model]["rows"]["inprocess"].get("batch1_median_ms")
        one["inprocess_batch1_ms"] = batch1
        one["overhead_ms"] = (one["triton_p50_ms"] - batch1) if one.get("triton_p50_ms") and batch1 else None
        models[model]["one_user"] = one
    for model in opts.models:
        log(f"[{model}] first request after ready, warmup on and off (a server of its own each)")
        models[model]["first_request"] = measure_first_request(model, opts)
    for model in opts.models:
        models[model]["ratios"] = ratios(models[model])
    result["targets"] = evaluate_targets(result)
    (opts.out / "bench.json").write_text(json.dumps(result, indent=1))
    (opts.out / "bench.md").write_text(render(result))
    return result


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m loadtest.studies.bench", description=__doc__.split("\n\n")[0],
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:-1]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["digits", "minilm"], help="models to benchmark")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds of Locust load per row (rows 2-5)")
    parser.add_argument("--warmup", type=float, default=2.0, help="leading seconds of each row left out")
    parser.add_argument("--users", nargs="+", default=[], metavar="[MODEL=]N",
                        help="closed-loop Locust users (default: digits=32 minilm=8)")
    parser.add_argument("--processes", type=int, default=1, help="Locust processes")
    parser.add_argument("--out", type=Path, default=Path("reports/bench"), help="writes bench.json and bench.md")
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    parser.add_argument("--inprocess-s", type=float, default=2.0, help="row 1: seconds per batch size")
    parser.add_argument("--perf-ms", type=int, default=1500, help="perf_analyzer measurement window, ms")
    parser.add_argument("--steady", type=int, default=200, help="first-request check: steady sequential requests")
    return parser


def options(argv: list[str] | None = None) -> Options:
    """The command line as :class:`Options`."""
    args = parser().parse_args(argv)
    users = {}
    for value in args.users:  # "32" for every model, "digits=32" for one
        model, _, number = value.rpartition("=")
        users.update({model: int(number)} if model else dict.fromkeys(args.models, int(number)))
    return Options(models=tuple(args.models), duration_s=args.duration, warmup_s=args.warmup, users=users,
                   processes=args.processes, out=args.out.resolve(), repository=args.repository.resolve(),
                   inprocess_s=args.inprocess_s, perf_ms=args.perf_ms, steady=args.steady)


def main(argv: list[str] | None = None) -> int:
    opts = options(argv)
    result = run(opts)
    print(render(result), end="")
    print(f"\nwrote {opts.out / 'bench.json'} and {opts.out / 'bench.md'}")
    return 1 if result.get("server_left") else 0


if __name__ == "__main__":
    sys.exit(main())
