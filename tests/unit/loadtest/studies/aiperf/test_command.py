"""tritonkit aiperf (loadtest/studies/aiperf/command.py, export.py) without a server: the AIPerf command line built
for the generator and the embedder, a recorded AIPerf export read back (tests/data/aiperf: 8 streamed requests of 8
tokens against the tiny generator, from tests/functional/test_text_generator.py), and bad input in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jinja2
import pytest

import tritonkit_cli
from loadtest.studies.aiperf import command as aiperf
from loadtest.studies.aiperf import export

ROOT = Path(__file__).resolve().parents[5]
REPOSITORY = ROOT / "model_repository"
RECORDED = ROOT / "tests" / "data" / "aiperf"
TWO_RUNS = RECORDED / "two_runs"
"""The aggregate AIPerf wrote for ``--runs 2`` against the real SmolLM2 generator, cut to ``export.INTERVALS``."""


def recorded(folder: Path) -> Path:
    """The recorded single run's summary and records copied into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in (export.SUMMARY, export.RECORDS):
        shutil.copy(RECORDED / name, folder / name)
    return folder


def parse(*argv: str):
    args = tritonkit_cli.build_parser().parse_args(["aiperf", *argv])
    args.repository = Path(args.repository).resolve()
    return args


def built(tmp_path: Path, *argv: str) -> tuple[list[str], dict, dict]:
    """The AIPerf argv for ``argv`` against a server at 127.0.0.1:8000, its endpoint and its --extra-inputs."""
    args = parse("--out", str(tmp_path), *argv)
    how = aiperf.endpoint(args.repository, args.model)
    cmd = aiperf.command(args, "127.0.0.1:8000", Path("/tok"), how, tmp_path / "t.jinja")
    return cmd, how, json.loads(cmd[cmd.index("--extra-inputs") + 1])


def value(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def render(template: str, **variables) -> dict:
    """The payload AIPerf sends: the template rendered as its template endpoint renders it."""
    return json.loads(jinja2.Environment(autoescape=True).from_string(template).render(**variables))


def no_counts():
    """Triton's counters, all 0: a snapshot for a run without a server."""
    metrics = aiperf.server_metrics
    return metrics.Snapshot({key: 0.0 for key in {**metrics.COUNTS, **metrics.DURATIONS}}, {}, {})


def test_the_generator_is_streamed_through_generate_stream_with_ignore_eos_and_no_metrics_probe(tmp_path):
    cmd, how, extra = built(tmp_path, "--requests", "8", "--output-tokens", "8", "--concurrency", "2")
    assert cmd[1:2] == ["profile"] and value(cmd, "--endpoint-type") == "template"
    assert value(cmd, "--endpoint") == "/v2/models/text_generator/generate_stream" and "--streaming" in cmd
    assert value(cmd, "--url") == "http://127.0.0.1:8000" and value(cmd, "--tokenizer") == "/tok"
    assert extra == {"payload_template": str(tmp_path / "t.jinja"), "response_field": "text_output", "ignore_eos": True}
    assert value(cmd, "--request-count") == "8" and value(cmd, "--concurrency") == "2"
    assert value(cmd, "--output-tokens-mean") == "8" and value(cmd, "--output-tokens-stddev") == "0"
    assert "--no-server-metrics" in cmd, "Triton 2.51's metrics port answers AIPerf's HEAD probe with 405"
    assert value(cmd, "--artifact-dir") == str(tmp_path / "artifacts") and "--goodput" not in cmd
    payload = render(how["template"], text='say "hi"\n', max_tokens=8)
    assert payload == {"text_input": 'say "hi"\n', "stream": True, "max_tokens": 8}


def test_the_embedder_is_sent_to_infer_as_its_text_input_and_its_embedding_read_back(tmp_path):
    cmd, how, extra = built(tmp_path, "--model", "text_embedder")
    assert value(cmd, "--endpoint") == "/v2/models/text_embedder/infer" and "--streaming" not in cmd
    field = "outputs[?name=='EMBEDDING'] | [0].data"
    assert extra == {"payload_template": str(tmp_path / "t.jinja"), "response_field": field}
    assert "--output-tokens-mean" not in cmd and "--no-server-metrics" in cmd
    payload = render(how["template"], text="a <b> & 'c'")
    assert payload == {"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["a <b> & 'c'"]}]}


def test_the_tokenizer_is_the_generators_version_folder_and_the_embedders_minilm_folder():
    assert aiperf.check_tokenizer(REPOSITORY / "text_generator" / "1") == REPOSITORY / "text_generator" / "1"
    minilm = aiperf.DEFAULT_TOKENIZERS["text_embedder"]()
    assert aiperf.check_tokenizer(minilm) == minilm.resolve()


def test_the_stream_budgets_are_aiperfs_goodput_in_one_argument(tmp_path):
    cmd, _, _ = built(tmp_path, "--slo-ttft-ms", "500", "--slo-itl-ms", "40", "--", "--num-warmup-requests", "2")
    assert value(cmd, "--goodput") == "time_to_first_token:500 inter_token_latency:40"
    assert cmd[-2:] == ["--num-warmup-requests", "2"], "flags after -- go to aiperf profile as given"


def test_aiperf_runs_without_the_hubs_offline_switches_and_keeps_its_dataset_files_in_the_scratch_folder(tmp_path):
    env = aiperf.aiperf_env({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/bin"}, tmp_path)
    assert env == {"PATH": "/bin", "TOKENIZERS_PARALLELISM": "false", "AIPERF_DATASET_MMAP_BASE_PATH": str(tmp_path)}


def test_a_recorded_export_reads_back_ttft_itl_goodput_and_every_answers_length(tmp_path):
    found = export.read(recorded(tmp_path / "artifacts"))
    assert found["aiperf_version"] == "0.13.0" and found["errors"] == []
    for name in ("time_to_first_token", "inter_token_latency"):
        assert found[name]["unit"] == "ms" and 0 < found[name]["p50"] <= found[name]["p99"]
    assert found["request_count"]["avg"] == 8 and found["good_request_count"]["avg"] == 8
    assert found["output_token_throughput"]["unit"] == "tokens/sec" and found["output_token_throughput"]["avg"] > 0
    assert export.lengths(tmp_path / "artifacts", 8) == {"asked": 8, "answers": 8, "by_length": {"8": 8}, "ok": True}
    assert not export.lengths(tmp_path / "artifacts", 16)["ok"] and "intervals" not in found


def test_several_profile_runs_add_aiperfs_intervals_to_the_report(tmp_path):
    shutil.copytree(TWO_RUNS, tmp_path / "two_runs")
    found = export.read(recorded(tmp_path))
    assert found["intervals"]["metadata"]["num_profile_runs"] == 2
    ttft = found["intervals"]["metrics"]["time_to_first_token_avg"]
    assert ttft["unit"] == "ms" and ttft["ci_low"] < ttft["mean"] < ttft["ci_high"]
    lines = export.intervals_lines(found["intervals"])
    assert "Across 2 profile runs (mean, 95% interval):" in lines
    assert any(line.startswith("| time_to_first_token_avg | ms | ") for line in lines)


def test_an_answer_of_another_length_is_found_and_named(tmp_path):
    records = (RECORDED / export.RECORDS).read_text().splitlines()
    short = json.loads(records[0])
    short["metrics"]["output_sequence_length"]["value"] = 5
    (tmp_path / export.RECORDS).write_text("\n".join([json.dumps(short), *records[1:]]) + "\n")
    checked = export.lengths(tmp_path, 8)
    assert checked == {"asked": 8, "answers": 8, "by_length": {"5": 1, "8": 7}, "ok": False}
    data = {
        "model": "text_generator",
        "endpoint": "/v2/models/text_generator/generate_stream",
        "streaming": True,
        "requests": 8,
        "concurrency": 2,
        "input_tokens": 16,
        "runs": 1,
        "aiperf": export.read(recorded(tmp_path / "recorded")),
        "lengths": {"checked": True, **checked},
        "server": {"requests": 8, "failures": 0, "executions": 8, "breakdown_ms": {}},
    }
    assert "NOT every answer had the 8 tokens asked (8 answers, by length {'5': 1, '8': 7})" in export.render(data)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--requests", "0"], "aiperf: error: --requests must be at least 1"),
        (["--tokenizer", "{tmp}"], "is not a tokenizer folder: no tokenizer.json or tokenizer_config.json"),
        (["--model", "digits"], "digits: AIPerf sends one text; the model's inputs are"),
        (["--model", "nosuch"], "model 'nosuch' is not in the repository"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2_before_any_install_or_server(tmp_path, capsys, argv, words):
    args = tritonkit_cli.build_parser().parse_args(
        ["aiperf", *(a.format(tmp=tmp_path) for a in argv), "--out", str(tmp_path / "out")]
    )
    assert aiperf._handler(args) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [["--concurrency", "many"], ["--slo-ttft-ms", "0"], ["--no-such-flag"]])
def test_bad_flags_exit_2_in_one_line(capsys, argv):
    with pytest.raises(SystemExit) as info:
        tritonkit_cli.build_parser().parse_args(["aiperf", *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "error:" in err and argv[0] in err and "\n" not in err, err


def test_aiperf_missing_and_not_installable_is_one_line_naming_the_log_and_exit_3(
    tmp_path, monkeypatch, capsys, failing_setup
):
    monkeypatch.setattr(aiperf, "AIPERF", tmp_path / "nowhere" / "aiperf")
    assert aiperf._handler(parse("--out", str(tmp_path / "out"))) == 3
    installing, error = capsys.readouterr().err.splitlines()
    assert installing.startswith("setup: installing AIPerf (first use of tritonkit aiperf)")
    assert error.startswith("aiperf: error: AIPerf is missing") and str(failing_setup / "aiperf.log") in error


def test_aiperf_failing_is_one_line_naming_its_log_and_exit_3_after_the_server_stopped(tmp_path, monkeypatch, capsys):
    fake = tmp_path / "aiperf"
    fake.write_text("#!/bin/sh\necho 'Traceback (most recent call last): boom'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(aiperf, "AIPERF", fake)
    monkeypatch.setattr(aiperf.server_metrics, "snapshot", lambda *a: no_counts())
    events = []

    def run_with_server(args, models, work):
        events.append(("server for", models))
        try:
            return 0, work(aiperf.target.Endpoints("127.0.0.1:1", "127.0.0.1:2", "http://127.0.0.1:3/metrics"), None)
        finally:
            events.append("server stopped")

    monkeypatch.setattr(aiperf.target, "run_with_server", run_with_server)
    out = tmp_path / "out"
    assert aiperf._handler(parse("--out", str(out))) == 3
    assert events == [("server for", ("text_generator", "smollm2_prefill", "smollm2_decode")), "server stopped"]
    err = capsys.readouterr().err
    assert err == f"aiperf: error: AIPerf exited with status 1: see {out / 'aiperf.log'}\n", "no traceback here"
    assert "boom" in (out / "aiperf.log").read_text()


def test_a_run_with_a_short_answer_writes_its_report_and_exits_1_in_one_line(tmp_path, monkeypatch, capsys):
    """The whole command after the run, on the recorded export with one answer cut to 5 tokens."""
    source = recorded(tmp_path / "recorded")
    records = (source / export.RECORDS).read_text().splitlines()
    short = json.loads(records[0])
    short["metrics"]["output_sequence_length"]["value"] = 5
    (source / export.RECORDS).write_text("\n".join([json.dumps(short), *records[1:]]) + "\n")
    out = tmp_path / "out"
    fake = tmp_path / "aiperf"
    fake.write_text(f"#!/bin/sh\nmkdir -p {out}/artifacts && cp {source}/* {out}/artifacts/\n")
    fake.chmod(0o755)
    monkeypatch.setattr(aiperf, "AIPERF", fake)
    monkeypatch.setattr(aiperf.server_metrics, "snapshot", lambda *a: no_counts())
    endpoints = aiperf.target.Endpoints("127.0.0.1:1", "127.0.0.1:2", "http://127.0.0.1:3/metrics")
    monkeypatch.setattr(aiperf.target, "run_with_server", lambda args, models, work: (0, work(endpoints, None)))
    assert aiperf._handler(parse("--out", str(out), "--output-tokens", "8")) == 1
    error = f"aiperf: error: 1 of 8 answers were not 8 tokens long: see {out / 'summary.md'}\n"
    assert capsys.readouterr().err == error
    data = json.loads((out / "results.json").read_text())
    assert data["lengths"]["by_length"] == {"5": 1, "8": 7} and data["aiperf"]["request_count"]["avg"] == 8
    assert "NOT every answer had the 8 tokens asked" in (out / "summary.md").read_text()
