"""`tritonkit demo` (make demo) against the session server: every step of its path, with the closing campaign
shortened by its own flag (the same runs otherwise), and its report written."""

from __future__ import annotations

import re

import pytest

import tritonkit_cli


def demo(*argv: str) -> int:
    args = tritonkit_cli.build_parser().parse_args(["demo", *argv])
    return args.handler(args)


def test_the_demo_runs_every_step_and_its_campaign_passes_against_a_running_server(server, tmp_path, capsys):
    c = server.config
    urls = ["--http-url", c.http_url, "--grpc-url", c.grpc_url, "--metrics-url", c.metrics_url]
    status = demo("--repository", str(c.model_repository), *urls, "--campaign-seconds", "3", "--reports", str(tmp_path))
    captured = capsys.readouterr()
    out = captured.out
    # A stall of the shared machine in a 3 s window can make the generator, not the server, the limit of a run:
    # the gate then does not judge (seen once on CI: 16% of digits-http-open's requests sent late). That is
    # the gate's right answer, not the demo failing; anything else must pass.
    unjudged = "SLO gate not judged" in captured.err and "the generator, not the server, was the limit" in out
    assert status == 0 or (status == 1 and unjudged), out[-3000:] + captured.err[-2000:]
    for step in ("export", "digits", "image_classifier", "text_embedder", "text_generator", "load campaign 'smoke'"):
        assert f"== {step}" in out, step
    table = out.split("== export", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    columns = {re.match(r"  \S+ +", line).end() for line in table}  # where each variant starts
    widest = max(len(line.split()[0]) for line in table)
    assert len(table) >= 10 and columns == {2 + widest + 1}, "the columns line up, no wider:\n" + "\n".join(table)
    accuracy = float(re.search(r"accuracy (\d\.\d+)", out).group(1))
    assert accuracy > 0.9, "the held-out digits, answered by the served model"
    assert "scenarios of 3 s" in out and "coffee" in out
    assert (tmp_path / "index.html").is_file() and (tmp_path / "runs.csv").read_text().count("\n") == 1 + 3


def test_the_demo_refuses_a_url_without_the_others_in_one_line(capsys):
    assert demo("--http-url", "127.0.0.1:1") == 2
    assert capsys.readouterr().err.strip() == "demo: error: --http-url needs --grpc-url and --metrics-url too"


def test_the_demo_runs_only_the_steps_of_the_models_it_is_given(server, tmp_path, capsys):
    c = server.config
    urls = ["--http-url", c.http_url, "--grpc-url", c.grpc_url, "--metrics-url", c.metrics_url]
    only = ["--models", "image_classifier"]
    status = demo("--repository", str(c.model_repository), *urls, *only, "--reports", str(tmp_path))
    out = capsys.readouterr().out
    assert status == 0, out[-3000:]
    assert "== image_classifier" in out and "coffee" in out
    assert not any(f"== {step}" in out for step in ("digits", "text_embedder", "text_generator")), out[-3000:]
    assert "no scenario on image_classifier; skipped" in out, "smoke.toml has no scenario on image_classifier"
    assert not (tmp_path / "index.html").exists()


def test_the_demo_refuses_a_model_it_has_no_step_for_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        demo("--models", "resnet50")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--models" in err and "'resnet50'" in err, err


def test_the_demo_refuses_a_repository_that_is_not_a_folder_in_one_line(tmp_path, capsys):
    assert demo("--repository", str(tmp_path / "missing"), "--models", "digits") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "missing" in err and "is not a directory" in err, err
