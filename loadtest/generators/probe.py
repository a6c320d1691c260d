"""One measurement of one served config at one load, by a generator that is checked for keeping up.

Tensor models are measured with ``perf_analyzer`` (C++, gRPC by default): ``--concurrency-range N`` for a
closed loop of N users, ``--request-rate-range R`` for an open loop at a constant rate, ``--request-intervals
FILE`` for an open loop on a schedule. Pipelines (ensembles, Python models) and streams (decoupled models) are
measured with Locust, with one process per client CPU. Triton's own counters are read around each run for the
error rate, the queue/compute split and the batch sizes. A command builds one ``generators.LoadGenerator`` (which of
the two, and its settings) and calls its ``measure`` for every run; ``with_perf_analyzer`` and ``with_locust``
here do the work.

A run whose generator was the bottleneck is marked ``saturated`` and must not be used to rank configs:
its CPU use reached ``CPU_LIMIT`` of the CPUs it may use (from the kernel's accounting of the child), or
in an open loop it did not send the rate asked for (perf_analyzer's "Avg send request rate" or its
delayed requests; Locust's offered count).
"""

from __future__ import annotations

import math
import os
import resource
import time
from pathlib import Path

from export.model_kind import is_decoupled
from loadtest.core import evidence
from loadtest.core.measurement import Load, Measurement
from loadtest.core.results import goodput_of
from loadtest.core.spec import CLOSED_LOOP_RPS_PER_USER
from loadtest.errors import LoadTestError
from loadtest.generators.locust.run import measure_run
from loadtest.generators.perf_analyzer import perf
from loadtest.generators.saturation import keeps_up
from loadtest.target import server_metrics, server_trace
from loadtest.target.endpoints import Endpoints

CPU_LIMIT = 0.9
"""A generator using this share of its CPUs (or more) is taken to be the bottleneck."""
DELAYED_LIMIT_PERCENT = 5.0
"""Open loop: a generator sending more than this share of requests late fell behind its schedule
(perf_analyzer's own count; Locust's is those sent more than ``latency.LATE_S``, 10 ms, after they fell due)."""
TENSOR_PLATFORMS = ("pytorch_libtorch", "onnxruntime_onnx", "tensorrt_plan", "tensorflow_savedmodel")


def saturation(
    cpu_fraction: float,
    load: Load,
    sent_rate: float | None = None,
    delayed_percent: float = 0.0,
    late_of: tuple[int, int] | None = None,
    measured_s: float | None = None,
    dropped: int = 0,
) -> str:
    """The one fell-behind rule: why a generator run cannot be trusted to rank configs ("" when it kept up).
    Where the run's counts are known, chance is forgiven: ``measured_s``, the seconds ``sent_rate`` was counted
    over, lets a Poisson count's shortfall pass (``saturation.keeps_up``; None: under ``KEEP_UP`` of the rate
    asked for is short); ``late_of``, (requests sent late, requests
    scheduled), makes the late share count only when it is above the limit beyond chance
    (``evidence.share_lower_bound``), so one late request of a 3 s run at 3 req/s is not a generator that fell
    behind."""
    reasons = []
    if not math.isnan(cpu_fraction) and cpu_fraction >= CPU_LIMIT:
        reasons.append(f"its CPU at {cpu_fraction:.0%} of its cores")
    if load.rate is not None:
        if sent_rate is not None and not keeps_up(sent_rate, load.rate, measured_s):
            reasons.append(f"sent {sent_rate:.1f} of {load.rate:g} req/s asked")
        late = delayed_percent if late_of is None else 100.0 * evidence.share_lower_bound(*late_of)
        if late > DELAYED_LIMIT_PERCENT:
            reasons.append(f"{delayed_percent:.1f}% of requests sent late")
    if dropped:
        reasons.append(f"{dropped} arrivals dropped unsent, every in-flight slot busy")
    return "; ".join(reasons)


def generator_for(platform: str, decoupled: bool, datatypes: list[str]) -> str:
    """perf_analyzer for a tensor model with numeric inputs; Locust for pipelines, Python models and streams."""
    if platform in TENSOR_PLATFORMS and not decoupled and "BYTES" not in datatypes:
        return "perf_analyzer"
    return "locust"


def generator_for_config(config: dict) -> str:
    """``generator_for`` a served config as Triton's JSON."""
    datatypes = [str(t.get("data_type", "")).removeprefix("TYPE_") for t in config.get("input", [])]
    return generator_for(config.get("platform") or config.get("backend", ""), is_decoupled(config), datatypes)


def client_cpus() -> frozenset[int]:
    """The CPUs this process (and the generators it starts) may run on."""
    return frozenset(os.sched_getaffinity(0))


def _server_view(stats) -> dict[str, float]:
    b = stats.breakdown_ms
    compute = sum(b.get(k, 0.0) for k in ("compute_input", "compute_infer", "compute_output"))
    return {
        "queue_ms": round(b.get("queue", math.nan), 4),
        "compute_ms": round(compute, 4),
        "request_ms": round(b.get("request", math.nan), 4),
        "avg_batch": round(stats.avg_batch, 3),
        "requests": stats.requests,
        "failures": stats.failures,
    }


def with_perf_analyzer(
    endpoints: Endpoints,
    served_model: str,
    load: Load,
    *,
    protocol: str = "grpc",
    input_data: Path | None = None,
    shapes: dict[str, list[int]] | None = None,
    measurement_ms: int = 2000,
    max_trials: int = 5,
    timeout_s: float | None = None,
    budget_ms: float = math.inf,
    request_intervals: Path | None = None,
) -> Measurement:
    """perf_analyzer at ``load`` against ``served_model``: one stable window (loosely: a shared CPU is never
    steady to 10 %), Triton's counters read around it. ``budget_ms``: the latency budget goodput counts
    against, from every measured request's latency in perf_analyzer's profile export (a finite budget only:
    the export holds every request's tensors, so it is not written when no budget asks for it, and goodput is
    then NaN). perf_analyzer stops at a failed request, so every request of a finished run succeeded.
    ``request_intervals``: an open loop on that schedule (perf_analyzer's ``--request-intervals`` file) instead
    of a constant ``load.rate``; the schedule's mean rate is to be ``load.rate``, which stays the offered rate
    the sent rate is judged against. ``timeout_s``: how long one perf_analyzer run may take (default
    :func:`loadtest.generators.perf_analyzer.perf.time_limit_s`)."""
    if request_intervals is not None and load.rate is None:
        raise LoadTestError("a request-intervals schedule is an open loop: give the load a rate, not users")
    before = server_metrics.snapshot(endpoints.http, endpoints.metrics, served_model)
    # Open loop: asynchronous requests, or each of perf_analyzer's threads waits for its answer and the
    # schedule slips (it reports the delayed share).
    extra = ("--async",) if load.rate is not None else ()
    per_s = load.rate if load.rate is not None else load.users * CLOSED_LOOP_RPS_PER_USER
    sample = server_trace.TraceSample(
        endpoints.http, served_model, server_trace.rate_for(per_s * measurement_ms / 1000 * max_trials)
    )

    def run_at(stability: int) -> perf.PerfResult:
        return perf.run(
            served_model,
            endpoints.url(protocol),
            protocol,
            concurrency=load.users or 1,
            request_rate=load.rate if request_intervals is None else None,
            request_intervals=request_intervals,
            input_data=input_data,
            shapes=shapes,
            measurement_ms=measurement_ms,
            stability_percentage=stability,
            max_trials=max_trials,
            timeout_s=timeout_s,
            extra_args=extra,
            profile_export=math.isfinite(budget_ms),
        )

    try:
        with sample:
            result = _steadiest(run_at)
    except perf.PerfAnalyzerOutOfMemory as exc:  # the generator's limit: the run says so, it did not fail
        behind = Measurement(math.nan, math.nan, math.nan, 0.0, "perf_analyzer", offered_rate=load.rate)
        behind.saturated = str(exc)
        return behind
    except perf.PerfAnalyzerError as exc:
        after = server_metrics.snapshot(endpoints.http, endpoints.metrics, served_model)
        failed = Measurement.failed("perf_analyzer", _perf_reason(str(exc)))
        stats = server_metrics.delta(before, after, math.nan)
        handled = stats.requests + stats.failures
        failed.error_rate = stats.failures / handled if handled else 0.0
        failed.server = _server_view(stats)
        return failed
    after = server_metrics.snapshot(endpoints.http, endpoints.metrics, served_model)
    row = result.rows[0]
    stats = server_metrics.delta(before, after, row.mean_ms)
    handled = stats.requests + stats.failures
    cpu = result.cpu_s / result.wall_s / len(client_cpus()) if result.wall_s > 0 else math.nan
    sent = result.sent_rate
    share = rate = math.nan
    if result.requests:  # the windows perf_analyzer's figures merge; one load level per run here
        measured = result.requests[0]
        share, rate = evidence.goodput(measured.within(budget_ms), len(measured.latencies_ms), measured.duration_s)
    p50, p99 = _ms(row.p50_ms), _ms(row.p99_ms)
    measured_s = measurement_ms / 1000  # one window: the shortest count the send rate may rest on
    trace = sample.times.quantiles() if sample.times is not None else None
    return Measurement(
        throughput=row.throughput,
        p50_ms=p50,
        p99_ms=p99,
        error_rate=stats.failures / handled if handled else 0.0,
        generator="perf_analyzer",
        mean_ms=_ms(row.mean_ms),
        generator_cpu=round(cpu, 3),
        offered_rate=load.rate,
        sent_rate=sent,
        saturated=saturation(cpu, load, sent, result.delayed_percent, measured_s=measured_s),
        server=_server_view(stats),
        goodput_share=share,
        goodput_rps=rate,
        floor_ms=server_trace.floor_ms(
            {"p50": p50, "p99": p99}, trace, stats.breakdown_ms.get("client_network", math.nan)
        ),
        measured_s=measured_s,
    )


def _steadiest(run_at) -> perf.PerfResult:
    """perf_analyzer's run (``run_at(stability)``): a shared CPU is never steady to its 10 %, so 50 % over its
    windows, and once more accepting any spread before giving up."""
    for stability in (50, 100):
        try:
            return run_at(stability)
        except perf.PerfAnalyzerError as exc:
            if stability == 100 or "stable measurement" not in str(exc):
                raise
    raise AssertionError("unreachable: the last stability raises")


def _perf_reason(message: str) -> str:
    """The line of perf_analyzer's output that says what went wrong, else the first line of the error."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for line in reversed(lines):
        if any(word in line.lower() for word in ("error", "failed", "unable", "invalid")):
            return line[:300]
    return lines[0][:300] if lines else "perf_analyzer failed"


def _ms(value: float | None) -> float:
    return math.nan if value is None else value


def locust_warmup_s(duration_s: float) -> float:
    """The start of a Locust run left out of its figures."""
    return min(2.0, duration_s / 4)


def with_locust(
    endpoints: Endpoints,
    model: str,
    served_model: str,
    load: Load,
    work: Path,
    label: str,
    *,
    protocol: str = "grpc",
    duration_s: float = 10.0,
    processes: int | None = None,
    payload: dict | None = None,
    budget_ms: float = math.inf,
    ttft_ms: float | None = None,
    itl_ms: float | None = None,
    log=print,
) -> Measurement:
    """Locust at ``load``, one process per client CPU unless ``processes`` says otherwise; ``payload``: a
    campaign scenario's payload table (``PayloadOptions.to_table``); ``budget_ms``: the latency budget goodput
    counts against (infinite: every success counts), and for streams ``ttft_ms`` and ``itl_ms`` too (None: not
    a budget). A streamed run gets its p99 TTFT, p99 ITL and output tokens/s from the client's stream figures."""
    processes = processes or max(1, len(client_cpus()))
    scenario = load.scenario(label, model, protocol, duration_s, locust_warmup_s(duration_s), processes, payload)
    usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    try:
        client, stats = measure_run(scenario, served_model, endpoints, work, label, log=log)
    except LoadTestError as exc:
        return Measurement.failed("locust", str(exc))
    wall = time.monotonic() - started
    usage_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (usage_after.ru_utime + usage_after.ru_stime) - (usage_before.ru_utime + usage_before.ru_stime)
    # Each Locust process is one Python thread of work: it saturates at one core.
    cpu = cpu_s / wall / min(processes, len(client_cpus())) if wall > 0 else math.nan
    sent = client.requests / client.duration_s if load.rate is not None and client.duration_s > 0 else None
    return Measurement.of_client(
        client,
        "locust",
        goodput_of(client, budget_ms, ttft_ms, itl_ms),
        generator_cpu=round(cpu, 3),
        offered_rate=load.rate,
        sent_rate=sent,
        saturated=saturation(
            cpu, load, sent, client.late_percent, (client.late, client.scheduled), client.duration_s, client.dropped
        ),
        server=_server_view(stats),
        floor_ms=server_trace.floor_ms(
            client.latency_ms, stats.trace, stats.breakdown_ms.get("client_network", math.nan)
        ),
        measured_s=client.duration_s,
    )
