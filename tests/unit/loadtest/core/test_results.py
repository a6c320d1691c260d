"""results.json keeps every trial and its intervals, and a run of several trials pools them."""

import math

from loadtest.core.results import CampaignResult, pooled
from tests.trial_samples import STRADDLING, campaign_of, run_of, trial


def test_pooled_trials_add_their_counts_and_merge_their_histograms():
    trials = [trial(4.0, requests=1000, failures=10), trial(8.0, requests=500)]
    client, server = pooled(trials)
    assert (client.requests, client.failures, client.duration_s) == (1500, 10, 20.0)
    assert client.latency_ms["max"] == 8.0 and client.latency_ms["p50"] == 2.0
    assert server.requests == 1500 and server.batch_histogram == {1: 20, 4: 10}
    assert math.isclose(server.breakdown_ms["request"], (4 / 3 * 1010 + 8 / 3 * 500) / 1510)
    assert pooled(trials[:1]) == (trials[0].client, trials[0].server)  # one trial is the run itself


def test_results_json_keeps_every_trial_and_its_intervals(tmp_path):
    run = run_of(STRADDLING)
    campaign_of(run).save(tmp_path / "results.json")
    (back,) = CampaignResult.load(tmp_path / "results.json").runs
    assert len(back.trials) == 4 and back.trials[2].client.latency_ms["p99"] == 9.4
    assert back.samples()["p99_ms"] == list(STRADDLING)
    p99 = back.interval("p99_ms")
    # on the log scale, as the verdict judges it: the geometric mean
    assert p99.trials == 4 and p99.low < 10.0 < p99.high
    assert math.isclose(p99.estimate, math.prod(STRADDLING) ** (1 / 4))
    assert back.verdict == "inconclusive" and back.outcome == "INCONCLUSIVE"


def test_a_one_trial_run_keeps_no_trial_list():
    run = run_of([5.0])
    assert run.trials == [] and run.intervals == {} and len(run.all_trials()) == 1
    assert run.interval("p99_ms") is None
