"""loadtest.tune.analyzer without running Model Analyzer: a recorded real checkpoint, the YAML, the wrapper."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml

import tritonkit_cli
from export import config as config_io
from export.changes import ServingChanges
from loadtest.core.spec import Candidate
from loadtest.target import apply
from loadtest.tune.analyzer import command as analyzer_command
from loadtest.tune.analyzer import profile as analyzer
from loadtest.tune.analyzer.profile import (
    AnalyzerFailed,
    AnalyzerNotInstalled,
    AnalyzerPick,
    AnalyzerTimeout,
    NoConfigMeetsBudget,
    measurements,
    pick_from_results,
)
from tests.served import served_config

DATA = Path(__file__).resolve().parents[3] / "data" / "analyzer"
CHECKPOINT = DATA / "digits.ckpt"  # `model-analyzer profile` on digits, budget 5 ms (checkpoints/0.ckpt)
CSV = DATA / "metrics-model-inference.csv"  # the same run's results CSV
REPOSITORY = Path(__file__).resolve().parents[4] / "model_repository"


def csv_rows() -> list[dict]:
    with open(CSV, newline="") as f:
        return list(csv.DictReader(f))


def test_checkpoint_measurements_agree_with_the_csv_ma_wrote():
    rows = measurements(CHECKPOINT)
    table = {(r["Model Config Path"], int(r["Concurrency"])): r for r in csv_rows()}
    assert len(rows) == len(table) > 0
    for row in rows:
        line = table[(row.config_name, row.concurrency)]
        assert row.throughput_infer_s == pytest.approx(float(line["Throughput (infer/sec)"]), abs=0.06)
        assert row.p99_ms == pytest.approx(float(line["p99 Latency (ms)"]), abs=0.06)
        assert row.max_batch_size == int(line["Max Batch Size"])
        assert f"{row.instance_count}:CPU" == line["Instance Group"]


def test_pick_is_the_fastest_that_ma_itself_says_meets_the_budget():
    budget = 5.0  # the constraint of the recorded run: MA's "Satisfies Constraints" column judged it
    pick = pick_from_results(CHECKPOINT, budget)
    within = [r for r in csv_rows() if r["Satisfies Constraints"] == "Yes"]
    best = max(within, key=lambda r: float(r["Throughput (infer/sec)"]))
    assert (pick.config_name, pick.concurrency) == (best["Model Config Path"], int(best["Concurrency"]))
    assert pick.model == "digits" and pick.p99_ms <= budget
    assert pick.dynamic_batching == {"max_queue_delay_us": 500, "preferred_batch_sizes": []}


def test_pick_reads_a_work_folder_too(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "0.ckpt").write_bytes(CHECKPOINT.read_bytes())
    assert pick_from_results(tmp_path, 5.0) == pick_from_results(CHECKPOINT, 5.0)


def test_budget_too_tight_raises_with_the_lowest_p99():
    lowest = min(float(r["p99 Latency (ms)"]) for r in csv_rows())
    with pytest.raises(NoConfigMeetsBudget, match="lowest p99 was"):
        pick_from_results(CHECKPOINT, lowest / 10)


def test_unknown_model_or_missing_checkpoint(tmp_path):
    with pytest.raises(analyzer.AnalyzerError, match="no measurement"):
        pick_from_results(CHECKPOINT, 5.0, model="nope")
    with pytest.raises(analyzer.AnalyzerError, match="no Model Analyzer checkpoint"):
        pick_from_results(tmp_path, 5.0)


PICK = AnalyzerPick(
    model="digits",
    config_name="digits_config_2",
    max_batch_size=8,
    instance_count=2,
    dynamic_batching={"max_queue_delay_us": 500, "preferred_batch_sizes": []},
    concurrency=4,
    throughput_infer_s=2000.0,
    p99_ms=4.0,
)


def test_the_pick_is_serving_changes():
    assert PICK.changes() == ServingChanges(
        max_batch_size=8, instances=2, dynamic_batching=True, max_queue_delay_us=500, preferred_batch_sizes=()
    )
    no_batching = AnalyzerPick(**{**PICK.__dict__, "dynamic_batching": None})
    assert no_batching.changes() == ServingChanges(max_batch_size=8, instances=2, dynamic_batching=False)


def test_the_pick_applied_to_a_served_config_keeps_the_rest_and_its_warmup_follows():
    served = served_config("digits")
    merged = apply.override(served, Candidate("model-analyzer", changes=PICK.changes()))
    assert config_io.from_json(merged).inputs == config_io.from_json(served).inputs
    assert merged["max_batch_size"] == 8
    assert merged["instance_group"] == [{"count": 2, "kind": "KIND_CPU"}]
    assert int(merged["dynamic_batching"]["max_queue_delay_microseconds"]) == 500
    assert "preferred_batch_size" not in merged["dynamic_batching"]  # none: the batcher sends what has queued
    assert [w["batch_size"] for w in merged["model_warmup"]] == [1, 8]  # the batch-64 sample would fail the load
    json.dumps(merged)  # what load_model(config=...) takes


def test_yaml_config_is_local_launch_with_our_paths_and_the_budget(tmp_path):
    server = tmp_path / "wrapper.sh"
    text = yaml.safe_dump(analyzer.analyzer_config("digits", tmp_path / "repo", 5.0, tmp_path, server))
    config = yaml.safe_load(text)
    assert config["triton_launch_mode"] == "local"
    assert config["triton_server_path"] == str(server)
    assert config["perf_analyzer_path"] == str(analyzer.PERF_ANALYZER)
    assert analyzer.PERF_ANALYZER.parts[-3:] == (".venv", "bin", "perf_analyzer")
    assert config["model_repository"] == str(tmp_path / "repo")
    assert config["run_config_search_mode"] == "brute"
    ports = {config["triton_http_endpoint"], config["triton_grpc_endpoint"], config["triton_metrics_url"]}
    assert len(ports) == 3 and all("127.0.0.1:" in p for p in ports)
    model = config["profile_models"]["digits"]
    assert model["cpu_only"] is True
    assert model["constraints"] == {"perf_latency_p99": {"max": 5.0}}
    assert model["objectives"] == {"perf_throughput": 10}
    params = model["model_config_parameters"]
    assert params["instance_group"] == [{"kind": "KIND_CPU", "count": [1, 2]}]
    assert params["max_batch_size"] == list(analyzer.MAX_BATCH_SIZES)
    assert model["parameters"]["concurrency"] == list(analyzer.CONCURRENCIES)
    one = analyzer.analyzer_config("digits", tmp_path, 5.0, tmp_path, server, max_instances=1, max_batch_size=16)
    one_params = one["profile_models"]["digits"]["model_config_parameters"]
    assert one_params["max_batch_size"] == [16] and one_params["instance_group"][0]["count"] == [1]


def test_wrapper_runs_our_server_with_its_environment(tmp_path):
    from deploy.server import TritonDistribution

    dist = TritonDistribution.find()
    wrapper = analyzer.write_server_wrapper(tmp_path / "tritonserver-wrapper.sh")
    text = wrapper.read_text()
    assert os.access(wrapper, os.X_OK) and text.startswith("#!/usr/bin/env bash\n")
    assert f"export PATH={Path(sys.prefix) / 'bin'}:" in text
    assert f"export LD_LIBRARY_PATH={dist.libs}" in text and "nvidia_pytriton.libs" in text
    assert f"exec {dist.binary} --backend-directory={tmp_path / 'backends'}" in text
    assert text.rstrip().endswith('"$@"')  # MA's own flags (ports, repository, explicit mode) pass through
    assert "--disable-auto-complete-config" not in text
    skipping = analyzer.write_server_wrapper(tmp_path / "skipping.sh", auto_complete=False).read_text()
    assert skipping.rstrip().endswith('--disable-auto-complete-config "$@"')
    assert (tmp_path / "backends" / "python" / "libtriton_python.so").is_file()
    assert (tmp_path / "backends" / "pytorch" / "model.py").is_file()
    # The binary starts and resolves its libraries through the wrapper's environment.
    done = subprocess.run([str(wrapper), "--help"], capture_output=True, text=True, timeout=60)
    assert "--model-repository" in done.stdout + done.stderr


def test_staged_model_has_no_warmup_or_preferred_sizes(tmp_path):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    source = tmp_path / "repo" / "digits"
    (source / "1").mkdir(parents=True)
    (source / "labels.txt").write_text("0\n")
    served = text_format.Parse((REPOSITORY / "digits" / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    served.dynamic_batching.max_queue_delay_microseconds = 1000  # whatever the repository's tuning says
    served.dynamic_batching.preferred_batch_size[:] = [8, 16]
    (source / "config.pbtxt").write_text(text_format.MessageToString(served))
    staged = analyzer.stage_model(tmp_path / "repo", "digits", tmp_path / "staged")
    config = text_format.Parse((staged / "digits" / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    assert not config.model_warmup and not config.dynamic_batching.preferred_batch_size
    assert config.dynamic_batching.max_queue_delay_microseconds == 1000 and config.max_batch_size == 64
    assert (staged / "digits" / "1").resolve() == (source / "1").resolve()
    assert (staged / "digits" / "labels.txt").is_symlink()


def fake_tools(tmp_path, monkeypatch, script: str) -> None:
    fake = tmp_path / "model-analyzer"
    fake.write_text(f"#!/usr/bin/env bash\n{script}\n")
    fake.chmod(0o755)
    monkeypatch.setattr(analyzer, "ANALYZER_BIN", fake)
    monkeypatch.setattr(analyzer, "PERF_ANALYZER", fake)


def test_missing_model_analyzer_is_a_typed_error(tmp_path, monkeypatch):
    monkeypatch.setattr(analyzer, "ANALYZER_BIN", tmp_path / "nowhere" / "model-analyzer")
    with pytest.raises(AnalyzerNotInstalled, match="deploy/setup.sh"):
        analyzer.profile("digits", REPOSITORY, 5.0, tmp_path / "out")


def test_failed_run_carries_the_log_tail(tmp_path, monkeypatch):
    fake_tools(tmp_path, monkeypatch, 'echo "[Model Analyzer] ERROR: something broke"; exit 3')
    with pytest.raises(AnalyzerFailed, match="exited with 3") as info:
        analyzer.profile("digits", REPOSITORY, 5.0, tmp_path / "out")
    assert "something broke" in info.value.log_tail and "something broke" in str(info.value)


def test_timeout_kills_model_analyzer_and_its_children(tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    fake_tools(tmp_path, monkeypatch, f'sleep 300 & echo $! > {pids}; echo "[Model Analyzer] Profiling"; wait')
    with pytest.raises(AnalyzerTimeout, match="killed") as info:
        analyzer.profile("digits", REPOSITORY, 5.0, tmp_path / "out", timeout_s=2)
    assert "Profiling" in info.value.log_tail
    child = int(pids.read_text())
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_a_model_not_in_the_repository_is_a_bad_argument_in_one_line(tmp_path, capsys):
    status = analyzer_command.main(
        ["nosuch", "--budget-ms", "5", "--repository", str(REPOSITORY), "--out", str(tmp_path)]
    )
    assert status == 2 and not any(tmp_path.iterdir()), "refused before Model Analyzer starts"
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'nosuch' is not in" in err and "digits" in err, err


def test_model_analyzer_missing_and_not_installable_is_one_line_naming_the_log_and_exit_3(
    tmp_path, monkeypatch, capsys, failing_setup
):
    missing = tmp_path / "nowhere" / "model-analyzer"
    monkeypatch.setattr(analyzer, "ANALYZER_BIN", missing)
    monkeypatch.setattr(analyzer, "FIRST_USE", {missing: ("analyzer", "Model Analyzer")})
    args = tritonkit_cli.build_parser().parse_args(
        ["analyzer", "digits", "--budget-ms", "5", "--repository", str(REPOSITORY), "--out", str(tmp_path / "out")]
    )
    assert analyzer_command.run_command(args) == 3
    installing, error = capsys.readouterr().err.splitlines()
    assert installing.startswith("setup: installing Model Analyzer (first use of tritonkit analyzer)")
    assert "Model Analyzer is missing" in error and str(failing_setup / "analyzer.log") in error
