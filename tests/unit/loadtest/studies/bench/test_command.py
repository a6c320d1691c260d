"""The side-by-side benchmark's pure parts: ratios, target verdicts and the tables, from a recorded result."""

from __future__ import annotations

import copy
import json

import pytest

from loadtest.core.spec import Candidate
from loadtest.studies.bench import command as bench
from loadtest.studies.bench import rows as bench_rows
from loadtest.target import apply
from tests.served import served_config

# Shaped like bench.json from a run (figures rounded), digits and minilm.
RECORDED = {
    "started": "2026-11-29T18:00:00+00:00",
    "machine": "2 CPUs, torch 2.13.0+cpu",
    "models": {
        "digits": {
            "users": 32,
            "duration_s": 15.0,
            "warmup_s": 2.0,
            "tuned_source": "the repository's config as exported (export/tuned.toml has no [digits] table)",
            "rows": {
                "inprocess": {
                    "throughput": 35000.0,
                    "p50_ms": 0.09,
                    "p99_ms": None,
                    "batch1_median_ms": 0.03,
                    "note": "batch 64, 2 threads",
                },
                "triton_plain": {"throughput": 1600.0, "p50_ms": 12.8, "p99_ms": 39.1, "note": "avg batch 1.0"},
                "triton_tuned": {"throughput": 3200.0, "p50_ms": 9.5, "p99_ms": 20.0, "note": "avg batch 4.2"},
                "fastapi": {"throughput": 1000.0, "p50_ms": 19.1, "p99_ms": 37.3},
                "fastapi_batcher": {"throughput": 3000.0, "p50_ms": 10.0, "p99_ms": 30.0},
            },
            "perf": {
                "range": "1,2,4,8,16,32",
                "failed": {"32": "PerfAnalyzerError: unstable"},
                "levels": [
                    {"concurrency": 1, "throughput": 1600.0, "p50_ms": 0.55, "p99_ms": 2.1},
                    {"concurrency": 16, "throughput": 2600.0, "p50_ms": 5.6, "p99_ms": 12.7},
                ],
                "best": {"concurrency": 16, "throughput": 2600.0, "p50_ms": 5.6, "p99_ms": 12.7},
                "best_under_p99": {"concurrency": 1, "throughput": 1600.0, "p50_ms": 0.55, "p99_ms": 2.1},
            },
            "one_client": {
                "p50_ms": 0.36,
                "p99_ms": 0.6,
                "throughput": 2700.0,
                "server_queue_ms": 0.05,
                "server_compute_ms": 0.2,
                "server_compute_input_ms": 0.02,
                "server_compute_infer_ms": 0.16,
                "server_compute_output_ms": 0.02,
                "inprocess_batch1_ms": 0.03,
                "overhead_ms": 0.33,
            },
            "one_user": {"triton_p50_ms": 0.35, "inprocess_batch1_ms": 0.03, "overhead_ms": 0.32, "error": None},
            "first_request": [
                {"warmup": True, "first_ms": 3.0, "steady_p50_ms": 2.0, "ratio": 1.5, "ready_s": 5.9},
                {"warmup": False, "first_ms": 40.0, "steady_p50_ms": 2.0, "ratio": 20.0, "ready_s": 5.8},
            ],
        },
        "minilm": {
            "users": 8,
            "duration_s": 15.0,
            "warmup_s": 2.0,
            "tuned_source": "export/tuned.toml [minilm]",
            "rows": {
                "inprocess": {"throughput": 400.0, "p50_ms": 80.0, "p99_ms": None, "batch1_median_ms": 6.0},
                "triton_plain": {"throughput": 150.0, "p50_ms": 50.0, "p99_ms": 70.0},
                "triton_tuned": {"throughput": 390.0, "p50_ms": 20.0, "p99_ms": 40.0},
                "fastapi": {"throughput": None, "error": "RuntimeError: the baseline exited"},
                "fastapi_batcher": {"throughput": 200.0, "p50_ms": 40.0, "p99_ms": 60.0},
            },
            "perf": {"error": "every level failed: {}"},
            "one_user": {"triton_p50_ms": 7.0, "inprocess_batch1_ms": 6.0, "overhead_ms": 1.0},
            "first_request": [
                {"warmup": True, "ratio": None, "error": "ServerStartError: no"},
                {"warmup": False, "first_ms": 90.0, "steady_p50_ms": 7.0, "ratio": 12.9, "ready_s": 9.0},
            ],
        },
    },
}


def test_ratio_is_none_unless_both_sides_were_measured():
    assert bench.ratio(300.0, 100.0) == pytest.approx(3.0)
    for a, b in ((None, 1.0), (1.0, None), (0.0, 1.0), (1.0, 0.0), (float("nan"), 1.0)):
        assert bench.ratio(a, b) is None


def test_ratios_of_row_3_against_the_others():
    got = bench.ratios(RECORDED["models"]["digits"])
    assert got == pytest.approx({"3/1": 3200 / 35000, "3/2": 2.0, "3/4": 3.2, "3/5": 3200 / 3000})
    minilm = bench.ratios(RECORDED["models"]["minilm"])
    assert minilm["3/4"] is None and minilm["3/1"] == pytest.approx(0.975)


def test_targets_say_met_or_missed_for_every_target_of_every_model():
    targets = bench.evaluate_targets(RECORDED)
    by = {(t["model"], t["target"]): t for t in targets}
    assert all(t["status"] in ("met", "missed") for t in targets)
    digits = [t for t in targets if t["model"] == "digits"]
    minilm = [t for t in targets if t["model"] == "minilm"]
    assert len(digits) == 5 and len(minilm) == 3  # the first-request target applies to both

    def status(model, start):
        (hit,) = [t for (m, text), t in by.items() if m == model and text.startswith(start)]
        return hit["status"], hit["measured"]

    assert status("digits", ">= 10k infer/s") == ("missed", "1,600 infer/s")
    assert status("digits", "tuned Triton >= 2.5x") == ("met", "3.20x")
    assert status("digits", "tuned Triton >= 1.2x") == ("missed", "1.07x")
    assert status("digits", "first request") == ("met", "1.50x")  # within 1.5x: the bound counts
    assert status("digits", "p50 serving overhead") == ("met", "0.330 ms")  # perf_analyzer's, not Locust's
    assert status("minilm", "tuned Triton >= 0.95x") == ("met", "0.97x")
    # what could not be measured is missed, and says so
    assert status("minilm", "tuned Triton >= 2x") == ("missed", "not measured")
    assert status("minilm", "first request") == ("missed", "not measured")


def test_targets_only_for_the_models_that_ran():
    only = copy.deepcopy(RECORDED)
    del only["models"]["minilm"]
    assert {t["model"] for t in bench.evaluate_targets(only)} == {"digits"}
    assert bench.evaluate_targets({"models": {}}) == []


def test_tables_render_from_the_recorded_json():
    result = json.loads(json.dumps({**RECORDED, "targets": bench.evaluate_targets(RECORDED)}))  # as bench.json holds it
    text = bench.render(result)
    assert text.count("| row | throughput (infer/s) | p50 ms | p99 ms | notes |") == 2
    for _, label in bench.ROWS:
        assert text.count(f"| {label} |") == 2
    assert "| 3. Triton tuned | 3,200 | 9.500 | 20.000 | avg batch 4.2 |" in text
    assert "| 1. in-process, best batch | 35,000 | 0.090 | - | batch 64, 2 threads |" in text
    assert "| 4. FastAPI per request | - | - | - | RuntimeError: the baseline exited |" in text
    assert "Ratios (throughput): 3/1 = 0.091x, 3/2 = 2.00x, 3/4 = 3.20x, 3/5 = 1.07x" in text
    assert "best with p99 < 5 ms: 1,600 infer/s at concurrency 1 (p99 2.100 ms)" in text
    assert "no stable figure at concurrency 32" in text
    assert "perf_analyzer (row 3, gRPC, the rows' payloads): failed: every level failed" in text
    assert (
        "Serving overhead at one client (perf_analyzer, gRPC, concurrency 1): Triton tuned p50 0.360 ms - "
        "in-process batch-1 median 0.030 ms = 0.330 ms; the server's split per request: queue 0.050 ms, "
        "compute 0.200 ms"
    ) in text
    assert "Second figure, Locust (1 user, HTTP, Python client): Triton tuned p50 0.350 ms" in text
    assert "one client (perf_analyzer, gRPC, concurrency 1): failed: not measured" in text  # minilm has none
    assert "= 0.320 ms" in text and "Tuned config: export/tuned.toml [minilm]" in text
    assert "warmup on: 3.00 ms vs steady p50 2.00 ms = 1.50x" in text
    assert "warmup on: failed: ServerStartError: no" in text
    targets = text.split("### targets")[1]
    rows = [line for line in targets.splitlines() if line.startswith("| digits") or line.startswith("| minilm")]
    assert len(rows) == 8 and all(line.endswith(("| met |", "| missed |")) for line in rows)


def test_perf_levels_double_up_to_the_users():
    assert bench_rows.perf_levels(32) == [1, 2, 4, 8, 16, 32]
    assert bench_rows.perf_levels(8) == [1, 2, 4, 8]
    assert bench_rows.perf_levels(12) == [1, 2, 4, 8, 12]
    assert bench_rows.perf_levels(1) == [1]


DEPLOYED = served_config("digits")


def test_tuned_source_names_the_tuned_table_or_its_absence(tmp_path):
    tuned = tmp_path / "tuned.toml"
    assert "has no [digits] table" in bench_rows.tuned_source("digits", tuned)
    tuned.write_text('[minilm]\nnote = "x"\nwarmup = false\n')
    assert "has no [digits] table" in bench_rows.tuned_source("digits", tuned)
    tuned.write_text('[digits]\nnote = "best of 3"\ninstance_groups = [{ count = 1, kind = "KIND_CPU" }]\n')
    assert bench_rows.tuned_source("digits", tuned).endswith("[digits] (best of 3)")
    assert bench_rows.tuned_source("digits_onnx", tuned).endswith("[digits] (best of 3)")  # another format


def test_describe_says_instances_batching_and_warmup():
    plain = apply.override(DEPLOYED, Candidate.of("plain", dynamic_batching=False, warmup=False))
    assert bench.describe(plain) == "2 instances, no dynamic batching, 0 warmup samples"
    assert bench.describe(DEPLOYED) == (
        "2 instances, dynamic batching (100 us, preferred [8, 16, 32, 64]), 2 warmup samples"
    )


def test_help_explains_every_row(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for text in (
        "1. in-process",
        "2. Triton plain",
        "3. Triton tuned",
        "4. FastAPI",
        "5. the same FastAPI",
        "--duration",
        "--users",
        "--models",
        "--out",
        "perf_analyzer",
    ):
        assert text in out


def test_command_line_becomes_options(tmp_path):
    opts = bench.options(["--models", "digits", "--duration", "3", "--users", "4", "minilm=2", "--out", str(tmp_path)])
    assert opts.models == ("digits",) and opts.duration_s == 3.0 and opts.out == tmp_path.resolve()
    assert opts.users == {"digits": 4, "minilm": 2} and opts.users_for("digits") == 4


def test_perf_analyzers_levels_come_from_the_command_line_or_double_up_to_the_users():
    assert bench.options(["--models", "digits"]).perf_concurrency == ()
    assert bench.options(["--models", "digits", "--perf-concurrency", "1", "4"]).perf_concurrency == (1, 4)


@pytest.mark.parametrize("level", ["0", "-1", "two"])
def test_a_perf_concurrency_below_one_is_refused_in_one_line(level, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--models", "digits", "--perf-concurrency", level, "--out", str(tmp_path / "bench")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--perf-concurrency" in err and "Traceback" not in err and not (tmp_path / "bench").exists()


def test_default_users_fill_the_served_configs_batches_on_every_instance():
    assert bench.default_users(DEPLOYED) == 32  # 2 instances x 64, capped
    minilm = {"max_batch_size": 32, "instance_group": [{"count": 2}], "dynamic_batching": {"preferred_batch_size": [8]}}
    assert bench.default_users(minilm) == 16
    no_preferred = {"max_batch_size": 4, "instance_group": [{"count": 3}], "dynamic_batching": {}}
    assert bench.default_users(no_preferred) == 12
    assert bench.default_users({"max_batch_size": 0}) == 8  # no batcher, one instance: the floor
    opts = bench.options(["--models", "minilm", "--users", "digits=4"])
    assert opts.users_for("minilm", minilm) == 16 and opts.users_for("digits", minilm) == 4


def test_trials_come_from_the_command_line_and_default_to_three(tmp_path):
    assert bench.options(["--models", "digits"]).trials == 3
    assert bench.options(["--models", "digits", "--trials", "1"]).trials == 1


@pytest.mark.parametrize("trials", ["0", "-2"])
def test_fewer_than_one_trial_is_a_usage_error_before_anything_runs(trials, tmp_path, capsys):
    out = tmp_path / "bench"
    status = bench.main(["--models", "digits", "--trials", trials, "--out", str(out)])
    assert status == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: --trials {trials} must be an integer >= 1" and "Traceback" not in err
    assert not out.exists()


def test_a_result_recorded_before_the_trials_renders_as_it_did():
    entry = RECORDED["models"]["digits"]
    assert bench.ratio_intervals(entry) == {name: None for name, _, _ in bench.RATIOS}
    assert "rounds" not in bench.render(RECORDED) and "One run each" not in bench.render(RECORDED)
