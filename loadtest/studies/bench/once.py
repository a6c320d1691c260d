"""The side-by-side benchmark's one-run figures, measured once after the rounds (``loadtest.studies.bench.command``).

On row 3's config: the serving overhead at one client (perf_analyzer at concurrency 1 over gRPC, and
Locust's one user over HTTP) and the perf_analyzer cross-check over a concurrency range; then the first
request after ready against the steady p50, warmup on and off, on a server of its own each.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from loadtest.core.measurement import Load
from loadtest.generators.perf_analyzer import perf
from loadtest.probes.first_request import measure
from loadtest.studies.bench.rows import Bench, Options, error_text, guarded, perf_levels, prime, triton_locust
from loadtest.studies.bench.targets import P99_BUDGET_MS
from loadtest.target import apply


def measure_once_on_tuned(bench: Bench, endpoints, tuned: dict, opts: Options, work: Path, log) -> dict:
    """After the rounds, on row 3's config: the one-client figures and the perf_analyzer cross-check (one run
    each)."""
    model, out = bench.model, {}
    try:
        apply.load(endpoints.http, model, tuned)
        prime(bench, endpoints.http, bench.users, "dynamic_batching" in tuned)
    except Exception as exc:  # noqa: BLE001
        log(f"[{model}] reloading row 3's config failed: {error_text(exc)}")
    with tempfile.TemporaryDirectory(prefix="bench-perf-") as tmp:
        data = perf.write_input_data(Path(tmp) / "input.json", bench.samples, bench.spec.config)
        out["one_client"] = measure_one_client(model, endpoints.grpc, data, opts, log)

        def one_user() -> dict:
            log(f"[{model}] one user: Locust, HTTP, {opts.duration_s:g} s")
            record = triton_locust(endpoints, opts, work, log).run(
                model, model, Load(users=1), label=f"{model}-one_user"
            )
            return {"p50_ms": record.client.latency_ms.get("p50")}

        row = guarded(one_user)
        out["one_user"] = {
            "triton_p50_ms": row.get("p50_ms"),
            "error": row.get("error"),
            "client": "Locust, 1 user, HTTP",
        }
        out["perf"] = measure_perf(model, endpoints.grpc, bench.users, data, opts, log)
    return out


PERF_SETTINGS = {"stability_percentage": 30.0, "max_trials": 6}
"""Loosely stable: this shared machine is never steady to perf_analyzer's default 10%."""


def _perf(model: str, grpc_url: str, level: int, data: Path, window_ms: int):
    return perf.run(model, grpc_url, "grpc", level, input_data=data, measurement_ms=window_ms, **PERF_SETTINGS)


def measure_one_client(model: str, grpc_url: str, data: Path, opts: Options, log) -> dict:
    """perf_analyzer at concurrency 1 over gRPC on row 3's config: the client's p50 and the server's split."""
    log(f"[{model}] one client: perf_analyzer, gRPC, concurrency 1")
    try:
        got = _perf(model, grpc_url, 1, data, max(opts.perf_ms, 1000)).rows[0]
    except Exception as exc:  # noqa: BLE001 - reported in its row, the other rows still count
        return {"error": error_text(exc)}
    parts = ("server_compute_input_ms", "server_compute_infer_ms", "server_compute_output_ms")
    compute = [getattr(got, k) for k in parts if getattr(got, k) is not None]
    return {
        "client": "perf_analyzer, gRPC, concurrency 1",
        **{k: getattr(got, k) for k in ("throughput", "p50_ms", "p99_ms", "server_queue_ms", *parts)},
        "server_compute_ms": sum(compute) if compute else None,
    }


def measure_perf(model: str, grpc_url: str, users: int, data: Path, opts: Options, log) -> dict:
    """perf_analyzer against row 3's config: one run per concurrency level (a level that fails to
    settle on this noisy machine is reported as such, the others still count)."""
    levels, rows, failed = list(opts.perf_concurrency) or perf_levels(users), [], {}
    log(f"[{model}] perf_analyzer on row 3 (gRPC, concurrency {levels})")
    for level in levels:
        try:
            rows += [
                {"concurrency": r.concurrency, "throughput": r.throughput, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms}
                for r in _perf(model, grpc_url, level, data, opts.perf_ms).rows
            ]
        except Exception as exc:  # noqa: BLE001
            failed[level] = error_text(exc)
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


def measure_first_request(bench: Bench, opts: Options) -> list[dict]:
    def one(warmup: bool) -> dict:
        got = measure(opts.repository, bench.model, bench.batch(1), warmup, opts.steady, "grpc")
        return {k: getattr(got, k) for k in ("first_ms", "steady_p50_ms", "ratio", "ready_s", "warmup_entries")}

    return [{"warmup": warmup, **guarded(one, warmup)} for warmup in (True, False)]
