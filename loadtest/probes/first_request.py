"""First-request latency after the server reports ready, against the steady median: what warmup buys.

:func:`measure` starts the local ``tritonserver`` (``deploy.lifecycle.local_server``, explicit mode, free
ports) serving one model, or one ensemble with every model its steps call, with their
``model_warmup`` entries as configured or removed, sends one request the moment the server reports
ready and times it, then sends ``steady_requests`` sequential requests for the steady median, and
stops the server (raising if anything was left).

How warmup is removed: the server is given a throw-away repository holding only the model (and an
ensemble's members), whose entries (version folders, label files, ``warmup/`` data) are symlinks to
the real ones and whose ``config.pbtxt`` files are the real configs re-written through protobuf with
``model_warmup`` cleared in every one of them. Both cases (warmup on and off) run through the same
throw-away repository, so the only difference between them is that field: the server loads the
models at start and reports ready after loading, in both. (Loading with ``load_model(model,
config=<json>)`` after a start with no model would also drop the warmup, but the server would then
be "ready" before the model is loaded, which is not the moment this measures.)

Payloads: the load tests' (``loadtest.generators.payloads``), the first sample: the payload flags' data
(``--input-data FILE.json``, ``--samples FILE.py:FUNC``), else a built-in model's or pipeline's own real
samples, else random values from the config (``--shape`` for a dynamic dim).

Run: ``tritonkit first-request --model digits [--model-warmup on|off|both] [--steady 200]``;
pipelines too (``--model image_classifier text_embedder``: one after the other); a model of your own:
``--model mine --repository DIR [--input-data FILE]``.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from deploy.client import connect, infer
from deploy.lifecycle import local_server
from deploy.server import ServerConfig, free_ports
from export import config as config_io
from export.model_kind import ensemble_steps, is_decoupled
from loadtest.core.client_stats import percentiles
from loadtest.errors import PayloadError
from loadtest.generators.payloads import (
    PayloadOptions,
    default_options,
    payloads,
)


@dataclasses.dataclass
class FirstRequest:
    model: str
    warmup: bool
    """Whether the served configs kept their ``model_warmup`` entries."""
    warmup_entries: int
    """How many ``model_warmup`` entries the served configs had in all (0 when warmup is off)."""
    protocol: str
    ready_s: float
    """From starting the process to the server reporting ready (includes the warmup)."""
    first_ms: float
    """Latency of the first inference request, sent as soon as the server was ready."""
    steady_p50_ms: float
    """Nearest-rank percentiles of the steady requests (``loadtest.core.client_stats.percentiles``)."""
    steady_p90_ms: float
    steady_requests: int
    ratio: float
    """first_ms / steady_p50_ms."""
    served: dict[str, int] = dataclasses.field(default_factory=dict)
    """Every model the server loaded (the model, and an ensemble's members) -> its ``model_warmup`` entries."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def measure(
    repository: Path,
    model: str,
    payload: dict[str, np.ndarray],
    warmup: bool,
    steady_requests: int = 200,
    protocol: str = "grpc",
    ready_timeout_s: float = 420.0,
) -> FirstRequest:
    """Start a server for ``model`` (and an ensemble's members) alone, time the first request after ready,
    then the steady p50."""
    if steady_requests < 1:
        raise ValueError("steady_requests must be >= 1")
    tmp = Path(tempfile.mkdtemp(prefix="tritonkit-first-request-"))
    try:
        served = _serving_repository(Path(repository), model, tmp / "repo", keep_warmup=warmup)
        http, grpc, metrics = free_ports(3)
        config = ServerConfig(
            model_repository=tmp / "repo",
            http_port=http,
            grpc_port=grpc,
            metrics_port=metrics,
            model_control_mode="explicit",
            load_models=tuple(served),
            ready_timeout_s=ready_timeout_s,
            exit_timeout_s=10,
        )
        started = time.monotonic()
        # Returns once /v2/health/ready answers 200 (polled every 0.2 s); the server is stopped however the
        # block ends, and SIGTERM or Ctrl-C exits 128 + signum once it is (deploy/lifecycle.py).
        with local_server(config) as server:
            ready_s = time.monotonic() - started
            client = connect(protocol, config.grpc_url if protocol == "grpc" else config.http_url)
            try:
                # Opens the connection, so the timed request pays for the model only, not for TCP/HTTP2 set-up.
                if not client.is_model_ready(model):
                    raise RuntimeError(f"{model} is not ready although the server is")
                t0 = time.perf_counter()
                infer(client, model, payload)
                first_ms = (time.perf_counter() - t0) * 1000
                times = []
                for _ in range(steady_requests):
                    t0 = time.perf_counter()
                    infer(client, model, payload)
                    times.append((time.perf_counter() - t0) * 1000)
            finally:
                client.close()
        if server.left_behind:
            raise RuntimeError(f"stopping the server left behind: {server.left_behind}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # symlinks are removed, never followed
    p50, p90 = percentiles(times, (50.0, 90.0))
    return FirstRequest(
        model=model,
        warmup=warmup,
        warmup_entries=sum(served.values()),
        protocol=protocol,
        ready_s=ready_s,
        first_ms=first_ms,
        steady_p50_ms=p50,
        steady_p90_ms=p90,
        steady_requests=steady_requests,
        ratio=first_ms / p50 if p50 > 0 else float("inf"),
        served=served,
    )


def read_config(repository: Path, model: str):
    """``<repository>/<model>/config.pbtxt`` as Triton's ``ModelConfig``, parsed with ``export.config.parse`` so a
    hand-written config (warmup samples of its own, fields a ``ModelSpec`` does not hold) keeps every field."""
    path = Path(repository) / model / "config.pbtxt"
    if not path.is_file():
        raise FileNotFoundError(f"no {path}: run `make export`, or give the --repository that holds {model!r}")
    return config_io.parse(path)


def members(repository: Path, model: str) -> list[str]:
    """``model`` and, for an ensemble, every model its steps call (nested ensembles too), each once, the
    model first."""
    order, todo = [], [model]
    while todo:
        name = todo.pop(0)
        if name not in order:
            order.append(name)
            todo.extend(ensemble_steps(read_config(repository, name)))
    return order


def _serving_repository(repository: Path, model: str, target: Path, keep_warmup: bool) -> dict[str, int]:
    """``target/<name>/`` for the model and its members: symlinks to the real entries, and each config with
    or without its warmup. Returns each served model's ``model_warmup`` entries, the model first."""
    from google.protobuf import text_format

    served = {}
    for name in members(repository, model):
        config = read_config(repository, name)
        if not keep_warmup:
            config.ClearField("model_warmup")
        folder = target / name
        folder.mkdir(parents=True)
        for entry in (repository / name).iterdir():
            if entry.name != "config.pbtxt":
                (folder / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
        (folder / "config.pbtxt").write_text(text_format.MessageToString(config))
        served[name] = len(config.model_warmup)
    return served


def payload_for(repository: Path, model: str, options: PayloadOptions | None = None) -> dict[str, np.ndarray]:
    """One request's inputs (batch 1) for ``model`` of ``repository``, the load tests' payloads: the payload
    flags' data, else the model's own samples (a built-in model or pipeline), else random values from its
    config. A decoupled model is refused: its first response is timed by the generation study."""
    config = read_config(repository, model)
    if is_decoupled(config):
        raise PayloadError(
            f"{model} is decoupled (streaming): time its first response with "
            f"`tritonkit bench-generation` (make bench-generation)"
        )
    return payloads(config, default_options(model, options))[0]
