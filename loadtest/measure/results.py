"""What a campaign measures, as plain dataclasses written to ``reports/<campaign>/results.json``.

One ``RunResult`` per (scenario, variant) pair: the client's view (every request's latency in an HDR
histogram, merged over Locust worker processes), the server's view (Triton's counters read before and
after the run) and the SLO verdict. The report, the SLO gate and the auto-tuner read only this file,
so a campaign can be re-reported or re-tuned without running it again.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from loadtest.drive.client_stats import ClientStats, TimelinePoint


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

    @property
    def avg_batch(self) -> float:
        return self.inferences / self.executions if self.executions else 0.0


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
    """Empty when the run met the SLO; else one sentence per violated limit."""

    @property
    def passed(self) -> bool:
        return not self.slo_violations


@dataclasses.dataclass
class CampaignResult:
    campaign: str
    started: str
    """ISO 8601 UTC."""
    slo: dict[str, float]
    """``p99_ms`` and ``max_error_rate``."""
    runs: list[RunResult]
    tuning: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Auto-tune outcome per model: the pick, the runner-up reasons, Model Analyzer's pick."""

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self), indent=1))

    @classmethod
    def load(cls, path: Path) -> CampaignResult:
        return from_dict(json.loads(Path(path).read_text()))


def from_dict(raw: dict[str, Any]) -> CampaignResult:
    runs = []
    for run in raw["runs"]:
        client = dict(run["client"])
        client["timeline"] = [TimelinePoint(**p) for p in client.get("timeline", [])]
        server = run.get("server")
        if server is not None:
            server = dict(server)
            server["batch_histogram"] = {int(k): v for k, v in server.get("batch_histogram", {}).items()}
            server = ServerStats(**server)
        runs.append(RunResult(**{**run, "client": ClientStats(**client), "server": server}))
    return CampaignResult(raw["campaign"], raw["started"], raw["slo"], runs, raw.get("tuning", {}))
