"""The campaign a ``tritonkit loadtest`` command line describes: ``--model`` and its flags as a one-scenario
campaign (:func:`model_campaign`), or a campaign file with the command line's overrides (:func:`file_campaign`);
a bad flag or value raises a ValueError naming it. ``--processes``' default: :func:`default_processes`."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from pathlib import Path

from loadtest.campaign import file as campaign_io
from loadtest.campaign.file import Campaign
from loadtest.cli import flags
from loadtest.core.spec import Scenario, Slo
from loadtest.generators.arrivals import parse_arrival
from loadtest.generators.payloads import PayloadOptions

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
    for flag, value in (
        ("--slo-p99-ms", args.slo_p99_ms),
        ("--slo-ttft-ms", args.slo_ttft_ms),
        ("--slo-itl-ms", args.slo_itl_ms),
    ):
        if value is not None and not 0 < value < math.inf:
            raise ValueError(f"{flag} {value:g} must be a number of ms > 0")
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
