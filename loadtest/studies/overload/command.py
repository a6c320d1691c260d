"""Overload: does the queue policy keep accepted requests inside the p99 budget at twice the saturating load?

``tritonkit overload [--model minilm] [--budget-ms 400] [--trials 3] [--duration 15]`` (``make overload``):

1. **Saturation.** With the queue policy removed, closed-loop users double (4, 8, 16, ...) until throughput
   stops growing by 5% (``loadtest.generators.saturation``); the best throughput is the saturating rate
   (``--saturation-rps`` skips the search).
2. **Load.** Open-loop Poisson arrivals at 1x, 1.5x and 2x of it, with the model's queue policy (from its
   served config, i.e. ``export/models.toml``; ``--max-queue-size``/``--timeout-us`` override it) and with
   none, each applied through model control (the served config is restored afterwards). At each load the two
   configs run ``--trials`` times each, interleaved (policy, none, none, policy, ...: ``evidence.interleaved``),
   so the machine's drift falls on both alike. The default, 3 trials of 15 s, keeps the study near 10 minutes on
   a 2-core machine (18 runs, the search, a reload per run and the drain of the runs without a policy).
3. **Table.** Per trial (``overload_rows.row``): offered and accepted rate, refusal rate (refused / offered),
   client drops, other errors, goodput, p99 of accepted requests against the budget, the statuses refusals came
   with. Per config and load (``overload_report.level``): p99 of accepted requests, refusal share, goodput and
   accepted rate with 95% intervals over the trials, and the verdict against the budget by ``slo.verdict``: pass,
   fail or inconclusive (the interval straddles the budget). Triton 2.51 answers a full queue ("Exceeds maximum
   queue size") and a request that waited past ``default_timeout_microseconds`` with REJECT ("Request timeout
   expired") with HTTP 503 / gRPC UNAVAILABLE: retryable statuses, counted as refusals
   (``loadtest.core.client_stats.RETRYABLE_STATUSES``). An arrival that finds every client slot busy is a *drop*
   (the client saturated, the server never saw it), reported apart; ``--max-inflight`` sets the slots.

Writes ``reports/overload/<model>/``: ``results.json`` (trials, levels, saturation search, every run),
``summary.md``, ``overload.png`` and the Locust logs under ``runs/``. Exit status: 0 when every load with the
queue policy passed (its p99 interval within the budget, failures only retryable refusals); 1 when one failed;
4 when none failed but one was inconclusive; 2 bad arguments; 3 the server or Locust failed. ``--report
results.json`` re-renders the summary and plot without running anything.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from export import config as config_io
from export.spec import QueuePolicy
from loadtest.cli import flags
from loadtest.cli.study import Study
from loadtest.core import evidence
from loadtest.core.results import RunResult
from loadtest.core.spec import Candidate, Scenario, Slo
from loadtest.errors import PayloadError, RunError
from loadtest.generators.locust.run import run_result, trial_of
from loadtest.generators.payloads import PayloadOptions
from loadtest.generators.saturation import Saturation, find_saturation, open_scenario, settle
from loadtest.generators.seam import Locust
from loadtest.reports.writer import ms_text
from loadtest.studies.overload.report import (
    LEVEL_HEADERS,
    TABLE_HEADERS,
    WITH_POLICY,
    WITHOUT_POLICY,
    level_table,
    table,
    text_table,
    verdict,
    write_outputs,
)
from loadtest.studies.overload.rows import load_runs, row, unfinished_row
from loadtest.target import apply
from loadtest.target import endpoints as target
from loadtest.target.endpoints import Endpoints
from tritonkit_errors import ExitStatus

__all__ = ["verdict", "WITH_POLICY", "WITHOUT_POLICY", "measure", "main", "row", "unfinished_row", "load_runs"]

OUT = Path("reports/overload")
CAMPAIGNS = Path(__file__).parents[2] / "campaigns"
FACTORS = (1.0, 1.5, 2.0)
TRIALS = 3
"""Trials per config and load by default: 18 runs of 15 s with the search, the reloads and the drains of the
runs without a policy, within about 10 minutes on a 2-core machine."""
DURATION_S = 15.0
EXIT = {"pass": ExitStatus.OK, "fail": ExitStatus.FAILED, "inconclusive": ExitStatus.INCONCLUSIVE}


# --- configs -------------------------------------------------------------------------------------


def policy_text(policy: QueuePolicy) -> str:
    if not policy.limits:
        return "none"
    return (
        f"max_queue_size={policy.max_queue_size}, default_timeout_us={policy.default_timeout_us}, "
        f"timeout_action={policy.timeout_action}"
    )


def policy_of(config: dict[str, Any]) -> QueuePolicy:
    """The queue policy of a served config (Triton's JSON form, read through ``export.config.from_json``);
    ``QueuePolicy()`` (limits nothing) when it has none."""
    batching = config_io.from_json(config).dynamic_batching
    return (batching.queue_policy if batching is not None else None) or QueuePolicy()


def with_overrides(policy: QueuePolicy, overrides: dict[str, int | None] | None) -> QueuePolicy:
    """``policy`` with each field of ``overrides`` that is not None in its place (a flag not given keeps the
    served value: ``--timeout-us 0`` alone removes only the timeout)."""
    return policy.replace(**{k: v for k, v in (overrides or {}).items() if v is not None})


def variants(model: str, policy: QueuePolicy, fmt: str = "torchscript") -> tuple[Candidate, Candidate]:
    """The config with ``policy`` and the same config with no queue policy (both otherwise as served)."""
    return (
        Candidate.of(
            WITH_POLICY,
            (model,),
            fmt,
            max_queue_size=policy.max_queue_size,
            default_timeout_us=policy.default_timeout_us,
            timeout_action=policy.timeout_action,
        ),
        Candidate.of(WITHOUT_POLICY, (model,), fmt, max_queue_size=0, default_timeout_us=0),
    )


def default_budget_ms(model: str) -> float | None:
    """The p99 budget of ``loadtest/campaigns/<model>.toml``, when there is one."""
    path = CAMPAIGNS / f"{model}.toml"
    if not path.is_file():
        return None
    return float(tomllib.loads(path.read_text())["slo"]["p99_ms"])


def saturation_without_policy(
    model: str,
    served: str,
    protocol: str,
    endpoints,
    work: Path,
    original: dict,
    fmt: str = "torchscript",
    log=print,
    payload: dict | None = None,
    **search,
) -> Saturation:
    """``find_saturation`` with the queue policy removed, then ``original`` served again."""
    _, without = variants(model, policy_of(original), fmt)
    with apply.ServedConfigs(endpoints.http) as configs:
        configs.apply(without, model)
        return find_saturation(model, served, protocol, endpoints, work, log=log, payload=payload, **search)


# --- the whole measurement -----------------------------------------------------------------------


def run_scenario(
    scenario: Scenario, variant: Candidate, served: str, endpoints: Endpoints, work: Path, budget: Slo, log
) -> RunResult:
    """One trial of the pair, through the generator seam, and its result."""
    record = Locust(endpoints, work, log=log).run_scenario(scenario, served, label=f"{scenario.name}--{variant.name}")
    return run_result(scenario, variant, served, [trial_of(record.client, record.server, budget)], budget)


def measure(
    model: str,
    endpoints,
    out_dir: Path,
    *,
    protocol: str = "grpc",
    fmt: str = "torchscript",
    budget_ms: float,
    duration_s: float = DURATION_S,
    warmup_s: float = 3.0,
    factors=FACTORS,
    saturation_rps: float | None = None,
    max_inflight: int = 4096,
    processes: int = 1,
    policy: QueuePolicy | None = None,
    overrides: dict[str, int | None] | None = None,
    search: dict | None = None,
    payload: dict | None = None,
    trials: int = TRIALS,
    log=print,
) -> dict[str, Any]:
    """Saturation, then open-loop load at each factor: ``trials`` runs with and ``trials`` without the queue
    policy, interleaved (A B, B A, ...); the results dict.
    ``policy`` replaces the served policy; ``overrides`` changes single fields of it (None keeps a field);
    ``payload``: the requests' payload table (``Scenario.payload``; default: the catalog model's samples, else
    random values from the served config)."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"--trials {trials!r} must be an integer >= 1")
    started = datetime.now(UTC).isoformat(timespec="seconds")
    served = Candidate.of("x", (model,), fmt).served_model(model)
    work = out_dir / "runs"
    work.mkdir(parents=True, exist_ok=True)
    original = apply.served_config(endpoints.http, served)
    policy = with_overrides(policy or policy_of(original), overrides)
    if not policy.limits:
        raise ValueError(
            f"{served} serves no queue policy: set one in export/models.toml (and re-export) or pass "
            f"--max-queue-size / --timeout-us"
        )
    with_policy, without_policy = variants(model, policy, fmt)
    log(f"overload {served} over {protocol}: queue policy {policy_text(policy)}; p99 budget {budget_ms:g} ms")
    if saturation_rps:
        sat = Saturation(saturation_rps, 0)
        sat_dict = {**dataclasses.asdict(sat), "given": True}
    else:
        sat = saturation_without_policy(
            model, served, protocol, endpoints, work, original, fmt, log=log, payload=payload, **(search or {})
        )
        sat_dict = dataclasses.asdict(sat)
    log(f"  saturating throughput {sat.rps:.1f} req/s")
    budget = Slo(budget_ms, max_error_rate=0.999999)
    rows, runs, current = [], [], None
    by_name = {v.name: v for v in (with_policy, without_policy)}
    configs = apply.ServedConfigs(endpoints.http)
    try:
        for factor in factors:
            rate = round(sat.rps * factor, 1)
            # the two configs interleaved at this load (A B, B A, ...), each switch a reload through model control
            for round_, name in evidence.interleaved([WITH_POLICY, WITHOUT_POLICY], trials):
                variant, trial = by_name[name], round_ + 1
                settle(endpoints, served)  # a run without a policy can leave a backlog behind
                if current != name:
                    configs.apply(variant, model)
                    current = name
                scenario = open_scenario(
                    model,
                    protocol,
                    rate,
                    duration_s,
                    warmup_s,
                    max_inflight,
                    processes,
                    name=f"{model}-{factor:g}x-trial{trial}",
                    payload=payload,
                )
                head = f"  {name:16s} {factor:4g}x trial {trial}/{trials} {rate:8.1f} req/s offered:"
                try:
                    run = run_scenario(scenario, variant, served, endpoints, work, budget, log=lambda *_: None)
                except RunError as exc:
                    # Without a queue policy the queue can grow until requests outlive the run: that is a
                    # result (latency without bound), not a reason to lose the other rows.
                    rows.append({**unfinished_row(name, factor, rate, budget_ms, str(exc)), "trial": trial})
                    log(f"{head} did not finish ({exc})")
                    continue
                r = {**row(run, name, factor, rate, budget_ms, warmup_s), "trial": trial}
                rows.append(r)
                runs.append(run)
                log(
                    f"{head} accepted {r['accepted_rps']:8.1f}/s  refused {r['refusal_rate']:6.2%}  dropped "
                    f"{r['drop_rate']:6.2%}  other {r['other_errors']}  goodput {r['goodput_share']:6.2%}"
                    f"  p99 {ms_text(r['p99_ms'])} ms {'ok' if r['meets_budget'] else 'OVER'}"
                )
    finally:
        settle(endpoints, served)  # a backlog drained before the config goes back
        configs.restore()
    return {
        "model": model,
        "served_model": served,
        "protocol": protocol,
        "budget_ms": budget_ms,
        "started": started,
        "policy": policy_text(policy),
        "policy_values": dataclasses.asdict(policy),
        "saturation": sat_dict,
        "factors": list(factors),
        "trials": trials,
        "duration_s": duration_s,
        "warmup_s": warmup_s,
        "max_inflight": max_inflight,
        "processes": processes,
        "rows": rows,
        "verdict": verdict(rows),
        "runs": [dataclasses.asdict(r) for r in runs],
    }


# --- command line --------------------------------------------------------------------------------


class Overload(Study):
    name = "overload"
    help = "does the queue policy keep accepted requests inside the p99 budget at 1x/1.5x/2x saturation?"
    alias = "python -m loadtest.studies.overload"

    def arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--model",
            default="minilm",
            help="public model name with a queue policy: minilm (default), efficientnet_lite0 or resnet50",
        )
        parser.add_argument(
            "--format",
            default="torchscript",
            choices=("torchscript", "onnx"),
            help="served variant (onnx: <model>_onnx)",
        )
        flags.add_protocol_flag(parser)
        parser.add_argument(
            "--budget-ms", type=float, help="p99 budget (default: the SLO of loadtest/campaigns/<model>.toml)"
        )
        flags.add_trial_flags(
            parser,
            trials=TRIALS,
            duration=DURATION_S,
            warmup_s=3.0,
            trials_help="runs per config and load, the configs interleaved (1: no intervals)",
            duration_help="seconds per load run",
        )
        parser.add_argument(
            "--factors", default="1,1.5,2", help="load factors of the saturating rate (default 1,1.5,2)"
        )
        parser.add_argument("--saturation-rps", type=float, help="skip the search: use this saturating rate")
        parser.add_argument(
            "--search-duration", type=float, default=10.0, help="seconds per saturation step (default 10)"
        )
        parser.add_argument(
            "--max-inflight",
            type=int,
            default=4096,
            help="client slots per Locust process; arrivals beyond are dropped (default 4096)",
        )
        parser.add_argument("--processes", type=int, default=1, help="Locust processes (default 1)")
        parser.add_argument(
            "--max-queue-size", type=int, help="queue policy under test: max_queue_size (default: the served config's)"
        )
        parser.add_argument(
            "--timeout-us",
            type=int,
            help="queue policy under test: default_timeout_microseconds (default: the served config's)",
        )
        flags.add_out_flag(parser, OUT, "reports folder (default reports/overload; files go to <out>/<model>/)")
        parser.add_argument("--report", type=Path, help="re-render summary.md and the plot from this results.json")
        flags.add_server_flags(parser)
        flags.add_payload_flags(parser)

    def run(self, args: argparse.Namespace) -> dict[str, Any] | int:
        """The measured data, or with ``--report`` the data of that results.json to render again."""
        if args.report:
            return json.loads(args.report.read_text())
        try:
            factors = tuple(float(f) for f in args.factors.split(","))
            budget = args.budget_ms or default_budget_ms(args.model)
            if budget is None or budget <= 0:
                raise ValueError(f"no p99 budget for {args.model!r}: pass --budget-ms")
            if any(f <= 0 for f in factors) or args.duration <= args.warmup_s or args.max_inflight < 1:
                raise ValueError("factors must be > 0, --duration must exceed --warmup-s, --max-inflight >= 1")
            if args.trials < 1:
                raise ValueError(f"--trials {args.trials} must be >= 1")
            if any(v is not None and v < 0 for v in (args.max_queue_size, args.timeout_us)):
                raise ValueError("--max-queue-size and --timeout-us must be >= 0")
            options = flags.payload_options(args)
        except (ValueError, PayloadError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return ExitStatus.USAGE
        served = Candidate.of("x", (args.model,), args.format).served_model(args.model)
        # Each flag replaces one field of the served policy; a field without its flag keeps the served value.
        overrides = {"max_queue_size": args.max_queue_size, "default_timeout_us": args.timeout_us}
        code, data = target.run_with_server(
            args,
            (served,),
            lambda endpoints, _server: measure(
                args.model,
                endpoints,
                args.out / args.model,
                protocol=args.protocol,
                fmt=args.format,
                budget_ms=budget,
                duration_s=args.duration,
                warmup_s=args.warmup_s,
                factors=factors,
                saturation_rps=args.saturation_rps,
                max_inflight=args.max_inflight,
                processes=args.processes,
                overrides=overrides,
                search={"duration_s": args.search_duration},
                payload=options.to_table() if options != PayloadOptions() else None,
                trials=args.trials,
            ),
        )
        return code or data

    def report(self, args: argparse.Namespace, data: dict[str, Any]) -> int:
        if args.report:
            paths = write_outputs(data, args.report.parent)
            v = data["verdict"] if "levels" in data["verdict"] else verdict(data["rows"])
            print(text_table(LEVEL_HEADERS, level_table(v["levels"])))
            print("wrote " + ", ".join(map(str, paths)))
            return EXIT[v.get("verdict", "pass" if v["passed"] else "fail")]
        paths = write_outputs(data, args.out / args.model)
        v = data["verdict"]
        print()
        print(text_table(TABLE_HEADERS, table(data["rows"])))
        print()
        print(text_table(LEVEL_HEADERS, level_table(v["levels"])))
        print()
        head = {
            "pass": "PASS: the queue policy kept the p99 interval within budget at every load and refused the excess "
            "with retryable statuses",
            "fail": "FAIL:",
            "inconclusive": "INCONCLUSIVE: at some load the p99 interval straddles the budget:",
        }[v["verdict"]]
        print("\n  ".join([head, *v["problems"]]))
        print("wrote " + ", ".join(map(str, paths)))
        return EXIT[v["verdict"]]


STUDY = Overload()
register, run_command, main = STUDY.register, STUDY.command, STUDY.main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """``python -m loadtest.studies.overload``: the parser of ``tritonkit overload``."""
    return STUDY.parser().parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
