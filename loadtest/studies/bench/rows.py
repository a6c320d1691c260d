"""The side-by-side benchmark's settings and its rows as arms of the rounds (``loadtest.studies.bench.command``).

:class:`Options` are the study's settings, :class:`Bench` one model's inputs to every row. Row 1 is the
exported file in process (:func:`measure_inprocess`); rows 2 and 3 are Triton plain and tuned, loaded through
model control and primed before each trial (:func:`triton_arms`); rows 4 and 5 the FastAPI servers, started
once and kept up for the rounds (:func:`fastapi_arms`). A failed trial is recorded as such and the rounds go on.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import time
import tomllib
import urllib.request
from collections.abc import Callable
from pathlib import Path

from deploy.client import connect, infer
from deploy.server import DEFAULT_REPOSITORY, PROJECT_ROOT, free_ports
from export import catalog
from export.variants import base_model
from loadtest.core.measurement import Load
from loadtest.core.spec import Candidate
from loadtest.core.trials import Arm
from loadtest.generators import seam as generators
from loadtest.generators.locust.runner import run_locust
from loadtest.generators.payloads import PayloadOptions, stack
from loadtest.probes.inprocess import ModelFile, limit
from loadtest.studies.bench.baselines.fastapi_app import serve_in_subprocess
from loadtest.studies.bench.report import Trial, default_users, describe, locust_trial
from loadtest.target import apply
from loadtest.target import endpoints as target

DEFAULT_TRIALS = 3
DEFAULT_MODELS = ("digits", "minilm")
"""Benchmarked by default, each in the format its tune picked (``export.catalog.served_pick``)."""


@dataclasses.dataclass
class Options:
    models: tuple[str, ...] = DEFAULT_MODELS
    trials: int = DEFAULT_TRIALS
    """Rounds of rows 1-5 (every row once a round)."""
    duration_s: float = 15.0
    warmup_s: float = 2.0
    users: dict[str, int] = dataclasses.field(default_factory=dict)
    processes: int = 1
    out: Path = PROJECT_ROOT / "reports" / "bench"
    repository: Path = DEFAULT_REPOSITORY
    inprocess_s: float = 2.0  # row 1: seconds per batch size
    perf_ms: int = 1500  # perf_analyzer's measurement window
    perf_concurrency: tuple[int, ...] = ()
    """perf_analyzer's concurrency levels on row 3; empty: 1, 2, 4 ... up to the users (:func:`perf_levels`)."""
    steady: int = 200  # first-request check: sequential requests for the steady p50
    payload: PayloadOptions = dataclasses.field(default_factory=PayloadOptions)
    """The requests (the payload flags); a catalog model without data options sends its own real data."""
    server_cpus: frozenset[int] | None = None
    client_cpus: frozenset[int] | None = None
    """Cores of the servers and row 1, and of the load generators; None: the halves of this machine's
    (``loadtest.target.endpoints.split_cpus``); empty sets: no pinning."""

    def users_for(self, model: str, config: dict | None = None) -> int:
        """``--users`` for ``model``, else enough for its served ``config`` (:func:`default_users`)."""
        return int(self.users.get(model) or default_users(config or {}))

    def cpus(self) -> tuple[frozenset[int], frozenset[int]]:
        """(client, server) cores."""
        if self.server_cpus is None and self.client_cpus is None:
            return target.split_cpus()
        return frozenset(self.client_cpus or ()), frozenset(self.server_cpus or ())


@dataclasses.dataclass
class Bench:
    """One model's inputs to every row: its exported file and config, the requests and the closed-loop users."""

    model: str
    spec: ModelFile
    samples: list
    server_cpus: frozenset[int]
    users: int

    def batch(self, n: int):
        return stack(self.samples, n)


# -- rows -----------------------------------------------------------------------------------------
def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"[:300]


def guarded(fn, *args) -> dict:
    """``fn(*args)``, or ``{"throughput": None, "error": ...}``: one failed check must not lose the others."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001
        return {"throughput": None, "error": error_text(exc)}


def trial_of(fn: Callable[[], Trial], generator: str = "locust") -> Callable[[], Trial]:
    """``fn`` as an arm's measure: a failed trial is recorded as such and the rounds go on."""

    def measure_once() -> Trial:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - reported in its row, the other trials still count
            return Trial.failed(generator, error_text(exc))

    return measure_once


def tuned_source(model: str, tuned_path: Path = catalog.TUNED) -> str:
    """Where row 3's config comes from: the repository's, which ``make export`` writes from
    ``export/models.toml`` overlaid with the auto-tuner's ``export/tuned.toml`` (whose table for ``minilm``
    holds for ``minilm_onnx`` too)."""
    model = base_model(model)
    table = tomllib.loads(tuned_path.read_text()).get(model) if tuned_path.is_file() else None
    where = tuned_path.relative_to(PROJECT_ROOT) if tuned_path.is_relative_to(PROJECT_ROOT) else tuned_path
    if not table:
        return f"the repository's config as exported ({where} has no [{model}] table)"
    return f"the repository's config as exported with {where} [{model}]" + (
        f" ({table['note']})" if table.get("note") else ""
    )


def measure_inprocess(bench: Bench, opts: Options) -> Trial:
    got = limit(
        bench.spec,
        bench.batch,
        seconds_per_size=opts.inprocess_s,
        max_batch=bench.spec.max_batch_size or None,
        cpus=bench.server_cpus or None,
    )
    best = next(r for r in got.table if r.batch == got.best_batch)
    return Trial(
        got.best_items_per_s,
        best.median_ms,
        math.nan,
        0.0,
        "in-process",
        detail={
            "batch1_median_ms": got.batch1_median_ms,
            "best_batch": got.best_batch,
            "threads": got.threads,
            "p90_ms": best.p90_ms,
            "table": [dataclasses.asdict(r) for r in got.table],
        },
    )


def locust_scenario(model: str, protocol: str, users: int, opts: Options, name: str):
    warmup_s = min(opts.warmup_s, opts.duration_s / 3)
    return Load(users=users).scenario(
        name, model, protocol, opts.duration_s, warmup_s, opts.processes, opts.payload.to_table()
    )


def triton_locust(endpoints, opts: Options, work: Path, log) -> generators.LoadGenerator:
    """The Locust of the Triton rows (2, 3 and the one user), from the generator seam: HTTP, ``--duration``
    with its warm-up, ``--processes``, the payload flags. (Rows 4 and 5 load FastAPI servers, which have no
    Triton config or counters for a generator to read: :func:`fastapi_arms` runs their Locust itself.)"""
    return generators.generator(
        "locust",
        endpoints,
        protocol="http",
        work=work,
        payload=opts.payload.to_table(),
        duration_s=opts.duration_s,
        warmup_s=min(opts.warmup_s, opts.duration_s / 3),
        processes=opts.processes,
        log=log,
    )


def perf_levels(users: int) -> list[int]:
    """1, 2, 4, ... up to the Locust users (and the users themselves)."""
    levels = [1 << i for i in range(max(1, users).bit_length()) if 1 << i < users]
    return levels + [users]


def prime(bench: Bench, url: str, users: int, batching: bool, fastapi: bool = False) -> float:
    """Untimed requests before a row, with the batch sizes the row's traffic will form (1, or 1, 2, 4 ... up
    to the users when a batcher joins requests), so that TorchScript's profiling executor has specialised
    (seconds for minilm) before Locust measures."""
    started, client = time.monotonic(), None if fastapi else connect("http", url)
    try:
        for batch in [b for b in (perf_levels(users) if batching else [1]) for _ in range(3)]:
            arrays = bench.batch(min(batch, bench.spec.max_batch_size or 1))
            if client is not None:
                infer(client, bench.model, arrays)
                continue
            body = json.dumps({"inputs": {k: v.tolist() for k, v in arrays.items()}}).encode()
            request = urllib.request.Request(f"http://{url}/infer", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as response:
                response.read()
    finally:
        if client is not None:
            client.close()
    return time.monotonic() - started


def triton_arms(bench: Bench, endpoints, opts: Options, work: Path, log) -> tuple[list[Arm], dict, dict]:
    """Rows 2 and 3 as arms: each loads its config through model control and primes it before its trial.
    Also the configs (plain, tuned)."""
    model, users = bench.model, bench.users
    # The server was started from config.pbtxt (for a catalog model: export's, with the tuned settings); rows 2
    # and 3 are loaded as explicit configs (a plain reload would keep serving the last override).
    tuned = apply.served_config(endpoints.http, model)
    plain = apply.override(tuned, Candidate.of("plain", dynamic_batching=False, instances=1, warmup=False))
    locust, arms = triton_locust(endpoints, opts, work, log), []
    for key, config in (("triton_plain", plain), ("triton_tuned", tuned)):
        failed = {"why": ""}  # a config that did not load fails its trial (the server serves the other one)

        def load(key: str = key, config: dict = config, failed: dict = failed) -> None:
            log(f"[{model}] {key}: loading {describe(config)} through model control")
            try:
                apply.load(endpoints.http, model, config)
                failed["why"] = ""
                took = prime(bench, endpoints.http, users, "dynamic_batching" in config)
                log(f"[{model}] {key}: primed in {took:.1f} s")
            except Exception as exc:  # noqa: BLE001 - its trial then fails and says why
                failed["why"] = f"loading the config failed: {error_text(exc)}"

        labels = (f"{model}-{key}-{n}" for n in itertools.count(1))

        def one(labels=labels, failed: dict = failed) -> Trial:
            if failed["why"]:
                return Trial.failed("locust", failed["why"])
            record = locust.run(model, model, Load(users=users), label=next(labels))
            return locust_trial(
                record.client, avg_batch=record.server.avg_batch, breakdown_ms=record.server.breakdown_ms
            )

        arms.append(Arm(key, trial_of(one), load))
    return arms, plain, tuned


FASTAPI_ROWS = (("fastapi", False), ("fastapi_batcher", True))


def fastapi_arms(bench: Bench, opts: Options, work: Path, log, procs: list) -> list[Arm]:
    """Rows 4 and 5 as arms: both uvicorn servers start now on the server's cores (``procs`` collects them for
    the caller to stop), are primed once and stay up for the rounds."""
    model, users, arms = bench.model, bench.users, []
    for key, batcher in FASTAPI_ROWS:
        (port,) = free_ports(1)
        url, failed = f"127.0.0.1:{port}", ""
        try:
            procs.append(
                serve_in_subprocess(
                    model, port, batcher, opts.repository, timeout_s=120, cpus=bench.server_cpus or None
                )
            )
            log(f"[{model}] {key}: uvicorn on {url}, primed in {prime(bench, url, users, batcher, True):.1f} s")
        except Exception as exc:  # noqa: BLE001 - every trial of the row then fails and says why
            failed = error_text(exc)
            log(f"[{model}] {key}: the server did not start: {failed}")

        labels = (f"{model}-{key}-{n}" for n in itertools.count(1))

        def one(url: str = url, failed: str = failed, labels=labels) -> Trial:
            if failed:
                return Trial.failed("locust", failed)
            label = next(labels)
            client = run_locust(
                locust_scenario(model, "fastapi", users, opts, label),
                model,
                url,
                work / f"{label}.json",
                work / f"{label}.log",
                progress=log,
                config=bench.spec.config,
                samples=bench.samples,
            )
            return locust_trial(client)

        arms.append(Arm(key, trial_of(one)))
    return arms
