"""loadtest.generators.probe without a server: when a generator run is marked saturated, which generator a
model gets, the load's checks, the CPU time perf_analyzer's run reports, the schedule it is given, and which
function a ``Generator`` calls with which settings."""

import json
import math
import stat
import sys
from types import SimpleNamespace

import pytest

from loadtest.core.client_stats import ClientStats
from loadtest.core.measurement import Load, Measurement
from loadtest.core.metrics import STREAM_METRICS
from loadtest.core.streams import stream_summary
from loadtest.errors import LoadTestError
from loadtest.generators import probe
from loadtest.generators.perf_analyzer import perf
from loadtest.target import server_metrics
from loadtest.target.endpoints import Endpoints


def test_a_generator_at_its_cpu_limit_is_saturated():
    assert probe.saturation(0.3, Load(users=16)) == ""
    assert probe.saturation(0.95, Load(users=16)) == "its CPU at 95% of its cores"
    assert probe.saturation(math.nan, Load(users=16)) == ""  # not measured: no claim either way


def test_an_open_loop_that_did_not_send_its_rate_is_saturated():
    load = Load(rate=3000)
    assert probe.saturation(0.2, load, sent_rate=2990.0) == ""
    assert probe.saturation(0.2, load, sent_rate=1300.0) == "sent 1300.0 of 3000 req/s asked"
    assert "100.0% of requests sent late" in probe.saturation(0.2, load, sent_rate=2999.0, delayed_percent=100.0)
    both = probe.saturation(0.99, load, sent_rate=1000.0)
    assert "CPU at 99%" in both and "sent 1000.0" in both


def test_a_late_share_of_a_known_count_counts_only_beyond_chance():
    load = Load(rate=3)
    one_of_seven = 100.0 / 7
    assert probe.saturation(0.2, load, delayed_percent=one_of_seven, late_of=(1, 7)) == ""  # a 3 s run at 3 req/s
    many = probe.saturation(0.2, load, delayed_percent=one_of_seven, late_of=(100, 700))
    assert "14.3% of requests sent late" in many
    assert "28.6% of requests sent late" in probe.saturation(0.2, load, delayed_percent=200.0 / 7, late_of=(2, 7))
    assert "14.3%" in probe.saturation(0.2, load, delayed_percent=one_of_seven)  # perf_analyzer's share: no count


def test_a_saturated_or_failed_measurement_is_not_usable():
    good = Measurement(5000, 1.0, 3.0, 0.0, "perf_analyzer", 0.4)
    assert good.usable and good.not_usable_reason == ""
    hot = Measurement(5000, 1.0, 3.0, 0.0, "perf_analyzer", 0.97, saturated="its CPU at 97% of its cores")
    assert not hot.usable and hot.not_usable_reason == "generator saturated: its CPU at 97% of its cores"
    failed = Measurement.failed("perf_analyzer", "Failed to obtain stable measurement.\nmore")
    assert not failed.usable and failed.error == "Failed to obtain stable measurement."
    assert Measurement.from_dict(hot.to_dict()) == hot


def test_tensor_models_get_perf_analyzer_and_pipelines_and_streams_locust():
    assert probe.generator_for("pytorch_libtorch", False, ["FP32"]) == "perf_analyzer"
    assert probe.generator_for("onnxruntime_onnx", False, ["INT64", "INT64"]) == "perf_analyzer"
    assert probe.generator_for("ensemble", False, ["BYTES"]) == "locust"
    assert probe.generator_for("python", True, ["BYTES"]) == "locust"
    assert probe.generator_for("pytorch_libtorch", False, ["BYTES"]) == "locust"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "either users"),
        ({"users": 4, "rate": 10.0}, "either users"),
        ({"users": 0}, "users=0"),
        ({"users": True}, "users=True"),
        ({"rate": -1.0}, "rate=-1.0"),
    ],
)
def test_a_load_needs_exactly_one_of_users_or_rate(kwargs, message):
    with pytest.raises(LoadTestError, match=message.replace("(", r"\(")):
        Load(**kwargs)
    assert Load(users=16).shape() == {"kind": "users", "users": 16}
    assert Load(rate=800.0).shape() == {"kind": "open", "rate": 800.0}


SENT = """\
Request Rate: 3000 inference requests per seconds
  Pass [1] throughput: 1298.67 infer/sec. Avg latency: 2540 usec (std 1107 usec).
  Client:
    Request count: 3894
    Throughput: 1298.97 infer/sec
    Avg send request rate: 1300.02 infer/sec
[WARNING] Perf Analyzer was not able to keep up with the desired request rate. 100.00% of the requests were delayed.
"""


def test_perf_analyzer_runs_report_their_cpu_time_sent_rate_and_delays(tmp_path):
    csv_text = "Request Rate,Inferences/Second,p99 latency\n3000,1298.97,9638\n"
    binary = tmp_path / "perf_analyzer"
    # Burns CPU for a moment (so its rusage is > 0), prints perf_analyzer's summary and writes the -f CSV.
    binary.write_text(
        f"#!{sys.executable}\n"
        "import sys, time\n"
        "end = time.process_time() + 0.2\n"
        "while time.process_time() < end: pass\n"
        f"print({SENT!r})\n"
        "args = sys.argv\n"
        f"open(args[args.index('-f') + 1], 'w').write({csv_text!r})\n"
    )
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    result = perf.run("digits", "127.0.0.1:1", request_rate=3000, binary=binary)
    assert "--request-rate-range" in result.command and "3000" in result.command
    assert "--concurrency-range" not in result.command
    assert result.cpu_s >= 0.15 and result.wall_s >= result.cpu_s * 0.5
    assert result.sent_rate == pytest.approx(1300.02) and result.delayed_percent == pytest.approx(100.0)
    assert result.rows[0].throughput == pytest.approx(1298.97) and result.rows[0].p99_ms == pytest.approx(9.638)
    with pytest.raises(ValueError, match="request_rate"):
        perf.run("digits", "127.0.0.1:1", request_rate=0, binary=binary)


def _snapshot(requests: float) -> server_metrics.Snapshot:
    values = {key: 0.0 for key in {**server_metrics.COUNTS, **server_metrics.DURATIONS}}
    return server_metrics.Snapshot({**values, "requests": requests}, {}, {})


def test_perf_analyzer_on_a_schedule_gets_its_intervals_file_and_keeps_the_rate_as_the_offered_one(
    monkeypatch, tmp_path
):
    snapshots = iter([_snapshot(0), _snapshot(400)])
    monkeypatch.setattr(probe.server_metrics, "snapshot", lambda *_: next(snapshots))
    asked = {}

    def fake_run(model, url, protocol, **kwargs):
        asked.update(kwargs)
        row = perf.PerfRow(0, 39.5, p50_ms=1.5, p99_ms=4.0)
        return perf.PerfResult(model, protocol, 1, [row], ["perf_analyzer"], "", "", 0.1, 10.0)

    monkeypatch.setattr(probe.perf, "run", fake_run)
    intervals = tmp_path / "intervals.txt"
    endpoints = Endpoints("127.0.0.1:8000", "127.0.0.1:8001", "http://127.0.0.1:8002/metrics")
    m = probe.with_perf_analyzer(endpoints, "digits", Load(rate=40.0), request_intervals=intervals)
    assert asked["request_intervals"] == intervals and asked["request_rate"] is None
    assert "--async" in asked["extra_args"]
    assert m.offered_rate == 40.0 and m.throughput == 39.5 and m.p99_ms == 4.0 and m.usable


def test_a_schedule_for_a_closed_loop_is_refused_before_any_run(tmp_path):
    endpoints = Endpoints("127.0.0.1:1", "127.0.0.1:2", "http://127.0.0.1:3/metrics")
    with pytest.raises(LoadTestError, match="give the load a rate"):
        probe.with_perf_analyzer(endpoints, "digits", Load(users=4), request_intervals=tmp_path / "intervals.txt")


# --- Generator: one generator set up once, dispatching to with_perf_analyzer or with_locust ---------------

ENDPOINTS = Endpoints("127.0.0.1:1", "127.0.0.1:2", "http://127.0.0.1:3/metrics")


# --- streams: the figures of a decoupled model's run, and records written before them ---------------------


def _locust_run(monkeypatch, streams: list) -> None:
    """``measure_run`` replaced: a Locust run of 10 requests over 2 s whose streamed rows are ``streams``."""
    client = ClientStats(
        requests=10,
        failures=0,
        duration_s=2.0,
        latency_ms={"p50": 40.0, "p99": 90.0},
        streams=streams,
        **(stream_summary(streams, 2.0) if streams else {}),
    )
    server = SimpleNamespace(breakdown_ms={}, avg_batch=1.0, requests=10, failures=0, trace={})
    monkeypatch.setattr(probe, "measure_run", lambda *args, **kwargs: (client, server))


def test_a_streamed_locust_run_has_its_p99_ttft_itl_and_tokens_per_second(monkeypatch, tmp_path):
    # [latency, TTFT, ITL (None: one token), tokens] per request: TTFT 10..19 ms, ITL 2 ms (none for one token)
    rows = [[40.0 + i, 10.0 + i, 2.0 if i else None, 4 if i else 1] for i in range(10)]
    _locust_run(monkeypatch, rows)
    m = probe.with_locust(ENDPOINTS, "gen", "gen", Load(rate=5.0), tmp_path, "run", ttft_ms=15.0, log=print)
    assert m.streamed and m.ttft_p99_ms == stream_summary(rows, 2.0)["ttft_ms"]["p99"] > 15.0
    assert m.itl_p99_ms == 2.0
    assert m.output_token_throughput == (9 * 4 + 1) / 2.0
    assert m.goodput_share == 0.6  # TTFT 10..15 ms within the 15 ms budget: 6 of 10
    raw = json.loads(json.dumps(m.to_dict()))
    assert Measurement.from_dict(raw).ttft_p99_ms == m.ttft_p99_ms


def test_a_campaign_trial_of_a_locust_runs_client_record_has_the_runs_figures(monkeypatch, tmp_path):
    # One record of a run: a campaign trial (results.Trial) becomes the Measurement a Locust run makes.
    from loadtest.core.results import Trial

    rows = [[40.0 + i, 10.0 + i, 2.0 if i else None, 4 if i else 1] for i in range(10)]
    _locust_run(monkeypatch, rows)
    m = probe.with_locust(ENDPOINTS, "gen", "gen", Load(rate=5.0), tmp_path, "run", ttft_ms=15.0, log=print)
    client = probe.measure_run()[0]
    assert m.measured_s == client.duration_s == 2.0
    recounted = Trial(client).measurement(math.inf, 15.0, None)
    assert recounted.figures() == m.figures() and set(STREAM_METRICS) <= set(m.figures())
    recorded = Trial(client, None, m.goodput_share, m.goodput_rps, math.inf, 15.0).measurement()
    assert recorded.figures() == m.figures()


def test_a_tensor_run_has_no_stream_figures_and_its_record_is_as_before(monkeypatch, tmp_path):
    _locust_run(monkeypatch, [])
    m = probe.with_locust(ENDPOINTS, "digits", "digits", Load(rate=5.0), tmp_path, "run", log=print)
    assert not m.streamed and math.isnan(m.itl_p99_ms) and math.isnan(m.output_token_throughput)
    assert not set(STREAM_METRICS) & set(m.to_dict())


def test_a_record_written_before_the_stream_figures_loads_without_them():
    old = {"throughput": 50.0, "p50_ms": 2.0, "p99_ms": 9.0, "error_rate": 0.0, "generator": "locust"}
    old |= {"generator_cpu": 0.2, "offered_rate": 50.0, "sent_rate": 49.0, "saturated": "", "error": ""}
    old |= {"server": {"queue_ms": 0.1}, "goodput_share": 1.0, "goodput_rps": 49.0}
    m = Measurement.from_dict(old)
    assert m.p99_ms == 9.0 and not m.streamed
    assert all(math.isnan(getattr(m, key)) for key in STREAM_METRICS)


def test_a_send_rate_short_by_a_poisson_counts_chance_is_forgiven_when_its_seconds_are_known():
    load = Load(rate=3)
    # 6 requests where 6.75 were due on average (3 req/s over 2.25 s): a Poisson count falls that short 45% of
    # the time, so it is no evidence that the generator fell behind.
    assert probe.saturation(0.2, load, sent_rate=6 / 2.25, measured_s=2.25) == ""
    assert probe.saturation(0.2, load, sent_rate=6 / 2.25) == "sent 2.7 of 3 req/s asked"  # seconds unknown
    many = Load(rate=3000)
    assert probe.saturation(0.2, many, sent_rate=2700.0, measured_s=10) == "sent 2700.0 of 3000 req/s asked"


def test_perf_analyzer_out_of_memory_is_the_generators_limit_not_a_failed_run(monkeypatch):
    from loadtest.capacity.search import GENERATOR, run_outcome
    from loadtest.core.spec import Slo

    snapshots = iter([_snapshot(0), _snapshot(0)])
    monkeypatch.setattr(probe.server_metrics, "snapshot", lambda *_: next(snapshots))

    def out_of_memory(*_args, **_kwargs):
        raise perf.PerfAnalyzerOutOfMemory("perf_analyzer ran out of memory (peak 11.2 GiB of the 11.5 GiB it may use)")

    monkeypatch.setattr(probe.perf, "run", out_of_memory)
    endpoints = Endpoints("127.0.0.1:8000", "127.0.0.1:8001", "http://127.0.0.1:8002/metrics")
    m = probe.with_perf_analyzer(endpoints, "digits", Load(rate=16000.0))
    assert not m.error and m.saturated.startswith("perf_analyzer ran out of memory") and not m.usable
    assert run_outcome(m, 16000.0, Slo(25.0)) == GENERATOR
