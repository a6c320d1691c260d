"""Triton's own time for each request of a run, from its trace API: the server's side of the generator's floor.

A load generator adds its own time to every latency it reports. Triton's metrics give the server's mean time per
request, which says where the average goes but not the p50 or p99. Its trace API gives each request's timestamps:
a local server (``deploy.server.LocalServer``) starts with tracing off and its trace file named (Triton names the
file only at start), and ``TraceSample`` turns ``TIMESTAMPS`` tracing on for one model for the length of a run,
every ``rate``-th request, then reads what Triton wrote: each request's time in the server (``REQUEST_START`` to
``REQUEST_END``), in its queue (``QUEUE_START`` to ``COMPUTE_START``) and in compute (``COMPUTE_START`` to
``COMPUTE_END``). Triton stamps them on the steady clock, the one ``time.monotonic_ns`` reads on this host, so
the run's warm-up is left out by time.

The generator's floor (``floor_ms``) is the client's percentile minus the server's at the same percentile, both over
the same run: the time the client, its library and the loopback add. A server that gives no sample (a Triton older
than 2.57.0, which can crash while tracing; one given by URL whose trace file is not on this host; one that refuses
the trace API) has a floor of means instead: the client's mean minus Triton's mean request time from its metrics.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from loadtest.core.client_stats import percentiles
from loadtest.core.measurement import floor_figures

FLOOR_SHARE = 0.25
"""A p99 budget of which the generator's own p99 (its floor) takes more than this share is mostly the generator's
to meet: a run says so, and capacity refuses to call that tail the server's knee."""
MAX_TRACED = 4000
"""Requests traced per run at most (a higher ``rate`` beyond): enough for a p99, little for the server to write."""
FLUSH_WAIT_S = 2.0
"""How long to wait for Triton to write the last traces after tracing is turned off."""
QUANTILES = (50.0, 99.0)
FLOOR_KEYS = ("p50", "p99", "mean")
"""A floor's figures: the percentiles where the run was traced, else the mean."""
STAGES = {"request": ("REQUEST_START", "REQUEST_END"), "queue": ("QUEUE_START", "COMPUTE_START")}
STAGES["compute"] = ("COMPUTE_START", "COMPUTE_END")
TRACE_FIXED_IN = (2, 57, 0)
"""The first Triton whose trace API is safe under load (server PR #8144, "Fix segfaults in tracing mode")."""


def traces_safely(version: str) -> bool:
    """Whether a Triton of this version (``get_server_metadata``'s, e.g. "2.51.0") may be traced under load."""
    parts = re.findall(r"\d+", version)[:3]
    return len(parts) == 3 and tuple(int(p) for p in parts) >= TRACE_FIXED_IN


def rate_for(expected_requests: float) -> int:
    """Trace every N-th request so that about ``MAX_TRACED`` of ``expected_requests`` are traced (1: all)."""
    if not expected_requests > MAX_TRACED or math.isinf(expected_requests):
        return 1
    return max(1, math.ceil(expected_requests / MAX_TRACED))


@dataclasses.dataclass
class ServerTimes:
    """Per traced request, ms: its time in the server, its queue and its compute."""

    request_ms: np.ndarray
    queue_ms: np.ndarray
    compute_ms: np.ndarray

    @property
    def count(self) -> int:
        return int(self.request_ms.size)

    def quantiles(self) -> dict[str, object]:
        """``{"traced": N, "request": {"p50": ms, "p99": ms, "mean": ms}, "queue": {...}, "compute": {...}}``."""
        out: dict[str, object] = {"traced": self.count}
        for stage, values in (("request", self.request_ms), ("queue", self.queue_ms), ("compute", self.compute_ms)):
            if values.size:
                got = percentiles(values, QUANTILES)
                out[stage] = {f"p{q:g}": round(v, 4) for q, v in zip(QUANTILES, got, strict=True)}
                out[stage]["mean"] = round(float(values.mean()), 4)
        return out


def parse(files: list[Path], model: str, since_ns: int = 0) -> ServerTimes:
    """The requests to ``model`` that started at or after ``since_ns`` in Triton's trace files (a JSON list each
    of entries for trace ids: one naming the model, others carrying timestamps); requests whose trace was cut
    (no ``REQUEST_END``) are left out."""
    names: dict[int, str] = {}
    stamps: dict[int, dict[str, int]] = {}
    for path in files:
        try:
            entries = json.loads(path.read_text() or "[]")
        except (OSError, ValueError):
            continue  # a file Triton was still writing when read: its requests are not in the sample
        for entry in entries:
            trace = entry.get("id")
            if "model_name" in entry:
                names[trace] = entry["model_name"]
            for stamp in entry.get("timestamps", ()):
                stamps.setdefault(trace, {})[stamp["name"]] = int(stamp["ns"])
    rows = {stage: [] for stage in STAGES}
    for trace, name in names.items():
        got = stamps.get(trace, {})
        if name != model or got.get("REQUEST_START", -1) < since_ns:
            continue
        if not all(a in got and b in got for a, b in STAGES.values()):
            continue
        for stage, (a, b) in STAGES.items():
            rows[stage].append((got[b] - got[a]) / 1e6)
    return ServerTimes(*(np.asarray(rows[s], dtype=np.float64) for s in ("request", "queue", "compute")))


class TraceSample:
    """``with TraceSample(http_url, model, rate, skip_s) as sample``: the model's requests traced for the block;
    after it, ``sample.times`` (None where the server gives no trace here) and ``sample.why_none``."""

    def __init__(self, http_url: str, model: str, rate: int = 1, skip_s: float = 0.0, config: dict | None = None):
        self.http_url, self.model, self.rate, self.skip_s = http_url, model, max(1, int(rate)), skip_s
        self.config = config
        """The served config as Triton's JSON, where the caller read it already (else it is asked for)."""
        self.file: Path | None = None
        self.since_ns = 0
        self.times: ServerTimes | None = None
        self.why_none = ""

    def _settings(self, settings: dict | None = None) -> dict:
        client = httpclient.InferenceServerClient(self.http_url, network_timeout=10.0)
        try:
            if settings is None:
                return client.get_trace_settings(model_name=self.model)
            return client.update_trace_settings(model_name=self.model, settings=settings)
        finally:
            client.close()

    def _written(self) -> list[Path]:
        assert self.file is not None
        return sorted(self.file.parent.glob(f"{self.file.name}.*"))

    def _untraceable(self) -> str:
        """Why the model is not traced ("" when it may be). A Triton older than ``TRACE_FIXED_IN`` can crash while
        tracing (it unlocks a freed mutex in ``TraceManager::TraceRelease`` after every traced request; fixed by
        the server's PR #8144, first in 2.57.0): such a server is never traced, and the floor is the mean from its
        metrics. Pipelines and streams are not traced either (2.51 was seen to crash serving text_generator after
        a traced text_embedder pipeline)."""
        client = httpclient.InferenceServerClient(self.http_url, network_timeout=10.0)
        try:
            version = client.get_server_metadata().get("version", "")
            config = self.config if self.config is not None else client.get_model_config(self.model)
        finally:
            client.close()
        if not traces_safely(version):
            fixed = ".".join(map(str, TRACE_FIXED_IN))
            return f"Triton {version or '(no version)'} is not traced: it can crash while tracing (fixed in {fixed})"
        if config.get("model_transaction_policy", {}).get("decoupled"):
            return "a decoupled model is not traced"
        # a config made from metadata names the backend as its platform
        if config.get("platform") in ("ensemble", "python") or config.get("backend") == "python":
            return "a pipeline (an ensemble or a Python model) is not traced"
        return ""

    def __enter__(self) -> TraceSample:
        try:
            self.why_none = self._untraceable()
            named = "" if self.why_none else self._settings().get("trace_file", "")
        except Exception as exc:  # noqa: BLE001 - a server that refuses the config or trace API: no sample, said why
            self.why_none = f"the server refused its config or trace API ({type(exc).__name__})"
            return self
        if self.why_none:
            return self
        if not named or not Path(named).parent.is_dir():
            self.why_none = "the server's trace file is not on this host (start it with --trace-config)"
            return self
        self.file = Path(named)
        for left in self._written():  # an earlier sample's, unread after a failure
            left.unlink(missing_ok=True)
        settings = {"trace_level": ["TIMESTAMPS"], "trace_rate": str(self.rate), "trace_count": "-1"}
        self._settings({**settings, "log_frequency": "500"})
        self.since_ns = time.monotonic_ns() + int(self.skip_s * 1e9)
        return self

    def __exit__(self, *exc_info) -> None:
        if self.file is None:
            return
        with contextlib.suppress(Exception):  # the server may be gone (a failed run): nothing to read then
            self._settings({"trace_level": ["OFF"]})
        # Triton writes what it holds when tracing goes off; wait until the files stop growing.
        deadline, last = time.monotonic() + FLUSH_WAIT_S, None
        while time.monotonic() < deadline:
            sizes = [(p.name, p.stat().st_size) for p in self._written() if p.exists()]
            if sizes and sizes == last:
                break
            last = sizes
            time.sleep(0.1)
        files = self._written()
        self.times = parse(files, self.model, self.since_ns)
        for path in files:
            path.unlink(missing_ok=True)
        if self.times.count == 0:
            self.why_none, self.times = "no request of the run was traced", None


_WINDOW_EDGE_MS = 0.5
"""How far a client's mean may fall below Triton's over one run and still be read as a floor of 0."""


def floor_ms(client_ms: dict[str, float], trace: dict | None, client_network_ms: float = math.nan) -> dict[str, float]:
    """The generator's floor: the client's p50 and p99 minus the server's at the same percentile over the same
    run (``ServerTimes.quantiles``); without a trace, its mean: the client's mean minus Triton's mean request
    time over the run (``client_network_ms``, from its metrics); empty when neither is known. Every request's
    client time holds its server time: a client mean a little below the server's is the windows' edges (0), one
    far below it means the two windows held different requests (a backlog drained after the client's window, as
    in an overloaded run): no floor, rather than 0."""
    if not trace or "request" not in trace:
        if not client_network_ms >= -_WINDOW_EDGE_MS:  # NaN too
            return {}
        return {"mean": round(max(0.0, client_network_ms), 4)}
    server = trace["request"]
    out = {}
    for key in ("p50", "p99"):
        client = client_ms.get(key, math.nan)
        if key in server and not math.isnan(client):
            out[key] = round(max(0.0, client - server[key]), 4)
    return out


UNTRACED = "no trace: Triton's means"
"""How every line says a floor is the mean from Triton's metrics rather than traced percentiles."""


def floor_text(floor: dict[str, float], trace: dict | None) -> str:
    """A floor (``floor_ms``) on one line: its p50 and p99 where the run was traced (``trace``: the run's
    ``ServerTimes.quantiles``), else its mean from Triton's metrics; "" for an empty floor."""
    if not floor:
        return ""
    how = f"{trace['traced']} traced" if "mean" not in floor else UNTRACED
    return f"generator floor {floor_figures(floor)} ({how})"


def floor_limit(floor: dict[str, float]) -> tuple[str, float]:
    """The figure of a floor judged against a p99 budget: its p99, else (untraced) its mean, which the p99 of
    the generator's own time is at least as large as in practice; ("", NaN) for an empty floor."""
    for key in ("p99", "mean"):
        if key in floor:
            return key, floor[key]
    return "", math.nan


def floor_warning(floor: dict[str, float], budget_ms: float, generator: str = "the load generator") -> str:
    """One sentence when the floor (``floor_limit``) takes more than ``FLOOR_SHARE`` of a finite ``budget_ms``;
    "" otherwise."""
    key, value = floor_limit(floor)
    if not math.isfinite(budget_ms) or not value > FLOOR_SHARE * budget_ms:
        return ""
    return (
        f"{generator}'s own {key} is {value:.2f} ms of the {budget_ms:g} ms budget (over {FLOOR_SHARE:.0%}): "
        "the p99 judged is largely the generator's"
    )
