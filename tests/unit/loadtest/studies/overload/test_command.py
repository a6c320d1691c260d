"""Queue-policy variants, the retry key, refusal counting and the overload/soak arithmetic (no server)."""

import argparse
import os

import pytest
from scipy.stats import poisson

from export.spec import QueuePolicy
from loadtest.campaign import file as campaign
from loadtest.cli import flags
from loadtest.core.client_stats import ClientStats, failure_status
from loadtest.core.latency import Merger, Recorder
from loadtest.core.spec import Candidate
from loadtest.errors import CampaignError, LoadTestError, VariantError
from loadtest.generators import saturation
from loadtest.generators.locust.runner import load_settings
from loadtest.studies.overload import command as overload
from loadtest.studies.soak import checks as soak_checks
from loadtest.studies.soak import command as soak
from loadtest.studies.soak import report as soak_report
from loadtest.target import apply
from loadtest.target import endpoints as target
from tests.campaign_samples import MINIMAL
from tests.overload_samples import recorded_run
from tests.served import served_config

# The smallest valid campaign (test_campaign's), with an open-loop shape.
BASE = MINIMAL.replace('shape = { kind = "users", users = 4 }', 'shape = { kind = "open", rate = 100 }')
# digits as the server serves it, with no batching delay (a queue policy with a delay stalls Triton 2.51).
CONFIG = served_config("digits")
CONFIG["dynamic_batching"].update(max_queue_delay_microseconds=0, preferred_batch_size=[8])


def parse(scenario_extra: str = "", variant: str = "") -> campaign.Campaign:
    text = BASE.replace("shape = {", scenario_extra + "\nshape = {")
    if variant:
        text += '[[variants]]\nname = "v"\nmodels = ["digits"]\n' + variant
    return campaign.parse(text)


# --- campaign keys -------------------------------------------------------------------------------


def test_queue_policy_keys_parse_and_change_the_config():
    (variant,) = parse(variant='max_queue_size = 16\ndefault_timeout_us = 8000\ntimeout_action = "REJECT"\n').variants
    changes = variant.changes
    assert (changes.max_queue_size, changes.default_timeout_us, changes.timeout_action) == (16, 8000, "REJECT")
    assert variant.changes_config and variant.has_queue_policy_change


@pytest.mark.parametrize(
    "variant, message",
    [
        ("max_queue_size = -1\n", "max_queue_size=-1 is out of range"),
        ("max_queue_size = 2.5\n", "max_queue_size=2.5 is out of range"),
        ("max_queue_size = true\n", "max_queue_size=True is out of range"),
        ("default_timeout_us = -5\n", "default_timeout_us=-5 is out of range"),
        ('timeout_action = "DROP"\n', "timeout_action='DROP' is not one of"),
        ("dynamic_batching = false\nmax_queue_size = 4\n", "change the dynamic batcher, but dynamic_batching=False"),
        ("priority_levels = 2\n", "unknown keys ['priority_levels']"),
    ],
)
def test_bad_queue_policy_values_name_the_value(variant, message):
    with pytest.raises(CampaignError, match=message.replace("[", r"\[").replace("(", r"\(")):
        parse(variant=variant)


def test_retry_is_parsed_and_passed_to_locust(tmp_path):
    (scenario,) = parse("retry = { attempts = 3, backoff_ms = 50 }").scenarios
    assert scenario.retry == {"attempts": 3, "backoff_ms": 50}
    settings = load_settings(scenario, "digits", "127.0.0.1:8001", tmp_path / "out.json")
    assert settings["retry"] == {"attempts": 3, "backoff_ms": 50}
    (plain,) = parse().scenarios
    assert plain.retry is None and "retry" not in load_settings(plain, "digits", "u", tmp_path / "o.json")


@pytest.mark.parametrize(
    "retry, message",
    [
        ("retry = 3", "retry=3 must be a table"),
        ("retry = { attempts = 3 }", "missing ['backoff_ms']"),
        ("retry = { attempts = 3, backoff_ms = 5, jitter = 1 }", "unknown ['jitter']"),
        ("retry = { attempts = 0, backoff_ms = 5 }", "retry.attempts=0 must be an integer >= 1"),
        ("retry = { attempts = 1.5, backoff_ms = 5 }", "retry.attempts=1.5 must be an integer >= 1"),
        ("retry = { attempts = 2, backoff_ms = -1 }", "retry.backoff_ms=-1 must be a number"),
        ('retry = { attempts = 2, backoff_ms = "5" }', "retry.backoff_ms='5' must be a number"),
    ],
)
def test_bad_retry_names_the_value(retry, message):
    with pytest.raises(CampaignError, match=message.replace("[", r"\[")):
        parse(retry)


# --- applying the queue policy -------------------------------------------------------------------


def test_override_writes_and_removes_the_queue_policy():
    with_policy = apply.override(CONFIG, Candidate.of("p", max_queue_size=16, default_timeout_us=8000))
    assert overload.policy_of(with_policy) == QueuePolicy(16, 8000, "REJECT")
    assert with_policy["dynamic_batching"]["preferred_batch_size"] == [8]  # the rest is kept
    assert "default_queue_policy" not in CONFIG["dynamic_batching"]  # the input is not changed
    only_size = apply.override(with_policy, Candidate.of("q", max_queue_size=4))
    assert overload.policy_of(only_size) == QueuePolicy(4, 8000)
    # Triton's JSON may carry the uint64 timeout as a string
    served = {
        **with_policy,
        "dynamic_batching": {
            **with_policy["dynamic_batching"],
            "default_queue_policy": {
                "max_queue_size": 16,
                "default_timeout_microseconds": "8000",
                "timeout_action": "REJECT",
            },
        },
    }
    assert overload.policy_of(served) == QueuePolicy(16, 8000)
    none = apply.override(served, Candidate.of("n", max_queue_size=0, default_timeout_us=0))
    assert "default_queue_policy" not in none["dynamic_batching"]
    assert overload.policy_of(none) == QueuePolicy() and not overload.policy_of(none).limits


def test_a_queue_policy_without_a_batcher_gets_one_or_is_refused():
    plain = {k: v for k, v in CONFIG.items() if k != "dynamic_batching"}
    added = apply.override(plain, Candidate.of("p", max_queue_size=8))
    assert added["dynamic_batching"]["default_queue_policy"]["max_queue_size"] == 8
    with pytest.raises(VariantError, match="dynamic batching needs max_batch_size > 0"):
        apply.override(plain, Candidate.of("p", max_batch_size=0, max_queue_size=8))


def test_each_policy_flag_replaces_only_its_own_field():
    served = QueuePolicy(128, 200000)
    assert overload.with_overrides(served, {"max_queue_size": None, "default_timeout_us": 0}) == QueuePolicy(128, 0)
    assert overload.with_overrides(served, {"max_queue_size": 4, "default_timeout_us": None}) == QueuePolicy(4, 200000)
    assert overload.with_overrides(served, None) == served
    assert overload.main(["--timeout-us", "-1"]) == 2


@pytest.mark.parametrize("text, cpus", [("0", {0}), ("0,2-3", {0, 2, 3}), ("1-1", {1})])
def test_cpu_lists_parse(text, cpus):
    assert target.parse_cpus(text) == cpus


@pytest.mark.parametrize("text", ["x", "1-x", "3-1", "-1", ""])
def test_bad_cpu_lists_name_the_part(text):
    with pytest.raises(LoadTestError, match="CPU list"):
        target.parse_cpus(text)
    with pytest.raises(argparse.ArgumentTypeError, match="CPU list"):  # as the --server-cpus flag's type
        flags.argument_type(target.parse_cpus)(text)


def test_server_cpus_must_be_this_machines(tmp_path):
    from deploy.server import ServerConfig

    mine = os.sched_getaffinity(0)
    assert ServerConfig(model_repository=tmp_path, cpus={min(mine)}).cpus == {min(mine)}
    with pytest.raises(ValueError, match="not all among"):
        ServerConfig(model_repository=tmp_path, cpus={max(mine) + 1})


def test_server_cpus_need_a_local_server():
    code = overload.main(
        [
            "--server-cpus",
            "0",
            "--http-url",
            "h:1",
            "--grpc-url",
            "h:2",
            "--metrics-url",
            "http://h:3",
            "--saturation-rps",
            "1",
        ]
    )
    assert code == 2


def test_the_overload_variants_keep_the_policy_and_drop_it():
    policy = QueuePolicy(16, 8000)
    with_policy, without = overload.variants("digits", policy, "onnx")
    assert with_policy.served_model("digits") == without.served_model("digits") == "digits_onnx"
    assert overload.policy_of(apply.override(CONFIG, with_policy)) == policy
    assert not overload.policy_of(apply.override(apply.override(CONFIG, with_policy), without)).limits


# --- refusals in the client's counts -------------------------------------------------------------


@pytest.mark.parametrize(
    "message, status",
    [
        ("InferenceServerException: [503] Exceeds maximum queue size", "503"),
        ("InferenceServerException: [StatusCode.UNAVAILABLE] Request timeout expired", "StatusCode.UNAVAILABLE"),
        ("InferenceServerException: [400] bad input", "400"),
        ("RuntimeError: HTTP 503: busy", "503"),
        ("dropped: every in-flight slot busy (client saturated)", "dropped"),
        ("TimeoutError: timed out", "TimeoutError"),
    ],
)
def test_failure_status(message, status):
    assert failure_status(message) == status


def test_refusals_are_counted_apart_from_drops_and_errors():
    recorder = Recorder()
    recorder.success(0, 0.002)
    recorder.failure(0, "InferenceServerException: [503] [request id: 7] Exceeds maximum queue size", latency_s=0.0004)
    recorder.failure(1, "InferenceServerException: [StatusCode.UNAVAILABLE] Request timeout expired")
    recorder.failure(1, "InferenceServerException: [400] bad input")
    recorder.drop(1)
    merger = Merger(window_s=60)
    merger.add(recorder.drain())
    stats = merger.stats(2.0)
    assert (stats.requests, stats.failures, stats.refused, stats.dropped, stats.other_failures) == (5, 4, 2, 1, 1)
    assert stats.failure_statuses == {"503": 1, "StatusCode.UNAVAILABLE": 1, "400": 1, "dropped": 1}
    assert [p.refused for p in stats.timeline] == [1, 1]
    assert stats.refusal_latency_ms["max"] == pytest.approx(0.4, rel=0.02)
    assert stats.refusal_rate == pytest.approx(2 / 5)
    assert stats.windows == [
        {
            "t": 0,
            "length_s": 60,
            "requests": 5,
            "failures": 4,
            "p50_ms": pytest.approx(2, rel=0.02),
            "p99_ms": pytest.approx(2, rel=0.02),
        }
    ]


def test_old_results_without_the_new_fields_still_load():
    from loadtest.core.results import from_dict

    raw = {
        "campaign": "c",
        "started": "",
        "slo": {},
        "runs": [
            {
                "scenario": "s",
                "variant": "v",
                "model": "digits",
                "served_model": "digits",
                "protocol": "grpc",
                "shape": {"kind": "users", "users": 1},
                "client": {
                    "requests": 3,
                    "failures": 1,
                    "duration_s": 1.0,
                    "latency_ms": {"p99": 1.0},
                    "timeline": [{"t": 0.0, "requests": 3, "failures": 1, "p50_ms": 1.0, "p99_ms": 1.0}],
                },
            }
        ],
    }
    run = from_dict(raw).runs[0]
    assert run.client.refused == 0 and run.client.timeline[0].refused == 0 and run.client.windows == []


# --- the overload budget -------------------------------------------------------------------------


def test_the_budget_defaults_to_the_models_campaign():
    assert overload.default_budget_ms("digits") == 10.0
    assert overload.default_budget_ms("no_such_model") is None


# --- soak checks ---------------------------------------------------------------------------------


def test_soak_checks():
    assert soak_checks.check_errors(0, 0, {})["passed"] and not soak_checks.check_errors(1, 0, {"503": 1})["passed"]
    windows = [
        {"t": 0, "length_s": 10, "p99_ms": 10.0},
        {"t": 10, "length_s": 10, "p99_ms": 30.0},
        {"t": 20, "length_s": 10, "p99_ms": 11.5},
        {"t": 30, "length_s": 10, "p99_ms": 99.0},
    ]
    full = soak_checks.full_windows(windows, 35.0)  # the last one runs past the end
    assert [w["t"] for w in full] == [0, 10, 20]
    p99 = soak_checks.check_p99(full)
    assert p99["passed"] and p99["drift"] == pytest.approx(0.15)
    assert not soak_checks.check_p99(full[:2])["passed"] and not soak_checks.check_p99(full[:1])["passed"]
    samples = [{"t": t, "total_bytes": b} for t, b in [(0, 50), (5, 100), (12, 100), (18, 102), (25, 103), (30, 104)]]
    memory = soak_checks.check_memory(samples, warmup_s=10, window_s=10)
    assert memory["passed"] and memory["growth"] == pytest.approx(2.5 / 101)  # mean 101 after warm-up, 103.5 last
    assert not soak_checks.check_memory(samples + [{"t": 36, "total_bytes": 120}], 10, 10)["passed"]
    assert not soak_checks.check_memory(samples[:2], 10, 10)["passed"]  # nothing after the warm-up


def test_the_sustained_rate_is_the_last_open_loop_step_the_server_kept_up_with(monkeypatch, tmp_path):
    capacity = 130.0  # the fake server completes up to this many req/s
    offered = []

    def fake_run(scenario, *_args, **_kwargs):
        rate = scenario.shape["rate"]
        offered.append(rate)
        done = min(rate, capacity)
        return ClientStats(
            requests=int(done * 10), failures=0, duration_s=10.0, latency_ms={"p99": 5.0 if rate <= capacity else 500.0}
        ), None

    monkeypatch.setattr(saturation, "measure_run", fake_run)
    monkeypatch.setattr(saturation, "settle", lambda *_: None)
    found = saturation.find_sustained_rate(
        "digits", "digits", "grpc", None, tmp_path, start_rps=50.0, log=lambda *_: None
    )
    assert offered == [50.0, 60.0, 72.0, 86.4, 103.7, 124.4, 149.3]  # 1.2x steps until it fell behind
    assert found.rps == 124.4 and [s["rate"] for s in found.steps] == offered
    with pytest.raises(ValueError, match="did not keep up with 200.0"):
        saturation.find_sustained_rate("digits", "digits", "grpc", None, tmp_path, start_rps=200.0, log=lambda *_: None)


def test_the_sustained_rate_stops_at_the_knee_where_p99_passes_3x_the_lowest_step_p99(monkeypatch, tmp_path):
    """Every step is completed in full, but p99 grows with the rate: past 3x the unloaded p99, queues build.
    The first step's p99 was noisy (20 ms); the bar is 3x the lowest p99 seen (5 ms), not 3x that."""
    p99s = iter([20.0, 5.0, 6.0, 14.0, 16.0, 99.0])

    def fake_run(scenario, *_args, **_kwargs):
        rate = scenario.shape["rate"]
        return ClientStats(requests=int(rate * 10), failures=0, duration_s=10.0, latency_ms={"p99": next(p99s)}), None

    monkeypatch.setattr(saturation, "measure_run", fake_run)
    monkeypatch.setattr(saturation, "settle", lambda *_: None)
    found = saturation.find_sustained_rate(
        "digits", "digits", "grpc", None, tmp_path, start_rps=50.0, log=lambda *_: None
    )
    assert [s["rate"] for s in found.steps] == [50.0, 60.0, 72.0, 86.4, 103.7] and found.rps == 86.4
    assert saturation.KNEE == 3.0 and saturation.START_FRACTION == 1 / 8


def test_keeping_up_allows_for_poisson_noise_at_low_rates_only():
    # 10.8 req/s over 8 s: 86 +- 9 arrivals, so 10.2 req/s completed (94%) is within the noise
    assert saturation.keeps_up(10.2, 10.8, 8.0)
    assert not saturation.keeps_up(7.0, 10.8, 8.0)  # 3.5 sigma short: fell behind
    # 1,000 req/s over 8 s: 8,000 +- 89, so the 95% bar holds
    assert saturation.keeps_up(951.0, 1000.0, 8.0) and not saturation.keeps_up(940.0, 1000.0, 8.0)
    assert not saturation.keeps_up(5.0, 10.0, 0.0)


@pytest.mark.parametrize(
    ("done", "expected"),
    [(0, 9.0), (1, 9.0), (2, 9.0), (4, 9.0), (9, 9.0), (0, 2.0), (60, 86.4), (70, 86.4), (7500, 8000.0)],
)
def test_the_one_kept_up_rule_is_the_exact_poisson_tail_below_ten_expected_and_beyond(done, expected):
    """Short by more than 5% only as often as a Poisson count of the expected mean falls that low by chance
    (scipy's exact tail, not a normal approximation, which cannot fail below ten expected: 0 of 9 kept up)."""
    rule = done >= 0.95 * expected or poisson.cdf(done, expected) >= saturation.POISSON_TAIL
    assert saturation.keeps_up(done / 8.0, expected / 8.0, 8.0) is bool(rule)
    if (done, expected) == (0, 9.0):
        assert not saturation.keeps_up(0.0, 9.0 / 8.0, 8.0)  # e^-9 = 0.00012: fell behind
    if (done, expected) == (0, 2.0):
        assert saturation.keeps_up(0.0, 2.0 / 8.0, 8.0)  # e^-2 = 0.135: chance


def test_the_p99_trend_is_the_fitted_line_not_two_windows():
    def windows(values):
        return [{"t": 60.0 * i, "length_s": 60.0, "p99_ms": v} for i, v in enumerate(values)]

    assert soak_checks.p99_trend(windows([10.0, 15.0, 20.0])) == pytest.approx(10.0 / 15.0)  # +10 ms on a 15 ms mean
    assert soak_checks.p99_trend(windows([10.0] * 5)) == 0.0
    # one bad last window fails first-vs-last, but barely moves the line through ten
    noisy = windows([10.0, 11.0, 9.0, 10.0, 11.0, 9.0, 10.0, 11.0, 9.0, 14.0])
    check = soak_checks.check_p99(noisy)
    assert not check["passed"] and check["drift"] == pytest.approx(0.4)
    assert abs(check["trend"]) < 0.3 and "fitted trend over the run" in check["detail"]
    assert soak_checks.p99_trend(windows([10.0])) is None


def test_split_cpus_gives_the_load_generator_the_lower_half_and_the_server_the_rest():
    assert target.split_cpus(frozenset({0, 1})) == (frozenset({0}), frozenset({1}))
    assert target.split_cpus(frozenset({4, 2, 3})) == (frozenset({2}), frozenset({3, 4}))
    assert target.split_cpus(frozenset({0})) == (frozenset(), frozenset())  # one CPU: nothing to split
    client, server = target.split_cpus()
    assert client | server <= os.sched_getaffinity(0) and not client & server


def test_the_soak_splits_the_cpus_unless_told_otherwise():
    assert soak.parse_args([]).split_cpus and not soak.parse_args(["--no-split-cpus"]).split_cpus
    # the soak samples the server's processes: it always starts its own, so it takes no server URL
    assert soak.parse_args([]).http_url is None
    with pytest.raises(SystemExit):
        soak.parse_args(["--http-url", "127.0.0.1:8000"])
    assert soak_report.cpu_text([], []) == "Server and load generator shared the CPUs."
    assert soak_report.cpu_text([1], [0]) == "Server and stubs on CPUs [1], load generator on CPUs [0]."


def test_each_load_runs_its_trials_interleaved_across_the_two_configs(monkeypatch, tmp_path):
    applied, ran = [], []
    monkeypatch.setattr(apply, "served_config", lambda url, model: CONFIG)
    monkeypatch.setattr(apply.ServedConfigs, "apply", lambda self, variant, model: applied.append(variant.name))
    monkeypatch.setattr(overload, "settle", lambda endpoints, served: None)

    def run_scenario(scenario, variant, served, endpoints, work, budget, log):
        ran.append((scenario.shape["rate"], variant.name))
        return recorded_run(variant.name, offered=800, accepted=800, refused=0, dropped=0, p99=5.0)

    monkeypatch.setattr(overload, "run_scenario", run_scenario)
    endpoints = target.Endpoints("h:1", "h:2", "http://h:3")
    data = overload.measure(
        "digits",
        endpoints,
        tmp_path,
        budget_ms=10.0,
        factors=(1.0, 2.0),
        saturation_rps=100.0,
        policy=QueuePolicy(16, 8000),
        trials=2,
        log=lambda *_: None,
    )
    a, b = overload.WITH_POLICY, overload.WITHOUT_POLICY
    assert ran == [(100.0, a), (100.0, b), (100.0, b), (100.0, a), (200.0, a), (200.0, b), (200.0, b), (200.0, a)]
    assert applied == [a, b, a, b, a]  # every switch of config is a reload, and only a switch
    assert [(r["config"], r["factor"], r["trial"]) for r in data["rows"][:4]] == [
        (a, 1.0, 1),
        (b, 1.0, 1),
        (b, 1.0, 2),
        (a, 1.0, 2),
    ]
    assert data["trials"] == 2 and {lv["trials"] for lv in data["verdict"]["levels"]} == {2}
    with pytest.raises(ValueError, match="--trials 0 must be an integer >= 1"):
        overload.measure("digits", endpoints, tmp_path, budget_ms=10.0, trials=0, log=lambda *_: None)
