"""Measure one run: Locust's load for a scenario between two reads of Triton's counters, both sides of it
(``measure_run``), and the run's ``RunResult`` with its SLO verdict (``run_scenario``)."""

from __future__ import annotations

from pathlib import Path

from loadtest.campaign import Candidate, Scenario, Slo
from loadtest.drive import apply
from loadtest.drive.client_stats import ClientStats
from loadtest.drive.runner import check_payloads, run_locust
from loadtest.drive.target import Endpoints
from loadtest.measure import server_metrics, slo
from loadtest.measure.results import RunResult, ServerStats


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
    return client, server_metrics.delta(before, after, client.latency_ms.get("mean", float("nan")))


def run_scenario(
    scenario: Scenario, variant: Candidate, served_model: str, endpoints: Endpoints, work: Path, budget: Slo, log=print
) -> RunResult:
    client, server = measure_run(scenario, served_model, endpoints, work, f"{scenario.name}--{variant.name}", log)
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
    run.slo_violations = slo.violations(run, budget)
    return run
