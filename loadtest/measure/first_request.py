"""First-request latency after the server reports ready, against the steady median: what warmup buys.

:func:`measure` starts the local ``tritonserver`` (``deploy.server.LocalServer``, explicit mode, free
ports) serving one model, with the model's ``model_warmup`` entries as configured or removed,
sends one request the moment the server reports ready and times it, then sends ``steady_requests``
sequential requests for the steady median, and stops the server (raising if anything was left).

How warmup is removed: the server is given a throw-away repository holding only ``<model>/``, whose
entries (version folders, label files) are symlinks to the real ones and whose ``config.pbtxt`` is
the real config re-written through protobuf with ``model_warmup`` cleared. Both cases (warmup on
and off) run through the same throw-away repository, so the only difference between them is that
field: the server loads the model at start and reports ready after loading, in both. (Loading with
``load_model(model, config=<json>)`` after a start with no model would also drop the warmup, but the
server would then be "ready" before the model is loaded, which is not the moment this measures.)

Run: ``python -m loadtest.measure.first_request --model digits [--warmup on|off|both] [--steady 200]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from deploy.client import connect, infer
from deploy.server import DEFAULT_REPOSITORY, LocalServer, ServerConfig, free_ports
from loadtest.drive.payloads import real_batch


@dataclasses.dataclass
class FirstRequest:
    model: str
    warmup: bool
    """Whether the served config kept its ``model_warmup`` entries."""
    warmup_entries: int
    """How many ``model_warmup`` entries the served config had (0 when warmup is off)."""
    protocol: str
    ready_s: float
    """From starting the process to the server reporting ready (includes the warmup)."""
    first_ms: float
    """Latency of the first inference request, sent as soon as the server was ready."""
    steady_p50_ms: float
    steady_p90_ms: float
    steady_requests: int
    ratio: float
    """first_ms / steady_p50_ms."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def measure(repository: Path, model: str, payload: dict[str, np.ndarray], warmup: bool,
            steady_requests: int = 200, protocol: str = "grpc", ready_timeout_s: float = 420.0) -> FirstRequest:
    """Start a server for ``model`` alone, time the first request after ready, then the steady p50."""
    if steady_requests < 1:
        raise ValueError("steady_requests must be >= 1")
    tmp = Path(tempfile.mkdtemp(prefix="tritonkit-first-request-"))
    try:
        entries = _single_model_repository(Path(repository), model, tmp / "repo", keep_warmup=warmup)
        http, grpc, metrics = free_ports(3)
        config = ServerConfig(model_repository=tmp / "repo", http_port=http, grpc_port=grpc, metrics_port=metrics,
                              model_control_mode="explicit", load_models=(model,), ready_timeout_s=ready_timeout_s,
                              exit_timeout_s=10)
        server = LocalServer(config)
        started = time.monotonic()
        server.start()  # returns once /v2/health/ready answers 200 (polled every 0.2 s)
        ready_s = time.monotonic() - started
        left: list[str] = []
        try:
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
        finally:
            left = server.stop()
        if left:
            raise RuntimeError(f"stopping the server left behind: {left}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # symlinks are removed, never followed
    ordered = sorted(times)
    p50 = statistics.median(times)
    return FirstRequest(model=model, warmup=warmup, warmup_entries=entries, protocol=protocol, ready_s=ready_s,
                        first_ms=first_ms, steady_p50_ms=p50,
                        steady_p90_ms=ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
                        steady_requests=steady_requests, ratio=first_ms / p50 if p50 > 0 else float("inf"))


def _single_model_repository(repository: Path, model: str, target: Path, keep_warmup: bool) -> int:
    """``target/<model>/``: symlinks to the real entries, and the config with or without its warmup.

    The config is parsed with ``export.config.parse`` and only ``model_warmup`` is cleared, so a hand-written
    config (warmup samples of its own, fields a ``ModelSpec`` does not hold) keeps everything else.
    Returns how many ``model_warmup`` entries the written config has.
    """
    from google.protobuf import text_format

    from export import config as config_io  # tritonclient's protobuf modules

    source = repository / model
    config_path = source / "config.pbtxt"
    if not config_path.is_file():
        raise FileNotFoundError(f"no {config_path}: run `make export`")
    config = config_io.parse(config_path)
    if not keep_warmup:
        config.ClearField("model_warmup")
    folder = target / model
    folder.mkdir(parents=True)
    for entry in source.iterdir():
        if entry.name != "config.pbtxt":
            (folder / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
    (folder / "config.pbtxt").write_text(text_format.MessageToString(config))
    return len(config.model_warmup)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.measure.first_request", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="digits or minilm (real payloads)")
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    parser.add_argument("--warmup", choices=("on", "off", "both"), default="both")
    parser.add_argument("--steady", type=int, default=200, help="sequential requests for the steady median")
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument("--seq-len", type=int, default=32, help="minilm sequence length")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    payload = real_batch(args.model, 1, args.seq_len)
    modes = {"on": [True], "off": [False], "both": [True, False]}[args.warmup]
    results = [measure(args.repository, args.model, payload, w, args.steady, args.protocol) for w in modes]
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
        return 0
    print(f"{args.model}: first request after ready vs steady median ({args.protocol}, batch 1, "
          f"{args.steady} sequential requests)")
    print("| warmup | ready s | first ms | steady p50 ms | first / p50 |\n|---|---|---|---|---|")
    for r in results:
        label = f"on ({r.warmup_entries} entries)" if r.warmup else "off"
        print(f"| {label} | {r.ready_s:.1f} | {r.first_ms:.2f} | {r.steady_p50_ms:.2f} | {r.ratio:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
