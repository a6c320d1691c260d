"""loadtest.generators.perf_analyzer.profile_export without a server: the latencies of the requests perf_analyzer's
figures merge, read from its profile export in chunks, and ``perf.run`` asking for the export only when wanted."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from loadtest.generators.perf_analyzer import perf, profile_export

PERF_DATA = Path(__file__).resolve().parents[4] / "data" / "perf"


def _fake_binary(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "perf_analyzer"
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


# -- the profile export (goodput) -------------------------------------------------------------------
def _export(path: Path, requests: list[tuple[int, list[int]]], boundaries: list[int]) -> Path:
    """A profile export as perf_analyzer 2.51 writes it (compact JSON, each request with its tensors); one
    input is named "timestamp" to show a tensor cannot pass for a request's send time."""
    body = {
        "experiments": [
            {
                "experiment": {"mode": "concurrency", "value": 1},
                "requests": [
                    {
                        "timestamp": start,
                        "request_inputs": {"timestamp": 7, "PIXELS": [0.5] * 64},
                        "response_timestamps": answers,
                        "response_outputs": [{"PROBABILITIES": [0.1] * 10}],
                    }
                    for start, answers in requests
                ],
                "window_boundaries": boundaries,
            }
        ],
        "version": "2.51.0",
        "service_kind": "triton",
        "endpoint": "",
    }
    path.write_text(json.dumps(body, separators=(",", ":")))
    return path


MS = 1_000_000


def test_the_profile_export_gives_the_latency_of_each_request_of_the_last_three_windows(tmp_path, monkeypatch):
    # Four 1 s windows; the first window's request is left out as perf_analyzer's figures leave it out.
    requests = [(100 * MS, [103 * MS]), (1100 * MS, [1102 * MS]), (2000 * MS, [2010 * MS]), (3500 * MS, [3501 * MS])]
    path = _export(tmp_path / "profile.json", requests, [0, 1000 * MS, 2000 * MS, 3000 * MS, 4000 * MS])
    (level,) = profile_export.read_profile_export(path)
    assert (level.mode, level.value) == ("concurrency", 1.0)
    assert level.latencies_ms.tolist() == [2.0, 10.0, 1.0] and level.duration_s == 3.0
    assert level.within(2.0) == 2 and level.within(float("inf")) == 3
    # Read in chunks far smaller than the file, every token is found once.
    monkeypatch.setattr(profile_export, "_CHUNK", 97)
    monkeypatch.setattr(profile_export, "_LONGEST_TOKEN", 64)
    assert profile_export.read_profile_export(path)[0].latencies_ms.tolist() == [2.0, 10.0, 1.0]


def test_a_file_that_is_not_a_profile_export_is_refused(tmp_path):
    (tmp_path / "other.json").write_text('{"timestamp": 5}')
    with pytest.raises(ValueError, match="not a perf_analyzer profile export"):
        profile_export.read_profile_export(tmp_path / "other.json")


def test_run_asks_for_the_profile_export_only_when_wanted_and_reads_it(tmp_path):
    (tmp_path / "recorded.csv").write_text((PERF_DATA / "digits_grpc_b1_c1-4.csv").read_text())
    _export(tmp_path / "recorded.json", [(100 * MS, [102 * MS])], [0, 1000 * MS])
    binary = _fake_binary(
        tmp_path,
        f'echo "$@" > {tmp_path}/args\n'
        'while [ $# -gt 0 ]; do if [ "$1" = -f ]; then '
        f'cp {tmp_path}/recorded.csv "$2"; fi; if [ "$1" = --profile-export-file ]; then '
        f'cp {tmp_path}/recorded.json "$2"; fi; shift; done\n',
    )
    plain = perf.run("digits", "127.0.0.1:8001", binary=binary)
    assert "--profile-export-file" not in (tmp_path / "args").read_text() and plain.requests == []
    exported = perf.run("digits", "127.0.0.1:8001", binary=binary, profile_export=True)
    args = (tmp_path / "args").read_text().split()
    export = Path(args[args.index("--profile-export-file") + 1])
    assert exported.requests[0].latencies_ms.tolist() == [2.0]
    assert not export.exists()  # deleted with the run's temporary folder
