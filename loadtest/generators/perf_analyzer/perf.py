"""Triton's own load generator, ``perf_analyzer`` 2.51, as a function: the cross-check of a Locust run.

:func:`run` starts ``.venv/bin/perf_analyzer`` against a running server with the load test's payloads
(:func:`write_input_data` writes them as its ``--input-data`` JSON), reads the ``-f`` CSV it writes and returns one
:class:`PerfRow` per concurrency level: client throughput (infer/s, i.e. items/s: requests/s times the batch size),
p50/p90/p95/p99 latency, and the client send/recv and server queue/compute columns (microseconds in the CSV,
milliseconds here). A failed or unstable run raises :class:`PerfAnalyzerError` carrying the tail of perf_analyzer's
output. With ``profile_export=True`` it also reads every measured request's latency from ``--profile-export-file``
(``loadtest.generators.perf_analyzer.profile_export``), which goodput counts against a latency budget.

Run: ``python -m loadtest.generators.perf_analyzer --model digits --url 127.0.0.1:8001 [--concurrency 1:8:1]`` with the
payload flags of ``tritonkit loadtest --model`` (default: the catalog model's samples, else random values from the
served config).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import math
import os
import re
import resource
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from deploy import tools
from deploy.server import PROJECT_ROOT
from loadtest.generators.payloads import input_data_json
from loadtest.generators.perf_analyzer.profile_export import MeasuredRequests, read_profile_export

PERF_ANALYZER = PROJECT_ROOT / ".venv" / "bin" / "perf_analyzer"

# CSV column -> PerfRow field; latencies and times are microseconds in the CSV.
_MS_COLUMNS = {
    "Client Send": "client_send_ms",
    "Network+Server Send/Recv": "network_server_send_recv_ms",
    "Server Queue": "server_queue_ms",
    "Server Compute Input": "server_compute_input_ms",
    "Server Compute Infer": "server_compute_infer_ms",
    "Server Compute Output": "server_compute_output_ms",
    "Client Recv": "client_recv_ms",
    "p50 latency": "p50_ms",
    "p90 latency": "p90_ms",
    "p95 latency": "p95_ms",
    "p99 latency": "p99_ms",
    "Avg latency": "avg_ms",
}

_MEAN_PARTS = tuple(field for column, field in _MS_COLUMNS.items() if "latency" not in column)
"""The CSV's parts of each request's time, which add up to its mean latency."""


class PerfAnalyzerError(RuntimeError):
    """perf_analyzer failed (or found no stable measurement); the message ends with its output tail."""


def ensure_perf_analyzer() -> Path:
    """``.venv/bin/perf_analyzer``, installed by ``deploy/setup.sh perf-analyzer`` on its first use."""
    try:
        return tools.ensure(PERF_ANALYZER, "perf-analyzer", "perf_analyzer", "first use of perf_analyzer")
    except tools.ToolMissing as exc:
        raise PerfAnalyzerError(str(exc)) from None


class PerfAnalyzerOutOfMemory(PerfAnalyzerError):
    """perf_analyzer used up the memory it may use (``MEMORY_SHARE``): at an open-loop rate it cannot keep up
    with, it queues requests without bound. The generator's limit, not the server's."""


MEMORY_SHARE = 0.5
"""perf_analyzer's address space is capped at this share of the machine's memory. Past its limit an open loop
queues requests in it without bound (seen: 14 GiB at 16,000 req/s on a 23 GiB machine, ended by the kernel's
OOM killer, which could as well have picked the server); capped, it fails alone."""
OUT_OF_MEMORY_SHARE = 0.75
"""A perf_analyzer ended by a signal whose peak resident memory reached this share of its cap ran out of it."""


def memory_cap_bytes() -> int:
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * MEMORY_SHARE)


@dataclasses.dataclass
class PerfRow:
    concurrency: int
    throughput: float
    """Inferences (items) per second, client side."""
    p50_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    avg_ms: float | None = None
    client_send_ms: float | None = None
    network_server_send_recv_ms: float | None = None
    server_queue_ms: float | None = None
    server_compute_input_ms: float | None = None
    server_compute_infer_ms: float | None = None
    server_compute_output_ms: float | None = None
    client_recv_ms: float | None = None
    extra: dict[str, float] = dataclasses.field(default_factory=dict)
    """Any further numeric CSV column (e.g. with ``--verbose-csv``), unconverted."""

    @property
    def mean_ms(self) -> float:
        """The mean latency: "Avg latency" where the CSV has it, else the sum of perf_analyzer's parts of it
        (client send, network and server send/receive, queue, compute, client receive); NaN without them."""
        if self.avg_ms is not None:
            return self.avg_ms
        parts = [getattr(self, name) for name in _MEAN_PARTS]
        return sum(parts) if all(p is not None for p in parts) else math.nan


@dataclasses.dataclass
class PerfResult:
    model: str
    protocol: str
    batch_size: int
    rows: list[PerfRow]
    command: list[str]
    csv_text: str
    output: str = ""
    """What perf_analyzer printed (stdout and stderr)."""
    cpu_s: float = 0.0
    """CPU time perf_analyzer used, user + system, all its threads (the kernel's rusage of the child)."""
    wall_s: float = 0.0
    """How long it ran."""
    request_rate: float | None = None
    """The rate asked for (``--request-rate-range``); None in concurrency mode and on a schedule."""
    requests: list[MeasuredRequests] = dataclasses.field(default_factory=list)
    """With ``profile_export``: the measured requests of each level, in the order of ``rows``."""

    @property
    def sent_rate(self) -> float | None:
        """Requests per second perf_analyzer sent ("Avg send request rate"), at a rate or on a schedule, and only
        when it sent more than 1% of its requests late."""
        found = re.findall(r"Avg send request rate: ([0-9.]+)", self.output)
        return float(found[-1]) if found else None

    @property
    def delayed_percent(self) -> float:
        """Share of requests perf_analyzer sent late ("N% of the requests were delayed"): it could not keep
        to the schedule of the rate asked for."""
        found = re.findall(r"([0-9.]+)% of the requests were delayed", self.output)
        return float(found[-1]) if found else 0.0

    @property
    def best(self) -> PerfRow:
        """The row with the highest throughput."""
        return max(self.rows, key=lambda r: r.throughput)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def parse_csv(text: str) -> list[PerfRow]:
    """perf_analyzer's ``-f`` CSV -> one row per concurrency level (or request rate: ``concurrency`` 0 and
    ``extra["Request Rate"]``), in file order.

    The CSV is one header line and one line per level; perf_analyzer may append blank lines or a
    second block (``--collect-metrics``) after a blank line, which is ignored.
    """
    block = text.strip().split("\n\n", 1)[0]
    reader = csv.DictReader(io.StringIO(block))
    level = next((c for c in ("Concurrency", "Request Rate") if c in (reader.fieldnames or ())), None)
    if level is None or "Inferences/Second" not in reader.fieldnames:
        raise ValueError(f"not a perf_analyzer concurrency or request-rate CSV; header: {reader.fieldnames}")
    rows = []
    for record in reader:
        if not record.get(level):
            continue
        row = PerfRow(
            concurrency=int(float(record[level])) if level == "Concurrency" else 0,
            throughput=float(record["Inferences/Second"]),
        )
        if level == "Request Rate":
            row.extra["Request Rate"] = float(record[level])
        for column, value in record.items():
            if column in (level, "Inferences/Second") or column is None or value in (None, ""):
                continue
            try:
                number = float(value)
            except ValueError:
                continue
            field = _MS_COLUMNS.get(column.strip())
            if field:
                setattr(row, field, number / 1000.0)
            else:
                row.extra[column.strip()] = number
        rows.append(row)
    if not rows:
        raise ValueError("the perf_analyzer CSV has a header but no rows")
    return rows


def write_input_data(path: Path, samples: list[dict[str, np.ndarray]], config=None) -> Path:
    """Write batch-1 ``samples`` (``loadtest.generators.payloads``) as perf_analyzer's ``--input-data`` JSON, one entry
    per sample with the batch dim dropped (perf_analyzer repeats an entry ``-b`` times and cycles through the
    entries in order). ``config``: the served config, which says whether the model batches (default: it does)."""
    path = Path(path)
    path.write_text(json.dumps(input_data_json(samples, config)))
    return path


def time_limit_s(measurement_ms: float, windows: int, levels: int = 1) -> float:
    """How long a perf_analyzer run of ``levels`` load levels, each of up to ``windows`` windows of
    ``measurement_ms``, may take before it counts as hung: twice its windows plus a minute for its start and ramp,
    two minutes at least. A fixed limit failed every long window (``tritonkit compare --duration 600``: 3 windows
    of 200 s against 120 s)."""
    return max(120.0, 60.0 + 2 * levels * windows * measurement_ms / 1000)


def _levels(concurrency: int | str) -> int:
    """The load levels of ``--concurrency-range`` ``concurrency`` (``4``: 1; ``"1:8:2"``: 4)."""
    parts = [int(p) for p in str(concurrency).split(":")]
    if len(parts) == 1:
        return 1
    start, end, step = (*parts, 1)[:3]
    return max(1, (end - start) // max(step, 1) + 1)


def run(
    model: str,
    url: str,
    protocol: str = "grpc",
    concurrency: int | str | tuple[int, int, int] = 1,
    batch_size: int = 1,
    input_data: Path | None = None,
    shapes: dict[str, list[int]] | None = None,
    measurement_ms: int = 3000,
    timeout_s: float | None = None,
    stability_percentage: float = 20.0,
    max_trials: int = 10,
    measurement_request_count: int | None = None,
    extra_args: tuple[str, ...] = (),
    binary: Path = PERF_ANALYZER,
    request_rate: float | None = None,
    profile_export: bool = False,
    request_intervals: Path | None = None,
) -> PerfResult:
    """Run perf_analyzer once and parse its CSV.

    ``concurrency``: one level (``4``), or a range ``"1:8:1"`` / ``(1, 8, 1)`` passed as
    ``--concurrency-range`` (one row per level). ``request_rate``: an open-loop load of that many requests
    per second (``--request-rate-range``) instead of a concurrency. ``request_intervals``: an open-loop load
    on a schedule instead, perf_analyzer's ``--request-intervals`` file (``arrivals.write_request_intervals``:
    microseconds from one request to the next, looped when the run outlasts it; perf_analyzer refuses it
    beside either range). ``input_data``: a file from
    :func:`write_input_data` (default: perf_analyzer's random data). ``shapes``: ``{"input_ids": [32]}`` for
    inputs with variable dims when no input data gives the shape. ``stability_percentage``/``max_trials``: on
    a shared CPU the default 10 % over 3 windows often never settles; a loose figure is still a
    cross-check. ``measurement_request_count``: measure windows of that many requests
    (``count_windows`` mode) instead of ``measurement_ms`` windows, for slow models. The result carries
    the CPU time perf_analyzer used, so a caller can tell whether the generator was the bottleneck.
    ``profile_export``: also write ``--profile-export-file`` and read each level's measured requests from it
    (``PerfResult.requests``); the file holds every request's inputs and outputs, so it is read as a stream
    and deleted with the run's temporary folder. ``timeout_s``: how long the run may take before it is ended as
    hung (default :func:`time_limit_s` of its windows and levels).
    """
    if protocol not in ("grpc", "http"):
        raise ValueError(f"protocol {protocol!r} is not grpc or http")
    if binary == PERF_ANALYZER:
        ensure_perf_analyzer()
    if request_rate is not None and not request_rate > 0:
        raise ValueError(f"request_rate {request_rate!r} must be > 0")
    if request_rate is not None and request_intervals is not None:
        raise ValueError("give a request_rate or request_intervals, not both")
    if isinstance(concurrency, tuple):
        concurrency = ":".join(str(int(c)) for c in concurrency)
    if timeout_s is None:
        levels = 1 if request_rate is not None or request_intervals is not None else _levels(concurrency)
        timeout_s = time_limit_s(measurement_ms, max_trials, levels)
    if request_intervals is not None:
        load = ["--request-intervals", str(request_intervals)]
    elif request_rate is not None:
        load = ["--request-rate-range", f"{request_rate:g}"]
    else:
        load = ["--concurrency-range", str(concurrency)]
    with tempfile.TemporaryDirectory(prefix="perf-") as tmp:
        csv_path = Path(tmp) / "perf.csv"
        cmd = [
            str(binary),
            "-m",
            model,
            "-u",
            url,
            "-i",
            protocol,
            "-b",
            str(batch_size),
            *load,
            "--measurement-interval",
            str(int(measurement_ms)),
            "--stability-percentage",
            f"{stability_percentage:g}",
            "--max-trials",
            str(int(max_trials)),
            "-f",
            str(csv_path),
        ]
        if measurement_request_count:
            cmd += [
                "--measurement-mode",
                "count_windows",
                "--measurement-request-count",
                str(int(measurement_request_count)),
            ]
        if input_data is not None:
            cmd += ["--input-data", str(input_data)]
        for name, dims in (shapes or {}).items():
            cmd += ["--shape", f"{name}:{','.join(str(int(d)) for d in dims)}"]
        export_path = Path(tmp) / "profile.json"
        if profile_export:
            cmd += ["--profile-export-file", str(export_path)]
        cmd += list(extra_args)
        log_path = Path(tmp) / "perf.log"
        returncode, cpu_s, wall_s, peak_bytes = _run_measured(cmd, log_path, timeout_s, binary)
        output = log_path.read_text(errors="replace")
        cap = memory_cap_bytes()
        if (
            returncode is not None
            and returncode < 0
            and (peak_bytes >= OUT_OF_MEMORY_SHARE * cap or "bad_alloc" in output)
        ):
            raise PerfAnalyzerOutOfMemory(
                f"perf_analyzer ran out of memory (peak {peak_bytes / 2**30:.1f} GiB of the {cap / 2**30:.1f} GiB it "
                f"may use, exit {returncode}): it queued requests faster than they were answered"
            )
        if returncode is None:
            raise PerfAnalyzerError(f"perf_analyzer ran past {timeout_s:.0f} s: {' '.join(cmd)}\n{output_tail(output)}")
        if returncode != 0 or not csv_path.exists():
            # On a schedule, an unstable measurement ends with code 0 and no CSV; the output says why.
            missing = "" if returncode else " without writing its CSV"
            raise PerfAnalyzerError(
                f"perf_analyzer exited with code {returncode}{missing}: {' '.join(cmd)}\n{output_tail(output)}"
            )
        text = csv_path.read_text()
        try:
            rows = parse_csv(text)
            measured = read_profile_export(export_path) if profile_export else []
        except (ValueError, OSError) as exc:
            raise PerfAnalyzerError(f"{exc}\n{output_tail(output)}") from None
    return PerfResult(model, protocol, batch_size, rows, cmd, text, output, cpu_s, wall_s, request_rate, measured)


def _run_measured(
    cmd: list[str], log_path: Path, timeout_s: float, binary: Path
) -> tuple[int | None, float, float, int]:
    """(exit status or None after a timeout, CPU seconds, wall seconds, peak resident bytes) of ``cmd``, its
    address space capped at ``memory_cap_bytes``; reaped with ``wait4`` so the kernel's accounting of the child
    (every thread) comes back with its status."""
    started = time.monotonic()
    with open(log_path, "wb") as sink:
        try:
            proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise PerfAnalyzerError(f"no perf_analyzer at {binary}: run `make setup`") from None
    cap = memory_cap_bytes()
    with contextlib.suppress(OSError):  # set before it has queued anything (not preexec_fn: unsafe with threads)
        resource.prlimit(proc.pid, resource.RLIMIT_AS, (cap, cap))
    try:
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
                cpu = usage.ru_utime + usage.ru_stime
                return proc.returncode, cpu, time.monotonic() - started, usage.ru_maxrss * 1024
            if time.monotonic() - started > timeout_s:
                proc.kill()
                _, _, usage = os.wait4(proc.pid, 0)
                proc.returncode = -9
                cpu = usage.ru_utime + usage.ru_stime
                return None, cpu, time.monotonic() - started, usage.ru_maxrss * 1024
            time.sleep(0.02)
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            proc.wait()
        raise


def output_tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
