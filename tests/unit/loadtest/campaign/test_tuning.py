"""SLO gate on a recorded campaign, the tuned catalog overlay (export/tuned.toml), and candidate config overrides."""

import copy
import tomllib
from pathlib import Path

import pytest
from google.protobuf import json_format

from export import catalog
from export import config as config_io
from export.changes import ServingChanges
from loadtest.core import slo
from loadtest.core.results import CampaignResult
from loadtest.core.spec import Candidate, Slo
from loadtest.errors import VariantError
from loadtest.target import apply
from loadtest.tune import autotune

DATA = Path(__file__).parents[3] / "data" / "loadtest"
REPOSITORY = Path(__file__).parents[4] / "model_repository"


@pytest.fixture
def recorded() -> CampaignResult:
    """A real two-variant digits campaign (plain: p99 17.2 ms, 1816 req/s; batch-1ms: p99 10.1 ms, 2597 req/s)."""
    return CampaignResult.load(DATA / "digits_two_variants.json")


def with_budget(result: CampaignResult, budget: Slo) -> CampaignResult:
    result = copy.deepcopy(result)
    for run in result.runs:
        run.slo_violations = slo.violations(run, budget)
    return result


def test_violations_say_which_limit_and_by_how_much(recorded):
    plain = recorded.runs[0]
    (sentence,) = slo.violations(plain, Slo(p99_ms=10.0))
    assert sentence == "p99 17.214 ms exceeds the 10 ms budget by 7.214 ms (72%)"
    assert slo.violations(plain, Slo(p99_ms=20.0)) == []
    failing = copy.deepcopy(plain)
    failing.client.failures = 91
    # judged on the count: its exact binomial interval, every request of the run
    (sentence,) = slo.violations(failing, Slo(20.0, 0.001))
    assert sentence == "error rate 0.999% (95% CI 0.805%-1.225%; 91 of 9110) exceeds the limit 0.100%"


def test_gate_every_run_names_each_failing_run(recorded):
    budget = Slo(p99_ms=15.0)
    failures = slo.gate(with_budget(recorded, budget), budget)
    assert failures == ["digits-grpc / plain: p99 17.214 ms exceeds the 15 ms budget by 2.214 ms (15%)"]


def test_gate_best_variant_needs_one_passing_variant_per_scenario(recorded):
    assert slo.gate(with_budget(recorded, Slo(15.0, gate="best-variant")), Slo(15.0, gate="best-variant")) == []
    budget = Slo(5.0, gate="best-variant")
    (failure,) = slo.gate(with_budget(recorded, budget), budget)
    assert failure.startswith("digits-grpc: no variant met the SLO; closest batch-1ms: p99 10.109 ms")


def test_tuned_settings_round_trip_through_the_catalog(tmp_path):
    # minilm: the catalog model with a queue policy
    base = catalog.load(catalog.CATALOG, None)["minilm"]
    changes = ServingChanges(max_queue_delay_us=0, preferred_batch_sizes=(4, 16), instances=1, max_batch_size=16)
    settings = autotune.tuned_settings(changes, base)
    text = autotune.render_tuned({"minilm": {"note": 'why "this"', **settings}})
    tuned = tmp_path / "tuned.toml"
    tuned.write_text(text)
    assert tomllib.loads(text)["minilm"]["note"] == 'why "this"'
    entry = catalog.load(catalog.CATALOG, tuned)["minilm"]
    # The variant's batching values replace the catalog's; the rest (the queue policy) is kept.
    assert entry.settings["dynamic_batching"] == {
        **base.settings["dynamic_batching"],
        "max_queue_delay_us": 0,
        "preferred_batch_sizes": [4, 16],
    }
    assert entry.settings["dynamic_batching"]["max_queue_size"] == base.settings["dynamic_batching"]["max_queue_size"]
    assert entry.settings["instance_groups"] == [{"count": 1, "kind": "KIND_CPU"}]
    assert entry.settings["max_batch_size"] == 16
    off = autotune.tuned_settings(ServingChanges(dynamic_batching=False), base)
    tuned.write_text(autotune.render_tuned({"minilm": off}))
    assert "dynamic_batching" not in catalog.load(catalog.CATALOG, tuned)["minilm"].settings


def test_a_tuned_queue_policy_reaches_the_catalog(tmp_path):
    base = catalog.load(catalog.CATALOG, None)["digits"]
    changes = ServingChanges(max_queue_size=48, default_timeout_us=9000, timeout_action="REJECT")
    tuned = tmp_path / "tuned.toml"
    tuned.write_text(autotune.render_tuned({"digits": autotune.tuned_settings(changes, base)}))
    batching = catalog.load(catalog.CATALOG, tuned)["digits"].settings["dynamic_batching"]
    assert (batching["max_queue_size"], batching["default_timeout_us"], batching["timeout_action"]) == (
        48,
        9000,
        "REJECT",
    )
    assert batching["max_queue_delay_us"] == base.settings["dynamic_batching"]["max_queue_delay_us"]


def test_tuned_file_rejects_untunable_keys_and_unknown_models(tmp_path):
    tuned = tmp_path / "tuned.toml"
    tuned.write_text("[digits]\nbuilder = 'x'\n")
    with pytest.raises(Exception, match="not tunable"):
        catalog.load(catalog.CATALOG, tuned)
    tuned.write_text("[nomodel]\nwarmup = false\n")
    with pytest.raises(Exception, match="is not a model of"):
        catalog.load(catalog.CATALOG, tuned)


def test_plan_diffs_every_format_and_writes_nothing(tmp_path):
    tuned = tmp_path / "tuned.toml"
    changes = ServingChanges(max_queue_delay_us=250, instances=1)
    before = {p: p.read_bytes() for p in (catalog.TUNED, *REPOSITORY.glob("digits*/config.pbtxt"))}
    text, entry, diff = autotune.plan("digits", changes, "note", REPOSITORY, tuned_path=tuned)
    assert not tuned.exists() and not list(tmp_path.iterdir())
    assert {p: p.read_bytes() for p in before} == before  # nothing else was written either
    assert "+  max_queue_delay_microseconds: 250" in diff
    assert "-  count: 2" in diff and "+  count: 1" in diff
    assert diff.count("+++ ") == len(entry.variants["cpu"])  # every format's config
    assert tomllib.loads(text)["digits"]["instance_groups"] == [{"count": 1, "kind": "KIND_CPU"}]


def digits_config_json() -> dict:
    """config.pbtxt in the JSON form Triton's get_model_config returns."""
    message = config_io.parse(REPOSITORY / "digits" / "config.pbtxt")
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def test_override_changes_only_what_the_variant_says():
    config = digits_config_json()
    plain = apply.override(config, Candidate.of("plain", dynamic_batching=False, instances=1, warmup=False))
    assert "dynamic_batching" not in plain and "model_warmup" not in plain
    assert plain["instance_group"][0]["count"] == 1 and plain["input"] == config["input"]
    tuned = apply.override(
        config, Candidate.of("t", max_queue_delay_us=300, preferred_batch_sizes=(8,), max_batch_size=16)
    )
    assert int(tuned["dynamic_batching"]["max_queue_delay_microseconds"]) == 300
    assert tuned["dynamic_batching"]["preferred_batch_size"] == [8]
    assert [w["batch_size"] for w in tuned["model_warmup"]] == [1, 16]  # the batch-64 warmup would fail the load
    assert config == digits_config_json()  # the input is not modified


def test_override_refuses_impossible_combinations():
    config = digits_config_json()
    with pytest.raises(VariantError, match=r"variant 'v'.*preferred_batch_sizes \[64\] exceed max_batch_size=32"):
        apply.override(config, Candidate.of("v", preferred_batch_sizes=(64,), max_batch_size=32))
    with pytest.raises(VariantError, match="variant 'v'.*dynamic batching needs max_batch_size > 0"):
        apply.override(config, Candidate.of("v", max_batch_size=0, max_queue_delay_us=10))
