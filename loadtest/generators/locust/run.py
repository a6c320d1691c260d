"""Measure one run: Locust's load for a scenario between two reads of Triton's counters, both sides of it
(``measure_run``, which the generator seam's ``Locust`` calls), one run as a trial of a (scenario, variant) pair
with its goodput (``trial_of``), and the pair's ``RunResult`` over its trials with the intervals and the SLO verdict
(``run_result``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from loadtest.core import evidence, slo
from loadtest.core.client_stats import ClientStats
from loadtest.core.results import RunResult, ServerStats, Trial, goodput_of, pooled
from loadtest.core.spec import Candidate, Scenario, Slo
from loadtest.generators.locust.runner import check_payloads, run_locust
from loadtest.target import apply, server_metrics, server_trace
from loadtest.target.endpoints import Endpoints


def measure_run(
    scenario: Scenario,
    served_model: str,
    endpoints: Endpoints,
    work: Path,
    label: str,
    log=print,
    extra_settings: dict | None = None,
) -> tuple[ClientStats, ServerStats]:
    """Locust for ``scenario`` between two reads of Triton's counters: both sides of one run. The payloads are
    made against the served config first, so a bad option or data file stops it before any load."""
    config = apply.served_config(endpoints.http, served_model)
    samples = check_payloads(scenario, served_model, config)
    before = server_metrics.snapshot(endpoints.http, endpoints.metrics, served_model)
    rate = server_trace.rate_for(scenario.expected_requests())
    with server_trace.TraceSample(endpoints.http, served_model, rate, scenario.warmup_s, config) as traced:
        client = run_locust(
            scenario,
            served_model,
            endpoints.url(scenario.protocol),
            work / f"{label}.json",
            work / f"{label}.log",
            progress=log,
            extra_settings=extra_settings,
            config=config,
            samples=samples,
        )
    after = server_metrics.snapshot(endpoints.http, endpoints.metrics, served_model)
    server = server_metrics.delta(before, after, client.latency_ms.get("mean", float("nan")))
    server.trace = traced.times.quantiles() if traced.times is not None else {}
    return client, server


def trial_of(client: ClientStats, server: ServerStats | None, budget: Slo) -> Trial:
    """One run of a pair (its own warm-up window left out) as a campaign's trial, with its goodput: requests
    answered without error within the p99 budget (every success when there is none), counted on the client's
    histogram; with a TTFT or ITL budget, streamed requests within those too, counted on each request's figures."""
    share, rate = goodput_of(client, budget.p99_ms, budget.ttft_ms, budget.itl_ms)
    return Trial(client, server, share, rate, budget.p99_ms, budget.ttft_ms, budget.itl_ms)


def trial_floor(trial: Trial) -> dict[str, float]:
    """The generator's own time in one trial's latencies (``server_trace.floor_ms``): traced percentiles, else the
    mean from Triton's metrics; empty without the server's side."""
    if not trial.server:
        return {}
    mean = trial.server.breakdown_ms.get("client_network", math.nan)
    return server_trace.floor_ms(trial.client.latency_ms, trial.server.trace, mean)


def run_result(
    scenario: Scenario, variant: Candidate, served_model: str, trials: Sequence[Trial], budget: Slo
) -> RunResult:
    """The pair's result over its trials: pooled stats, every trial and the intervals (two or more), goodput
    and the SLO verdict (``slo.run_verdict``)."""
    client, server = pooled(trials)
    run = RunResult(
        scenario.name,
        variant.name,
        scenario.model,
        served_model,
        scenario.protocol,
        dict(scenario.shape),
        client,
        server,
    )
    if len(trials) > 1:
        run.trials = list(trials)
        run.intervals = {
            metric: evidence.figure_interval(metric, values).to_dict() for metric, values in run.samples().items()
        }
    floors = [trial_floor(t) for t in trials]
    floors = [f for f in floors if f]
    run.generator_floor_ms = {
        k: float(np.median(got)) for k in server_trace.FLOOR_KEYS if (got := [f[k] for f in floors if k in f])
    }
    # The trials' counts added (a share is within / requests), rather than counting the merged histogram again.
    within = sum(round(t.goodput_share * t.client.requests) for t in trials if t.client.requests)
    run.goodput_share, run.goodput_rps = evidence.goodput(within, client.requests, client.duration_s)
    return slo.record_verdict(run, budget)
