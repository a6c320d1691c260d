"""`tritonkit tune NAME`: search a served model's batching, instances, max batch size and exported formats
for the highest throughput that meets a p99 budget at a given load, and write the pick.

The load is a closed loop of `--users N` or an open loop of `--rate R` requests per second, made by
perf_analyzer (C++ gRPC) for tensor models and by Locust for pipelines and streams; a local server is
started with the model's formats (or `--http-url` names a running one) and, by default, the server and the
generator run on separate halves of the CPUs. Each candidate is applied through model control and screened
with one probe; the served config and the best few (`--leaders`) are then measured again, interleaved,
`--trials` times each. A candidate replaces the served config only when its throughput is better beyond the
noise (by at least `--min-effect`) and its SLO verdict over its trials is PASS; else the served config stays.
The served configs are restored afterwards. Every candidate tried is printed and kept in
`reports/tune/NAME/` (results.json, summary.md, tune.png).

The pick is written through the config generator: `export/tuned.toml` (then re-exported) for a model of
export/models.toml, the model's own `config.pbtxt` (and its manifest's export arguments) for a model
exported with `--model-file`. `--dry-run` prints the diff and writes no config.

Exit status: 0 a pick was written (or diffed), the served config kept included; 1 no candidate met the
SLO (the best one is named with the load at which it does); 2 a bad argument or model; 3 the server or the
load generator failed; 4 no candidate passed and the leader's SLO verdict stayed inconclusive.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
from pathlib import Path

from export import config as config_io
from export import model_kind
from export.errors import ExportError
from export.model_kind import is_decoupled
from loadtest.cli import flags
from loadtest.core.evidence import require_trials
from loadtest.core.measurement import Load
from loadtest.core.spec import Slo
from loadtest.errors import LoadTestError, PayloadError
from loadtest.generators.payloads import default_options, payloads
from loadtest.generators.perf_analyzer import perf
from loadtest.target import apply
from loadtest.target import endpoints as target
from loadtest.target.endpoints import Endpoints
from loadtest.tune import compare, decide, search, writer
from loadtest.tune import report as tune_report
from loadtest.tune.space import Point, formats_in
from loadtest.tune.tuner import TuneError, TuneOptions, tune
from tritonkit_command import Command
from tritonkit_errors import ExitStatus, alias_parser

REPORTS = Path("reports") / "tune"
EPILOG = """\
examples:
  tritonkit tune digits --slo-p99-ms 30 --users 4 --trials 3
  tritonkit tune digits --slo-p99-ms 30 --users 4 --analyzer       also Model Analyzer's pick, same load
  tritonkit tune scorer --slo-p99-ms 20 --rate 500 --budget-s 60 --dry-run
  tritonkit tune minilm --slo-p99-ms 400 --users 8 --shape input_ids:32 --shape attention_mask:32
  tritonkit tune encoder --via encoder_pipeline --samples my_texts.py:sentences --slo-p99-ms 200 --users 4
                                         the model behind a pipeline, at the load real requests give it
"""


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: values must be >= 0")
    return values


def _counts(text: str) -> tuple[int, ...]:
    values = _ints(text)
    if 0 in values:
        raise argparse.ArgumentTypeError(f"{text!r}: instance counts must be >= 1")
    return values


def _delays(text: str) -> tuple[int | None, ...]:
    parts = text.split(",")
    try:
        return tuple(None if p == "off" else _ints(p)[0] for p in parts)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of delays in us or 'off'") from None


def _preferred(text: str) -> tuple[tuple[int, ...], ...]:
    sets = []
    for part in text.split("/"):
        sizes = () if part in ("none", "-", "") else _ints(part)
        if any(s < 1 for s in sizes):
            raise argparse.ArgumentTypeError(f"{text!r}: preferred batch sizes must be >= 1")
        sets.append(tuple(sorted(sizes)))
    return tuple(sets)


HELP = "search batching, instances, max batch size and formats for the best config in a p99 budget"


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="NAME", help="the served model (any model in the repository)")
    flags.add_p99_budget_flag(parser, required=True)
    load = parser.add_mutually_exclusive_group(required=True)
    load.add_argument(
        "--users", type=flags.positive(int), help="closed loop: this many clients, each waits for its answer"
    )
    load.add_argument("--rate", type=flags.positive(float), help="open loop: this many requests per second")
    parser.add_argument("--max-error-rate", type=float, default=0.0, help="largest acceptable failures/requests")
    parser.add_argument(
        "--budget-s", type=flags.positive(float), default=300.0, help="wall-clock budget of the search (default 300)"
    )
    parser.add_argument(
        "--analyzer",
        action="store_true",
        help="also run Triton Model Analyzer on the model with the same budget, then measure both "
        "picks under the same load and print them side by side",
    )
    parser.add_argument(
        "--trials",
        type=int,
        default=decide.TRIALS,
        help=f"interleaved trials of each leader (default {decide.TRIALS}, at least 2)",
    )
    parser.add_argument(
        "--min-effect",
        type=float,
        default=decide.MIN_EFFECT,
        help="smallest throughput gain over the served config that replaces it, as a fraction "
        f"(default {decide.MIN_EFFECT:g})",
    )
    parser.add_argument(
        "--leaders",
        type=flags.positive(int),
        default=decide.LEADERS,
        help=f"candidates measured again beside the served config (default {decide.LEADERS})",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the config diff of the pick; write no config")
    flags.add_protocol_flag(parser)
    parser.add_argument(
        "--strategy",
        choices=search.STRATEGIES,
        default="descent",
        help="descent: one setting at a time (default); grid: every combination",
    )
    parser.add_argument("--max-instances", type=flags.positive(int), default=4, help="instance counts 1..N (default 4)")
    parser.add_argument(
        "--instances",
        type=_counts,
        metavar="LIST",
        help="instance counts to search, e.g. 2 or 1,2 (in place of 1..--max-instances)",
    )
    parser.add_argument("--measurement-ms", type=flags.positive(int), default=2000, help="perf_analyzer window (ms)")
    parser.add_argument(
        "--delays-us",
        type=_delays,
        metavar="LIST",
        help="batching delays to search, e.g. off,0,500 (off: no dynamic batcher; default off and "
        "0, 100, 500, 1000, 2000 and the served one)",
    )
    parser.add_argument(
        "--batch-sizes",
        type=_ints,
        metavar="LIST",
        help="max_batch_size values to search, each at most what the export was checked for",
    )
    parser.add_argument(
        "--preferred",
        type=_preferred,
        metavar="LIST",
        help="preferred batch size sets to search, '/'-separated, e.g. none/8/8,16 (default: none, "
        "the served sizes and sizes near the load)",
    )
    parser.add_argument(
        "--formats",
        type=lambda t: tuple(t.split(",")),
        metavar="LIST",
        help="exported formats to compare, e.g. torchscript/fp32,onnx/fp32 (default: every one the server serves)",
    )
    parser.add_argument(
        "--via",
        metavar="ENSEMBLE",
        help="send the load through this ensemble (a pipeline that calls NAME, e.g. one `tritonkit export "
        "--preprocess` wrote), with its requests (--samples): NAME is tuned at the batches the pipeline gives it",
    )
    parser.add_argument("--out", type=Path, help="report folder (default reports/tune/NAME)")
    flags.add_payload_flags(parser)
    flags.add_server_flags(parser, split=True)
    parser.set_defaults(handler=run)


def options_from(args: argparse.Namespace, out: Path) -> TuneOptions:
    if not 0 <= args.max_error_rate < 1:
        raise TuneError(f"--max-error-rate {args.max_error_rate} must be in [0, 1)")
    if not 0 <= args.min_effect < 1:
        raise TuneError(f"--min-effect {args.min_effect} must be a fraction in [0, 1)")
    if args.via and args.analyzer:
        raise TuneError("--analyzer measures the model alone; it does not combine with --via")
    return TuneOptions(
        model=args.model,
        slo=Slo(args.slo_p99_ms, args.max_error_rate),
        load=Load(users=args.users, rate=args.rate),
        repository=Path(args.repository).resolve(),
        budget_s=args.budget_s,
        protocol=args.protocol,
        strategy=args.strategy,
        max_instances=args.max_instances,
        measurement_ms=args.measurement_ms,
        payload=default_options(args.via or args.model, flags.payload_options(args)),
        work=out / "runs",
        axes=_axes(args),
        leaders=args.leaders,
        trials=require_trials(args.trials),
        min_effect=args.min_effect,
        via=args.via,
    )


def _axes(args: argparse.Namespace) -> dict[str, tuple]:
    given = {
        "batcher": args.delays_us,
        "max_batch_size": args.batch_sizes,
        "format": args.formats,
        "preferred": args.preferred,
        "instances": args.instances,
    }
    return {axis: values for axis, values in given.items() if values}


def models_to_load(repository: Path, model: str) -> tuple[str, ...]:
    """The model and its exported formats; a pipeline calls other models, so then the whole repository."""
    names = [Point(fmt, None, (), 1, 0).served_model(model) for fmt in formats_in(repository, model)] or [model]
    config = repository / model / "config.pbtxt"
    try:
        if config.is_file() and model_kind.kind(config_io.parse(config)).calls_others:
            return ("*",)
    except ExportError:
        pass  # loaded by name: the server says what is wrong with it
    return tuple(names)


def run(args: argparse.Namespace) -> int:
    out = args.out or REPORTS / args.model
    try:
        options = options_from(args, out)
        if not args.http_url and (missing := target.missing_model(options.repository, args.model)):
            raise TuneError(missing)
    except (TuneError, LoadTestError, ValueError) as exc:  # PayloadError is a LoadTestError
        print(f"tune: error: {exc}", file=sys.stderr)
        return ExitStatus.USAGE
    flags.resolve_cpus(args)
    status, value = target.run_with_server(
        args,
        ("*",) if args.via else models_to_load(options.repository, args.model),
        lambda endpoints, _server: _tune(options, endpoints, out, args),
    )
    return value if status == 0 else status


def with_payloads(options: TuneOptions, endpoints: Endpoints, out: Path) -> TuneOptions:
    """The payloads made once from the served config (one clear error before any probe when they cannot be),
    and written as perf_analyzer's input data: both generators send the same requests."""
    config = apply.served_config(endpoints.http, options.target)
    samples = payloads(config, options.payload)
    if is_decoupled(config) or any(a.dtype == object for a in samples[0].values()):
        return options  # Locust: its processes make the same payloads from options.payload
    out.mkdir(parents=True, exist_ok=True)
    return dataclasses.replace(options, input_data=perf.write_input_data(out / "input_data.json", samples, config))


def _tune(options: TuneOptions, endpoints: Endpoints, out: Path, args: argparse.Namespace) -> int:
    if args.client_cpus:
        print(f"tune: generator on CPUs {_cpus(args.client_cpus)}, server on {_cpus(args.server_cpus) or 'all'}")
    try:
        options = with_payloads(options, endpoints, out)
        what = options.payload.samples or options.payload.input_data or "random values from the config"
        print(f"tune: requests carry {what}")
        outcome = tune(options, endpoints)
    except (TuneError, PayloadError) as exc:
        print(f"tune: error: {exc}", file=sys.stderr)
        return ExitStatus.USAGE
    sections: list[str] = []
    extra: dict = {
        "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "cpus": {"generator": sorted(args.client_cpus), "server": sorted(args.server_cpus)},
    }
    if args.analyzer:
        side = compare.with_analyzer(outcome, endpoints, out / "analyzer")
        extra["analyzer"] = side.to_dict()
        sections.append(side.markdown())
        print(side.text())
    rows = tune_report.table_rows(*_table_input(outcome))
    print()
    print(tune_report.text_table(rows))
    decision = outcome.decision
    extra["decision"] = decision.to_dict()
    sections.append(tune_report.decision_markdown(decision))
    best = outcome.best
    if best is None:
        summary = tune_report.write(outcome, out, extra=extra, sections=sections)
        print(f"\ntune {options.model}: {decision.reason}", file=sys.stderr)
        if decision.meets_at:
            print(f"tune {options.model}: {decision.meets_at}", file=sys.stderr)
        print(f"report: {summary}", file=sys.stderr)
        return decision.status
    start = outcome.result.start
    kept = " (the served config, kept)" if decision.kept_served else ""
    print(
        f"\ntune {options.model}: pick #{best.order} {best.point.label()}{kept}: {_figures(best)} "
        f"(served #{start.order}: {_figures(start)})\n{decision.reason}"
    )
    try:
        written = writer.write_pick(outcome, dry_run=args.dry_run, reload=lambda name: _reload(endpoints, name))
    except LoadTestError as exc:
        print(f"tune: error: {exc}", file=sys.stderr)
        return ExitStatus.USAGE
    extra["written"] = written.to_dict()
    sections.append(written.markdown())
    print(written.text())
    summary = tune_report.write(outcome, out, extra=extra, sections=sections)
    print(f"report: {summary} (plot {out / 'tune.png'}, results {out / 'results.json'})")
    return ExitStatus.OK


def _figures(trial: search.Trial) -> str:
    iv = trial.intervals()
    return f"{iv['throughput'].text('{:.1f}', ' infer/s')}, p99 {iv['p99_ms'].text(unit=' ms')}"


def _reload(endpoints: Endpoints, model: str) -> None:
    apply.load(endpoints.http, model)


def _table_input(outcome):
    trials, names = tune_report.all_trials(outcome)
    return trials, outcome.options.slo, outcome.best, names


def _cpus(cpus) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def main(argv: list[str] | None = None) -> int:
    parser = alias_parser(Command("tune", __name__).register, "python -m loadtest.tune")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
