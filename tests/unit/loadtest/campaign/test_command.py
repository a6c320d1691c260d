"""``tritonkit loadtest``'s stream budgets: ``--slo-ttft-ms`` and ``--slo-itl-ms`` with ``--model``, ``ttft_ms`` and
``itl_ms`` in a campaign's ``[slo]``, each refused with one line naming it when it is not a number of ms > 0."""

from __future__ import annotations

import textwrap

import pytest

from loadtest.campaign import file as campaign_io
from loadtest.campaign.command import file_campaign, model_campaign
from loadtest.errors import CampaignError
from tritonkit_cli import build_parser
from tritonkit_errors import ExitStatus


def args(*argv: str):
    return build_parser().parse_args(["loadtest", *argv])


def test_the_stream_budgets_join_the_slo_of_a_model_run():
    campaign = model_campaign(args("--model", "text_generator", "--slo-ttft-ms", "250", "--slo-itl-ms", "40"))
    assert (campaign.slo.ttft_ms, campaign.slo.itl_ms) == (250.0, 40.0)
    assert model_campaign(args("--model", "digits")).slo.ttft_ms is None


@pytest.mark.parametrize(("flag", "value"), [("--slo-ttft-ms", "0"), ("--slo-itl-ms", "-3"), ("--slo-ttft-ms", "inf")])
def test_a_stream_budget_that_is_no_positive_number_exits_2_in_one_line_naming_the_flag(flag, value, capsys):
    with pytest.raises(SystemExit) as done:
        args("--model", "text_generator", flag, value)
    assert done.value.code == ExitStatus.USAGE
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"argument {flag}: '{value}' " in err


def test_a_campaign_file_sets_the_stream_budgets_in_its_slo_table(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        textwrap.dedent("""
            name = "gen"
            [slo]
            p99_ms = 5000.0
            ttft_ms = 300
            itl_ms = 45.5
            [[scenarios]]
            name = "gen-grpc"
            model = "text_generator"
            protocol = "grpc"
            shape = { kind = "users", users = 2 }
        """)
    )
    campaign = file_campaign(args(str(path)))
    assert (campaign.slo.ttft_ms, campaign.slo.itl_ms) == (300, 45.5)
    with pytest.raises(ValueError, match="^--slo-ttft-ms is for --model; a campaign file sets it per scenario$"):
        file_campaign(args(str(path), "--slo-ttft-ms", "5"))


@pytest.mark.parametrize("table", ["ttft_ms = 0", 'itl_ms = "fast"', "itl_ms = true"])
def test_a_bad_stream_budget_in_a_campaign_is_one_error_naming_the_key(table):
    text = f'name = "c"\n[slo]\np99_ms = 5.0\n{table}\n[[scenarios]]\nname = "s"\nmodel = "m"\nprotocol = "grpc"\n'
    text += 'shape = { kind = "users", users = 1 }\n'
    key = table.split(" ")[0]
    with pytest.raises(CampaignError, match=f"slo.{key}=.* must be a number of ms > 0"):
        campaign_io.parse(text)


def test_processes_default_to_one_per_client_core_and_no_more_than_the_users():
    from loadtest.campaign.command import default_processes

    assert default_processes(args("--client-cpus", "0-3")) == 4
    assert default_processes(args("--client-cpus", "0-3"), users=2) == 2
    assert default_processes(args("--client-cpus", "0")) == 1


def test_the_master_takes_its_worker_count_and_refuses_flags_of_the_other_role():
    from loadtest.campaign.command import master_of

    master = master_of(args("--model", "digits", "--master", "--expect-workers", "3"))
    assert master is not None and master.workers == 3
    assert master_of(args("--model", "digits")) is None
    for argv, named in (
        (("--master", "--expect-workers", "0"), "--expect-workers 0"),
        (("--master", "--processes", "2"), "--processes"),
        (("--expect-workers", "2"), "--expect-workers is for --master"),
        (("--master-host", "h"), "--master-host is for --worker"),
    ):
        with pytest.raises(ValueError, match=named):
            master_of(args("--model", "digits", *argv))
