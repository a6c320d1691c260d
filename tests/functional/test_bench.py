"""The side-by-side benchmark end to end for digits with tiny durations and two rounds: every row measured in
every round, round by round, every ratio with its paired interval, every target judged.

The figures of so short a run mean little; this checks that each row ran and the outputs are complete,
never whether a target was met (the benchmark reports that, it does not assert it).
"""

from __future__ import annotations

import json
import statistics

import pytest

from loadtest.studies.bench import command as bench
from loadtest.studies.bench.targets import RATIOS


def test_the_bench_measures_every_row_for_digits(repository, tmp_path):
    lines: list[str] = []
    opts = bench.Options(
        models=("digits",),
        trials=2,
        duration_s=1.0,
        warmup_s=0.25,
        users={"digits": 4},
        out=tmp_path,
        repository=repository,
        inprocess_s=0.1,
        perf_ms=300,
        perf_concurrency=(1, 4),
        steady=10,
    )
    bench.run(opts, log=lines.append)
    log = "\n".join(lines)

    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["server_left"] == [], "stopping tritonserver left processes or /dev/shm regions behind"
    digits = saved["models"]["digits"]
    for key, label in bench.ROWS:
        row = digits["rows"][key]
        assert row.get("throughput") and row["throughput"] > 0, f"{label}: {row}\n{log}"
        assert row["p50_ms"] > 0, f"{label}: {row}"
        assert len(row["trials"]) == 2 and row["intervals"]["throughput"]["trials"] == 2, f"{label}: {row}"
        # The row's figures are its own trials' (recorded with it): throughput their mean, p50 their geometric
        # mean, over the trials that did not fail.
        usable = [t for t in row["trials"] if "error" not in t]
        assert row["throughput"] == pytest.approx(statistics.fmean(t["throughput"] for t in usable), rel=1e-9)
        assert row["p50_ms"] == pytest.approx(statistics.geometric_mean(t["p50_ms"] for t in usable), rel=1e-9)
    # round by round: every row's first trial before any row's second
    order = [line for line in lines if " trial " in line and "/2:" in line]
    assert max(i for i, line in enumerate(order) if "trial 1/2" in line) < min(
        i for i, line in enumerate(order) if "trial 2/2" in line
    ), "\n".join(order)
    for key in ("triton_plain", "triton_tuned", "fastapi", "fastapi_batcher"):
        assert digits["rows"][key]["p99_ms"] >= digits["rows"][key]["p50_ms"]
        assert digits["rows"][key]["failures"] == 0, digits["rows"][key]
    # plain really is plain, and without a tuned table row 3 serves the repository's config (its batcher)
    assert "1 instance, no dynamic batching, 0 warmup samples" in digits["rows"]["triton_plain"]["note"]
    assert "tuned.toml" in digits["tuned_source"]
    if "has no [digits] table" in digits["tuned_source"]:
        assert "dynamic batching (" in digits["rows"]["triton_tuned"]["note"]
    assert set(digits["ratios"]) == {"3/1", "3/2", "3/4", "3/5"} and all(v > 0 for v in digits["ratios"].values())
    # Each ratio pairs its rows' trials by round: the geometric mean of the rounds' throughput ratios (a round
    # where either row failed left out).
    for name, a, b in RATIOS:
        rounds = zip(digits["rows"][a]["trials"], digits["rows"][b]["trials"], strict=True)
        by_round = [ta["throughput"] / tb["throughput"] for ta, tb in rounds if "error" not in ta and "error" not in tb]
        assert digits["ratios"][name] == pytest.approx(statistics.geometric_mean(by_round), rel=1e-9), name
    assert all(
        iv["trials"] == 2 and iv["low"] <= iv["estimate"] <= iv["high"] for iv in digits["ratio_intervals"].values()
    )
    assert digits["perf"].get("best", {}).get("throughput", 0) > 0, digits["perf"]
    assert digits["perf"]["range"] == "1,4", digits["perf"]  # the levels asked for, not the users' doubling
    assert digits["one_user"]["overhead_ms"] is not None, digits["one_user"]
    assert [f["warmup"] for f in digits["first_request"]] == [True, False]
    assert all(f.get("ratio") for f in digits["first_request"]), digits["first_request"]

    digits_targets = [t for t in bench.TARGETS if t[0] in ("*", "digits")]
    assert len(saved["targets"]) == len(digits_targets)
    assert [t["target"] for t in saved["targets"]] == [t[1] for t in digits_targets]
    assert all(t["status"] in ("met", "missed", "inconclusive") for t in saved["targets"])

    markdown = (tmp_path / "bench.md").read_text()
    assert "### digits" in markdown and "### targets" in markdown
    # Its table shows each row's throughput as its trials measured it.
    for key, label in bench.ROWS:
        line = next(line for line in markdown.splitlines() if line.startswith(f"| {label} |"))
        assert f"| {digits['rows'][key]['throughput']:,.0f}" in line, (line, digits["rows"][key]["throughput"])
    judged = ("| met |", "| missed |", "| inconclusive |")
    assert sum(line.endswith(judged) for line in markdown.splitlines()) == len(digits_targets)
    assert "2 rounds, every row once a round" in markdown
