"""``tritonkit serve``: the real tritonserver on this machine, serving the project's repository."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from deploy.errors import ServerError, ServerStopRequested
from deploy.lifecycle import local_server
from deploy.server import MODEL_CONTROL_MODES, LocalServer, ServerConfig
from deploy.signals import StopRequest
from tritonkit_errors import ExitStatus

EPILOG = """\
environment: HTTP_PORT, GRPC_PORT, METRICS_PORT (defaults 8000, 8001, 8002) and MODEL_REPOSITORY.

The server binds 127.0.0.1 unless --address says otherwise; any other address needs TRITON_ADMIN_KEY
(16+ characters), and the repository, model-config, shared-memory, trace and logging APIs then need
the header admin-key (gRPC: triton-grpc-protocol-admin-key). It runs until Ctrl-C or SIGTERM, then
stops its Python-backend stubs and removes the /dev/shm regions they used. In explicit model-control
mode a supervisor reloads any model whose Python-backend stub dies (Triton does not restart it),
ends the replaced stubs Triton then keeps, and prints one line per recovery; --no-supervise turns it
off (docs/recovery.md). A model that fails to load does not take the others down: the server comes up
with the models that loaded and prints one "serve: not loaded: MODEL: REASON" line per model that did
not; --strict makes any failed load stop the start instead, as in the containers (docs/production.md).
Arguments after `--` go to tritonserver unchanged, e.g. `tritonkit serve -- --log-info=false`.

Exit status: 0 stopped cleanly; 1 the server failed to start or exited, or a stub process or /dev/shm
region was left behind; 2 bad arguments.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = ServerConfig.__dataclass_fields__
    parser.add_argument(
        "--repository", type=Path, help="model repository (default: $MODEL_REPOSITORY or ./model_repository)"
    )
    parser.add_argument("--address", default=defaults["address"].default, help="bind address for all endpoints")
    parser.add_argument("--http-port", type=int, help="default: $HTTP_PORT or 8000")
    parser.add_argument("--grpc-port", type=int, help="default: $GRPC_PORT or 8001")
    parser.add_argument("--metrics-port", type=int, help="default: $METRICS_PORT or 8002")
    parser.add_argument(
        "--model-control-mode",
        choices=MODEL_CONTROL_MODES,
        default="explicit",
        help="explicit (default) lets clients load/unload models without a restart",
    )
    parser.add_argument(
        "--load-model",
        action="append",
        dest="load_models",
        help="model to load at start in explicit mode (repeatable; default: all)",
    )
    parser.add_argument(
        "--response-cache-bytes",
        type=int,
        default=0,
        help="size of the response cache; models enable it with response_cache",
    )
    parser.add_argument("--no-summary-latencies", action="store_true", help="omit latency quantile summaries")
    parser.add_argument("--exit-timeout", type=int, default=30, help="seconds shutdown waits for in-flight requests")
    parser.add_argument("--log-verbose", type=int, default=0, help="tritonserver --log-verbose level")
    parser.add_argument(
        "--no-supervise",
        action="store_true",
        help="do not reload models whose Python-backend stub died (explicit mode only)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="every model must load, or the server does not start (the containers' behaviour)",
    )
    parser.add_argument(
        "--ready-timeout",
        type=float,
        default=420.0,
        help="seconds to wait for ready (all models load and warm up first)",
    )
    parser.add_argument("extra", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    given = {
        "model_repository": args.repository,
        "http_port": args.http_port,
        "grpc_port": args.grpc_port,
        "metrics_port": args.metrics_port,
        "load_models": tuple(args.load_models) if args.load_models else None,
    }
    extra = [a for a in args.extra if a != "--"]
    return ServerConfig(
        **{k: v for k, v in given.items() if v is not None},
        address=args.address,
        model_control_mode=args.model_control_mode,
        response_cache_bytes=args.response_cache_bytes,
        summary_latencies=not args.no_summary_latencies,
        exit_timeout_s=args.exit_timeout,
        log_verbose=args.log_verbose,
        ready_timeout_s=args.ready_timeout,
        extra_args=tuple(extra),
        supervise=not getattr(args, "no_supervise", False) and args.model_control_mode == "explicit",
        strict=getattr(args, "strict", False),
    )


def run(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"serve: error: {exc}", file=sys.stderr)
        return ExitStatus.USAGE
    # The handler only records the signal (deploy/signals.py); this thread polls it, also while it waits for
    # ready, so a signal at any moment, or a burst of them, ends in one clean stop.
    with StopRequest() as stop:
        return _serve(config, stop)


def _serve(config: ServerConfig, stop: StopRequest) -> int:
    _print_supervisor_events()
    lifecycle = local_server(config, signals=stop)  # the start and the cleanup every command shares
    server = lifecycle.server
    print(f"serve: starting tritonserver on {config.model_repository} (log: {server.log_path})", flush=True)
    try:
        with lifecycle:
            if not config.strict:
                _print_unavailable(server)
            print(
                f"serve: ready  HTTP {config.http_url}  gRPC {config.grpc_url}  metrics {config.metrics_url}"
                f"{'  (supervised)' if config.supervise else ''}",
                flush=True,
            )
            try:
                while not stop:
                    if not server.running:
                        print(f"serve: error: tritonserver exited\n{server.log_excerpt()}", file=sys.stderr)
                        return ExitStatus.FAILED
                    time.sleep(0.2)
            finally:
                print("serve: stopping", flush=True)
    except ServerStopRequested:
        return _report_stop(server.left_behind, "stopped before it was ready")
    except ServerError as exc:
        print(f"serve: error: {exc}", file=sys.stderr)
        return ExitStatus.FAILED
    return _report_stop(server.left_behind, "stopped")


def _print_unavailable(server: LocalServer) -> None:
    try:
        for name, reason in server.unavailable_models():
            print(f"serve: not loaded: {name}: {reason}", file=sys.stderr, flush=True)
    except (RuntimeError, OSError) as exc:  # the index is a convenience; the server is up either way
        print(f"serve: could not list the models that failed to load: {exc}", file=sys.stderr, flush=True)


def _report_stop(left: list[str], what: str) -> int:
    if left:
        print(f"serve: error: left behind after stop: {left}", file=sys.stderr)
        return ExitStatus.FAILED
    print(f"serve: {what}; no stub process or /dev/shm region left", flush=True)
    return ExitStatus.OK


def _print_supervisor_events() -> None:
    """The supervisor's recovery lines on stdout, as ``serve: supervisor: ...``."""
    logger = logging.getLogger("tritonkit.supervisor")
    if not any(getattr(h, "_tritonkit_serve", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("serve: supervisor: %(message)s"))
        handler._tritonkit_serve = True
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


HELP = "run the local tritonserver until Ctrl-C"


def arguments(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser)
    parser.set_defaults(handler=run)
