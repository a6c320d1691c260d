"""`tritonkit tune` on a model the user brings: exported with --model-file, tuned with a short budget against
a local server the command starts; it reports every candidate, writes the pick into the model's config.pbtxt
and manifest, and a server started afterwards serves it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.client import connect
from export import config as config_io
from export.user import recorded
from tests.conftest import server_config, start_or_fail

PROJECT = Path(__file__).resolve().parents[2]
# Generous: this checks the flow on a shared 2-core machine, not its speed.
TUNE = ["--slo-p99-ms", "1000", "--users", "4", "--budget-s", "12", "--max-instances", "2", "--measurement-ms", "500"]
# The leaders' confirmation small: the served config and one leader, 3 interleaved trials each (with 2, t(1) =
# 12.7 leaves a p99 interval too wide for any verdict but inconclusive).
TUNE += ["--leaders", "1"]


def tritonkit(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tritonkit_cli", *args], cwd=PROJECT, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def user_repository(scorer_export, tmp_path_factory) -> Path:
    """The session's export of the scorer, copied: tune writes its pick into the folder."""
    return scorer_export.copy_to(tmp_path_factory.mktemp("repository"))


def test_a_user_models_pick_is_reported_written_to_its_folder_and_served(user_repository, tmp_path):
    """One tune of a model the user brings, checked end to end. A dry run (nothing written) is checked by
    tests/functional/test_loadtest.py's campaign [tune] and tests/unit/loadtest/tune/test_writer.py."""
    out = tmp_path / "report"
    done = tritonkit("tune", "scorer", "--repository", str(user_repository), *TUNE, "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "pick #" in done.stdout
    results = json.loads((out / "results.json").read_text())
    assert results["model"] == "scorer" and results["generator"] == "perf_analyzer"
    assert len(results["trials"]) >= 2 and results["best"] is not None
    assert all(t["point"]["max_batch_size"] <= 16 for t in results["trials"])  # the export's checked limit
    assert (out / "tune.png").stat().st_size > 0 and "| # | format |" in (out / "summary.md").read_text()
    # The table printed lists every candidate tried.
    assert sum(line.split()[0].isdigit() for line in done.stdout.splitlines() if line.strip()) >= len(results["trials"])
    best = results["best_point"]
    spec = config_io.read(user_repository / "scorer")
    assert spec.max_batch_size == best["max_batch_size"]
    assert sum(g.count for g in spec.instance_groups) == best["instances"]
    if best["batcher"] is None:
        assert spec.dynamic_batching is None
    else:
        assert spec.dynamic_batching.max_queue_delay_us == best["batcher"]
    assert recorded.read(user_repository / "scorer")["tuned"].startswith("tritonkit tune")
    # A server started on the repository now serves the written config.
    server = start_or_fail(server_config(user_repository, load_models=("scorer",)))
    try:
        client = connect("http", server.config.http_url)
        served = config_io.from_json(
            client.get_model_config("scorer"),
            labels=spec.labels,
            description=spec.description,
            precision=spec.precision,
            version=spec.version,
        )
        client.close()
        assert served == config_io.as_served(spec)
    finally:
        assert not server.stop()
