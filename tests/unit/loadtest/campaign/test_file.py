"""Campaign files: the documented example parses, every shipped campaign parses, bad files name the bad value."""

from pathlib import Path

import pytest

from loadtest.campaign import file as campaign
from loadtest.core import spec
from loadtest.errors import CampaignError
from loadtest.generators.locust.runner import locust_command
from tests.campaign_samples import MINIMAL

CAMPAIGNS = sorted((Path(campaign.__file__).parents[1] / "campaigns").glob("*.toml"))


def example() -> str:
    doc = campaign.__doc__
    return doc[doc.index('name = "digits-tuning"') :].split('"""')[0].replace("\n    ", "\n")


def test_the_documented_example_parses_with_every_key():
    parsed = campaign.parse(example())
    assert parsed.name == "digits-tuning"
    assert parsed.slo == spec.Slo(5.0, 0.001, "best-variant", min_goodput=0.99)
    (scenario,) = parsed.scenarios
    assert scenario.shape == {"kind": "users", "users": 32} and scenario.peak_users == 32
    assert scenario.trials == 3  # its own key wins over the campaign's trials = 1
    (variant,) = parsed.variants
    assert variant.changes.preferred_batch_sizes == (16, 32) and variant.changes_config
    assert variant.changes.max_queue_size == 64 and variant.has_queue_policy_change
    assert parsed.tune_models == ("digits",) and parsed.analyzer is False and parsed.tune_budget_s == 120
    assert (parsed.tune_leaders, parsed.tune_trials, parsed.tune_measurement_ms) == (2, 3, 2000)


@pytest.mark.parametrize("path", CAMPAIGNS, ids=[p.stem for p in CAMPAIGNS])
def test_shipped_campaigns_parse(path):
    parsed = campaign.load(path)
    assert parsed.scenarios and parsed.variants


def test_no_variants_means_the_deployed_config():
    parsed = campaign.parse(MINIMAL)
    assert parsed.variants == (spec.AS_DEPLOYED,)
    assert not spec.AS_DEPLOYED.changes_config
    assert spec.AS_DEPLOYED.served_model("digits") == "digits"


def test_format_and_precision_pick_the_served_variant():
    onnx = spec.Candidate.of("onnx", models=("digits",), format="onnx")
    assert onnx.served_model("digits") == "digits_onnx"
    assert onnx.served_model("minilm") == "minilm"  # not one of its models
    assert spec.Candidate.of("h", precision="fp16").served_model("minilm") == "minilm_fp16"


@pytest.mark.parametrize(
    "change, message",
    [
        ('protocol = "grpc"', None),
        ('protocol = "smtp"', "protocol 'smtp'"),
        ('shape = { kind = "ramp", users = 4 }', "shape kind 'ramp'"),
        ('shape = { kind = "open" }', "missing ['rate']"),
        ('shape = { kind = "users", users = 4, rate = 3 }', "unknown ['rate']"),
        ('shape = { kind = "users", users = -1 }', "shape.users=-1"),
        ('shape = { kind = "spike", base = 1, peak = 9, at_s = 2 }', "missing ['hold_s']"),
        ("duration_s = 2\nwarmup_s = 3", "duration_s=2"),
        ("processes = 0", "processes=0"),
        ('colour = "red"', "unknown keys ['colour']"),
    ],
)
def test_bad_scenarios_name_the_value(change, message):
    text = MINIMAL.replace('protocol = "grpc"', change) if "protocol" in change else MINIMAL + change + "\n"
    if "shape" in change:
        text = MINIMAL.replace('shape = { kind = "users", users = 4 }', change)
    if message is None:
        campaign.parse(text)
        return
    with pytest.raises(CampaignError, match=message.replace("[", r"\[").replace("]", r"\]")):
        campaign.parse(text)


@pytest.mark.parametrize(
    "text, message",
    [
        ("name = 'x'\n[[scenarios]]\n", "needs an \\[slo\\] table"),
        (MINIMAL.replace("p99_ms = 5", "p99_ms = 0"), "p99_ms=0"),
        (MINIMAL.replace("p99_ms = 5", "p99_ms = 5\ngate = 'some'"), "gate='some'"),
        (MINIMAL + "[[variants]]\nname = 'v'\ninstances = 0\n", "instances=0"),
        (MINIMAL + "[[variants]]\nname = 'v'\nformat = 'tflite'\n", "format 'tflite' is not one of"),
        (MINIMAL + "[[variants]]\nname = 'v'\n[[variants]]\nname = 'v'\n", "variant names repeat"),
        (MINIMAL + "[tune]\nmodels = ['minilm']\n", "\\['minilm'\\] have no scenario"),
        (MINIMAL + "[tune]\ntrials = 1\n", "\\[tune\\] trials=1: the leaders' intervals need at least 2"),
        (MINIMAL + "[tune]\nleaders = 0\n", "\\[tune\\] leaders=0 must be an integer >= 1"),
        (MINIMAL + "[tune]\nmeasurement_ms = 0.5\n", "\\[tune\\] measurement_ms=0.5 must be a whole number"),
        (MINIMAL + "[extra]\n", "unknown top-level keys"),
        ("[slo\n", "not valid TOML"),
    ],
)
def test_bad_campaigns_name_the_value(text, message):
    with pytest.raises(CampaignError, match=message):
        campaign.parse(text)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(CampaignError, match="does not exist"):
        campaign.load(tmp_path / "nope.toml")


def test_locust_command_follows_the_shape():
    scenario = spec.Scenario("s", "digits", "grpc", {"kind": "open", "rate": 500}, duration_s=10, processes=2)
    cmd = locust_command(scenario, "127.0.0.1:8001")
    assert cmd[1:3] == ["-m", "loadtest.generators.locust.main"]  # gRPC readied for gevent before Locust imports
    assert "TritonUser" in cmd and cmd[cmd.index("-u") + 1] == "2"  # one arrival generator per process
    # The open loop's users stop themselves at the schedule's end; Locust's stop comes a second later.
    assert cmd[cmd.index("--processes") + 1] == "2" and cmd[cmd.index("-t") + 1] == "11s"
    closed = spec.Scenario("c", "digits", "grpc", {"kind": "users", "users": 4}, duration_s=10)
    closed_cmd = locust_command(closed, "127.0.0.1:8001")
    assert closed_cmd[closed_cmd.index("-t") + 1] == "10s"


def test_trials_default_to_one_and_the_top_level_key_reaches_every_scenario():
    assert campaign.parse(MINIMAL).scenarios[0].trials == 1
    both = MINIMAL + '[[scenarios]]\nname = "t"\nmodel = "digits"\nprotocol = "http"\ntrials = 5\n'
    both += 'shape = { kind = "users", users = 2 }\n'
    parsed = campaign.parse("trials = 3\n" + both)
    assert [s.trials for s in parsed.scenarios] == [3, 5]  # a scenario's own key wins


@pytest.mark.parametrize(
    "text, message",
    [
        ("trials = 0\n" + MINIMAL, "campaign: trials=0 must be an integer >= 1"),
        ("trials = 2.5\n" + MINIMAL, "campaign: trials=2.5 must be an integer >= 1"),
        ('trials = "3"\n' + MINIMAL, "campaign: trials='3' must be an integer >= 1"),
        ("trials = true\n" + MINIMAL, "campaign: trials=True must be an integer >= 1"),
        (MINIMAL + "trials = -1\n", "scenario 's': trials=-1 must be an integer >= 1"),
        (MINIMAL + "trials = 1.0\n", "scenario 's': trials=1.0 must be an integer >= 1"),
    ],
)
def test_a_bad_trial_count_is_one_clear_error(text, message):
    with pytest.raises(CampaignError) as caught:
        campaign.parse(text)
    assert str(caught.value) == message
