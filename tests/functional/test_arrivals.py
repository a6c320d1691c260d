"""Open-loop arrival patterns against the real server: ``tritonkit loadtest --model digits --arrival gamma:0.5`` runs,
its report names the pattern, and two Locust processes send one schedule between them, not one each."""

import json
import subprocess
import sys


def test_gamma_arrivals_run_and_the_report_names_the_pattern(server, tmp_path):
    c = server.config
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tritonkit_cli",
            "loadtest",
            "--model",
            "digits",
            "--rate",
            "50",
            "--arrival",
            "gamma:0.5",
            "--duration",
            "6",
            "--processes",
            "2",
            "--out",
            str(tmp_path),
            "--http-url",
            c.http_url,
            "--grpc-url",
            c.grpc_url,
            "--metrics-url",
            c.metrics_url,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "arrival=gamma, burstiness=0.5" in done.stdout
    (run,) = json.loads((tmp_path / "digits" / "results.json").read_text())["runs"]
    assert run["shape"] == {"kind": "open", "rate": 50.0, "arrival": "gamma", "burstiness": 0.5}
    # The whole seconds after both processes are up (they start up to ~2 s late on 2 busy cores, and the
    # arrivals due before a user is ready are not sent): 50/s with CV sqrt(2) gaps is 150 +- about 25 in
    # three seconds. Two processes each sending the whole schedule would send twice that, one alone half.
    timeline = run["client"]["timeline"]
    steady = [p["requests"] for p in timeline if 2 <= p["t"] <= 4]
    assert len(steady) == 3 and 90 <= sum(steady) <= 225, timeline
    assert run["client"]["failures"] == 0
