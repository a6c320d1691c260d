"""What a campaign measures, as plain dataclasses written to ``reports/<campaign>/results.json``.

One ``RunResult`` per (scenario, variant) pair: the client's view (every request's latency in an HDR
histogram, merged over Locust worker processes), the server's view (Triton's counters read before and
after the run), goodput and the SLO verdict. The report, the SLO gate and the auto-tuner read only this
file, so a campaign can be re-reported or re-tuned without running it again.

A pair measured in several trials keeps every trial (``RunResult.trials``, each with its own client and
server stats), the interval of each figure over them (``RunResult.intervals``) and, as ``client`` and
``server``, the trials pooled (counts added, histograms merged, timelines one after another). One trial
is the run itself: ``trials`` stays empty.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtest.core import evidence
from loadtest.core.client_stats import PERCENTILES, ClientStats, TimelinePoint, percentile_key
from loadtest.core.latency import new_histogram, value_at
from loadtest.core.measurement import Measurement
from loadtest.core.metrics import STREAM_METRICS
from loadtest.core.streams import count_streams_within, stream_summary


def write_json(path: Path, data: Any) -> Path:
    """``data`` as every report writes it: indent 1, what JSON cannot hold as its ``str``, a trailing newline."""
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")
    return path


@dataclasses.dataclass
class ServerStats:
    """Triton's own counters for the served model over the run (after minus before)."""

    requests: int
    """``nv_inference_request_success`` delta."""
    failures: int
    """``nv_inference_request_failure`` delta."""
    inferences: int
    """``nv_inference_count`` delta: batch items inferred."""
    executions: int
    """``nv_inference_exec_count`` delta: model executions (batches)."""
    breakdown_ms: dict[str, float]
    """Mean per request, ms: ``request`` (server total), ``queue``, ``compute_input``, ``compute_infer``,
    ``compute_output``, and ``client_network`` (client mean minus server request mean)."""
    batch_histogram: dict[int, int] = dataclasses.field(default_factory=dict)
    """Batch size -> executions of that size during the run (statistics extension, ``batch_stats``)."""
    summary_ms: dict[str, float] = dataclasses.field(default_factory=dict)
    """``summary_latencies`` quantiles of request duration at the end of the run, e.g. ``p99`` (ms)."""
    trace: dict = dataclasses.field(default_factory=dict)
    """Triton's own p50/p99 per request over the run from its trace API (``server_trace.ServerTimes.quantiles``:
    ``traced``, ``request``, ``queue``, ``compute``); empty where the server gives no trace here."""

    @property
    def avg_batch(self) -> float:
        return self.inferences / self.executions if self.executions else 0.0


def goodput_of(
    client: ClientStats, budget_ms: float, ttft_ms: float | None = None, itl_ms: float | None = None
) -> tuple[float, float]:
    """Goodput (share, rate): requests answered without error within the latency budget and, for streams,
    within the TTFT and ITL budgets given (counted on each request's raw figures)."""
    if ttft_ms is None and itl_ms is None:
        within = evidence.count_within(client.hdr, budget_ms)
    else:
        within = count_streams_within(client.streams, budget_ms, ttft_ms, itl_ms)
    return evidence.goodput(within, client.requests, client.duration_s)


@dataclasses.dataclass
class Trial:
    """One run of the load generator for a (scenario, variant) pair."""

    client: ClientStats
    server: ServerStats | None = None
    goodput_share: float = math.nan
    """Requests answered without error within the p99 budget, over all requests (``evidence.goodput``)."""
    goodput_rps: float = math.nan
    """The same requests per second."""
    goodput_budget_ms: float = math.nan
    """The budget the goodput above was counted against (infinite: every success counted)."""
    goodput_ttft_ms: float | None = None
    """The TTFT budget the goodput was also counted against (streams; None: none)."""
    goodput_itl_ms: float | None = None
    """The ITL budget the goodput was also counted against (streams; None: none)."""

    def measurement(
        self, budget_ms: float | None = None, ttft_ms: float | None = None, itl_ms: float | None = None
    ) -> Measurement:
        """This trial as the one record of a run (``Measurement.of_client``); goodput as recorded, or recounted
        when ``budget_ms`` (with the stream budgets ``ttft_ms``, ``itl_ms``) differs from what it was counted
        against (infinite: every success counts)."""
        share, rate = self.goodput_share, self.goodput_rps
        budgets = (budget_ms, ttft_ms, itl_ms)
        if budget_ms is not None and budgets != (self.goodput_budget_ms, self.goodput_ttft_ms, self.goodput_itl_ms):
            share, rate = goodput_of(self.client, *budgets)
        return Measurement.of_client(self.client, "locust", (share, rate))


@dataclasses.dataclass
class RunResult:
    """One scenario under one config variant."""

    scenario: str
    variant: str
    model: str
    """The scenario's public model name (what the clients call)."""
    served_model: str
    """The model that served it (the variant may pick another format, e.g. ``digits_onnx``)."""
    protocol: str
    """``http`` | ``grpc`` | ``fastapi``."""
    shape: dict[str, Any]
    """The load shape as written in the campaign (``kind`` plus its parameters)."""
    client: ClientStats
    server: ServerStats | None = None
    """None when the target is not Triton (the FastAPI baseline)."""
    slo_violations: list[str] = dataclasses.field(default_factory=list)
    """Empty when the run met the SLO; else one sentence per limit it missed or straddles."""
    goodput_share: float = math.nan
    """Requests answered without error within the p99 budget, over all requests (all trials pooled)."""
    goodput_rps: float = math.nan
    verdict: str = ""
    """``pass``, ``fail`` or ``inconclusive`` (``loadtest.core.slo``); "" in results written before it, where
    ``slo_violations`` alone decides."""
    settle: str = ""
    """For an inconclusive verdict: how many more trials would likely settle it."""
    trials: list[Trial] = dataclasses.field(default_factory=list)
    """Every trial when there were two or more (``client``/``server`` then pool them); empty for one."""
    intervals: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    """Figure (``evidence.METRICS``, and ``STREAM_METRICS`` for streams) -> its interval over the trials
    (``Interval.to_dict``); empty for one."""
    generator_floor_ms: dict[str, float] = dataclasses.field(default_factory=dict)
    """The generator's own time in the latencies (``server_trace.floor_ms``), the median over the trials that were
    traced: ``p50``, ``p99``; empty where the server gave no trace."""
    generator_limit: str = ""
    """Why the load generator, not the server, limited a trial of this run (``execution.generator_limit``): its
    figures measured the generator, and the SLO gate does not judge them; "" when it kept up."""

    @property
    def passed(self) -> bool:
        return self.verdict == "pass" if self.verdict else not self.slo_violations

    @property
    def outcome(self) -> str:
        """``PASS``, ``FAIL`` or ``INCONCLUSIVE``."""
        return (self.verdict or ("pass" if self.passed else "fail")).upper()

    def all_trials(self) -> list[Trial]:
        """Every trial; a one-trial run is its own trial."""
        return self.trials or [Trial(self.client, self.server, self.goodput_share, self.goodput_rps)]

    def samples(
        self, budget_ms: float | None = None, ttft_ms: float | None = None, itl_ms: float | None = None
    ) -> dict[str, list[float]]:
        """Figure -> the trials' values (see ``Trial.measurement``); ``STREAM_METRICS`` too when the run streamed."""
        figures = [t.measurement(budget_ms, ttft_ms, itl_ms).figures() for t in self.all_trials()]
        metrics = evidence.METRICS + (STREAM_METRICS if self.client.streams else ())
        return {metric: [f.get(metric, math.nan) for f in figures] for metric in metrics}

    def interval(self, metric: str) -> evidence.Interval | None:
        """The figure's interval over two or more trials; None for one trial."""
        raw = self.intervals.get(metric)
        return evidence.Interval.from_dict(raw) if raw else None


def pooled(trials: Sequence[Trial]) -> tuple[ClientStats, ServerStats | None]:
    """The trials as one run: counts and durations added, histograms merged, timelines one after another."""
    clients = [t.client for t in trials]
    if len(clients) == 1:
        return clients[0], trials[0].server
    hist = new_histogram()
    for c in clients:
        if c.hdr:
            hist.decode_and_add(c.hdr)
    timeline, windows, offset = [], [], 0.0
    for c in clients:
        timeline += [dataclasses.replace(p, t=p.t + offset) for p in c.timeline]
        windows += [{**w, "t": w["t"] + offset} for w in c.windows]
        offset += max([p.t + 1 for p in c.timeline] + [c.duration_s])

    def total(name: str) -> int:
        return sum(getattr(c, name) for c in clients)

    def counts(name: str) -> dict[str, int]:
        return dict(sum((Counter(getattr(c, name)) for c in clients), Counter()))

    client = ClientStats(
        requests=total("requests"),
        failures=total("failures"),
        duration_s=sum(c.duration_s for c in clients),
        latency_ms=_latency_ms(hist, clients),
        timeline=timeline,
        hdr=hist.encode().decode() if hist.get_total_count() else "",
        dropped=total("dropped"),
        errors=counts("errors"),
        warmup_requests=total("warmup_requests"),
        retries=total("retries"),
        refused=total("refused"),
        failure_statuses=counts("failure_statuses"),
        windows=windows,
        latency_sum_ms=sum(c.latency_sum_ms for c in clients),
        streams=[row for c in clients for row in c.streams],
        **stream_summary([row for c in clients for row in c.streams], sum(c.duration_s for c in clients)),
    )
    servers = [t.server for t in trials]
    return client, (None if any(s is None for s in servers) else _pooled_server(servers))


def _latency_ms(hist, clients: Sequence[ClientStats]) -> dict[str, float]:
    """``ClientStats.latency_ms`` of the merged histogram; the mean from the trials' means (exact: each is a
    sum over a count, where the histogram's mean puts each count at its bucket's middle)."""
    keys = [*map(percentile_key, PERCENTILES), "mean", "min", "max"]
    if hist.get_total_count() == 0:
        return dict.fromkeys(keys, math.nan)
    *ranked, lowest, highest = (v / 1000 for v in value_at(hist, (*PERCENTILES, 0.0, 100.0)))
    weights = [(c.latency_ms.get("mean", math.nan), c.accepted) for c in clients if c.accepted]
    mean = sum(m * n for m, n in weights) / sum(n for _, n in weights) if weights else math.nan
    return {**dict(zip(keys, ranked, strict=False)), "mean": mean, "min": lowest, "max": highest}


def _pooled_server(servers: Sequence[ServerStats]) -> ServerStats:
    handled = [s.requests + s.failures for s in servers]
    keys = dict.fromkeys(k for s in servers for k in s.breakdown_ms)
    breakdown = {
        k: sum(s.breakdown_ms.get(k, 0.0) * n for s, n in zip(servers, handled, strict=True)) / sum(handled)
        if sum(handled)
        else math.nan
        for k in keys
    }
    batches = sum((Counter(s.batch_histogram) for s in servers), Counter())
    return ServerStats(
        requests=sum(s.requests for s in servers),
        failures=sum(s.failures for s in servers),
        inferences=sum(s.inferences for s in servers),
        executions=sum(s.executions for s in servers),
        breakdown_ms=breakdown,
        batch_histogram=dict(sorted(batches.items())),
        summary_ms=dict(servers[-1].summary_ms),  # quantiles at the end of the last trial
    )


@dataclasses.dataclass
class CampaignResult:
    campaign: str
    started: str
    """ISO 8601 UTC."""
    slo: dict[str, float]
    """``p99_ms``, ``max_error_rate``, ``gate`` and ``min_goodput``."""
    runs: list[RunResult]
    tuning: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Auto-tune outcome per model: the pick, the runner-up reasons, Model Analyzer's pick."""

    def save(self, path: Path) -> None:
        write_json(path, dataclasses.asdict(self))

    @classmethod
    def load(cls, path: Path) -> CampaignResult:
        return from_dict(json.loads(Path(path).read_text()))


def _client(raw: dict[str, Any]) -> ClientStats:
    client = dict(raw)
    client["timeline"] = [TimelinePoint(**p) for p in client.get("timeline", [])]
    return ClientStats(**client)


def _server(raw: dict[str, Any] | None) -> ServerStats | None:
    if raw is None:
        return None
    server = dict(raw)
    server["batch_histogram"] = {int(k): v for k, v in server.get("batch_histogram", {}).items()}
    return ServerStats(**server)


def from_dict(raw: dict[str, Any]) -> CampaignResult:
    runs = []
    for run in raw["runs"]:
        trials = [
            Trial(**{**t, "client": _client(t["client"]), "server": _server(t.get("server"))})
            for t in run.get("trials", [])
        ]
        runs.append(
            RunResult(
                **{**run, "client": _client(run["client"]), "server": _server(run.get("server")), "trials": trials}
            )
        )
    return CampaignResult(raw["campaign"], raw["started"], raw["slo"], runs, raw.get("tuning", {}))
