"""Open-loop arrival patterns: gamma gaps have the asked mean and burstiness, a ramp goes from its start to its end
rate, a replay plays the recorded offsets and payloads and splits them among generators, perf_analyzer's
intervals file reproduces a schedule, and bad specs, shapes and schedule files are named in one error."""

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

import tritonkit_cli
from loadtest.campaign import file as campaign
from loadtest.campaign.command import model_campaign, run
from loadtest.core import spec as run_spec
from loadtest.errors import CampaignError
from loadtest.generators import arrivals, command
from loadtest.generators.arrivals import ArrivalError, Gamma, Poisson, Ramp, Replay, from_shape, parse_arrival
from tests.campaign_samples import MINIMAL

RECORDED = [(0.0, 2), (0.013, 0), (0.5, 1), (0.5, 3), (1.25, 0), (2.0, 4), (2.5, 1)]


def gaps(arrival, rate: float, count: int, seed: int = 7) -> np.ndarray:
    offsets = [due.t for due in itertools.islice(arrival.schedule(rate, seed=seed), count)]
    return np.diff(offsets, prepend=0.0)


@pytest.fixture
def schedule(tmp_path) -> Path:
    path = tmp_path / "trace.jsonl"
    lines = [json.dumps({"t": t, "payload": p, "latency_ms": 3.2}) for t, p in RECORDED]
    lines.insert(3, "")  # blank lines are skipped
    path.write_text("\n".join(lines[-1:] + lines[:-1]) + "\n")  # recorded out of order: played in time order
    return path


# --- gamma and Poisson ------------------------------------------------------------------------------


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 1.0, 4.0])
def test_gamma_gaps_have_mean_one_over_rate_and_cv_one_over_root_burstiness(burstiness):
    rate = 800.0
    drawn = gaps(Gamma(burstiness), rate, 50_000)
    assert drawn.mean() == pytest.approx(1 / rate, rel=0.03)
    assert drawn.std() / drawn.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.05)


def test_poisson_gaps_have_mean_one_over_rate_and_cv_one():
    drawn = gaps(Poisson(), 50.0, 50_000)
    assert drawn.mean() == pytest.approx(1 / 50, rel=0.03)
    assert drawn.std() / drawn.mean() == pytest.approx(1.0, rel=0.05)


def test_the_same_seed_draws_the_same_schedule_and_another_seed_another():
    assert list(gaps(Gamma(0.5), 100, 50, seed=3)) == list(gaps(Gamma(0.5), 100, 50, seed=3))
    assert list(gaps(Gamma(0.5), 100, 50, seed=3)) != list(gaps(Gamma(0.5), 100, 50, seed=4))


def test_generators_share_one_schedule_so_their_union_keeps_its_burstiness():
    whole = list(itertools.islice(Gamma(0.5).schedule(300, seed=11), 3000))
    shares = [list(itertools.islice(Gamma(0.5).share(300, math.inf, 11, i, 3), 1000)) for i in range(3)]
    assert sorted(itertools.chain(*shares)) == sorted(whole)
    assert shares[1][:2] == [whole[1], whole[4]]


# --- ramp -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("start, end", [(100.0, 1000.0), (1000.0, 100.0)])
def test_a_ramp_runs_at_its_start_rate_first_and_its_end_rate_last(start, end):
    ramp, duration, window = Ramp(end), 200.0, 10.0
    assert ramp.rate_at(start, 0.0, duration) == start
    assert ramp.rate_at(start, duration, duration) == ramp.rate_at(start, 2 * duration, duration) == end
    offsets = np.array([d.t for d in itertools.takewhile(lambda d: d.t < duration, ramp.schedule(start, duration))])
    first = np.count_nonzero(offsets < window) / window
    last = np.count_nonzero(offsets >= duration - window) / window
    assert first == pytest.approx(ramp.rate_at(start, window / 2, duration), rel=0.1)
    assert last == pytest.approx(ramp.rate_at(start, duration - window / 2, duration), rel=0.1)


def test_a_ramp_needs_the_runs_duration():
    with pytest.raises(ArrivalError, match="duration_s"):
        next(Ramp(100).schedule(10))


# --- replay -----------------------------------------------------------------------------------------


def test_a_replay_plays_the_recorded_offsets_and_payloads_then_loops(schedule):
    replay = parse_arrival(f"replay:{schedule}")
    played = list(itertools.islice(replay.schedule(None), 2 * len(RECORDED)))
    assert [(d.t, d.payload) for d in played[: len(RECORDED)]] == RECORDED
    assert [d.t for d in played[len(RECORDED) :]] == pytest.approx([2.5 + t for t, _ in RECORDED])
    assert replay.describe() == "replay of trace.jsonl (7 requests over 2.5 s, 2.8/s)"


def test_a_csv_schedule_reads_as_the_jsonl_one(schedule, tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("t,payload,status\n" + "".join(f"{t},{p},200\n" for t, p in RECORDED) + "3.0,,200\n")
    offsets, payloads = arrivals.read_schedule(path)
    assert (offsets[:-1], payloads[:-1]) == arrivals.read_schedule(schedule)
    assert (offsets[-1], payloads[-1]) == (3.0, None)


def test_a_replay_scales_by_its_speed_or_to_a_rate(schedule):
    fast = from_shape({"kind": "open", "arrival": "replay", "schedule": str(schedule), "speed": 2})
    assert [d.t for d in itertools.islice(fast.schedule(None), 7)] == pytest.approx([t / 2 for t, _ in RECORDED])
    replay = parse_arrival(f"replay:{schedule}")
    to_rate = [d.t for d in itertools.islice(replay.schedule(28.0), 7)]
    assert to_rate == pytest.approx([t / 10 for t, _ in RECORDED])  # recorded 2.8/s, asked 28/s
    with pytest.raises(ArrivalError, match="a rate or a speed, not both"):
        next(fast.schedule(28.0))


def test_a_replay_split_among_generators_is_the_recorded_schedule(schedule):
    replay = parse_arrival(f"replay:{schedule}")
    # one pass of 7 lines among 3 generators: lines 0, 3, 6 / 1, 4 / 2, 5
    shares = [list(itertools.islice(replay.share(None, math.inf, 0, i, 3), n)) for i, n in enumerate((3, 2, 2))]
    assert sorted((d.t, d.payload) for d in itertools.chain(*shares)) == sorted(RECORDED)
    assert [d.payload for d in shares[0]] == [2, 3, 1]  # lines 0, 3, 6 of the recorded schedule


# --- perf_analyzer's --request-intervals ---------------------------------------------------------


def test_request_intervals_are_microseconds_from_one_request_to_the_next(tmp_path):
    path = arrivals.write_request_intervals(tmp_path / "i.txt", [0.1, 0.3, 0.8])
    assert path.read_text() == "100000\n200000\n500000\n"  # perf_analyzer's own example: 0.1 s, 0.3 s, 0.8 s
    # rounded on the offsets, so rounding never accumulates
    assert arrivals.request_intervals_us([0.0000004, 0.0000016, 0.0000026]) == [0, 2, 1]


def test_request_intervals_looped_as_perf_analyzer_loops_them_are_the_replay(schedule, tmp_path):
    replay = parse_arrival(f"replay:{schedule}")
    intervals = arrivals.request_intervals_us(replay.offsets)
    looped = np.cumsum(intervals * 3) / 1e6
    played = [d.t for d in itertools.islice(replay.schedule(None), 3 * len(RECORDED))]
    assert looped == pytest.approx(played, abs=1e-6)


def test_the_intervals_command_writes_the_file_and_refuses_a_bad_schedule(schedule, tmp_path, capsys):
    out = tmp_path / "intervals.txt"
    assert command.main([str(schedule), str(out), "--speed", "2"]) == 0
    assert out.read_text().split() == [str(g) for g in arrivals.request_intervals_us(t / 2 for t, _ in RECORDED)]
    assert command.main([str(tmp_path / "none.jsonl"), str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("a.jsonl", '{"t": 0.1}\n{"t": 0.2\n', r"a.jsonl:2: not JSON"),
        ("a.jsonl", '{"t": 0.1}\n[0.2]\n', r"a.jsonl:2: expected an object"),
        ("a.jsonl", '{"t": -1}\n', r"a.jsonl:1: t=-1 must be seconds"),
        ("a.jsonl", '{"payload": 1}\n', r"a.jsonl:1: t=None"),
        ("a.jsonl", '{"t": 1, "payload": -2}\n', r"a.jsonl:1: payload=-2 must be an index"),
        ("a.jsonl", '{"t": 1, "payload": 1.5}\n', r"payload=1.5"),
        ("a.jsonl", "\n", "no requests in it"),
        ("a.jsonl", '{"t": 0}\n{"t": 0}\n', "span no time"),
        ("a.csv", "time,payload\n1,2\n", r"a.csv:1: the header must name a 't' column"),
        ("a.csv", "t\n0.5\nsoon\n", r"a.csv:3: t='soon'"),
        ("a.txt", "0.5\n", "name it .jsonl"),
    ],
)
def test_a_bad_schedule_file_is_named_with_its_line(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(ArrivalError, match=message):
        parse_arrival(f"replay:{tmp_path / name}")


# --- the spec and the shape -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, arrival, description",
    [
        ("poisson", Poisson(), "Poisson arrivals"),
        ("gamma:0.5", Gamma(0.5), "gamma arrivals, burstiness 0.5"),
        (" Gamma:2 ", Gamma(2.0), "gamma arrivals, burstiness 2"),
        ("ramp:1600", Ramp(1600.0), "Poisson arrivals, rate ramping linearly to 1600/s over the run"),
    ],
)
def test_a_spec_parses_describes_itself_and_round_trips_through_an_open_shape(spec, arrival, description):
    parsed = parse_arrival(spec)
    assert parsed == arrival and parsed.describe() == description
    shape = {"kind": "open", "rate": 800, **parsed.shape_keys()}
    scenario = run_spec.Scenario("s", "digits", "grpc", shape)  # the campaign accepts what the spec writes
    assert from_shape(scenario.shape) == arrival


def test_a_replay_spec_round_trips_through_an_open_shape_without_a_rate(schedule):
    shape = {"kind": "open", **parse_arrival(f"replay:{schedule}").shape_keys()}
    assert shape["schedule"] == str(schedule.resolve())
    assert from_shape(run_spec.Scenario("s", "digits", "grpc", shape).shape) == parse_arrival(f"replay:{schedule}")


@pytest.mark.parametrize(
    "spec, message",
    [
        ("", "unknown pattern ''"),
        ("weibull:2", "unknown pattern 'weibull'; give poisson, gamma:B"),
        ("poisson:3", "poisson takes no value"),
        ("gamma", r"gamma needs a value, e.g. gamma:0.5"),
        ("gamma:", r"gamma needs a value"),
        ("gamma:bursty", "'bursty' is not a number"),
        ("gamma:0", r"burstiness=0.0 must be a number > 0"),
        ("gamma:-1", r"burstiness=-1.0 must be a number > 0"),
        ("gamma:nan", r"burstiness=nan must be a number > 0"),
        ("ramp:inf", r"rate_end=inf must be a number > 0"),
        ("replay", "replay needs a value"),
        ("replay:missing.jsonl", "schedule file 'missing.jsonl' does not exist"),
    ],
)
def test_a_bad_spec_is_one_error_naming_the_option_and_the_spec(spec, message):
    with pytest.raises(ArrivalError, match=message) as caught:
        parse_arrival(spec)
    assert str(caught.value).startswith(f"--arrival {spec!r}: ")
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, CampaignError)


def test_the_campaign_and_the_patterns_name_the_same_arrivals_and_keys(schedule):
    assert set(arrivals.PATTERNS) == set(run_spec.ARRIVAL_KEYS)
    examples = [Poisson(), Gamma(0.5), Ramp(10), Replay.load(schedule, speed=2.0)]
    for example in examples:
        needed, optional = run_spec.ARRIVAL_KEYS[example.name]
        assert needed <= set(example.shape_keys()) - {"arrival"} <= needed | optional


@pytest.mark.parametrize(
    "shape, message",
    [
        ('{ kind = "open", rate = 8, arrival = "weibull" }', "shape.arrival='weibull' is not one of"),
        ('{ kind = "open", rate = 8, arrival = "gamma" }', "shape.arrival='gamma' needs shape.burstiness"),
        ('{ kind = "open", rate = 8, arrival = "gamma", burstiness = 0 }', "shape.burstiness=0 must be"),
        ('{ kind = "open", rate = 8, arrival = "gamma", burstiness = -0.5 }', r"shape.burstiness=-0.5 must be"),
        ('{ kind = "open", rate = 8, burstiness = 0.5 }', "shape.burstiness is for arrival = 'gamma', not 'poisson'"),
        ('{ kind = "open", rate = 8, arrival = "ramp" }', "needs shape.rate_end"),
        ('{ kind = "open", arrival = "gamma", burstiness = 2 }', r"missing \['rate'\]"),
        ('{ kind = "open", arrival = "replay", schedule = "none.jsonl" }', "shape.schedule='none.jsonl': no such"),
        ('{ kind = "open", arrival = "replay", schedule = 3 }', "shape.schedule=3: no such file"),
        ('{ kind = "users", users = 4, arrival = "gamma" }', r"unknown \['arrival'\]"),
    ],
)
def test_a_bad_arrival_in_a_campaign_is_one_error_naming_the_key(shape, message):
    text = MINIMAL.replace('shape = { kind = "users", users = 4 }', f"shape = {shape}")
    with pytest.raises(CampaignError, match=message):
        campaign.parse(text)


def test_a_campaigns_schedule_is_found_beside_it_and_a_replay_takes_a_rate_or_a_speed(schedule):
    path = schedule.with_name("replay.toml")
    shape = 'shape = { kind = "open", arrival = "replay", schedule = "trace.jsonl"'
    path.write_text(MINIMAL.replace('shape = { kind = "users", users = 4 }', shape + " }"))
    (scenario,) = campaign.load(path).scenarios
    assert scenario.shape["schedule"] == str(schedule.resolve())
    path.write_text(MINIMAL.replace('shape = { kind = "users", users = 4 }', shape + ", rate = 5, speed = 2 }"))
    with pytest.raises(CampaignError, match="shape.rate and shape.speed both scale a replay"):
        campaign.load(path)


def test_a_tuned_model_whose_scenario_replays_without_a_rate_is_refused_before_any_load(schedule):
    path = schedule.with_name("tuned-replay.toml")
    shape = 'shape = { kind = "open", arrival = "replay", schedule = "trace.jsonl" }'
    path.write_text(MINIMAL.replace('shape = { kind = "users", users = 4 }', shape) + '[tune]\nmodels = ["digits"]\n')
    with pytest.raises(CampaignError, match="the search needs one"):
        campaign.load(path)


# --- tritonkit loadtest --model ... --arrival SPEC --------------------------------------------------


def loadtest_args(*argv: str):
    return tritonkit_cli.build_parser().parse_args(["loadtest", *argv])


def test_the_arrival_option_puts_the_pattern_into_the_open_shape(schedule):
    (gamma,) = model_campaign(loadtest_args("--model", "digits", "--rate", "50", "--arrival", "gamma:0.5")).scenarios
    assert gamma.shape == {"kind": "open", "rate": 50.0, "arrival": "gamma", "burstiness": 0.5}
    (replay,) = model_campaign(loadtest_args("--model", "digits", "--arrival", f"replay:{schedule}")).scenarios
    assert replay.shape == {"kind": "open", "arrival": "replay", "schedule": str(schedule.resolve())}
    (plain,) = model_campaign(loadtest_args("--model", "digits", "--rate", "50")).scenarios
    assert plain.shape == {"kind": "open", "rate": 50.0}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "digits", "--arrival", "gamma:0.5"], "error: --arrival gamma:0.5 needs --rate R (requests/s)"),
        (
            ["--model", "digits", "--users", "4", "--arrival", "gamma:0.5"],
            "error: --arrival gamma:0.5 is for the open loop (--rate), not --users",
        ),
        (
            ["--model", "digits", "--rate", "9", "--arrival", "gamma:0"],
            "error: --arrival 'gamma:0': burstiness=0.0 must be a number > 0",
        ),
        (["c.toml", "--arrival", "poisson"], "error: --arrival is for --model; a campaign file sets it per scenario"),
    ],
)
def test_a_bad_arrival_option_is_one_line_and_exit_2(argv, message, capsys):
    assert run(loadtest_args(*argv)) == 2
    assert capsys.readouterr().err.splitlines() == [message]
