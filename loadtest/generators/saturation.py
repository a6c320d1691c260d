"""The saturation and knee searches the studies share: how much load a served model takes.

- ``find_saturation``: closed-loop users doubling until throughput stops growing (``loadtest.studies.overload.command``
  runs it with the queue policy removed, ``loadtest.studies.soak.command`` on the config as deployed);
- ``find_sustained_rate``: open-loop Poisson rates rising until the server falls behind or its p99 passes the
  knee (``loadtest.studies.soak.command``);
- ``open_scenario``, ``settle`` (wait out a backlog between runs) and ``keeps_up``, the one rule for a count that
  kept up with its rate (a server's completions, a generator's requests sent).
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

from deploy.client import metrics, model_metric
from loadtest.core.measurement import Load
from loadtest.core.spec import Scenario
from loadtest.generators.locust.run import measure_run


@dataclasses.dataclass
class Saturation:
    rps: float
    """Best successful throughput of the closed-loop search: the saturating rate."""
    users: int
    steps: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Each step: users, throughput_rps, p99_ms, failures."""


def find_saturation(
    model: str,
    served: str,
    protocol: str,
    endpoints,
    work: Path,
    *,
    duration_s: float = 10.0,
    warmup_s: float = 2.0,
    start_users: int = 4,
    max_users: int = 256,
    min_gain: float = 0.05,
    payload: dict | None = None,
    log=print,
) -> Saturation:
    """Closed-loop users doubling from ``start_users`` until throughput grows by less than ``min_gain``
    (or ``max_users``): the best successful throughput seen, on the config as served. The overload
    comparison searches with the queue policy removed (``saturation_without_policy``), so both of its
    configs share one reference rate. ``payload``: the scenarios' payload table (``Scenario.payload``)."""
    work.mkdir(parents=True, exist_ok=True)
    best: dict[str, Any] | None = None
    steps = []
    users = start_users
    while users <= max_users:
        scenario = Load(users=users).scenario(
            f"saturation-{users}u", model, protocol, duration_s, warmup_s, payload=payload
        )
        client, _ = measure_run(scenario, served, endpoints, work, scenario.name, log=lambda *_: None)
        step = {
            "users": users,
            "throughput_rps": round(client.throughput_rps, 1),
            "p99_ms": round(client.latency_ms.get("p99", math.nan), 3),
            "failures": client.failures,
        }
        steps.append(step)
        log(
            f"  saturation search: {users:4d} users  {client.throughput_rps:8.1f} req/s  "
            f"p99 {step['p99_ms']:.3f} ms  failures {client.failures}"
        )
        if best is not None and step["throughput_rps"] < best["throughput_rps"] * (1 + min_gain):
            if step["throughput_rps"] > best["throughput_rps"]:
                best = step
            break
        best = step
        users *= 2
    if best is None or best["throughput_rps"] <= 0:
        raise ValueError(f"saturation search for {served} found no throughput: {steps}")
    return Saturation(best["throughput_rps"], best["users"], steps)


def settle(endpoints, served: str, timeout_s: float = 60.0) -> None:
    """Wait until the server holds no request of ``served`` (a run without a queue policy leaves a backlog)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if model_metric(metrics(endpoints.metrics), "nv_inference_pending_request_count", served) == 0:
                return
        except OSError:
            return
        time.sleep(0.5)


def open_scenario(
    model: str,
    protocol: str,
    rate: float,
    duration_s: float,
    warmup_s: float,
    max_inflight: int,
    processes: int = 1,
    name: str = "",
    payload: dict | None = None,
) -> Scenario:
    load = Load(rate=rate, shape_keys=(("max_inflight", max_inflight),))
    return load.scenario(name or f"{model}-open-{rate:g}", model, protocol, duration_s, warmup_s, processes, payload)


KEEP_UP = 0.95
"""A step keeps up when the server completed at least this share of the offered rate, failing nothing..."""
KNEE = 3.0
"""...and its p99 stayed within this multiple of the lowest step p99 so far (the unloaded latency)."""
START_FRACTION = 1 / 8
"""The open-loop search starts at this share of the closed-loop saturation: well below the knee."""
POISSON_TAIL = 0.00135
"""A count short of its rate by more than ``KEEP_UP`` is excused as chance only while a Poisson count of the
expected mean falls that low at least this often (the one-sided tail of 3 standard deviations)."""


def keeps_up(done_rps: float, rate: float, measured_s: float | None) -> bool:
    """The one rule for "kept up with ``rate``": the count over ``measured_s`` (``done_rps`` x ``measured_s``:
    completions for a server, requests sent for a generator) is within ``KEEP_UP`` of the expected count, or short
    of it by no more than a Poisson count's chance (the exact lower tail, ``POISSON_TAIL``). 10.8 req/s for 8 s
    expects 86.4: a minilm step that completed 82 kept up, 56 did not; 9 expected and none done did not either
    (a normal approximation's 3-sigma bar sits at zero there and could not fail). ``measured_s`` None (a record
    that does not say how long it counted): the share alone, as no chance can be reckoned without a count."""
    if measured_s is None:
        return done_rps >= KEEP_UP * rate
    expected = rate * measured_s
    if not expected > 0 or not math.isfinite(done_rps):  # NaN: no measured seconds to count over
        return False
    count = round(done_rps * measured_s)
    if count >= KEEP_UP * expected:
        return True
    from scipy.stats import poisson

    return float(poisson.cdf(count, expected)) >= POISSON_TAIL


def find_sustained_rate(
    model: str,
    served: str,
    protocol: str,
    endpoints,
    work: Path,
    *,
    start_rps: float,
    step: float = 1.2,
    duration_s: float = 10.0,
    warmup_s: float = 2.0,
    max_steps: int = 12,
    max_inflight: int = 4096,
    payload: dict | None = None,
    log=print,
) -> Saturation:
    """The highest open-loop rate the server keeps up with: Poisson arrivals from ``start_rps``, each step
    ``step`` times the last, until a step completes under ``KEEP_UP`` of its rate (less at low rates:
    ``keeps_up``), fails a request, or its p99 passes ``KNEE`` x the lowest step p99 so far (queues build).
    Closed-loop clients batch better than open-loop arrivals, so their saturation overstates the rate an
    open-loop load can be held at."""
    steps: list[dict[str, Any]] = []
    best = None
    rate = start_rps
    for _ in range(max_steps):
        scenario = open_scenario(
            model,
            protocol,
            round(rate, 1),
            duration_s,
            warmup_s,
            max_inflight,
            name=f"sustained-{rate:.0f}rps",
            payload=payload,
        )
        settle(endpoints, served)
        client, _ = measure_run(scenario, served, endpoints, work, scenario.name, log=lambda *_: None)
        p99 = client.latency_ms.get("p99", math.nan)
        entry = {
            "rate": round(rate, 1),
            "throughput_rps": round(client.throughput_rps, 1),
            "p99_ms": round(p99, 3),
            "failures": client.failures,
        }
        steps.append(entry)
        # The lowest p99 so far is the unloaded latency: noise only ever adds to a step's p99.
        baseline = min(s["p99_ms"] for s in steps)
        measured_s = client.duration_s if client.duration_s > 0 else duration_s - warmup_s
        kept_up = (
            client.failures == 0
            and keeps_up(client.throughput_rps, rate, measured_s)
            and not (baseline > 0 and p99 > KNEE * baseline)
        )
        log(
            f"  sustained-rate search: {rate:8.1f} req/s offered  {client.throughput_rps:8.1f} completed  "
            f"p99 {p99:.3f} ms  failures {client.failures}  {'kept up' if kept_up else 'fell behind'}"
        )
        if not kept_up:
            break
        best = entry
        rate *= step
    if best is None:
        raise ValueError(
            f"{served} did not keep up with {start_rps:.1f} req/s open-loop, the lowest rate tried: "
            f"{steps}; pass a lower --saturation-rps"
        )
    return Saturation(best["rate"], 0, steps)
