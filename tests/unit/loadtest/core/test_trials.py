"""The trial runner: interleaved order, config switching only when the arm changes, warm-up left out."""

from __future__ import annotations

import dataclasses
import math

from loadtest.core import trials
from loadtest.core.measurement import Measurement


def _arm(name, values, calls, prepares=None):
    it = iter(values)

    def measure():
        calls.append(name)
        return Measurement(next(it), 1.0, 2.0, 0.0, "test", goodput_share=1.0, goodput_rps=1.0)

    prepare = (lambda: prepares.append(name)) if prepares is not None else None
    return trials.Arm(name, measure, prepare)


def test_arms_are_measured_interleaved_with_the_warm_up_round_left_out():
    calls, prepares = [], []
    arms = [_arm("A", [1, 10, 11, 12], calls, prepares), _arm("B", [2, 20, 21, 22], calls, prepares)]
    results = trials.run_trials(arms, 3, warmup_rounds=1, log=lambda _: None)
    assert calls == ["A", "B", "B", "A"] * 2
    assert prepares == ["A", "B", "A", "B", "A"]  # switched only when the arm changes (A B | B A | A B | B A)
    assert [m.throughput for m in results["A"].trials] == [10, 11, 12]
    assert [m.throughput for m in results["A"].warmup] == [1]
    assert results["B"].intervals()["throughput"].estimate == 21


def test_an_arm_is_prepared_only_when_the_previous_trial_was_of_another_arm():
    calls, prepares = [], []
    results = trials.run_trials([_arm("A", [1, 2, 3], calls, prepares)], 3, log=lambda _: None)
    assert prepares == ["A"]
    assert results["A"].intervals()["throughput"].trials == 3


def test_unusable_trials_are_kept_in_the_record_but_left_out_of_the_figures():
    failing = trials.Arm("A", lambda: Measurement.failed("test", "model not ready"))
    results = trials.run_trials([failing], 2, log=lambda _: None)
    assert len(results["A"].trials) == 2
    assert math.isnan(results["A"].intervals()["p99_ms"].estimate)
    assert "model not ready" in trials.line(results["A"].trials[0])


def test_streamed_trials_carry_ttft_itl_and_tokens_to_the_verdict_and_the_line():
    plain = Measurement(10.0, 1.0, 2.0, 0.0, "test")
    streamed = [Measurement(10.0, 1.0, 2.0, 0.0, "test", ttft_p99_ms=8.0, itl_p99_ms=3.0, output_token_throughput=80.0)]
    streamed.append(dataclasses.replace(streamed[0], ttft_p99_ms=12.0))
    assert "ttft_p99_ms" not in trials.samples([plain, plain])
    figures = trials.samples(streamed)
    assert figures["ttft_p99_ms"] == [8.0, 12.0] and figures["itl_p99_ms"] == [3.0, 3.0]
    assert figures["output_token_throughput"] == [80.0, 80.0]
    assert trials.line(streamed[0]).endswith("p99 TTFT 8.000 ms  p99 ITL 3.000 ms  tokens/s 80.0")
    assert "TTFT" not in trials.line(plain)
