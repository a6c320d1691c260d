"""Runs of recorded trial values for the unit tests of the SLO verdict, the gate and the report
(test_slo.py, test_execution.py, test_report.py, test_results.py)."""

from __future__ import annotations

from loadtest.core.client_stats import ClientStats
from loadtest.core.latency import new_histogram
from loadtest.core.results import CampaignResult, RunResult, ServerStats, Trial
from loadtest.core.spec import Candidate, Scenario, Slo
from loadtest.generators.locust.run import run_result

BUDGET = Slo(p99_ms=10.0)
PASSING = (5.0, 5.2, 4.9)
FAILING = (15.0, 16.0, 15.5)
STRADDLING = (9.0, 9.8, 9.4, 10.4)
"""p99s whose 95% interval (about 8.7-10.6 ms) straddles the 10 ms budget; about 14 trials would settle it."""


def trial(p99_ms: float, requests: int = 1000, failures: int = 0) -> Trial:
    """A trial whose successes all took ``p99_ms`` / 2 but the top 1%, which took ``p99_ms``."""
    hist = new_histogram()
    ok = requests - failures
    tail = max(1, ok // 100)
    hist.record_value(round(p99_ms * 500), ok - tail)
    hist.record_value(round(p99_ms * 1000), tail)
    client = ClientStats(requests, failures, 10.0, {"p50": p99_ms / 2, "p99": p99_ms}, hdr=hist.encode().decode())
    server = ServerStats(requests, failures, requests, requests // 4, {"request": p99_ms / 3}, {1: 10, 4: 5})
    return Trial(client, server, ok / requests, ok / 10.0)


def run_of(p99s, scenario: str = "s", variant: str = "v", budget: Slo = BUDGET) -> RunResult:
    """The run of one trial per p99 value, judged against ``budget``."""
    shaped = Scenario(scenario, "digits", "grpc", {"kind": "users", "users": 2}, trials=len(p99s))
    return run_result(shaped, Candidate(variant), "digits", [trial(p) for p in p99s], budget)


def campaign_of(*runs: RunResult, budget: Slo = BUDGET) -> CampaignResult:
    return CampaignResult("c", "2026-01-01T00:00:00Z", {"p99_ms": budget.p99_ms}, list(runs))
