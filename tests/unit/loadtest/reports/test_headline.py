"""The report's first line: the campaign's verdict as the exit status has it, what decided it, the best variant per
scenario and the tuner's pick."""

from __future__ import annotations

import dataclasses

from loadtest.campaign.execution import gate_status
from loadtest.core.spec import Slo
from loadtest.reports.headline import campaign_headline, slo_of
from tests.trial_samples import FAILING, PASSING, STRADDLING, campaign_of, run_of
from tritonkit_errors import ExitStatus

BEST_VARIANT = Slo(p99_ms=10.0, gate="best-variant")


def best_variant_campaign(*runs):
    result = campaign_of(*runs)
    return dataclasses.replace(result, slo=dataclasses.asdict(BEST_VARIANT))


def test_a_passing_campaign_names_the_rule_and_the_fastest_passing_variant_of_each_scenario(capsys):
    result = best_variant_campaign(run_of(PASSING, "s", "a"), run_of(FAILING, "s", "b"), run_of(PASSING, "t", "a"))
    headline = campaign_headline(result)
    assert headline.verdict == "PASS"
    assert headline.text.startswith("each scenario has a variant that met the SLO (best-variant)")
    assert "best: s: a (" in headline.text and "t: a" not in headline.text  # t has one variant: nothing to pick
    assert gate_status(result, BEST_VARIANT) == ExitStatus.OK  # the page and the exit status agree
    capsys.readouterr()


def test_a_failing_campaign_leads_with_what_failed_and_counts_the_rest():
    result = campaign_of(run_of(FAILING, "s"), run_of(FAILING, "t"))
    headline = campaign_headline(result)
    assert headline.verdict == "FAIL"
    assert headline.text.startswith("s / v: ") and "(and 1 more below)" in headline.text


def test_an_inconclusive_campaign_says_so_and_what_would_settle_it():
    headline = campaign_headline(campaign_of(run_of(STRADDLING)))
    assert headline.verdict == "INCONCLUSIVE" and "would likely settle" in headline.text


def test_the_tuners_pick_is_in_the_line():
    result = dataclasses.replace(campaign_of(run_of(PASSING)), tuning={"digits": {"pick": "batch16"}, "x": "y"})
    assert str(campaign_headline(result)).endswith("tune digits: pick batch16")


def test_a_record_without_runs_or_an_slo_is_not_judged():
    assert campaign_headline(campaign_of()).verdict == "NOT JUDGED"
    broken = dataclasses.replace(campaign_of(run_of(PASSING)), slo={"p99_ms": -1.0})
    assert slo_of(broken) is None and campaign_headline(broken).text == "the record holds no SLO to judge against"
    assert slo_of(dataclasses.replace(broken, slo={})) == Slo(p99_ms=float("inf"))


def test_a_miss_where_the_load_generator_was_the_limit_is_not_judged_as_the_exit_status_says(capsys):
    limited = run_of(FAILING, "s")
    limited.generator_limit = "the generator sent 20% late"
    result = campaign_of(limited, run_of(PASSING, "t"))
    headline = campaign_headline(result)
    assert headline.verdict == "NOT JUDGED" and headline.text.endswith("was the limit in s / v")
    assert gate_status(result, Slo(p99_ms=10.0)) == ExitStatus.BROKEN
    capsys.readouterr()
