"""`tritonkit compare MODEL --b SPEC (--users N | --rate R)`: is B worse than A? Two served configs, versions
or models of one model, measured interleaved (A B, B A, ...) at the same load, judged per metric (throughput,
p50, p99 and, with --budget-ms, goodput) as better, worse, no difference or inconclusive, each with its change
and interval. `--aa` measures A against itself: the noise floor of the machine and the method.

An arm spec is comma-separated key=value pairs (empty: the model as served): `model=NAME` another served
model, `version=N` a version folder, or serving changes such as `max_queue_delay_us=5000,instances=2`
(`preferred_batch_sizes=8+16`). A local server (the default) serves both arms side by side under two model
names, so nothing reloads between trials; docs/compare.md says how. perf_analyzer measures tensor models,
Locust the others. Writes reports/compare-MODEL/ (results.json with every trial, summary.md).

Exit status: 0 no regression (B better or no different in every metric); 1 B worse in some metric; 2 bad
arguments; 3 the server or the load generator failed; 4 inconclusive (a line says how many trials would
likely settle it).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import shlex
import sys
import tempfile
from pathlib import Path

from export import config as config_io
from export.errors import ExportError
from loadtest.cli import flags
from loadtest.core import evidence, trials
from loadtest.core.measurement import Load, Measurement
from loadtest.errors import LoadTestError
from loadtest.generators import probe
from loadtest.generators import seam as generators
from loadtest.generators.payloads import default_options, payloads
from loadtest.generators.perf_analyzer import perf, profile_export
from loadtest.generators.seam import LoadGenerator
from loadtest.reports.writer import save_report
from loadtest.studies.compare import gate
from loadtest.studies.compare.spec import ArmSpec, CompareError, ServedArm, needs_pipeline, parse_spec, plan, stage
from loadtest.target import apply
from loadtest.target import endpoints as target
from loadtest.target.endpoints import Endpoints
from tritonkit_errors import ExitStatus

EPILOG = """\
examples:
  tritonkit compare digits --b max_queue_delay_us=5000 --users 1
  tritonkit compare digits --b model=digits_onnx --rate 400 --budget-ms 5
  tritonkit compare digits --aa --users 8                             the noise floor
  tritonkit compare digits --b-repository candidate/model_repository --users 8
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", help="the model compared (a model of the repository)")
    parser.add_argument("--a", default="", metavar="SPEC", help="arm A (default: the model as served)")
    parser.add_argument("--b", metavar="SPEC", help="arm B, e.g. max_queue_delay_us=5000,instances=2 or model=NAME")
    parser.add_argument("--aa", action="store_true", help="A/A: measure A as both arms (the noise floor)")
    parser.add_argument("--a-repository", type=Path, metavar="DIR", help="arm A's model folder from this repository")
    parser.add_argument("--b-repository", type=Path, metavar="DIR", help="arm B's model folder from this repository")
    load = parser.add_mutually_exclusive_group(required=True)
    load.add_argument("--users", type=flags.positive(int), help="closed loop: this many clients")
    load.add_argument("--rate", type=flags.positive(float), help="open loop: this many requests per second")
    parser.add_argument("--trials", type=int, default=10, help="trials of each arm (default 10, at least 2)")
    parser.add_argument(
        "--duration", type=flags.positive(float), default=3.0, help="seconds measured per trial (default 3)"
    )
    parser.add_argument(
        "--warmup-rounds",
        type=flags.number(int, 0, strict=False),
        default=1,
        help="rounds run first and left out (default 1)",
    )
    parser.add_argument(
        "--min-effect",
        type=flags.number(float, 0, strict=False),
        default=0.1,
        help="relative change that matters (default 0.1): smaller is 'no difference'",
    )
    parser.add_argument(
        "--min-effect-p99",
        type=flags.number(float, 0, strict=False),
        default=0.2,
        help="the same for p99 (default 0.2): a tail moves more between trials than a rate or a median",
    )
    parser.add_argument("--budget-ms", type=flags.positive(float), help="latency budget that goodput counts")
    flags.add_protocol_flag(parser)
    parser.add_argument("--out", type=Path, help="report folder (default reports/compare-MODEL)")
    flags.add_payload_flags(parser)
    flags.add_server_flags(parser, split=True)


HELP = "A/B regression gate: two configs, versions or models measured interleaved; --aa: noise floor"


def arguments(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser)
    parser.set_defaults(handler=run)


def arm_specs(args: argparse.Namespace) -> tuple[dict[str, ArmSpec], bool]:
    """The two arms from the flags, and whether this is an A/A comparison."""
    evidence.require_trials(args.trials)
    if args.aa and (args.b is not None or args.b_repository):
        raise CompareError("--aa measures A as both arms: drop --b and --b-repository")
    if not args.aa and args.b is None and not args.b_repository:
        raise CompareError("give --b SPEC (or --b-repository DIR), or --aa for the noise floor")
    a = parse_spec(args.a)
    b = a if args.aa else parse_spec(args.b)
    for folder in (args.a_repository, None if args.aa else args.b_repository):
        if folder is not None and not Path(folder).is_dir():
            raise CompareError(f"repository {folder} is not a folder")
    a = _with_repository(a, args.a_repository)
    b = a if args.aa else _with_repository(b, args.b_repository)
    return {"A": a, "B": b}, a.same_as(b)


def _with_repository(spec: ArmSpec, folder: Path | None) -> ArmSpec:
    return dataclasses.replace(spec, repository=Path(folder).resolve()) if folder else spec


def run(args: argparse.Namespace) -> int:
    out = args.out or Path("reports") / f"compare-{args.model}"
    try:
        specs, aa = arm_specs(args)
    except (LoadTestError, ValueError) as exc:
        print(f"compare: error: {exc}", file=sys.stderr)
        return int(ExitStatus.USAGE)
    remote = bool(args.http_url)
    repository = Path(args.repository).resolve()
    if not remote and (missing := target.missing_model(repository, args.model)):
        print(f"compare: error: {missing}", file=sys.stderr)
        return int(ExitStatus.USAGE)
    flags.resolve_cpus(args)
    with tempfile.TemporaryDirectory(prefix="tritonkit-compare-") as staged:
        try:
            arms = plan(args.model, specs, repository, remote=remote)
            if not remote:
                stage(arms, repository, Path(staged))
        except (LoadTestError, ValueError, OSError) as exc:
            print(f"compare: error: {exc}", file=sys.stderr)
            return int(ExitStatus.USAGE)
        served = tuple(dict.fromkeys(arm.served for arm in arms))
        models = ("*",) if needs_pipeline(repository, arms) else served
        server_args = argparse.Namespace(**{**vars(args), "repository": Path(staged)}) if not remote else args
        status, value = target.run_with_server(
            server_args, models, lambda endpoints, _server: _compare(args, arms, aa, endpoints, out)
        )
    return value if status == 0 else status


def _compare(args: argparse.Namespace, arms: list[ServedArm], aa: bool, endpoints: Endpoints, out: Path) -> int:
    load = Load(users=args.users, rate=args.rate)
    # A running server gets its configs back; a local one stops with the run.
    serving = apply.ServedConfigs(endpoints.http, restore=bool(args.http_url))
    configs = {arm.name: _changed(endpoints, arm, serving.original(arm.served)) for arm in arms}
    shared = arms[0].served == arms[1].served and configs["A"] != configs["B"]
    with serving:
        if not shared:  # each arm has its own name: its config is loaded once
            for arm in arms:
                if arm.spec.changes:
                    serving.load(arm.served, configs[arm.name])
        generator = _generator([apply.served_config(endpoints.http, arm.served) for arm in arms])
        options = default_options(args.model, flags.payload_options(args))
        config = apply.served_config(endpoints.http, arms[0].served)
        out.mkdir(parents=True, exist_ok=True)
        input_data = None
        if generator == "perf_analyzer":
            input_data = perf.write_input_data(out / "input_data.json", payloads(config, options), config)
        budget = args.budget_ms if args.budget_ms is not None else math.inf
        print(
            f"compare {args.model}: {'A/A' if aa else 'A/B'}; A {arms[0].spec.describe()} ({arms[0].served}), "
            f"B {arms[1].spec.describe()} ({arms[1].served}); {load.text()}, {generator}, {args.trials} trials of "
            f"{args.duration:g} s + {args.warmup_rounds} warm-up round(s), interleaved",
            flush=True,
        )
        driver = _load_generator(args, endpoints, generator, input_data, options, budget, out)
        measured = [
            trials.Arm(
                arm.name,
                _measurer(args, driver, arm, load),
                (lambda arm=arm: serving.load(arm.served, configs[arm.name])) if shared else None,
            )
            for arm in arms
        ]
        results = trials.run_trials(measured, args.trials, warmup_rounds=args.warmup_rounds)
    verdict = gate.judge(results, args.min_effect, budget, args.min_effect_p99, aa=aa)
    data = {
        "model": args.model,
        "mode": "A/A" if aa else "A/B",
        "command": shlex.join(["tritonkit", *sys.argv[1:]]),
        "arms": [arm.to_dict() for arm in arms],
        "load": load.text(),
        "generator": generator,
        "trials": args.trials,
        "duration_s": args.duration,
        "warmup_rounds": args.warmup_rounds,
        "min_effect": args.min_effect,
        "p99_min_effect": args.min_effect_p99,
        "budget_ms": args.budget_ms,
        "cpus": {"generator": sorted(args.client_cpus), "server": sorted(args.server_cpus)},
        "results": {name: result.to_dict() for name, result in results.items()},
        "verdict": verdict.to_dict(),
    }
    if aa and verdict.comparisons:
        data["noise_floor"] = gate.noise_floor(verdict.comparisons)
    data["plot"] = None  # compare draws none; the key stays, as the other studies' results.json have it
    save_report(data, out, gate.markdown)
    for line in gate.lines(verdict, aa):
        print(line, file=sys.stderr if verdict.broken else sys.stdout)
    print(f"report: {out / 'summary.md'} (every trial in {out / 'results.json'}); exit status {int(verdict.status)}")
    return int(verdict.status)


def _changed(endpoints: Endpoints, arm: ServedArm, original: dict) -> dict:
    """The config the arm serves (Triton's JSON): its served one with the arm's serving changes."""
    if not arm.spec.changes:
        return original
    try:
        return config_io.to_json(arm.spec.changes.apply(config_io.from_json(original)))
    except ExportError as exc:
        raise CompareError(f"arm {arm.name} ({arm.spec.describe()}): {exc}") from None


def _generator(configs: list[dict]) -> str:
    """perf_analyzer when every arm is a tensor model it can drive, else Locust for both: one generator."""
    kinds = {probe.generator_for_config(config) for config in configs}
    return "locust" if "locust" in kinds else "perf_analyzer"


def _load_generator(args, endpoints, generator, input_data, options, budget, out) -> LoadGenerator:
    """The one generator both arms are measured by: perf_analyzer's three windows together last --duration;
    Locust runs --duration."""
    return generators.generator(
        generator,
        endpoints,
        protocol=args.protocol,
        budget_ms=budget,
        input_data=input_data,
        measurement_ms=profile_export.stable_window_ms(args.duration),
        max_trials=profile_export.STABILITY_WINDOWS,
        work=out / "runs",
        payload=options.to_table(),
        duration_s=args.duration,
    )


def _measurer(args, driver: LoadGenerator, arm: ServedArm, load: Load):
    """One trial of ``arm``; Locust's runs are named after the arm and the trial."""
    count = iter(range(1, 1_000_000))

    def measure() -> Measurement:
        return driver.measure(args.model, arm.served, load, label=f"{arm.name}-{next(count)}")

    return measure
