"""The side-by-side benchmark: the same model under the same load, served five ways, in repeated rounds.

Rows (throughput in inferences/s; one request = one item for rows 2-5):

1. in-process: the exported file (``model.pt``, or ``model.onnx`` through onnxruntime) called directly at its
   best batch size (``loadtest.probes.inprocess.limit``) on the server's cores with as many threads, the
   ceiling of those cores (items/s; p50 is the median call at that batch);
2. Triton plain: one instance, no dynamic batching, no warmup, applied through model control;
3. Triton tuned: the repository's config (for a catalog model, what ``make export`` writes from
   ``export/models.toml`` with the auto-tuner's ``export/tuned.toml`` over it; the output quotes its note);
4. FastAPI + uvicorn serving the same file once per request, JSON shaped by its config in and out;
5. the same FastAPI server with its asyncio micro-batcher.

Any TorchScript or ONNX model of the repository can be benchmarked (``--models NAME``, ``make bench
MODEL=NAME``) with the requests of ``tritonkit loadtest --model`` (the payload flags; a catalog model sends its
own real data). Rows 2-5 run the same closed-loop Locust load (same users, duration, warm-up and processes).

Trials: the rows are measured round by round, ``--trials`` rounds (default 3; row 1 too, so every ratio pairs
up): 1 2 3 4 5, 5 4 3 2 1, ... (``loadtest.core.trials.run_trials``), never all trials of one row first, so
the machine's drift falls on every row alike. Each row reports throughput, p50 and p99 with 95% intervals over
its trials; each ratio is paired by round (``bench_targets.paired_ratio``); a target whose interval straddles
its threshold is inconclusive. One trial is allowed and labelled "1 trial, no interval".

Servers: Triton (rows 2 and 3 are one model, reloaded through model control and primed before each of their
trials) and both FastAPI servers stay up side by side on the server's cores for all rounds rather than being
restarted per round: an idle server takes next to no CPU, a restart costs seconds of start and priming per row
and round. Row 1 runs beside them while they idle.

Once, after the rounds, on row 3's config (one run each, and labelled so): the perf_analyzer cross-check (gRPC,
the same payloads, a concurrency range) and the serving overhead at one client (perf_analyzer's p50 at
concurrency 1 over gRPC, the C++ client, minus row 1's batch-1 median, with the server's queue/compute split;
Locust's one-user p50 over HTTP is a second figure); then the first request after ready against the steady
p50, warmup on and off (``loadtest.probes.first_request``). Targets are printed as met, missed or
inconclusive, never asserted.

Cores: the servers and the load generator run on cores of their own (``--server-cpus``, ``--client-cpus``; by
default the upper and the lower half of this machine's), and row 1 on the servers', so no load generator
takes cores from the model and every row computes on the same cores.

Run: ``tritonkit bench [--models digits minilm] [--trials 3] [--duration 15] [--out reports/bench]``.
This module holds the command line and the run; the rows as arms are in ``bench_rows``, the one-run figures in
``bench_once``, the ratios and targets in ``bench_targets``, the rows' summaries and tables in ``bench_report``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from deploy.lifecycle import local_server
from deploy.server import ServerConfig, free_ports
from export import catalog
from loadtest.cli import flags
from loadtest.cli.study import Study
from loadtest.core.trials import Arm, run_trials
from loadtest.errors import LoadTestError
from loadtest.generators.payloads import default_options, payloads
from loadtest.probes.inprocess import model_file
from loadtest.reports.writer import save_report
from loadtest.studies.bench.baselines.fastapi_app import stop_subprocess
from loadtest.studies.bench.once import measure_first_request, measure_once_on_tuned
from loadtest.studies.bench.report import ROWS, Trial, default_users, describe, inprocess_row, render, row_summary
from loadtest.studies.bench.rows import (
    DEFAULT_MODELS,
    DEFAULT_TRIALS,
    FASTAPI_ROWS,
    Bench,
    Options,
    fastapi_arms,
    measure_inprocess,
    trial_of,
    triton_arms,
    tuned_source,
)
from loadtest.studies.bench.targets import (
    P99_BUDGET_MS,
    RATIOS,
    TARGETS,
    evaluate_targets,
    finish,
    ratio,
    ratio_intervals,
    ratios,
    throughput,
)
from loadtest.target.endpoints import Endpoints
from tritonkit_errors import ExitStatus

__all__ = [
    "Options",
    "run",
    "main",
    "ROWS",
    "RATIOS",
    "TARGETS",
    "ratio",
    "ratios",
    "ratio_intervals",
    "throughput",
    "render",
    "describe",
    "evaluate_targets",
    "options",
    "P99_BUDGET_MS",
    "default_users",
    "Trial",
]


# -- one model ------------------------------------------------------------------------------------
def measure_model(bench: Bench, endpoints, opts: Options, work: Path, log) -> dict:
    """Rows 1-5 round by round (Triton up, both FastAPI servers up beside it), then the one-run figures on
    row 3's config."""
    model = bench.model
    procs: list = []
    try:
        served, plain, tuned = triton_arms(bench, endpoints, opts, work, log)
        inprocess = Arm("inprocess", trial_of(lambda: measure_inprocess(bench, opts), "in-process"))
        arms = [inprocess, *served, *fastapi_arms(bench, opts, work, log, procs)]
        log(f"[{model}] {opts.trials} round(s) of rows 1-5, {bench.users} users, {opts.duration_s:g} s per served row")
        results = run_trials(arms, opts.trials, log=lambda line: log(f"[{model}]{line}"))
    finally:
        for proc in procs:
            stop_subprocess(proc)
    cores = f" on CPUs {_cpu_text(bench.server_cpus)}" if bench.server_cpus else ""
    rows = {
        "inprocess": inprocess_row(results["inprocess"], f"{bench.spec.model_path.name}, {{threads}} threads{cores}")
    }
    for key, config in (("triton_plain", plain), ("triton_tuned", tuned)):
        batches = [
            t.detail["avg_batch"] for t in results[key].usable if isinstance(t, Trial) and "avg_batch" in t.detail
        ]
        mean = f"{sum(batches) / len(batches):.1f}" if batches else "-"
        rows[key] = row_summary(results[key], note=f"{describe(config)}; avg batch {mean}")
    for key, batcher in FASTAPI_ROWS:
        how = "asyncio micro-batcher (max wait 2 ms)" if batcher else "one forward per request"
        rows[key] = row_summary(results[key], note=f"uvicorn, JSON, {bench.spec.model_path.name}, {how}")
    return {
        "rows": rows,
        "tuned_source": tuned_source(model),
        **measure_once_on_tuned(bench, endpoints, tuned, opts, work, log),
    }


def _cpu_text(cpus) -> str:
    return ",".join(map(str, sorted(cpus))) if cpus else "all"


# -- the whole run ---------------------------------------------------------------------------------
def prepare(opts: Options, server_cpus: frozenset[int]) -> dict[str, Bench]:
    """Every model's file, config and requests, checked before anything runs (LoadTestError, FileNotFoundError
    or ValueError naming the model and what is wrong)."""
    if isinstance(opts.trials, bool) or not isinstance(opts.trials, int) or opts.trials < 1:
        raise ValueError(f"--trials {opts.trials!r} must be an integer >= 1")
    benches = {}
    for model in opts.models:
        spec = model_file(model, opts.repository)
        benches[model] = Bench(
            model,
            spec,
            payloads(spec.config, default_options(model, opts.payload)),
            server_cpus,
            opts.users_for(model, spec.config),
        )
    return benches


def run(opts: Options, log=None) -> dict:
    """Every row for every model, round by round; writes ``bench.json`` and ``bench.md`` under ``opts.out``."""
    began = time.monotonic()
    log = log or (lambda line: print(f"[{time.monotonic() - began:5.0f} s] {line}", file=sys.stderr, flush=True))
    client_cpus, server_cpus = opts.cpus()
    benches = prepare(opts, server_cpus)
    opts.out.mkdir(parents=True, exist_ok=True)
    work = opts.out / "runs"
    work.mkdir(exist_ok=True)
    import torch  # only for the machine line; the rows import what their file needs

    result = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{len(os.sched_getaffinity(0))} CPUs, torch {torch.__version__}",
        "cpus": {"server": sorted(server_cpus), "client": sorted(client_cpus)},
        "settings": {
            "trials": opts.trials,
            "duration_s": opts.duration_s,
            "warmup_s": opts.warmup_s,
            "processes": opts.processes,
            "payload": opts.payload.to_table(),
        },
        "models": {
            m: {
                "users": benches[m].users,
                "trials": opts.trials,
                "duration_s": opts.duration_s,
                "warmup_s": min(opts.warmup_s, opts.duration_s / 3),
                "rows": {},
                "format": benches[m].spec.model_path.name,
            }
            for m in opts.models
        },
    }
    models = result["models"]
    log(f"servers and row 1 on CPUs {_cpu_text(server_cpus)}, load generators on CPUs {_cpu_text(client_cpus)}")
    affinity = os.sched_getaffinity(0)
    try:
        http, grpc, metrics = free_ports(3)
        config = ServerConfig(
            model_repository=opts.repository,
            http_port=http,
            grpc_port=grpc,
            metrics_port=metrics,
            model_control_mode="explicit",
            load_models=tuple(opts.models),
            exit_timeout_s=10,
            cpus=server_cpus,
        )
        log(f"starting tritonserver (HTTP {http}, gRPC {grpc}) with {', '.join(opts.models)}")
        # Stopped however the block ends; SIGTERM or Ctrl-C unwinds the rows and exits 128 + signum.
        with local_server(config) as server:
            if client_cpus:  # after the server started on its own: Locust and perf_analyzer, started here, inherit it
                os.sched_setaffinity(0, client_cpus)
            for model in opts.models:
                measured = measure_model(benches[model], Endpoints.of(server), opts, work, log)
                models[model]["rows"].update(measured.pop("rows"))
                models[model].update(measured)
        result["server_left"] = server.left_behind
        if server.left_behind:
            log(f"WARNING: stopping tritonserver left behind: {server.left_behind}")
    finally:
        os.sched_setaffinity(0, affinity)
    for model in opts.models:
        log(f"[{model}] first request after ready, warmup on and off (a server of its own each)")
        models[model]["first_request"] = measure_first_request(benches[model], opts)
    finish(result)
    save_report(result, opts.out, render, names=("bench.json", "bench.md"))
    return result


class BenchStudy(Study):
    name = "bench"
    help = "the side-by-side benchmark: in-process, Triton plain and tuned, FastAPI (+ batcher), in trials"
    alias = "python -m loadtest.studies.bench"
    description = __doc__.split("\n\n")[0]
    epilog = "\n\n".join(__doc__.split("\n\n")[1:-1])

    def arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--models",
            nargs="+",
            default=None,
            help="TorchScript or ONNX models of the repository (default: digits minilm, each in the format its tune "
            "picked, export/tuned.toml's serves: minilm_onnx)",
        )
        flags.add_trial_flags(
            parser,
            trials=DEFAULT_TRIALS,
            duration=15.0,
            warmup_s=2.0,
            trials_help="rounds of rows 1-5, every row once a round (1: no intervals)",
            duration_help="seconds of Locust load per row (rows 2-5)",
        )
        parser.add_argument(
            "--users",
            nargs="+",
            default=[],
            metavar="[MODEL=]N",
            help="closed-loop Locust users (default: enough for the served config to form its largest "
            "batch on every instance, 8 to 32)",
        )
        parser.add_argument("--processes", type=int, default=1, help="Locust processes")
        flags.add_out_flag(parser, Path("reports/bench"), "writes bench.json and bench.md (default reports/bench)")
        parser.add_argument("--inprocess-s", type=float, default=2.0, help="row 1: seconds per batch size")
        parser.add_argument("--perf-ms", type=int, default=1500, help="perf_analyzer measurement window, ms")
        parser.add_argument(
            "--perf-concurrency",
            nargs="+",
            type=flags.positive(int),
            default=[],
            metavar="N",
            help="perf_analyzer's concurrency levels on row 3 (default: 1, 2, 4 ... up to the users)",
        )
        parser.add_argument("--steady", type=int, default=200, help="first-request check: steady sequential requests")
        # the servers, row 1 and the generators are all this command's: no URL of a running server
        flags.add_server_flags(parser, urls=False, split=True)
        flags.add_payload_flags(parser)

    def run(self, args: argparse.Namespace) -> tuple[Options, dict] | int:
        try:
            opts = options_of(args)
            return opts, run(opts)
        except (LoadTestError, FileNotFoundError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return ExitStatus.USAGE

    def report(self, args: argparse.Namespace, data: tuple[Options, dict]) -> int:
        """``run`` wrote bench.json and bench.md (``run(opts)`` is also called without the command line)."""
        opts, result = data
        print(render(result), end="")
        print(f"\nwrote {opts.out / 'bench.json'} and {opts.out / 'bench.md'}")
        return ExitStatus.FAILED if result.get("server_left") else ExitStatus.OK


STUDY = BenchStudy()
register, run_command, main = STUDY.register, STUDY.command, STUDY.main


def parser() -> argparse.ArgumentParser:
    """``python -m loadtest.studies.bench``: the parser of ``tritonkit bench``."""
    return STUDY.parser()


def options(argv: list[str] | None = None) -> Options:
    """The command line as :class:`Options` (``PayloadError``/``ValueError`` for contradicting flags)."""
    return options_of(parser().parse_args(argv))


def options_of(args: argparse.Namespace) -> Options:
    args.models = args.models or [catalog.served_pick(m) for m in DEFAULT_MODELS]
    users = {}
    for value in args.users:  # "32" for every model, "digits=32" for one
        model, _, number = value.rpartition("=")
        try:
            users.update({model: int(number)} if model else dict.fromkeys(args.models, int(number)))
        except ValueError:
            raise ValueError(f"--users {value!r} is not N or MODEL=N") from None
    none = None if args.split_cpus else frozenset()  # None: Options.cpus() splits them
    return Options(
        models=tuple(args.models),
        trials=args.trials,
        duration_s=args.duration,
        warmup_s=args.warmup_s,
        users=users,
        processes=args.processes,
        out=args.out.resolve(),
        repository=args.repository.resolve(),
        inprocess_s=args.inprocess_s,
        perf_ms=args.perf_ms,
        perf_concurrency=tuple(args.perf_concurrency),
        steady=args.steady,
        payload=flags.payload_options(args),
        server_cpus=args.server_cpus if args.server_cpus else none,
        client_cpus=args.client_cpus if args.client_cpus else none,
    )


if __name__ == "__main__":
    sys.exit(main())
