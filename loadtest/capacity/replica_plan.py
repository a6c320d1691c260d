"""The replica plan from a capacity: how many replicas serve a target rate, and a server metric read at the
rate each replica is planned to carry (the autoscaler's target): Triton's queue time for the HPA, the requests
in flight for KServe's and Ray Serve's targets (``autoscalers.in_flight_at``)."""

from __future__ import annotations

import math

import numpy as np

from loadtest.capacity.search import CapacityError

HEADROOM = 0.2


def replicas(target_rps: float, per_replica_rps: float, headroom: float = HEADROOM, spare: int = 1) -> int:
    """Replicas that serve ``target_rps`` with ``headroom`` for bursts when each holds ``per_replica_rps`` (the
    capacity interval's lower bound), plus ``spare`` so that one may fail or be drained (N+1)."""
    if not (math.isfinite(target_rps) and target_rps > 0):
        raise CapacityError(f"target rate {target_rps!r} must be > 0 requests/s")
    if not (math.isfinite(per_replica_rps) and per_replica_rps > 0):
        raise CapacityError(f"per-replica capacity {per_replica_rps!r} must be > 0 requests/s")
    if not (math.isfinite(headroom) and headroom >= 0):
        raise CapacityError(f"headroom {headroom!r} must be >= 0 (0.2: 20% above the target)")
    # A ratio that is a whole number up to float rounding (100 * 1.2 / 40) needs no extra replica.
    return math.ceil(round(target_rps * (1 + headroom) / per_replica_rps, 9)) + spare


def metric_at(points: list[tuple[float, float]], rate: float) -> float:
    """A server metric at ``rate`` from (rate, value) points measured around it: linear between the nearest
    two, the nearest end's value outside them; NaN without points."""
    by_rate: dict[float, list[float]] = {}
    for r, v in points:
        if math.isfinite(r) and math.isfinite(v):
            by_rate.setdefault(r, []).append(v)
    if not by_rate:
        return math.nan
    rates = sorted(by_rate)  # trials at one rate: their mean
    return float(np.interp(rate, rates, [float(np.mean(by_rate[r])) for r in rates]))
