"""`tritonkit capacity NAME --slo-p99-ms B`: the highest open-loop rate whose p99 meets the budget, with its
interval, and a replica plan. A streamed (decoupled) model may be given stream budgets too, in GenAI-Perf's terms:
`--slo-ttft-ms T` (p99 time to first token) and `--slo-itl-ms I` (p99 inter-token latency); a rate then holds
when every budget given holds, and the answer reports p99 TTFT, p99 ITL and output tokens/s.

Open-loop load made by perf_analyzer for a tensor model (C++: a constant rate, or the `--arrival` pattern as its
`--request-intervals` schedule) and by Locust for pipelines and streams (Poisson by default, latency counted from
each request's intended send time); `--generator` picks either. The first run measures the generator's own time
(its floor: the client's p50/p99 minus Triton's own over the run, from Triton's trace API; from Triton 2.57.0, the
mean from its metrics before); a budget of which the floor's p99 (or mean) takes over a quarter is refused
(exit 2). `loadtest.capacity.search.find_capacity` brackets the knee (rates doubling), narrows it to 5%, then
runs `--trials` rounds at 0.9x, 1x and 1.1x the highest passing rate: each round's knee gives the interval, the
three-way SLO verdict at 1x (else 0.9x, else 10% lower) confirms it; then one more round there (unless
`--no-late-round`) joins the interval, and the answer says when it shows the server's rate moved during the run.
`--target-rps Q` prints the replicas that serve Q at the interval's lower bound with `--headroom` for bursts,
plus one (N+1), and the autoscaling target: Triton's queue time per request (the metric deploy/k8s's HPA
scales on) at the rate each replica is planned to carry, as a kustomize patch (printed, or `--write-patch
FILE`), and KServe's scaleTarget and Ray Serve's target_ongoing_requests there (requests in flight by Little's
law), each with its interval (``autoscalers``), as a KServe InferenceService merge patch with
`--write-kserve-patch FILE`; `--price-per-hour P` adds the cost per million requests. Report:
reports/capacity-NAME/ (results.json, summary.md, capacity.png).

Exit status: 0 found; 1 no rate meets the budget (even the lowest probed), or the trials failed at every step
down; 2 bad arguments, a model that is not in the repository or not served, or a budget within the generator's
floor; 3 the server or the load
generator failed; 4 the verdict at the knee stayed inconclusive.
"""

from __future__ import annotations

import argparse
import datetime
import math
import shlex
import sys
from pathlib import Path

from export import config as config_io
from export import model_kind
from export.errors import ExportError
from loadtest.capacity import autoscalers, replica_plan
from loadtest.capacity import report as capacity_report
from loadtest.capacity import search as capacity
from loadtest.capacity.result import budget_text
from loadtest.capacity.search import CapacityResult
from loadtest.cli import flags
from loadtest.core import evidence
from loadtest.core.measurement import Load, Measurement, floor_figures
from loadtest.core.spec import Slo
from loadtest.errors import LoadTestError
from loadtest.generators import probe
from loadtest.generators import seam as generators
from loadtest.generators.arrivals import Arrival, parse_arrival, write_request_intervals
from loadtest.generators.payloads import default_options, payloads
from loadtest.generators.perf_analyzer import perf, profile_export
from loadtest.generators.saturation import settle
from loadtest.reports import writer as study_report
from loadtest.target import apply, server_trace
from loadtest.target import endpoints as target
from loadtest.target.endpoints import Endpoints
from tritonkit_errors import ExitStatus

REPORTS = Path("reports")
PA_WINDOWS = 5
"""perf_analyzer's measurement windows per run at most (it stops at 3 stable ones): a schedule covers them all."""
CONSTANT_RATE = ("poisson", "gamma", "replay")
"""Patterns with one rate over the run; a ramp changes its rate within a run and has no single knee."""
EPILOG = """\
examples:
  tritonkit capacity digits --slo-p99-ms 50
  tritonkit capacity digits --slo-p99-ms 50 --target-rps 5000 --write-patch hpa-patch.yaml
  tritonkit capacity text_embedder --slo-p99-ms 400 --arrival gamma:0.5 --start-rate 5 --trials 5
  tritonkit capacity text_generator --slo-p99-ms 5000 --slo-ttft-ms 500 --slo-itl-ms 60 --start-rate 1
"""


HELP = "the highest open-loop rate whose p99 meets a budget, with its interval, and a replica plan"


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="NAME", help="the served model (any model in the repository)")
    flags.add_p99_budget_flag(parser, required=True)
    parser.add_argument("--max-error-rate", type=float, default=0.0, help="largest acceptable failures/requests")
    flags.add_stream_budget_flags(parser, "a rate holds only where the figure's p99 is within it")
    parser.add_argument(
        "--trials", type=int, default=5, help="rounds of runs around the knee for its interval (>= 2, default 5)"
    )
    parser.add_argument(
        "--no-late-round",
        dest="late_round",
        action="store_false",
        help="skip the knee's round after the verdict, which puts the run's minutes in the interval and says when "
        "the server's rate moved during the run (one more run per rate of the knee's)",
    )
    parser.add_argument(
        "--arrival",
        metavar="SPEC",
        help="open-loop arrivals: poisson (default), gamma:B (burstiness B: < 1 burstier), replay:FILE; with "
        "--generator perf_analyzer, played as its --request-intervals schedule (default there: a constant rate)",
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per run, warm-up included (default 10)")
    parser.add_argument("--start-rate", type=float, default=20.0, help="first rate probed, req/s (default 20)")
    parser.add_argument("--max-rate", type=float, default=math.inf, help="highest rate probed, req/s (default none)")
    parser.add_argument(
        "--growth", type=float, default=capacity.GROWTH, help="bracket: each rate this many times the last (default 2)"
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=capacity.TOLERANCE,
        help="narrow the knee until the failing rate is within this share of the passing one (default 0.05)",
    )
    parser.add_argument("--target-rps", type=float, help="plan the replicas that serve this many requests/s")
    parser.add_argument(
        "--headroom", type=float, default=replica_plan.HEADROOM, help="burst headroom over --target-rps (default 0.2)"
    )
    parser.add_argument("--write-patch", type=Path, metavar="FILE", help="write the HPA patch here (default: print)")
    parser.add_argument(
        "--write-kserve-patch", type=Path, metavar="FILE", help="write a merge patch of the KServe InferenceService"
    )
    parser.add_argument(
        "--price-per-hour", type=float, metavar="USD", help="USD per replica-hour: adds the cost per million requests"
    )
    flags.add_protocol_flag(parser)
    parser.add_argument(
        "--generator",
        choices=generators.GENERATORS,
        help="perf_analyzer (the default for a tensor model: C++, a constant rate, or the --arrival pattern as its "
        "--request-intervals schedule) or locust (the default for pipelines and streams: latency from each "
        "request's intended send time)",
    )
    parser.add_argument("--processes", type=int, help="Locust processes (default: one per generator CPU)")
    parser.add_argument("--out", type=Path, help="report folder (default reports/capacity-NAME)")
    flags.add_payload_flags(parser)
    flags.add_server_flags(parser, split=True)
    parser.set_defaults(handler=run)


def _usage(message: str) -> int:
    print(f"capacity: error: {message}", file=sys.stderr)
    return int(ExitStatus.USAGE)


def check_arguments(args: argparse.Namespace) -> Arrival:
    """The parsed pattern; ValueError (a LoadTestError for the trials) naming the first bad value. Whether the
    model streams, which the stream budgets need, is checked on its config (``check_stream_budgets``)."""
    for flag, _ in flags.stream_budgets(args):
        if args.generator == "perf_analyzer":
            raise ValueError(f"{flag}: streams are measured by Locust (--generator locust), not {args.generator}")
    if args.trials < 2:
        raise ValueError(f"--trials {args.trials}: an interval needs at least 2 trials")
    for flag, value in (("--duration", args.duration), ("--start-rate", args.start_rate)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{flag} {value:g} must be > 0")
    if not (math.isfinite(args.growth) and args.growth > 1):
        raise ValueError(f"--growth {args.growth:g} must be > 1")
    if not 0 < args.tolerance < args.growth - 1:
        raise ValueError(f"--tolerance {args.tolerance:g} must be in (0, --growth - 1)")
    if not args.max_rate >= args.start_rate:
        raise ValueError(f"--max-rate {args.max_rate:g} must be >= --start-rate {args.start_rate:g}")
    if args.target_rps is not None and not (math.isfinite(args.target_rps) and args.target_rps > 0):
        raise ValueError(f"--target-rps {args.target_rps:g} must be > 0 requests/s")
    if not (math.isfinite(args.headroom) and args.headroom >= 0):
        raise ValueError(f"--headroom {args.headroom:g} must be >= 0 (0.2: 20% above the target)")
    if args.price_per_hour is not None and not (math.isfinite(args.price_per_hour) and args.price_per_hour > 0):
        raise ValueError(f"--price-per-hour {args.price_per_hour:g} must be > 0 USD per replica-hour")
    if args.write_kserve_patch is not None and args.write_kserve_patch == args.write_patch:
        raise ValueError(f"--write-kserve-patch {args.write_kserve_patch}: the HPA patch is written there")
    if not 0 <= args.max_error_rate < 1:
        raise ValueError(f"--max-error-rate {args.max_error_rate:g} must be in [0, 1)")
    if args.processes is not None and args.processes < 1:
        raise ValueError(f"--processes {args.processes} must be >= 1")
    arrival = parse_arrival(args.arrival or "poisson")
    if arrival.name not in CONSTANT_RATE:
        raise ValueError(f"--arrival {args.arrival}: capacity needs one rate per run ({', '.join(CONSTANT_RATE)})")
    return arrival


def check_stream_budgets(args: argparse.Namespace, config) -> None:
    """A stream budget for a model that does not stream (not decoupled) is a ValueError naming the flag."""
    given = flags.stream_budgets(args)
    if given and not model_kind.is_decoupled(config):
        flag = given[0][0]
        raise ValueError(
            f"{flag}: {args.model} is not a streamed (decoupled) model, so it has no p99 {flags.STREAM_BUDGETS[flag]}; "
            "its budget is --slo-p99-ms"
        )


def models_to_load(repository: Path, model: str, config=None) -> tuple[str, ...]:
    """The model; the whole repository for a pipeline (an ensemble or a Python model calls others)."""
    config = config if config is not None else config_io.parse(repository / model / "config.pbtxt")
    return ("*",) if model_kind.kind(config).calls_others else (model,)


def run(args: argparse.Namespace) -> int:
    try:
        arrival = check_arguments(args)
        options = default_options(args.model, flags.payload_options(args))
    except (ValueError, LoadTestError) as exc:  # ArrivalError and PayloadError among them
        return _usage(str(exc))
    repository = Path(args.repository).resolve()
    models: tuple[str, ...] = ()
    if not args.http_url:
        if missing := target.missing_model(repository, args.model):
            return _usage(missing)
        try:
            config = config_io.parse(repository / args.model / "config.pbtxt")
            check_stream_budgets(args, config)
            models = models_to_load(repository, args.model, config)
        except (ExportError, ValueError) as exc:
            return _usage(str(exc))
        flags.resolve_cpus(args)
    out = args.out or REPORTS / f"capacity-{args.model}"
    status, value = target.run_with_server(
        args, models, lambda endpoints, _: _capacity(args, arrival, options, endpoints, out)
    )
    return value if status == 0 else status


def _measurer(args, arrival: Arrival, options, endpoints: Endpoints, out: Path):
    """(measure_at, what the arrivals are) for the chosen generator."""
    if args.generator == "perf_analyzer":
        config = apply.served_config(endpoints.http, args.model)
        out.mkdir(parents=True, exist_ok=True)
        # No budget_ms: capacity judges perf_analyzer's p99 alone, so no profile export (every request's
        # tensors) is written.
        generator = generators.generator(
            "perf_analyzer",
            endpoints,
            protocol=args.protocol,
            input_data=perf.write_input_data(out / "input_data.json", payloads(config, options), config),
            measurement_ms=profile_export.stable_window_ms(args.duration),
            max_trials=PA_WINDOWS,
        )
        # Without --arrival: perf_analyzer's own constant rate; with one, that pattern as a schedule.
        span_s = generator.measured_s * PA_WINDOWS
        schedule = request_schedules(arrival, span_s, out / "schedules") if args.arrival else None

        def measure_pa(rate: float) -> Measurement:
            settle(endpoints, args.model)
            return generator.measure(
                args.model, args.model, Load(rate=rate), request_intervals=schedule(rate) if schedule else None
            )

        if schedule:
            return measure_pa, f"{arrival.describe()} (perf_analyzer --request-intervals)"
        return measure_pa, "constant-rate arrivals (perf_analyzer)"
    generator = generators.generator(
        "locust",
        endpoints,
        protocol=args.protocol,
        budget_ms=args.slo_p99_ms,
        ttft_ms=args.slo_ttft_ms,  # goodput within the stream budgets too
        itl_ms=args.slo_itl_ms,
        work=out / "runs",
        payload=options.to_table(),
        duration_s=args.duration,
        processes=args.processes,
    )
    keys = tuple(arrival.shape_keys().items())
    count = iter(range(1, 10**6))

    def measure_locust(rate: float) -> Measurement:
        settle(endpoints, args.model)  # an overloaded run leaves a backlog: let it drain first
        load = Load(rate=rate, shape_keys=keys)
        return generator.measure(args.model, args.model, load, label=f"run{next(count):03d}-{rate:.0f}rps")

    return measure_locust, arrival.describe()


def request_schedules(arrival: Arrival, span_s: float, folder: Path):
    """rate -> a new perf_analyzer ``--request-intervals`` file of ``arrival`` at that rate, ``span_s`` long, for
    each run: the n-th run at a rate is seeded by the rate and n, so trials at one rate play different draws of
    the pattern (as Locust's runs do), their interval holds the draw's variation, and a rerun plays the same."""
    runs: dict[float, int] = {}

    def at(rate: float) -> Path:
        n = runs[rate] = runs.get(rate, 0) + 1
        offsets = []
        for due in arrival.schedule(rate, span_s, seed=round(rate * 1000) * 1000 + n):
            offsets.append(due.t)
            if due.t >= span_s and len(offsets) >= rate * span_s:
                break
        # Scaled so the file's mean rate (perf_analyzer's: count over the sum of intervals) is the rate asked
        # for, which the run's sent rate is judged against; a finite draw of gamma gaps misses it by chance.
        # At least rate x span_s arrivals, so the scaled file still spans span_s.
        scale = len(offsets) / rate / offsets[-1]
        folder.mkdir(parents=True, exist_ok=True)
        return write_request_intervals(folder / f"{rate:.6g}rps-{n}.txt", (t * scale for t in offsets))

    return at


def _capacity(args, arrival: Arrival, options, endpoints: Endpoints, out: Path) -> int:
    if args.model not in apply.ready_models(endpoints.http):
        raise ValueError(f"model {args.model!r} is not served at {endpoints.http}")
    if args.http_url and flags.stream_budgets(args):  # a local server's model was checked on its repository's config
        # A server that restricts its config API gives metadata, which cannot tell: the budgets are then judged
        # on what the runs measure (no stream figures: the budgets are missed, naming them).
        check_stream_budgets(args, apply.served_config(endpoints.http, args.model, decoupled=True))
    budget = Slo(args.slo_p99_ms, args.max_error_rate, ttft_ms=args.slo_ttft_ms, itl_ms=args.slo_itl_ms)
    if args.generator is None:  # the model's own: perf_analyzer for a tensor model, Locust for the rest
        args.generator = probe.generator_for_config(apply.served_config(endpoints.http, args.model, decoupled=True))
    measure_at, arrivals = _measurer(args, arrival, options, endpoints, out)
    floor: dict = {}
    measure_at = floor_guard(measure_at, args.slo_p99_ms, args.generator, floor)
    print(
        f"capacity {args.model}: {budget_text(budget)}, errors <= {budget.max_error_rate:.2%}; {arrivals}, "
        f"{args.generator}, {args.duration:g} s runs from {args.start_rate:g} req/s, "
        f"{args.trials} rounds around the knee",
        flush=True,
    )
    result = capacity.find_capacity(
        measure_at,
        budget,
        args.start_rate,
        trials=args.trials,
        max_rate=args.max_rate,
        growth=args.growth,
        tolerance=args.tolerance,
        log=lambda text: print(text, flush=True),
        late_round=args.late_round,
    )
    sentence = result.sentence(arrivals)
    extra = {
        "model": args.model,
        "command": shlex.join(["tritonkit", *sys.argv[1:]]),
        "generator": args.generator,
        "arrivals": arrivals,
        "duration_s": args.duration,
        "generator_floor_ms": floor,
        "date": datetime.date.today().isoformat(),
        "commit": study_report.commit(),
    }
    lines = plan(result, args) if result.status is ExitStatus.OK else []
    if lines:
        extra["plan"] = {"lines": lines}
    hint = thin_runs_hint(result, args.duration)
    if hint:
        extra["hint"] = hint
    summary = capacity_report.write(result, out, extra, sentence)
    print()
    if hint:
        print(hint)
    print(f"capacity {args.model}: {sentence}", file=sys.stdout if result.status is ExitStatus.OK else sys.stderr)
    for text in lines:
        print(text)
    print(f"report: {summary} (plot {out / 'capacity.png'}, results {out / 'results.json'})")
    return int(result.status)


class BudgetInFloor(ValueError):
    """The budget is within the generator's floor (a bad argument for this generator: exit status 2)."""


def floor_guard(measure_at, budget_ms: float, generator: str, floor: dict):
    """``measure_at`` that reads the generator's floor off the first run with one (the lowest rate: no queue) into
    ``floor`` and prints it, and raises ``BudgetInFloor`` when its p99 (or untraced, its mean) takes more than
    ``server_trace.FLOOR_SHARE`` of the budget (``server_trace.floor_warning``)."""

    def measure(rate: float) -> Measurement:
        m = measure_at(rate)
        if floor or not m.floor_ms:
            return m
        floor.update(rate=rate, **m.floor_ms)
        figures = floor_figures(m.floor_ms)
        how = server_trace.UNTRACED if "mean" in m.floor_ms else "traced"
        print(f"  generator floor at {rate:g} req/s: {figures} (client minus Triton's own time, {how})", flush=True)
        if server_trace.floor_warning(m.floor_ms, budget_ms):
            (key, value), share = server_trace.floor_limit(m.floor_ms), server_trace.FLOOR_SHARE
            better = "use --generator perf_analyzer or a larger budget" if generator != "perf_analyzer" else ""
            raise BudgetInFloor(
                f"budget within the generator's floor: {generator}'s own {key} is {value:.2f} ms of the "
                f"{budget_ms:g} ms budget (over {share:.0%}) at {rate:g} req/s; {better or 'use a larger budget'}"
            )
        return m

    return measure


def thin_runs_hint(result: CapacityResult, duration_s: float) -> str:
    """For an inconclusive answer whose last runs were too short to estimate a p99 (``evidence.thin_tail``):
    what to change, as one line; "" otherwise."""
    if result.status is not ExitStatus.INCONCLUSIVE or not result.confirmations:
        return ""
    rate = result.confirmations[-1].rate
    note = evidence.thin_tail(rate * duration_s)
    if not note:
        return ""
    seconds = math.ceil(evidence.requests_for() / rate)
    return f"hint: at {rate:g} req/s for {duration_s:g} s, {note}: --duration {seconds} or more"


def plan(result: CapacityResult, args) -> list[str]:
    """The replica plan, KServe's and Ray Serve's targets and the HPA target as printed lines; the HPA patch
    printed or written, the KServe patch written when asked for."""
    lower = result.plan_rate
    if not lower > 0:
        return ["no replica plan: the capacity interval reaches 0 req/s; more --trials would narrow it"]
    lines = []
    max_replicas = None
    if args.target_rps is not None:
        max_replicas = replica_plan.replicas(args.target_rps, lower, args.headroom)
        lines.append(
            f"replicas for {args.target_rps:g} req/s: {max_replicas} = ceil({args.target_rps:g} x "
            f"{1 + args.headroom:g} / {lower:.1f}) + 1 (the interval's lower bound per replica, "
            f"{args.headroom:.0%} burst headroom, N+1)"
        )
    per_pod = lower / (1 + args.headroom)
    wanted = autoscalers.Plan(args.model, per_pod, args.headroom, result.capacity, max_replicas, args.target_rps)
    more, kserve = autoscalers.lines(result, wanted, args.price_per_hour, args.write_kserve_patch)
    lines += more
    if kserve and args.write_kserve_patch:
        args.write_kserve_patch.parent.mkdir(parents=True, exist_ok=True)
        args.write_kserve_patch.write_text(kserve)
    seconds = capacity_report.hpa_target(result, per_pod)
    if math.isnan(seconds):
        return [*lines, "HPA target: no queue time was measured (Triton's metrics gave none)"]
    try:
        patch = capacity_report.hpa_patch(seconds, per_pod, args.model, max_replicas)
    except LoadTestError as exc:
        return [*lines, f"HPA target: {exc}"]
    lines.append(
        f"HPA target: {capacity_report.quantity(seconds)} of queue time per request "
        f"({capacity_report.QUEUE_METRIC}), Triton's value at {per_pod:.1f} req/s per replica"
    )
    if args.write_patch:
        args.write_patch.parent.mkdir(parents=True, exist_ok=True)
        args.write_patch.write_text(patch)
        lines.append(f"HPA patch written to {args.write_patch} (kustomize: patches: [{{path: ...}}])")
    else:
        lines += ["HPA patch (kustomize):", *patch.rstrip().splitlines()]
    return lines
