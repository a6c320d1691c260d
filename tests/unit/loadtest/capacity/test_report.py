"""loadtest/capacity/report.py: the HPA patch (rendered over a deploy/k8s overlay with the venv's
``kubectl kustomize``), the queue-time target read at the planned rate, and the report folder."""

import dataclasses
import json
import math
import os

import pytest
import yaml

from loadtest.capacity import report as capacity_report
from loadtest.capacity.search import find_capacity
from loadtest.core import evidence
from loadtest.core.measurement import Measurement
from loadtest.core.spec import Slo
from loadtest.errors import LoadTestError
from tests.k8s_manifests import K8S, render


def measured(rate: float) -> Measurement:
    """A server that meets 50 ms up to 400 req/s, queueing 1 ms per 100 req/s, its mean latency 4 ms + 1 ms per
    100 req/s."""
    p99 = 10.0 if rate <= 400 else 200.0
    return Measurement(rate, p99 / 2, p99, 0.0, "recorded", server={"queue_ms": rate / 100}, mean_ms=4 + rate / 100)


@pytest.fixture(scope="module")
def result():
    return find_capacity(measured, Slo(50.0), 100.0, trials=2, log=lambda _: None)


def test_the_patch_sets_the_queue_time_target_and_renders_over_an_overlay(tmp_path):
    patch = capacity_report.hpa_patch(0.0032, 333.3, "digits", max_replicas=6)
    (tmp_path / "hpa-patch.yaml").write_text(patch)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(K8S / "overlays" / "cpu", tmp_path)],  # kustomize: no absolute paths
                "patches": [{"path": "hpa-patch.yaml"}],
            }
        )
    )
    (hpa,) = [d for d in render(tmp_path) if d["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["metadata"] == {**hpa["metadata"], "name": "triton", "namespace": "tritonkit"}
    metric, *others = hpa["spec"]["metrics"]
    assert metric["pods"]["metric"]["name"] == capacity_report.QUEUE_METRIC
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "3.2m"}
    served = [
        m["pods"]["metric"]["name"] for m in yaml.safe_load(capacity_report.HPA_FILE.read_text())["spec"]["metrics"]
    ]
    assert [m["pods"]["metric"]["name"] for m in others] == served[1:], "the HPA's other metrics are kept"
    assert hpa["spec"]["maxReplicas"] == 6
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300  # the rest kept


def test_the_patch_names_the_metric_the_hpa_in_deploy_k8s_scales_on():
    _, metric = capacity_report.hpa_metric()
    assert metric == capacity_report.QUEUE_METRIC


def test_an_hpa_on_another_metric_gets_no_patch(tmp_path):
    other = tmp_path / "hpa.yaml"
    text = capacity_report.HPA_FILE.read_text().replace(capacity_report.QUEUE_METRIC, "gpu_utilisation")
    other.write_text(text)
    with pytest.raises(LoadTestError, match="scales on 'gpu_utilisation'"):
        capacity_report.hpa_patch(0.001, 100.0, "digits", path=other)


@pytest.mark.parametrize(("seconds", "text"), [(0.02, "20m"), (0.0032, "3.2m"), (0.00004, "0.04m"), (0.0, "0.001m")])
def test_queue_seconds_become_a_kubernetes_quantity(seconds, text):
    assert capacity_report.quantity(seconds) == text


def test_the_target_is_the_queue_time_at_the_planned_rate(result):
    # The runs queue rate / 100 ms: at 250 req/s, 2.5 ms.
    assert capacity_report.hpa_target(result, 250.0) == pytest.approx(0.0025)
    assert all(math.isfinite(q) for _, q in capacity_report.queue_points(result))


def test_the_report_folder_holds_every_probe_and_trial_a_summary_and_a_plot(result, tmp_path):
    sentence = result.sentence()
    summary = capacity_report.write(result, tmp_path, {"model": "digits", "plan": {"lines": ["replicas: 3"]}}, sentence)
    raw = json.loads((tmp_path / "results.json").read_text())
    assert raw["sentence"] == sentence and raw["model"] == "digits"
    assert len(raw["probes"]) == len(result.probes) and len(raw["confirmations"][0]["trials"]) == 2
    text = summary.read_text()
    assert sentence in text and "## Trials at 400 req/s" in text and "- replicas: 3" in text
    assert (tmp_path / "capacity.png").read_bytes().startswith(b"\x89PNG")


def test_the_summary_shows_ttft_itl_and_tokens_per_second_for_a_streamed_model_only(result, tmp_path):
    def streamed(rate: float) -> Measurement:
        return dataclasses.replace(measured(rate), ttft_p99_ms=4.0, itl_p99_ms=1.25, output_token_throughput=rate * 16)

    streams = find_capacity(streamed, Slo(50.0, ttft_ms=20.0), 100.0, trials=2, log=lambda _: None)
    text = capacity_report.write(streams, tmp_path / "gen", {"model": "gen"}, streams.sentence()).read_text()
    assert (
        "| rate offered | phase | completed/s | p50 ms | p99 ms | p99 TTFT ms | p99 ITL ms | tokens/s | errors |"
        in text
    )
    assert "| 100.0 | bracket | 100.0 | 5.000 | 10.000 | 4.000 | 1.250 | 1600.0 | 0.00% |" in text
    assert "- streams at 400 req/s (GenAI-Perf's figures, 95% CI over the trials): p99 TTFT 4.000 ms" in text
    tensor = capacity_report.write(result, tmp_path / "digits", {"model": "digits"}, result.sentence()).read_text()
    assert "TTFT" not in tensor and "tokens/s" not in tensor


def test_the_plot_bars_each_confirmed_rates_p99_with_its_trials_interval(tmp_path):
    calls = iter(range(10_000))

    def noisy(rate: float) -> Measurement:  # trials at one rate alternate 9 and 12 ms
        return dataclasses.replace(measured(rate), p99_ms=9.0 if next(calls) % 2 else 12.0)

    found = find_capacity(noisy, Slo(50.0), 100.0, trials=3, log=lambda _: None)
    confirmation = found.confirmations[0]
    iv = capacity_report.p99_interval(confirmation)
    p99s = [m.p99_ms for m in confirmation.result.usable]
    assert iv is not None and iv.low < min(p99s) <= max(p99s) < iv.high and iv.trials == len(p99s) == 3
    # One trial: its verdict's interval is the value alone, and there is no bar to draw.
    alone = evidence.Interval(9.0, 9.0, 9.0, 1)
    limits = [
        dataclasses.replace(lim, interval=alone) if lim.name == "p99" else lim for lim in confirmation.verdict.limits
    ]
    one = dataclasses.replace(confirmation, verdict=dataclasses.replace(confirmation.verdict, limits=tuple(limits)))
    assert capacity_report.p99_interval(one) is None
    assert capacity_report.plot(found, tmp_path / "capacity.png").read_bytes().startswith(b"\x89PNG")
