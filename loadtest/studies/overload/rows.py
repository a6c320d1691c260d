"""The overload study's figures of one run (``loadtest.studies.overload.command``): the row of the trials table, from
the measured window of a ``RunResult`` (offered, accepted, refused and dropped counts and rates, goodput, p99 of
accepted requests against the budget, the statuses refusals came with), the row of a run that did not finish,
and the runs of a results.json read back.

Failures are recorded in the warm-up seconds too while successes there are not, so the counts come from the
per-second timeline from the end of the warm-up on. ``refusal_rate`` is refused / offered, where offered counts
every arrival (sent or dropped by the client).
"""

from __future__ import annotations

import math
from typing import Any

from loadtest.core import evidence
from loadtest.core.client_stats import DROPPED, is_refusal
from loadtest.core.results import RunResult, from_dict
from loadtest.generators.saturation import keeps_up


def unfinished_row(config: str, factor: float, target_rps: float, budget_ms: float, why: str) -> dict[str, Any]:
    """A run whose requests were still queued when Locust had to stop: no figures, over the budget."""
    nan = float("nan")
    return {
        "config": config,
        "factor": factor,
        "target_rps": round(target_rps, 1),
        "offered_rps": nan,
        "offered": 0,
        "accepted": 0,
        "accepted_rps": nan,
        "refused": 0,
        "refusal_rate": 0.0,
        "dropped": 0,
        "drop_rate": 0.0,
        "other_errors": 0,
        "p50_ms": None,
        "p99_ms": None,
        "budget_ms": budget_ms,
        "meets_budget": False,
        "refusal_statuses": {},
        "other_statuses": {},
        "refusal_latency_ms": {},
        "client_kept_up": True,
        "server_avg_batch": None,
        "server_queue_ms": None,
        "unfinished": why,
    }


def row(
    run: RunResult, config: str, factor: float, target_rps: float, budget_ms: float, warmup_s: float = 0.0
) -> dict[str, Any]:
    """The table's figures for one run. Rates are per second of the measured window; ``refusal_rate`` is
    refused / offered, where offered counts every arrival (sent or dropped)."""
    c = run.client
    duration = c.duration_s if c.duration_s > 0 else float("nan")
    statuses = dict(c.failure_statuses)
    refusal_statuses = {s: n for s, n in statuses.items() if is_refusal(s)}
    other_statuses = {s: n for s, n in statuses.items() if not is_refusal(s) and s != DROPPED}
    p99 = c.latency_ms.get("p99", math.nan)
    p99 = None if p99 is None or (isinstance(p99, float) and math.isnan(p99)) else float(p99)
    offered, accepted, refused, dropped, other = _window_counts(run, warmup_s)
    offered_rps = offered / duration
    # goodput: accepted requests within the budget (the histogram holds the measured window's successes)
    good_share, good_rps = evidence.goodput(evidence.count_within(c.hdr, budget_ms), offered, duration)
    return {
        "config": config,
        "factor": factor,
        "target_rps": round(target_rps, 1),
        "offered_rps": round(offered_rps, 1),
        "offered": offered,
        "accepted": accepted,
        "accepted_rps": round(accepted / duration, 1),
        "refused": refused,
        "refusal_rate": refused / offered if offered else 0.0,
        "dropped": dropped,
        "drop_rate": dropped / offered if offered else 0.0,
        "other_errors": other,
        "p50_ms": c.latency_ms.get("p50"),
        "p99_ms": p99,
        "budget_ms": budget_ms,
        "meets_budget": p99 is not None and p99 <= budget_ms,
        "goodput_share": good_share,
        "goodput_rps": round(good_rps, 1),
        "refusal_statuses": refusal_statuses,
        "other_statuses": other_statuses,
        "refusal_latency_ms": dict(c.refusal_latency_ms),
        "client_kept_up": keeps_up(offered_rps, target_rps, duration),
        "server_avg_batch": round(run.server.avg_batch, 2) if run.server else None,
        "server_queue_ms": run.server.breakdown_ms.get("queue") if run.server else None,
    }


def _window_counts(run: RunResult, warmup_s: float) -> tuple[int, int, int, int, int]:
    """Offered, accepted, refused, dropped and other failures of the measured window. Failures are recorded in
    the warm-up seconds too while successes there are not, so the counts come from the per-second timeline
    from ``warmup_s`` on (the whole run's counts when the timeline is missing)."""
    c = run.client
    points = [p for p in c.timeline if p.t >= warmup_s]
    other = c.other_failures
    if not points:
        return c.requests, c.accepted, c.refused, c.dropped, other
    offered = sum(p.requests for p in points)
    failures = sum(p.failures for p in points)
    refused = sum(p.refused for p in points)
    other = min(other, failures - refused)
    return offered, offered - failures, refused, max(0, failures - refused - other), other


def load_runs(data: dict[str, Any]) -> list[RunResult]:
    """The ``RunResult`` objects of a results.json written here."""
    return from_dict(
        {"campaign": "overload", "started": data.get("started", ""), "slo": {}, "runs": data.get("runs", [])}
    ).runs
