"""``tritonkit loadtest``: load any served model, from a campaign file or straight from the command line, then
write ``reports/<name>/`` (results, Markdown, plots, HTML), tune (campaigns) and gate on the SLO.

  tritonkit loadtest CAMPAIGN.toml                       every scenario under every variant (loadtest/campaign/file.py)
  tritonkit loadtest --model NAME [--protocol grpc] [--users N | --rate R] [--duration S] [--slo-p99-ms X]
                     [--slo-ttft-ms X] [--slo-itl-ms X]   (streams: decoupled models, e.g. text_generator)
                     [--arrival poisson|gamma:B|ramp:END_RATE|replay:FILE]
                     [--shape NAME:D1,D2] [--int-range LO:HI] [--input-data FILE.json | --samples FILE.py:FUNC]

``--model`` loads one model of the repository with no campaign file: a local server serving that model (and
what it calls) is started unless ``--http-url/--grpc-url/--metrics-url`` name a running one. The requests are
random values from the served config (a dynamic dim needs ``--shape``; BYTES inputs need real data), a
perf_analyzer input-data file, or a function of yours; a catalog model sends its own real data by default.
A decoupled model is driven as a stream, and its time to first token (TTFT), inter-token latency (ITL) and
output tokens/s are reported too (docs/load-testing.md#streams-ttft-itl-tokenss).

``--processes N``: Locust processes on this host, one per client core by default (the ``--client-cpus`` set, else
the CPUs this process may use; a closed loop no more than its users); a run whose generator was the limit says so.
More hosts, the same campaign flags (docs/load-testing.md#more-processes-and-hosts)::

  tritonkit loadtest CAMPAIGN.toml|--model NAME ... --master --expect-workers N [--master-bind-port P]
  tritonkit loadtest --worker --master-host H [--master-port P] [--processes N]      (on each load host)

The master runs the campaign as a local run would, each run's load sent by the N worker processes (its Locust's
master/worker messages carry the run's settings out and every request's latency back), and writes the same result.

``--trials N`` (or ``trials = N`` in a campaign file) runs each scenario N times under each variant,
interleaved (A B, B A, ...), each trial with its own warm-up left out; with N >= 2 every figure is reported with its
95% interval and the SLO verdict is pass, fail or inconclusive (docs/load-testing.md#trials-intervals-and-the-verdict).

Exit status: 0 the SLO held; 1 the SLO gate failed (each failing scenario is named, with by how much);
2 the campaign file, an argument, the model, its payloads or the server's address is invalid; 3 the server
or Locust failed, or the SLO was missed only where the load generator, not the server, was the limit (its
requests sent late, its rate short, its slots full or its CPU saturated: each such run is named); 4 inconclusive: no
scenario failed but one straddles a limit (each is named, with how many more trials would likely settle it).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import sys
from pathlib import Path

from loadtest.campaign import file as campaign_io
from loadtest.campaign.execution import execute
from loadtest.campaign.file import Campaign
from loadtest.campaign.preflight import check_reachable, check_repository_payloads, needed_models
from loadtest.cli import flags
from loadtest.core.spec import Scenario, Slo
from loadtest.errors import CampaignError, PayloadError, VariantError
from loadtest.generators.arrivals import parse_arrival
from loadtest.generators.locust import runner
from loadtest.generators.payloads import PayloadOptions
from loadtest.target import apply
from loadtest.target import endpoints as target
from tritonkit_errors import ExitStatus

CAMPAIGNS = Path(__file__).parents[1] / "campaigns"
REPORTS = Path("reports")


DEFAULT_USERS = 8


def default_processes(args: argparse.Namespace, users: int | None = None) -> int:
    """One Locust process per client core (``--client-cpus``, else the CPUs this process may use), and no more than
    a closed loop's ``users``; at least 1."""
    cores = len(args.client_cpus or os.sched_getaffinity(0))
    return max(1, min(cores, users) if users else cores)


def file_campaign(args: argparse.Namespace) -> Campaign:
    if args.campaign is None:
        raise ValueError("give a campaign file or --model NAME (tritonkit loadtest --help)")
    flags = [
        f
        for f, v in (
            ("--users", args.users),
            ("--rate", args.rate),
            ("--arrival", args.arrival),
            ("--slo-p99-ms", args.slo_p99_ms),
            ("--slo-goodput", args.slo_goodput),
            ("--slo-ttft-ms", args.slo_ttft_ms),
            ("--slo-itl-ms", args.slo_itl_ms),
            ("--warmup-s", args.warmup_s),
            ("--shape", args.shape),
            ("--input-data", args.input_data),
            ("--samples", args.samples),
        )
        if v
    ]
    if flags:
        raise ValueError(f"{flags[0]} is for --model; a campaign file sets it per scenario")
    _check_trials(args)
    campaign = campaign_io.load(args.campaign)
    scenarios = tuple(
        dataclasses.replace(s, payload=_relative_to(s.payload, args.campaign.parent)) for s in campaign.scenarios
    )
    for s in scenarios:  # the options now; their fit to the served config before the first run
        PayloadOptions.from_table(s.payload, f"{args.campaign}: scenario {s.name!r}: payload")
    if args.trials is not None:
        scenarios = tuple(dataclasses.replace(s, trials=args.trials) for s in scenarios)
    if args.processes is not None:
        scenarios = tuple(dataclasses.replace(s, processes=args.processes) for s in scenarios)
    if args.duration:
        scenarios = tuple(
            dataclasses.replace(s, duration_s=args.duration, warmup_s=min(s.warmup_s, args.duration / 4))
            for s in scenarios
        )
    return dataclasses.replace(campaign, scenarios=scenarios)


def _relative_to(payload: dict | None, folder: Path) -> dict | None:
    """A campaign's data files are found beside it first (then from the working directory)."""
    if not payload:
        return payload
    out = dict(payload)
    if (
        isinstance(out.get("input_data"), str)
        and not Path(out["input_data"]).is_absolute()
        and (folder / out["input_data"]).is_file()
    ):
        out["input_data"] = str((folder / out["input_data"]).resolve())
    if isinstance(out.get("samples"), str):
        file, sep, func = out["samples"].rpartition(":")
        if sep and not Path(file).is_absolute() and (folder / file).is_file():
            out["samples"] = f"{(folder / file).resolve()}:{func}"
    return out


def model_campaign(args: argparse.Namespace) -> Campaign:
    """``--model`` and its flags as a one-scenario campaign, so the same runner, report and gate serve both."""
    if args.campaign is not None:
        raise ValueError("give a campaign file or --model, not both")
    duration = 20.0 if args.duration is None else args.duration
    warmup = min(2.0, duration / 10) if args.warmup_s is None else args.warmup_s
    if args.users is not None and args.users < 1:
        raise ValueError(f"--users {args.users} must be >= 1")
    if args.rate is not None and not (args.rate > 0 and math.isfinite(args.rate)):
        raise ValueError(f"--rate {args.rate} must be a number of requests/s > 0")
    _check_trials(args)
    if args.slo_goodput is not None and not 0 < args.slo_goodput <= 1:
        raise ValueError(f"--slo-goodput {args.slo_goodput} must be a share in (0, 1], e.g. 0.99")
    shape = (
        {"kind": "open", "rate": args.rate} if args.rate else {"kind": "users", "users": args.users or DEFAULT_USERS}
    )
    if args.arrival is not None:
        arrival = parse_arrival(args.arrival)
        if args.users is not None:
            raise ValueError(f"--arrival {args.arrival} is for the open loop (--rate), not --users")
        if args.rate is None and arrival.name != "replay":
            raise ValueError(f"--arrival {args.arrival} needs --rate R (requests/s)")
        shape = {"kind": "open", **({"rate": args.rate} if args.rate else {}), **arrival.shape_keys()}
    options = flags.payload_options(args)
    scenario = Scenario(
        f"{args.model}-{args.protocol}",
        args.model,
        args.protocol,
        shape,
        duration,
        warmup,
        args.processes or default_processes(args, None if args.rate or args.arrival else args.users or DEFAULT_USERS),
        payload=options.to_table() if options != PayloadOptions() else None,
        trials=args.trials or 1,
    )
    slo = Slo(
        args.slo_p99_ms or math.inf,
        args.max_error_rate,
        min_goodput=args.slo_goodput,
        ttft_ms=args.slo_ttft_ms,
        itl_ms=args.slo_itl_ms,
    )
    return Campaign(args.model, slo, (scenario,))


def _check_trials(args: argparse.Namespace) -> None:
    if args.trials is not None and args.trials < 1:
        raise ValueError(f"--trials {args.trials} must be >= 1")


HELP = (
    "load any served model (a campaign file or --model): Locust through tritonclient, "
    "Triton's metrics, report, SLO gate"
)


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "campaign",
        type=Path,
        nargs="?",
        help=f"campaign TOML file (see loadtest/campaign/file.py; examples in {CAMPAIGNS})",
    )
    parser.add_argument("--out", type=Path, default=REPORTS, help="reports folder (default: reports/)")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="[tune]: print the config.pbtxt diff of the chosen variant instead of writing it",
    )
    parser.add_argument(
        "--trials",
        type=int,
        help="runs of each scenario under each variant, interleaved; 2 or more report 95%% intervals "
        "(campaign: overrides its trials; default 1)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        help="seconds of load (campaign: overrides every scenario's duration_s; --model: default 20)",
    )
    one = parser.add_argument_group("one model without a campaign file (--model)")
    one.add_argument("--model", help="the model to load (a name in the repository or on the server)")
    flags.add_protocol_flag(one)
    load = one.add_mutually_exclusive_group()
    load.add_argument(
        "--users", type=int, help=f"closed loop: this many users, each waiting for its answer (default {DEFAULT_USERS})"
    )
    load.add_argument("--rate", type=float, help="open loop: Poisson arrivals at this many requests/s")
    one.add_argument(
        "--arrival",
        metavar="SPEC",
        help="open-loop arrivals at --rate: poisson (default), gamma:B (burstiness B: < 1 burstier, > 1 more "
        "regular), ramp:END_RATE (linear from --rate), replay:FILE (a recorded schedule; --rate optional)",
    )
    flags.add_warmup_seconds(
        one, None, "leading seconds left out of the figures (default: a tenth of the duration, at most 2)"
    )
    one.add_argument(
        "--processes",
        type=int,
        help="Locust processes on this host (default: one per client core, see --client-cpus; a campaign file: "
        "overrides its scenarios' processes)",
    )
    flags.add_p99_budget_flag(one, required=False, what="p99 budget in ms (default: none, the gate checks errors only)")
    one.add_argument("--max-error-rate", type=float, default=0.0, help="largest failures/requests (default 0)")
    one.add_argument(
        "--slo-goodput",
        type=float,
        metavar="SHARE",
        help="goodput floor: the least share of requests answered without error within --slo-p99-ms "
        "(and --slo-ttft-ms, --slo-itl-ms) (e.g. 0.99)",
    )
    flags.add_stream_budget_flags(one, "the gate holds its p99 to it; goodput counts only requests within it")
    add_distributed_arguments(parser)
    flags.add_payload_flags(parser)
    flags.add_server_flags(parser)
    parser.set_defaults(handler=run)
    parser.error = _usage_error  # one line and exit 2, as for every other bad input


def add_distributed_arguments(parser: argparse.ArgumentParser) -> None:
    hosts = parser.add_argument_group("load from other hosts (Locust's master and workers)")
    role = hosts.add_mutually_exclusive_group()
    role.add_argument(
        "--master",
        action="store_true",
        help="run the campaign with its load sent by --expect-workers worker processes of other hosts",
    )
    role.add_argument(
        "--worker",
        action="store_true",
        help="send the load of the master at --master-host, run after run, until stopped (no campaign flags: "
        "the master sends each run's settings)",
    )
    hosts.add_argument(
        "--expect-workers", type=int, default=1, help="--master: worker processes each run waits for (default 1)"
    )
    hosts.add_argument("--master-bind-host", default="*", help="--master: interface to listen on (default: all)")
    hosts.add_argument("--master-bind-port", type=int, default=5557, help="--master: port (default 5557)")
    hosts.add_argument("--master-host", help="--worker: the master's host name or address")
    hosts.add_argument("--master-port", type=int, default=5557, help="--worker: the master's port (default 5557)")


def master_of(args: argparse.Namespace) -> runner.Master | None:
    """``--master``'s settings (None for a local run); a ValueError names a bad one."""
    if not args.master:
        if args.expect_workers != 1:
            raise ValueError("--expect-workers is for --master")
        if args.master_host:
            raise ValueError("--master-host is for --worker")
        return None
    if args.expect_workers < 1:
        raise ValueError(f"--expect-workers {args.expect_workers} must be >= 1")
    if args.processes is not None:
        raise ValueError("--processes is a worker's (each worker host's processes count in --expect-workers)")
    return runner.Master(args.expect_workers, args.master_bind_host, args.master_bind_port)


def run_worker(args: argparse.Namespace) -> int:
    """``--worker``: no campaign of its own, the master's runs one after another."""
    if not args.master_host:
        return _error("--worker needs --master-host (the host running tritonkit loadtest --master)")
    given = [
        flag
        for flag, value in (
            ("CAMPAIGN", args.campaign),
            ("--model", args.model),
            ("--http-url", args.http_url),
            ("--duration", args.duration),
            ("--trials", args.trials),
        )
        if value is not None
    ]
    if given:
        return _error(f"{given[0]} is the master's: a worker takes each run's settings from it")
    if args.processes is not None and args.processes < 1:
        return _error(f"--processes {args.processes} must be >= 1")
    processes = args.processes or default_processes(args)
    if args.client_cpus:
        os.sched_setaffinity(0, args.client_cpus)  # its Locust processes inherit it
    return runner.run_worker(args.master_host, args.master_port, processes)


def _usage_error(message: str):
    print(f"error: {message} (tritonkit loadtest --help)", file=sys.stderr)
    raise SystemExit(ExitStatus.USAGE)


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return ExitStatus.USAGE


def run(args: argparse.Namespace) -> int:
    if args.worker:
        return run_worker(args)
    try:
        master = master_of(args)
        if args.processes is not None and args.processes < 1:
            raise ValueError(f"--processes {args.processes} must be >= 1")
        campaign = model_campaign(args) if args.model else file_campaign(args)
    except (CampaignError, PayloadError, ValueError) as exc:
        return _error(str(exc))
    if args.http_url:
        try:
            check_reachable(args.http_url)
            for model in needed_models(campaign):
                apply.served_config(args.http_url, model)
        except (ValueError, VariantError) as exc:
            return _error(str(exc))
        models = ()
    else:
        models = needed_models(campaign, args.repository)
        missing = [why for m in models if m != "*" and (why := target.missing_model(args.repository, m))]
        if missing:
            return _error(missing[0])
        try:  # the payloads against the configs the server will load, before starting it
            check_repository_payloads(campaign, args.repository)
        except (PayloadError, CampaignError) as exc:
            return _error(str(exc))
    out = args.out / campaign.name

    def work(endpoints, _server):
        with runner.as_master(master) if master else contextlib.nullcontext():
            return execute(campaign, endpoints, args.repository, out, dry_run=args.dry_run)

    code, status = target.run_with_server(args, models, work)
    return code or status
