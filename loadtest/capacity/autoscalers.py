"""Autoscaler targets at the rate each replica is planned to carry, each with its interval: KServe's
``scaleTarget`` (``scaleMetric: concurrency`` or ``rps``), Ray Serve's ``target_ongoing_requests``, a merge patch
of a KServe InferenceService, and the cost of the plan at a price per replica-hour. Pure arithmetic and YAML text:
the command reads the flags and writes the files.

KServe's concurrency and Ray Serve's ongoing requests are requests in flight per replica, which Little's law
gives from the planned rate and the mean latency there: L = rate x mean latency (s). The mean latency at the
planned rate is read between the runs around it (``replica_plan.metric_at``, as the HPA's queue time); those are
mostly single runs, so its interval is the run-to-run spread of the repeated trials nearest that rate (their 95%
interval as a ratio to their geometric mean, ``evidence.figure_interval``), carried over to the value read.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import yaml

from loadtest.capacity.replica_plan import metric_at
from loadtest.capacity.report import runs
from loadtest.capacity.search import CapacityResult
from loadtest.core import evidence
from loadtest.core.evidence import Interval

LATENCIES = {"mean_ms": "mean", "p50_ms": "p50"}
"""The latency Little's law takes, in order: the mean; without one recorded, the p50 (for a latency skewed right
it is under the mean, so the targets err low and replicas scale out early, not late)."""
RAY_STEP = 0.1
"""Ray Serve's target is a float it compares with the replicas' average ongoing requests, so a fraction is
honoured; one decimal, since the trials' spread of the latency is wider than a finer figure would claim."""
MIN_REPLICAS = 1
"""KServe's default: 0 would scale to zero, and the first request would wait for a model to load."""
KSERVE_API = "serving.kserve.io/v1beta1"
SECONDS_PER_HOUR = 3600


@dataclasses.dataclass(frozen=True)
class InFlight:
    """Requests in flight per replica at ``rate`` req/s by Little's law, from the latency read there."""

    rate: float
    figure: str
    """``mean``, or ``p50`` when no run recorded a mean (``LATENCIES``)."""
    latency_ms: Interval
    """At ``rate``: the value read between the runs around it, its bounds the spread of ``spread_rate``'s trials."""
    spread_rate: float | None = None
    """The rate of the repeated trials whose spread gives the interval; None when no rate had two (no interval)."""

    @property
    def requests(self) -> Interval:
        iv = self.latency_ms
        low, estimate, high = (self.rate * v / 1000 for v in (iv.low, iv.estimate, iv.high))
        return Interval(estimate, low, high, iv.trials, iv.confidence)


@dataclasses.dataclass(frozen=True)
class KServeTarget:
    """One ``scaleMetric`` and the planned load per replica in its terms, with that load's interval."""

    metric: str
    """``concurrency`` (requests in flight) or ``rps`` (requests per second)."""
    load: Interval

    @property
    def target(self) -> int | None:
        return whole(self.load.estimate)

    @property
    def given_up(self) -> float:
        """The share of the planned load that rounding down gives up (inf without a target)."""
        return 1 - self.target / self.load.estimate if self.target else math.inf


def whole(value: float) -> int | None:
    """KServe's ``scaleTarget``: an integer, rounded down (up would let a replica carry more than planned before
    scaling out); None under 1, which no whole target holds (a target of 1 would wait for more than planned)."""
    if not value >= 1:
        return None
    return math.floor(round(value, 9))  # 2.9999999999999996 is 3


def ray_target(value: float) -> float | None:
    """Ray Serve's ``target_ongoing_requests``: rounded down to one decimal (``RAY_STEP``); None under it."""
    if not value >= RAY_STEP:
        return None
    return round(math.floor(round(value / RAY_STEP, 9)) * RAY_STEP, 1)


def in_flight_at(result: CapacityResult, rate: float) -> InFlight | None:
    """The latency at ``rate`` (``LATENCIES``' first figure that any usable run recorded) and the requests in
    flight it gives; None when no run recorded a latency."""
    measured = [(r, m) for r, m in runs(result) if m.usable]
    for name, figure in LATENCIES.items():
        value = metric_at([(r, float(getattr(m, name))) for r, m in measured], rate)
        if not value > 0:
            continue
        spread = _spread(result, name, rate)
        if spread is None:
            return InFlight(rate, figure, Interval(value, value, value, 1))
        trials_rate, iv = spread
        low, high = value * iv.low / iv.estimate, value * iv.high / iv.estimate
        return InFlight(rate, figure, Interval(value, low, high, iv.trials, iv.confidence), trials_rate)
    return None


def _spread(result: CapacityResult, name: str, rate: float) -> tuple[float, Interval] | None:
    """(rate, interval) of the figure over the repeated trials nearest ``rate``: at least two usable values."""
    spreads = []
    for c in result.confirmations:
        iv = evidence.figure_interval(name, [float(getattr(m, name)) for m in c.result.usable])
        if iv.has_interval and iv.estimate > 0:
            spreads.append((abs(c.rate - rate), c.rate, iv))
    if not spreads:
        return None
    _, trials_rate, iv = min(spreads, key=lambda s: s[:2])
    return trials_rate, iv


def kserve_targets(in_flight: InFlight | None, per_pod: Interval) -> list[KServeTarget]:
    """The concurrency target (without a latency, none) and the rps target, at the planned load per replica."""
    targets = [KServeTarget("concurrency", in_flight.requests)] if in_flight is not None else []
    return [*targets, KServeTarget("rps", per_pod)]


def kserve_choice(targets: list[KServeTarget]) -> KServeTarget | None:
    """The target for the patch: the one whose rounding down gives up least of the planned load (concurrency on a
    tie: KServe's default, and it follows the latency when the requests change); None when neither is whole."""
    usable = [t for t in targets if t.target is not None]
    return min(usable, key=lambda t: t.given_up) if usable else None


def isvc_name(model: str) -> str:
    """An InferenceService's name is a DNS-1035 label: lower case, ``-`` for ``_``."""
    return model.lower().replace("_", "-")


def kserve_patch(model: str, choice: KServeTarget, per_pod_rps: float, max_replicas: int | None = None) -> str:
    """A YAML merge patch of the InferenceService named after ``model``: its predictor's ``scaleMetric`` and
    ``scaleTarget``, ``minReplicas`` and, given, ``maxReplicas`` (the plan's replicas)."""
    predictor: dict[str, object] = {"minReplicas": MIN_REPLICAS}
    if max_replicas is not None:
        predictor["maxReplicas"] = max(max_replicas, MIN_REPLICAS)
    predictor.update(scaleMetric=choice.metric, scaleTarget=choice.target)
    patch = {
        "apiVersion": KSERVE_API,
        "kind": "InferenceService",
        "metadata": {"name": isvc_name(model)},
        "spec": {"predictor": predictor},
    }
    head = (
        f"# tritonkit capacity {model}: KServe's target for {per_pod_rps:.1f} req/s per replica (the capacity's\n"
        f"# lower bound less the burst headroom), on the server measured; re-measure on the pods' own hardware.\n"
        f"# kubectl patch inferenceservice {isvc_name(model)} --type merge --patch-file FILE\n"
    )
    return head + yaml.safe_dump(patch, sort_keys=False)


def cost_per_million(price_per_hour: float, replicas: float, rps: float) -> float:
    """USD per million requests: ``replicas`` at ``price_per_hour`` USD each serving ``rps`` requests/s."""
    if not (math.isfinite(price_per_hour) and price_per_hour > 0):
        raise ValueError(f"price {price_per_hour!r} must be > 0 USD per replica-hour")
    if not (math.isfinite(rps) and rps > 0) or not replicas > 0:
        raise ValueError(f"{replicas!r} replicas serving {rps!r} req/s has no cost per request")
    return replicas * price_per_hour / (rps * SECONDS_PER_HOUR) * 1e6


@dataclasses.dataclass(frozen=True)
class Plan:
    """The plan the autoscalers' targets are for."""

    model: str
    per_pod_rps: float
    """The rate each replica is planned to carry: the plan rate over 1 + headroom."""
    headroom: float
    capacity: Interval | None = None
    """The capacity interval, whose bounds over 1 + headroom give the rps target's interval."""
    max_replicas: int | None = None
    target_rps: float | None = None


def _span(low: float, high: float, fmt: str, confidence: float = evidence.CONFIDENCE) -> str:
    return f"{confidence:.0%} CI {fmt.format(low)}-{fmt.format(high)}"


def in_flight_line(inflight: InFlight | None) -> str:
    """The requests in flight per replica with their interval, and what they come from; without a latency, why."""
    if inflight is None:
        return (
            "in flight per replica: no latency was recorded (no run gave a mean or a p50), so no KServe concurrency "
            "or Ray Serve target"
        )
    iv, lat = inflight.requests, inflight.latency_ms
    which = f"the {inflight.figure} latency there"
    if inflight.figure != "mean":
        which += f" (no run recorded a mean, which Little's law needs: the {inflight.figure}, so the targets err low)"
    if inflight.spread_rate is None:
        spread = "no repeated trials: no interval"
    else:
        spread = f"{_span(lat.low, lat.high, '{:.3f}', lat.confidence)}, the spread of {lat.trials} trials at "
        spread += f"{inflight.spread_rate:g} req/s"
    span = _span(iv.low, iv.high, "{:.2f}", iv.confidence)
    return (
        f"in flight per replica at {inflight.rate:.1f} req/s: {iv.estimate:.2f} ({span}) "
        f"by Little's law: {inflight.rate:.1f} req/s x {which}, {lat.estimate:.3f} ms ({spread})"
    )


def _target_span(load: Interval, target, floor: float) -> str:
    """The interval of a target: ``target`` (the rounding) of each bound of the load, "under ``floor``" where it
    gives none; "no interval" for one trial."""
    if not load.has_interval:
        return "no interval"
    low, high = (target(v) for v in (load.low, load.high))
    return _span(*(f"{v:g}" if v is not None else f"under {floor:g}" for v in (low, high)), "{}", load.confidence)


def kserve_line(target: KServeTarget) -> str:
    """One scaleMetric's target with the interval of the planned load it rounds down."""
    load, unit = target.load, ("in flight" if target.metric == "concurrency" else "req/s per replica")
    fmt = "{:.2f}" if target.metric == "concurrency" else "{:.1f}"
    if target.target is None:
        return f"KServe scaleMetric {target.metric}: no whole scaleTarget under 1 ({fmt.format(load.estimate)} {unit})"
    return (
        f"KServe scaleMetric {target.metric}: scaleTarget {target.target} ({_target_span(load, whole, 1)}), "
        f"{fmt.format(load.estimate)} {unit} rounded down"
    )


def ray_line(inflight: InFlight) -> str:
    iv = inflight.requests
    value = ray_target(iv.estimate)
    if value is None:
        return f"Ray Serve target_ongoing_requests: none, under {RAY_STEP:g} request in flight ({iv.estimate:.3f})"
    span = _target_span(iv, ray_target, RAY_STEP)
    return f"Ray Serve target_ongoing_requests: {value:g} ({span}), {iv.estimate:.2f} in flight rounded down to 0.1"


def cost_line(plan: Plan, price: float) -> str:
    """At ``price`` USD per replica-hour, the cost per million requests of the plan (with ``target_rps``) and of
    one replica at its planned rate."""
    one = cost_per_million(price, 1, plan.per_pod_rps)
    at_rate = f"{one:.4g} USD per million requests on one replica at {plan.per_pod_rps:.1f} req/s"
    if plan.target_rps is None or plan.max_replicas is None:
        return f"cost at {price:g} USD per replica-hour: {at_rate}"
    total = cost_per_million(price, plan.max_replicas, plan.target_rps)
    return (
        f"cost at {price:g} USD per replica-hour: {total:.4g} USD per million requests at {plan.target_rps:g} req/s "
        f"({plan.max_replicas} replicas, {plan.max_replicas * price:g} USD/h); {at_rate}"
    )


def lines(
    result: CapacityResult, plan: Plan, price_per_hour: float | None = None, kserve_file: Path | None = None
) -> tuple[list[str], str | None]:
    """The printed lines of KServe's and Ray Serve's targets and, given ``price_per_hour``, of the cost; and the
    KServe patch (None when neither scaleMetric has a whole target), which the command writes to ``kserve_file``
    (named in a line; None: not written)."""
    inflight = in_flight_at(result, plan.per_pod_rps)
    scale = 1 + plan.headroom
    high = plan.capacity.high / scale if plan.capacity is not None else plan.per_pod_rps
    # The plan takes the capacity interval's lower bound: the rps target sits at the bottom of its interval.
    trials = plan.capacity.trials if plan.capacity is not None else 1
    per_pod = Interval(plan.per_pod_rps, plan.per_pod_rps, max(high, plan.per_pod_rps), trials)
    targets = kserve_targets(inflight, per_pod)
    out = [in_flight_line(inflight), *(kserve_line(t) for t in targets)]
    choice = kserve_choice(targets)
    patch = None
    if choice is None:
        unwritten = f": {kserve_file} not written" if kserve_file else ""
        out.append(f"KServe patch: none (neither scaleMetric has a whole scaleTarget at the planned load){unwritten}")
    else:
        patch = kserve_patch(plan.model, choice, plan.per_pod_rps, plan.max_replicas)
        fields = f"minReplicas {MIN_REPLICAS}" + (f", maxReplicas {plan.max_replicas}" if plan.max_replicas else "")
        where = f"written to {kserve_file}" if kserve_file else "--write-kserve-patch FILE writes it"
        out.append(
            f"KServe patch ({where}): scaleMetric {choice.metric}, scaleTarget {choice.target} (rounding down gives "
            f"up least of the planned load there), {fields}"
        )
    if inflight is not None:
        out.append(ray_line(inflight))
    if price_per_hour is not None:
        out.append(cost_line(plan, price_per_hour))
    return out, patch
