"""Soak: a long open-loop run at a fraction of the saturating load; errors, p99 drift and memory growth.

``tritonkit soak [--model digits] [--minutes 10] [--fraction 0.7]`` (``make soak``):

1. Saturation of the config as deployed, or ``--saturation-rps`` (the searches of ``loadtest.generators.saturation``,
   shared with the overload study): closed-loop users doubling until throughput stops growing, then
   open-loop rates rising 1.2x from an eighth of that (``find_sustained_rate``) until the server falls
   behind: it completes under 95% of the offered rate (less at low rates, within Poisson noise:
   ``keeps_up``), fails a request, or its p99 passes 3x the lowest step p99 so far (the knee, where queues
   start to build). The highest rate before that is the saturation. Closed-loop clients batch better than open-loop
   arrivals, and on a small machine their rate is past the open-loop knee: 70% of it kept p99 jumping
   between 71 and 532 ms per minute.
2. Open-loop Poisson arrivals at ``fraction`` x saturation for ``minutes``, on the config as deployed, while
   the resident memory (RSS) of ``tritonserver`` and every process under it (the Python-backend stubs) is
   sampled every ``--sample-s`` seconds.
3. Three checks:
   - **no errors**: no failed request (refusals and client drops included) and no failure counted by Triton;
   - **p99 steady**: the p99 of the first and of the last window (``--window-s``, a minute by default) within
     20% of each other (``|last - first| / first``);
   - **memory flat**: the mean RSS (server + stubs) of the last window within 5% of that of the first window
     after the memory warm-up (``--memory-warmup-s``, one window by default).

The server (and its stubs) and the load generator run on their own CPUs by default: the upper and the lower
half of those this process may use (``--no-split-cpus`` shares them; ``--server-cpus``/``--client-cpus``
choose). Sharing two cores, the open-loop generator's own stalls showed up as server latency.

``--generator perf_analyzer`` puts the load on perf_analyzer (``loadtest.generators.perf_analyzer.windows``, one pass
per window) instead of Locust: a Python generator's own stalls, at a rate near what one core of it sends, appear in its
p99.

Writes ``reports/soak/<model>/``: ``results.json`` (checks, windows, memory samples, the run),
``summary.md`` and ``soak.png`` (p99 per window and per second; memory over time). Exit status: 0 every check
passed; 1 a check failed; 2 bad arguments; 3 the server or Locust failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from loadtest.cli import flags
from loadtest.cli.study import Study
from loadtest.core.measurement import Load
from loadtest.core.spec import Candidate
from loadtest.errors import PayloadError
from loadtest.generators import seam as generators
from loadtest.generators.payloads import PayloadOptions
from loadtest.generators.saturation import START_FRACTION, find_saturation, find_sustained_rate, settle
from loadtest.studies.soak.checks import check_errors, check_memory, check_p99, full_windows
from loadtest.studies.soak.report import write_outputs
from loadtest.target import endpoints as target
from tritonkit_errors import ExitStatus

OUT = Path("reports/soak")


# --- memory --------------------------------------------------------------------------------------


def family_rss(pid: int) -> dict[str, int]:
    """RSS in bytes of process ``pid`` and each process under it, keyed ``"<name>:<pid>"``."""
    out = {}
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return out
    for proc in processes:
        try:
            out[f"{proc.name()}:{proc.pid}"] = proc.memory_info().rss
        except psutil.Error:
            pass
    return out


class MemorySampler:
    """Samples ``family_rss(pid)`` every ``every_s`` seconds on a thread until stopped."""

    def __init__(self, pid: int, every_s: float = 5.0):
        self.pid, self.every_s = pid, every_s
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.started = 0.0

    def _sample(self) -> None:
        rss = family_rss(self.pid)
        if rss:
            self.samples.append(
                {"t": round(time.monotonic() - self.started, 2), "total_bytes": sum(rss.values()), "processes": rss}
            )

    def _run(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(self.every_s):
                self._sample()
                return

    def start(self) -> MemorySampler:
        self.started = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        self._thread.join(timeout=30)
        return self.samples


# --- the run -------------------------------------------------------------------------------------


def soak(
    model: str,
    endpoints,
    server_pid: int,
    out_dir: Path,
    *,
    protocol: str = "grpc",
    fmt: str = "torchscript",
    generator: str = "locust",
    minutes: float = 10.0,
    fraction: float = 0.7,
    window_s: float = 60.0,
    sample_s: float = 5.0,
    warmup_s: float = 5.0,
    memory_warmup_s: float | None = None,
    saturation_rps: float | None = None,
    max_inflight: int = 4096,
    search: dict | None = None,
    payload: dict | None = None,
    log=print,
) -> dict[str, Any]:
    served = Candidate.of("x", (model,), fmt).served_model(model)
    work = out_dir / "runs"
    work.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    search_record: dict[str, Any] = {"given": saturation_rps is not None}
    if saturation_rps is None:
        # On the config as served (70% of a rate measured without its queue policy overloads it), closed-loop
        # first, then open-loop upwards from well below that: the rate open-loop arrivals can be held at.
        closed = find_saturation(model, served, protocol, endpoints, work, log=log, payload=payload, **(search or {}))
        sustained = find_sustained_rate(
            model,
            served,
            protocol,
            endpoints,
            work,
            start_rps=closed.rps * START_FRACTION,
            duration_s=(search or {}).get("duration_s", 10.0),
            max_inflight=max_inflight,
            payload=payload,
            log=log,
        )
        saturation_rps = sustained.rps
        search_record.update(closed_loop=closed.steps, closed_loop_rps=closed.rps, open_loop=sustained.steps)
    rate = round(fraction * saturation_rps, 1)
    duration_s = minutes * 60.0
    memory_warmup_s = window_s if memory_warmup_s is None else memory_warmup_s
    log(f"soak {served} over {protocol}: {rate:g} req/s ({fraction:g} x {saturation_rps:.1f}) for {duration_s:g} s")
    # One generator from the seam, its windows the soak's: perf_analyzer one pass per window, Locust the whole
    # run (one process, its warm-up and window) in one.
    load_generator = generators.generator(
        generator,
        endpoints,
        protocol=protocol,
        payload=payload,
        measurement_ms=int(window_s * 1000),
        max_trials=int(duration_s // window_s),
        work=work,
        duration_s=duration_s,
        warmup_s=warmup_s,
        window_s=window_s,
        processes=1,
        log=log,
    )
    load = Load(rate=rate, shape_keys=(("max_inflight", max_inflight),))
    settle(endpoints, served)
    sampler = MemorySampler(server_pid, sample_s).start()
    try:
        record = load_generator.run(model, served, load, label=f"soak-{model}")
    finally:
        samples = sampler.stop()
    client, server_failures = record.client, record.server_failures
    windows = full_windows(client.windows, duration_s)
    checks = [
        check_errors(client.failures, server_failures, client.failure_statuses),
        check_p99(windows),
        check_memory(samples, memory_warmup_s, window_s),
    ]
    return {
        "model": model,
        "served_model": served,
        "protocol": protocol,
        "started": started,
        "saturation_rps": saturation_rps,
        "saturation_search": search_record,
        "fraction": fraction,
        "rate": rate,
        "duration_s": duration_s,
        "warmup_s": warmup_s,
        "window_s": window_s,
        "sample_s": sample_s,
        "memory_warmup_s": memory_warmup_s,
        "requests": client.requests,
        "throughput_rps": client.throughput_rps,
        "p99_ms": client.latency_ms.get("p99"),
        "checks": checks,
        "passed": all(c["passed"] for c in checks),
        "windows": client.windows,
        "timeline": [dataclasses.asdict(p) for p in client.timeline],
        "memory": samples,
        "client": {k: v for k, v in dataclasses.asdict(client).items() if k not in ("timeline", "windows", "hdr")},
        "server_failures": server_failures,
        "generator": generator,
    }


class Soak(Study):
    name = "soak"
    help = "a long open-loop run at a fraction of saturation: errors, p99 drift, server and stub memory"
    alias = "python -m loadtest.studies.soak"

    def arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--model", default="digits", help="public model name (default digits)")
        parser.add_argument("--format", default="torchscript", choices=("torchscript", "onnx"))
        flags.add_protocol_flag(parser)
        parser.add_argument(
            "--generator",
            default="locust",
            choices=("locust", "perf_analyzer"),
            help="the soak's load: Locust (default) or perf_analyzer, whose C++ client adds less jitter "
            "of its own to the p99 it measures (the saturation search uses Locust either way)",
        )
        parser.add_argument("--minutes", type=float, default=10.0, help="length of the run (default 10)")
        parser.add_argument("--fraction", type=float, default=0.7, help="share of the saturating rate (default 0.7)")
        parser.add_argument("--window-s", type=float, default=60.0, help="p99 window, s (default 60: p99 per minute)")
        parser.add_argument("--sample-s", type=float, default=5.0, help="memory sampling period, s (default 5)")
        flags.add_warmup_seconds(parser, 5.0, "leading seconds left out of the latency")
        parser.add_argument("--memory-warmup-s", type=float, help="memory warm-up, s (default: one window)")
        parser.add_argument("--saturation-rps", type=float, help="skip the saturation search: use this rate")
        parser.add_argument(
            "--search-duration", type=float, default=10.0, help="seconds per saturation step (default 10)"
        )
        parser.add_argument("--max-inflight", type=int, default=4096, help="client slots (default 4096)")
        flags.add_out_flag(parser, OUT, "reports folder (default reports/soak; files go to <out>/<model>/)")
        # memory is sampled from the server's processes: always a local server
        flags.add_server_flags(parser, urls=False, split=True)
        flags.add_payload_flags(parser)

    def run(self, args: argparse.Namespace) -> dict[str, Any] | int:
        if not (
            0 < args.fraction <= 2
            and args.minutes > 0
            and args.window_s > 0
            and args.sample_s > 0
            and args.minutes * 60 > args.warmup_s >= 0
        ):
            print(
                "error: needs 0 < --fraction <= 2, --minutes > 0, --window-s > 0, --sample-s > 0, "
                "0 <= --warmup-s < the run",
                file=sys.stderr,
            )
            return ExitStatus.USAGE
        try:
            options = flags.payload_options(args)
        except PayloadError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return ExitStatus.USAGE
        flags.resolve_cpus(args)
        served = Candidate.of("x", (args.model,), args.format).served_model(args.model)
        code, data = target.run_with_server(
            args,
            (served,),
            lambda endpoints, server: soak(
                args.model,
                endpoints,
                server.process.pid,
                args.out / args.model,
                protocol=args.protocol,
                fmt=args.format,
                generator=args.generator,
                minutes=args.minutes,
                fraction=args.fraction,
                window_s=args.window_s,
                sample_s=args.sample_s,
                warmup_s=args.warmup_s,
                memory_warmup_s=args.memory_warmup_s,
                saturation_rps=args.saturation_rps,
                max_inflight=args.max_inflight,
                search={"duration_s": args.search_duration},
                payload=options.to_table() if options != PayloadOptions() else None,
            ),
        )
        if code:
            return code
        data.update(server_cpus=sorted(args.server_cpus), client_cpus=sorted(args.client_cpus))
        return data

    def report(self, args: argparse.Namespace, data: dict[str, Any]) -> int:
        paths = write_outputs(data, args.out / args.model)
        for check in data["checks"]:
            print(f"{'PASS' if check['passed'] else 'FAIL'}  {check['name']}: {check['detail']}")
        print("wrote " + ", ".join(map(str, paths)))
        return ExitStatus.OK if data["passed"] else ExitStatus.FAILED


STUDY = Soak()
register, run_command, main = STUDY.register, STUDY.command, STUDY.main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """``python -m loadtest.studies.soak``: the parser of ``tritonkit soak``."""
    return STUDY.parser().parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
