"""One run's record, whichever generator made it (``Measurement``), and the load it ran at (``Load``).

A run whose generator was the bottleneck is marked ``saturated`` (``loadtest.generators.probe.saturation``)
and must not be used to rank configs."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from loadtest.core.client_stats import ClientStats
from loadtest.core.metrics import METRICS, STREAM_METRICS
from loadtest.core.spec import Scenario
from loadtest.errors import LoadTestError


@dataclasses.dataclass(frozen=True)
class Load:
    """The load a config is measured at: a closed loop of ``users`` or an open loop of ``rate`` req/s, and the
    further keys of its Locust shape (open-loop client slots ``max_inflight``, an arrival pattern's
    ``Arrival.shape_keys``); perf_analyzer takes its users or rate alone."""

    users: int | None = None
    rate: float | None = None
    shape_keys: tuple[tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        if (self.users is None) == (self.rate is None):
            raise LoadTestError("give either users (closed loop) or rate (open loop), not both or neither")
        if self.users is not None and (
            isinstance(self.users, bool) or not isinstance(self.users, int) or self.users < 1
        ):
            raise LoadTestError(f"users={self.users!r} must be an integer >= 1")
        if self.rate is not None and not self.rate > 0:
            raise LoadTestError(f"rate={self.rate!r} must be > 0 requests per second")

    def text(self) -> str:
        return f"{self.users} users (closed loop)" if self.users else f"{self.rate:g} req/s (open loop)"

    def shape(self) -> dict[str, Any]:
        """The campaign shape of this load (for Locust)."""
        kind = {"kind": "users", "users": self.users} if self.users else {"kind": "open", "rate": self.rate}
        return {**kind, **dict(self.shape_keys)}

    def scenario(
        self,
        name: str,
        model: str,
        protocol: str,
        duration_s: float,
        warmup_s: float,
        processes: int = 1,
        payload: dict[str, Any] | None = None,
    ) -> Scenario:
        """The run spec of one Locust run at this load: what every command but a campaign file builds."""
        return Scenario(name, model, protocol, self.shape(), duration_s, warmup_s, processes, payload=payload)


@dataclasses.dataclass
class Measurement:
    """What one run of the generator measured; latencies of successful requests, client side."""

    throughput: float
    """Successful inferences per second (items; requests for batch-1 clients)."""
    p50_ms: float
    p99_ms: float
    error_rate: float
    """Failed / handled requests, from Triton's counters (and the client's, for Locust)."""
    generator: str
    generator_cpu: float = math.nan
    """CPU time the generator used / (its wall time x the CPUs it may use): 1.0 is all of them."""
    offered_rate: float | None = None
    """Open loop: the rate asked for."""
    sent_rate: float | None = None
    """Open loop: the rate the generator sent."""
    saturated: str = ""
    """Why the generator was the bottleneck; "" when it kept up."""
    error: str = ""
    """The measurement failed (the config did not load, the generator failed): the first line of why."""
    server: dict[str, float] = dataclasses.field(default_factory=dict)
    """Triton's view over the run: ``queue_ms``, ``compute_ms`` (mean per request), ``avg_batch``, ``requests``."""
    goodput_share: float = math.nan
    """Requests answered without error within the latency budget, over all requests (``evidence.goodput``);
    NaN when the generator gives no per-request latencies or no budget was set."""
    goodput_rps: float = math.nan
    """The same requests per second."""
    ttft_p99_ms: float = math.nan
    """Streams (a decoupled model under Locust): p99 time to first token (TTFT), ms; NaN for any other run."""
    itl_p99_ms: float = math.nan
    """Streams: p99 inter-token latency (ITL), ms; NaN for any other run, or when no request streamed 2 tokens."""
    output_token_throughput: float = math.nan
    """Streams: output tokens per second of the measured window; NaN for any other run."""
    mean_ms: float = math.nan
    """The mean latency of successful requests, ms: Little's law's (requests in flight = rate x mean latency)."""
    floor_ms: dict[str, float] = dataclasses.field(default_factory=dict)
    """The generator's own time in ``p50_ms`` and ``p99_ms`` (``server_trace.floor_ms``: the client's percentile
    minus Triton's own over the run), or without a trace its ``mean`` (the client's mean minus Triton's mean request
    time, from its metrics); empty when neither is known."""
    measured_s: float | None = None
    """The seconds the run's counts cover (its warm-up left out): what ``saturation.keeps_up`` reckons a count's
    chance on; None in a record that does not say."""

    @classmethod
    def of_client(
        cls, client: ClientStats, generator: str, goodput: tuple[float, float] = (math.nan, math.nan), **fields: Any
    ) -> Measurement:
        """The record of a run from the client's whole record (``ClientStats``): its figures, its stream figures
        when it streamed, ``goodput`` (share, rate) as counted against the run's budgets, and ``fields`` (the
        generator's and the server's view)."""
        streams = {}
        if client.streams:
            streams = {
                "ttft_p99_ms": client.ttft_ms.get("p99", math.nan),
                "itl_p99_ms": client.itl_ms.get("p99", math.nan),  # none when every request streamed one token
                "output_token_throughput": client.output_token_throughput,
            }
        return cls(
            throughput=client.throughput_rps,
            p50_ms=client.latency_ms.get("p50", math.nan),
            p99_ms=client.latency_ms.get("p99", math.nan),
            error_rate=client.error_rate,
            generator=generator,
            mean_ms=client.latency_ms.get("mean", math.nan),
            goodput_share=goodput[0],
            goodput_rps=goodput[1],
            **streams,
            **fields,
        )

    def figures(self) -> dict[str, float]:
        """``METRICS``, and ``STREAM_METRICS`` when the run streamed: the figures trials are judged and reported on."""
        names = METRICS + (STREAM_METRICS if self.streamed else ())
        return {name: float(getattr(self, name)) for name in names}

    @property
    def streamed(self) -> bool:
        """The run streamed (a decoupled model): it has stream figures."""
        return not math.isnan(self.ttft_p99_ms)

    @property
    def usable(self) -> bool:
        return not self.error and not self.saturated

    @property
    def not_usable_reason(self) -> str:
        if self.error:
            return f"failed: {self.error}"
        return f"generator saturated: {self.saturated}" if self.saturated else ""

    @classmethod
    def failed(cls, generator: str, error: str) -> Measurement:
        return cls(
            0.0, math.nan, math.nan, 0.0, generator, error=error.strip().splitlines()[0] if error.strip() else "failed"
        )

    def to_dict(self) -> dict[str, Any]:
        """Every field; the stream figures only for a run that streamed (a tensor model's record is as before)."""
        raw = dataclasses.asdict(self)
        if not self.streamed:
            for key in STREAM_METRICS:
                raw.pop(key)
        return raw

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Measurement:
        """A record of ``to_dict``; one without stream figures (a tensor model's, or written before them) has NaN."""
        return cls(**raw)


def samples(measurements: Sequence[Measurement]) -> dict[str, list[float]]:
    """Figure -> the trials' values: ``METRICS``, and ``STREAM_METRICS`` when a trial streamed (the figures
    ``slo.verdict`` judges the TTFT and ITL budgets on; NaN for a trial without them)."""
    streamed = any(m.streamed for m in measurements)
    names = METRICS + (STREAM_METRICS if streamed else ())
    return {name: [float(getattr(m, name)) for m in measurements] for name in names}


def floor_figures(floor: dict[str, float]) -> str:
    """``p50 0.593 p99 0.645 ms`` (or ``mean 0.610 ms``): a floor as every line that prints one writes it."""
    return " ".join(f"{k} {v:.3f}" for k, v in floor.items()) + " ms"
