"""Triton's side of a run: its counters read before and after, turned into where the time went.

Triton's durations are cumulative microseconds per request (a batched execution's compute time is
charged to each request in it), so delta / requests is the mean per request. The batch-size histogram
comes from the statistics extension (``batch_stats``), which counts executions per batch size; the
Prometheus endpoint has no such histogram in 2.51.
"""

from __future__ import annotations

import dataclasses
import math

import tritonclient.http as httpclient

from deploy.client import metrics, model_metric
from loadtest.core.results import ServerStats

DURATIONS = {
    "request": "nv_inference_request_duration_us",
    "queue": "nv_inference_queue_duration_us",
    "compute_input": "nv_inference_compute_input_duration_us",
    "compute_infer": "nv_inference_compute_infer_duration_us",
    "compute_output": "nv_inference_compute_output_duration_us",
}
COUNTS = {
    "requests": "nv_inference_request_success",
    "failures": "nv_inference_request_failure",
    "inferences": "nv_inference_count",
    "executions": "nv_inference_exec_count",
}
SUMMARY = "nv_inference_request_summary_us"


@dataclasses.dataclass
class Snapshot:
    values: dict[str, float]
    """COUNTS and DURATIONS keys -> cumulative value."""
    batches: dict[int, int]
    """Batch size -> executions so far."""
    summary_ms: dict[str, float]
    """``p50`` ... -> request-duration quantile (ms) over Triton's summary window."""


def snapshot(http_url: str, metrics_url: str, model: str) -> Snapshot:
    samples = metrics(metrics_url)
    values = {key: model_metric(samples, name, model) for key, name in {**COUNTS, **DURATIONS}.items()}
    summary = {}
    for (name, labels), value in samples.items():
        labels = dict(labels)
        if name == SUMMARY and labels.get("model") == model and "quantile" in labels and not math.isnan(value):
            summary[f"p{float(labels['quantile']) * 100:g}"] = value / 1000
    client = httpclient.InferenceServerClient(http_url)
    try:
        stats = client.get_inference_statistics(model)
    finally:
        client.close()
    batches: dict[int, int] = {}
    for model_stats in stats.get("model_stats", []):
        for entry in model_stats.get("batch_stats", []):
            size = int(entry["batch_size"])
            batches[size] = batches.get(size, 0) + int(entry["compute_infer"]["count"])
    return Snapshot(values, batches, summary)


def delta(before: Snapshot, after: Snapshot, client_mean_ms: float) -> ServerStats:
    diff = {k: after.values[k] - before.values.get(k, 0.0) for k in after.values}
    handled = diff["requests"] + diff["failures"]
    breakdown = {key: (diff[key] / handled / 1000 if handled else math.nan) for key in DURATIONS}
    breakdown["client_network"] = (
        client_mean_ms - breakdown["request"] if handled and not math.isnan(client_mean_ms) else math.nan
    )
    batches = {size: n - before.batches.get(size, 0) for size, n in after.batches.items()}
    return ServerStats(
        requests=int(diff["requests"]),
        failures=int(diff["failures"]),
        inferences=int(diff["inferences"]),
        executions=int(diff["executions"]),
        breakdown_ms=breakdown,
        batch_histogram={size: n for size, n in sorted(batches.items()) if n > 0},
        summary_ms=after.summary_ms,
    )
