"""loadtest/generators/perf_analyzer/perf.py without a server: perf_analyzer's CSV and input data, the command it is run
with."""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path

import numpy as np
import pytest

from loadtest.generators.perf_analyzer import perf

PERF_DATA = Path(__file__).resolve().parents[4] / "data" / "perf"


# -- perf_analyzer --------------------------------------------------------------------------------
def test_parse_a_recorded_perf_analyzer_csv():
    # Recorded from `perf_analyzer -m digits -i grpc -b 1 --concurrency-range 1:4:3 --input-data ...`
    # against the local tritonserver 2.51 (digits test rows as input data).
    rows = perf.parse_csv((PERF_DATA / "digits_grpc_b1_c1-4.csv").read_text())
    assert [r.concurrency for r in rows] == [1, 4]
    first, second = rows
    assert first.throughput == pytest.approx(474.194)
    assert (first.p50_ms, first.p90_ms, first.p95_ms, first.p99_ms) == pytest.approx((1.952, 2.358, 2.711, 5.545))
    assert first.server_queue_ms == pytest.approx(1.145)
    assert first.server_compute_infer_ms == pytest.approx(0.519)
    assert first.client_send_ms == pytest.approx(0.004) and first.client_recv_ms == pytest.approx(0.001)
    assert first.network_server_send_recv_ms == pytest.approx(0.305)
    assert first.avg_ms is None and first.extra == {}
    assert second.throughput == pytest.approx(1420.96) and second.p99_ms == pytest.approx(7.277)


def test_parse_a_recorded_verbose_csv_keeps_the_extra_columns():
    # Recorded with `-i http -b 4 --concurrency-range 2 --verbose-csv`.
    (row,) = perf.parse_csv((PERF_DATA / "digits_http_b4_c2_verbose.csv").read_text())
    assert row.concurrency == 2 and row.throughput == pytest.approx(4074.81)
    assert row.avg_ms == pytest.approx(1.954)
    assert row.extra == {"request/response": 61.0, "response wait": 1884.0}


def test_parse_ignores_a_trailing_metrics_block_and_refuses_other_files():
    text = (PERF_DATA / "digits_grpc_b1_c1-4.csv").read_text() + "\n\nConcurrency,Avg GPU Utilization\n1,gpu0:0;\n"
    assert len(perf.parse_csv(text)) == 2
    with pytest.raises(ValueError, match="not a perf_analyzer concurrency or request-rate CSV"):
        perf.parse_csv("Batch,Inferences/Second\n10,10\n")
    (rate,) = perf.parse_csv("Request Rate,Inferences/Second,p99 latency\n800,795.5,2500\n")
    assert rate.concurrency == 0 and rate.extra["Request Rate"] == 800 and rate.p99_ms == 2.5
    with pytest.raises(ValueError, match="no rows"):
        perf.parse_csv("Concurrency,Inferences/Second\n")


def test_write_input_data_is_perf_analyzers_format(tmp_path):
    # batch-1 payloads, batch dim first: perf_analyzer takes one item per entry, the batch dim dropped
    samples = [
        {"input_ids": np.array([[101, 2023, 102, 0]], dtype=np.int64), "attention_mask": np.array([[1, 1, 1, 0]])},
        {"input_ids": np.array([[101, 7592, 999, 102]]), "attention_mask": np.ones((1, 4), dtype=np.int64)},
    ]
    path = perf.write_input_data(tmp_path / "in.json", samples)
    data = json.loads(path.read_text())
    assert list(data) == ["data"] and len(data["data"]) == 2
    assert data["data"][0]["input_ids"] == {"content": [101, 2023, 102, 0], "shape": [4]}
    assert data["data"][1]["attention_mask"] == {"content": [1, 1, 1, 1], "shape": [4]}
    assert all(isinstance(v, int) for v in data["data"][0]["input_ids"]["content"])

    pixels = np.arange(64, dtype=np.float32).reshape(1, 8, 8) / 4
    data = json.loads(perf.write_input_data(tmp_path / "px.json", [{"PIXELS": pixels}]).read_text())
    assert data["data"][0]["PIXELS"]["shape"] == [8, 8]
    assert data["data"][0]["PIXELS"]["content"][:3] == [0.0, 0.25, 0.5]
    # an unbatched model's samples keep every dim; BYTES go as strings
    unbatched = {"name": "g", "max_batch_size": 0, "input": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]}]}
    data = json.loads(
        perf.write_input_data(tmp_path / "t.json", [{"TEXT": np.array([b"hi"], dtype=object)}], unbatched).read_text()
    )
    assert data["data"][0]["TEXT"] == {"content": ["hi"], "shape": [1]}
    with pytest.raises(ValueError):
        perf.write_input_data(tmp_path / "x.json", [])


def _fake_binary(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "perf_analyzer"
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_run_builds_the_command_and_parses_what_perf_analyzer_writes(tmp_path):
    csv_text = (PERF_DATA / "digits_grpc_b1_c1-4.csv").read_text()
    (tmp_path / "recorded.csv").write_text(csv_text)
    # Copies the recorded CSV to the -f argument and records its arguments.
    binary = _fake_binary(
        tmp_path,
        f'echo "$@" > {tmp_path}/args\n'
        'while [ $# -gt 0 ]; do if [ "$1" = -f ]; then '
        f'cp {tmp_path}/recorded.csv "$2"; fi; shift; done\n',
    )
    result = perf.run(
        "digits",
        "127.0.0.1:8001",
        concurrency=(1, 4, 3),
        batch_size=2,
        input_data=tmp_path / "in.json",
        shapes={"input_ids": [32]},
        measurement_ms=1500,
        binary=binary,
    )
    args = (tmp_path / "args").read_text().split()
    assert args[:8] == ["-m", "digits", "-u", "127.0.0.1:8001", "-i", "grpc", "-b", "2"]
    assert "--concurrency-range" in args and args[args.index("--concurrency-range") + 1] == "1:4:3"
    assert args[args.index("--measurement-interval") + 1] == "1500"
    assert args[args.index("--input-data") + 1] == str(tmp_path / "in.json")
    assert args[args.index("--shape") + 1] == "input_ids:32"
    assert [r.concurrency for r in result.rows] == [1, 4] and result.best.concurrency == 4
    assert result.csv_text == csv_text


def test_a_failed_run_raises_with_the_output_tail(tmp_path):
    binary = _fake_binary(
        tmp_path, 'echo "Request concurrency: 2"\necho "Failed to obtain stable measurement." >&2\nexit 2\n'
    )
    with pytest.raises(perf.PerfAnalyzerError) as info:
        perf.run("minilm", "127.0.0.1:1", concurrency=2, binary=binary)
    assert "exited with code 2" in str(info.value) and "Failed to obtain stable measurement." in str(info.value)
    with pytest.raises(perf.PerfAnalyzerError, match="make setup"):
        perf.run("digits", "127.0.0.1:1", binary=tmp_path / "missing")


def test_a_schedule_is_passed_as_request_intervals_instead_of_either_range(tmp_path):
    # Records its arguments and writes a request-rate CSV (perf_analyzer's header on a schedule).
    binary = _fake_binary(
        tmp_path,
        f'echo "$@" > {tmp_path}/args\n'
        'while [ $# -gt 0 ]; do if [ "$1" = -f ]; then '
        'printf "Request Rate,Inferences/Second,p99 latency\\n40,39.5,4000\\n" > "$2"; fi; shift; done\n',
    )
    intervals = tmp_path / "intervals.txt"
    intervals.write_text("25000\n25000\n")
    result = perf.run("digits", "127.0.0.1:8001", request_intervals=intervals, binary=binary)
    args = (tmp_path / "args").read_text().split()
    assert args[args.index("--request-intervals") + 1] == str(intervals)
    assert "--request-rate-range" not in args and "--concurrency-range" not in args
    assert result.rows[0].throughput == pytest.approx(39.5) and result.request_rate is None
    with pytest.raises(ValueError, match="not both"):
        perf.run("digits", "127.0.0.1:8001", request_rate=40, request_intervals=intervals, binary=binary)


def test_a_run_that_writes_no_csv_says_so_even_with_exit_code_0(tmp_path):
    # On a schedule, perf_analyzer ends an unstable measurement with code 0 and no CSV.
    binary = _fake_binary(tmp_path, 'echo "Failed to obtain stable measurement." >&2\nexit 0\n')
    with pytest.raises(perf.PerfAnalyzerError) as info:
        perf.run("digits", "127.0.0.1:1", request_intervals=tmp_path, binary=binary)
    assert "exited with code 0 without writing its CSV" in str(info.value)
    assert "Failed to obtain stable measurement." in str(info.value)


def test_perf_analyzers_time_limit_grows_with_its_windows_and_levels():
    assert perf.time_limit_s(2000, 5) == 120.0  # short windows: two minutes
    assert perf.time_limit_s(200_000, 3) == 60.0 + 1200.0  # compare --duration 600: 3 windows of 200 s
    assert perf.time_limit_s(200_000, 3) > 3 * 200
    assert perf.time_limit_s(30_000, 10, levels=8) == 60.0 + 2 * 8 * 10 * 30  # a concurrency range, level by level
    assert [perf._levels(c) for c in (4, "4", "1:8", "1:8:1", "1:8:2", "2:32:10")] == [1, 1, 8, 8, 4, 4]


def test_a_rows_mean_latency_is_the_sum_of_its_parts_where_the_csv_has_no_average():
    header = "Request Rate,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
    header += "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p99 latency"
    (row,) = perf.parse_csv(f"{header}\n20,19.9,10,300,50,20,100,10,5,480,900\n")
    assert row.mean_ms == pytest.approx(0.495)
    assert perf.parse_csv(f"{header},Avg latency\n20,19.9,10,300,50,20,100,10,5,480,900,600\n")[0].mean_ms == 0.6
    assert math.isnan(perf.parse_csv("Request Rate,Inferences/Second,p99 latency\n800,795.5,2500\n")[0].mean_ms)


def test_perf_analyzers_memory_is_capped_and_running_out_of_it_is_its_own_error(tmp_path):
    # perf_analyzer aborts on std::bad_alloc when its open loop queues more than its cap allows
    binary = _fake_binary(
        tmp_path,
        f"sleep 0.5\nulimit -v > {tmp_path}/cap\n"
        "echo \"terminate called after throwing an instance of 'std::bad_alloc'\"\nkill -ABRT $$\n",
    )
    with pytest.raises(perf.PerfAnalyzerOutOfMemory, match="ran out of memory .* it queued requests faster"):
        perf.run("digits", "127.0.0.1:1", request_rate=16000, binary=binary)
    assert int((tmp_path / "cap").read_text()) == perf.memory_cap_bytes() // 1024  # ulimit -v: KiB


def test_a_perf_analyzer_ended_by_a_signal_at_its_memory_cap_ran_out_of_memory(tmp_path, monkeypatch):
    # The exit and the peak resident memory as wait4 reports them (a real run's: the test above).
    cap = perf.memory_cap_bytes()
    binary = _fake_binary(tmp_path, "exit 0\n")

    def ended(code: int, peak: float):
        def run(_cmd, log_path, *_):
            log_path.write_text("")
            return code, 1.0, 2.0, int(peak * cap)

        return run

    monkeypatch.setattr(perf, "_run_measured", ended(-9, 0.8))
    with pytest.raises(perf.PerfAnalyzerOutOfMemory, match=r"peak [0-9.]+ GiB of the [0-9.]+ GiB it may use, exit -9"):
        perf.run("digits", "127.0.0.1:1", request_rate=16000, binary=binary)
    # a signal far below the cap is a failure, not the generator's limit
    monkeypatch.setattr(perf, "_run_measured", ended(-15, 0.1))
    with pytest.raises(perf.PerfAnalyzerError) as info:
        perf.run("digits", "127.0.0.1:1", request_rate=20, binary=binary)
    assert not isinstance(info.value, perf.PerfAnalyzerOutOfMemory) and "exited with code -15" in str(info.value)
