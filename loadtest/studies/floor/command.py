"""`tritonkit floor NAME`: the load generators' own time, measured against one served model.

Each arm is one generator (perf_analyzer, Locust) over one protocol (gRPC, HTTP) at one open-loop rate; the
arms run in interleaved rounds (A B C D, D C B A, ...: ``trials.run_trials``), so the machine's drift falls on
each alike. Every run is traced by Triton (``loadtest.target.server_trace``): its floor is the client's p50 and
p99 minus Triton's own over the same run, the time the generator, its library, the loopback and Triton's
frontend add. A Triton older than 2.57.0 is not traced (it can crash while tracing): its floor is the mean, the
client's mean minus Triton's mean request time from its metrics. Each figure is reported with its 95% interval
over the rounds, and each generator's p50 is set against perf_analyzer's (C++, the reference) at the same rate and
protocol, paired by round: the target is a difference within ``TARGET_MS``, printed met, missed or inconclusive,
never asserted.

  tritonkit floor digits                                  gRPC and HTTP, both generators, 20 req/s, 3 rounds
  tritonkit floor digits --rates 20,1000 --trials 5       and near saturation too

Report: reports/floor-NAME/ (results.json, summary.md). Exit status: 0 measured; 2 bad arguments, or a model
that is not in the repository; 3 the server or a generator failed, or fewer than 2 usable rounds of an arm.
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
from pathlib import Path
from typing import Any

from loadtest.cli import flags
from loadtest.cli.study import Study
from loadtest.core import evidence
from loadtest.core.measurement import Load
from loadtest.core.trials import Arm, run_trials
from loadtest.errors import LoadTestError
from loadtest.generators import seam as generators
from loadtest.generators.payloads import default_options, payloads
from loadtest.generators.perf_analyzer import perf, profile_export
from loadtest.reports.writer import commit, save_report
from loadtest.target import apply, server_trace
from loadtest.target import endpoints as target
from tritonkit_errors import ExitStatus

REFERENCE = "perf_analyzer"
TARGET_MS = 0.3
"""A generator's p50 within this of perf_analyzer's at the same rate and protocol adds next to nothing."""


def _list(text: str, allowed: tuple[str, ...] | None = None) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if allowed is not None and t not in allowed]
    if not items or bad:
        what = f"one or more of {', '.join(allowed)}" if allowed is not None else "one value or more"
        raise argparse.ArgumentTypeError(f"{text!r}: give {what}, comma-separated")
    return list(dict.fromkeys(items))


def _rates(text: str) -> list[float]:
    try:
        rates = [float(t) for t in _list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--rates {text!r}: numbers of requests/s, comma-separated") from None
    if not all(math.isfinite(r) and r > 0 for r in rates):
        raise argparse.ArgumentTypeError(f"--rates {text!r}: every rate must be > 0 requests/s")
    return rates


def arm_name(generator: str, protocol: str, rate: float) -> str:
    return f"{generator} {protocol} {rate:g}/s"


def measure(args: argparse.Namespace, endpoints, out: Path, log=print) -> dict[str, Any]:
    """Every arm's rounds, and the figures with their intervals."""
    config = apply.served_config(endpoints.http, args.model)
    options = default_options(args.model, flags.payload_options(args))
    out.mkdir(parents=True, exist_ok=True)
    input_data = perf.write_input_data(out / "input_data.json", payloads(config, options), config)
    built = {}
    for kind in args.generators:
        for protocol in args.protocols:
            settings = {"protocol": protocol, "work": out / "runs", "duration_s": args.duration, "processes": 1}
            settings |= {"payload": options.to_table(), "input_data": input_data, "max_trials": 5}
            settings["measurement_ms"] = profile_export.stable_window_ms(args.duration)
            built[(kind, protocol)] = generators.generator(kind, endpoints, **settings)
    arms = [
        Arm(arm_name(kind, protocol, rate), lambda g=gen, r=rate: g.measure(args.model, args.model, Load(rate=r)))
        for rate in args.rates
        for (kind, protocol), gen in built.items()
    ]
    log(f"floor {args.model}: {len(arms)} arms x {args.trials} rounds of {args.duration:g} s, interleaved")
    results = run_trials(arms, args.trials, log=log)
    return {"arms": {name: summarize_arm(r.trials) for name, r in results.items()}, "pairs": pairs(args, results)}


def summarize_arm(trials) -> dict[str, Any]:
    usable = [m for m in trials if m.usable]
    figures = {
        "p50_ms": [m.p50_ms for m in usable],
        "p99_ms": [m.p99_ms for m in usable],
        "floor_p50_ms": [m.floor_ms.get("p50", math.nan) for m in usable],
        "floor_p99_ms": [m.floor_ms.get("p99", math.nan) for m in usable],
        "floor_mean_ms": [m.floor_ms.get("mean", math.nan) for m in usable],
        "throughput": [m.throughput for m in usable],
    }
    return {
        "trials": [m.to_dict() for m in trials],
        "usable": len(usable),
        "intervals": {k: evidence.figure_interval(k, v).to_dict() for k, v in figures.items()},
    }


def pairs(args: argparse.Namespace, results) -> list[dict[str, Any]]:
    """Each generator's p50 minus perf_analyzer's at the same rate and protocol, over the rounds where both were
    usable (they ran next to each other), with the target's verdict."""
    out = []
    for rate in args.rates:
        for protocol in args.protocols:
            reference = results.get(arm_name(REFERENCE, protocol, rate))
            for kind in (k for k in args.generators if k != REFERENCE):
                other = results.get(arm_name(kind, protocol, rate))
                if reference is None or other is None:
                    continue
                rounds = [(a, b) for a, b in zip(reference.trials, other.trials, strict=False) if a.usable and b.usable]
                diffs = [b.p50_ms - a.p50_ms for a, b in rounds]
                iv = evidence.interval(diffs)
                out.append(
                    {"generator": kind, "protocol": protocol, "rate": rate, "p50_minus_reference_ms": iv.to_dict()}
                )
                out[-1]["target"] = target_verdict(iv)
    return out


def target_verdict(iv: evidence.Interval) -> str:
    """met when the difference's interval is within ``TARGET_MS``, missed when it is beyond, else inconclusive."""
    if iv.trials < 2 or math.isnan(iv.estimate):
        return "inconclusive: fewer than 2 paired rounds"
    if iv.high <= TARGET_MS:
        return "met"
    if iv.low > TARGET_MS:
        return "missed"
    return "inconclusive"


def _cell(raw: dict[str, float], fmt: str = "{:.3f}") -> str:
    iv = evidence.Interval.from_dict(raw)
    return (
        "n/a" if math.isnan(iv.estimate) else f"{fmt.format(iv.estimate)} ({fmt.format(iv.low)}-{fmt.format(iv.high)})"
    )


def markdown(data: dict[str, Any]) -> str:
    head = [
        f"# The load generators' floor on `{data['model']}`",
        "",
        f"- command: `{data['command']}` ({data['date']}, commit {data['commit'] or 'unknown'})",
        f"- {data['trials']} interleaved rounds of {data['duration_s']:g} s per arm; 95% intervals over the rounds",
        "- floor: the client's percentile minus Triton's own (its trace API) over the same run; untraced (a Triton "
        "older than 2.57.0), the client's mean minus Triton's mean request time from its metrics",
        "",
        "| arm | usable | p50 ms | p99 ms | floor p50 ms | floor p99 ms | floor mean ms |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = [
        f"| {name} | {arm['usable']} | {_cell(arm['intervals']['p50_ms'])} | {_cell(arm['intervals']['p99_ms'])} | "
        f"{_cell(arm['intervals']['floor_p50_ms'])} | {_cell(arm['intervals']['floor_p99_ms'])} | "
        f"{_cell(arm['intervals']['floor_mean_ms'])} |"
        for name, arm in data["arms"].items()
    ]
    tail = ["", f"| generator | protocol | rate | p50 minus {REFERENCE}'s, ms | target (<= {TARGET_MS} ms) |"]
    tail += ["|---|---|---|---|---|"]
    for p in data["pairs"]:
        tail.append(
            f"| {p['generator']} | {p['protocol']} | {p['rate']:g}/s | {_cell(p['p50_minus_reference_ms'])} "
            f"| {p['target']} |"
        )
    return "\n".join([*head, *rows, *tail, ""])


def arm_floor_text(intervals: dict) -> str:
    """The traced floor's p50 and p99, or untraced (a Triton older than 2.57.0) its mean."""
    if not math.isnan(evidence.Interval.from_dict(intervals["floor_p50_ms"]).estimate):
        return f"floor p50 {_cell(intervals['floor_p50_ms'])} ms, p99 {_cell(intervals['floor_p99_ms'])} ms"
    return f"floor mean {_cell(intervals['floor_mean_ms'])} ms ({server_trace.UNTRACED})"


class Floor(Study):
    name = "floor"
    help = "the load generators' own time (client minus Triton's, from its trace) at given rates, with intervals"
    alias = "python -m loadtest.studies.floor"

    def arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", metavar="NAME", help="a tensor model of the repository (perf_analyzer drives it)")
        parser.add_argument("--rates", type=_rates, default=[20.0], help="open-loop rates, req/s (default 20)")
        parser.add_argument(
            "--generators",
            type=lambda t: _list(t, generators.GENERATORS),
            default=list(generators.GENERATORS),
            help="comma-separated (default perf_analyzer,locust)",
        )
        parser.add_argument(
            "--protocols",
            type=lambda t: _list(t, generators.PROTOCOLS),
            default=list(generators.PROTOCOLS),
            help="comma-separated (default grpc,http)",
        )
        parser.add_argument("--trials", type=int, default=3, help="interleaved rounds (>= 2, default 3)")
        parser.add_argument("--duration", type=float, default=6.0, help="seconds per run (default 6)")
        flags.add_out_flag(parser, None, "report folder (default reports/floor-NAME)")
        flags.add_payload_flags(parser)
        flags.add_server_flags(parser, split=True)

    def run(self, args: argparse.Namespace) -> dict[str, Any] | int:
        try:
            evidence.require_trials(args.trials)
            if not (math.isfinite(args.duration) and args.duration >= 1):
                raise ValueError(f"--duration {args.duration:g} must be at least 1 s")
            flags.payload_options(args)
        except (ValueError, LoadTestError) as exc:
            print(f"floor: error: {exc}", file=sys.stderr)
            return ExitStatus.USAGE
        if not args.http_url and (missing := target.missing_model(args.repository, args.model)):
            print(f"floor: error: {missing}", file=sys.stderr)
            return ExitStatus.USAGE
        flags.resolve_cpus(args)
        out = args.out or Path("reports") / f"floor-{args.model}"
        code, data = target.run_with_server(args, (args.model,), lambda endpoints, _: measure(args, endpoints, out))
        if code:
            return code
        if any(arm["usable"] < 2 for arm in data["arms"].values()):
            short = [name for name, arm in data["arms"].items() if arm["usable"] < 2]
            print(f"floor: error: fewer than 2 usable rounds of {', '.join(short)} (see {out})", file=sys.stderr)
            data["status"] = int(ExitStatus.BROKEN)
        return data | {"model": args.model, "out": str(out)}

    def report(self, args: argparse.Namespace, data: dict[str, Any]) -> int:
        data |= {"trials": args.trials, "duration_s": args.duration, "rates": args.rates, "commit": commit()}
        data |= {"command": " ".join(["tritonkit", *sys.argv[1:]]), "date": datetime.date.today().isoformat()}
        paths = save_report(data, Path(data["out"]), markdown)
        print()
        for name, arm in data["arms"].items():
            print(f"  {name:26s} {arm_floor_text(arm['intervals'])}")
        for p in data["pairs"]:
            print(
                f"  {p['generator']} {p['protocol']} at {p['rate']:g}/s: p50 minus {REFERENCE}'s "
                f"{_cell(p['p50_minus_reference_ms'])} ms: target <= {TARGET_MS} ms {p['target']}"
            )
        print("wrote " + ", ".join(map(str, paths)))
        return int(data.get("status", ExitStatus.OK))


STUDY = Floor()
register, run_command, main = STUDY.register, STUDY.command, STUDY.main

if __name__ == "__main__":
    sys.exit(main())
