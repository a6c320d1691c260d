"""The server a measurement runs against: its ``Endpoints``, and (for ``loadtest.studies.overload.command``,
``loadtest.studies.soak.command``) one given by URL or a local one started for the run and stopped after it,
optionally pinned to its own CPUs apart from the load generator."""

from __future__ import annotations

import dataclasses
import os
import sys
import urllib.error
from pathlib import Path
from typing import Any

from deploy.errors import ServerError
from deploy.lifecycle import local_server
from deploy.server import DEFAULT_REPOSITORY, ServerConfig, free_ports
from loadtest.errors import CampaignError, LoadTestError, PayloadError
from tritonkit_errors import ExitStatus


@dataclasses.dataclass(frozen=True)
class Endpoints:
    http: str
    """host:port of Triton's HTTP endpoint (model control and statistics go through it)."""
    grpc: str
    metrics: str
    """Full URL of the Prometheus endpoint."""

    @classmethod
    def of(cls, server) -> Endpoints:
        c = server.config
        return cls(c.http_url, c.grpc_url, c.metrics_url)

    def url(self, protocol: str) -> str:
        return self.grpc if protocol == "grpc" else self.http


def default_repository() -> Path:
    """``$MODEL_REPOSITORY``, else the project's ``model_repository/``."""
    return Path(os.environ.get("MODEL_REPOSITORY") or DEFAULT_REPOSITORY)


def missing_model(repository: Path, model: str) -> str:
    """Why ``model`` cannot be served from ``repository`` (it has no ``config.pbtxt`` there), naming the models
    there; "" when it can."""
    repository = Path(repository)
    if (repository / model / "config.pbtxt").is_file():
        return ""
    found = sorted(p.parent.name for p in repository.glob("*/config.pbtxt"))
    return f"model {model!r} is not in the repository {repository}; models there: {found}"


def parse_cpus(text: str) -> frozenset[int]:
    """``"0"``, ``"0,2"``, ``"2-5"`` -> CPU numbers; the bad part is named."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            raise LoadTestError(f"CPU list {text!r}: {part!r} is not N or N-M") from None
        if low < 0 or high < low:
            raise LoadTestError(f"CPU list {text!r}: {part!r} is not a range of CPU numbers")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def split_cpus(cpus: frozenset[int] | None = None) -> tuple[frozenset[int], frozenset[int]]:
    """(client, server): the lower half of ``cpus`` (default: the CPUs this process may use) for the load
    generator, the rest for the server; two empty sets (no pinning) with fewer than two CPUs."""
    ordered = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
    if len(ordered) < 2:
        return frozenset(), frozenset()
    half = len(ordered) // 2
    return frozenset(ordered[:half]), frozenset(ordered[half:])


def server_config(args, models: tuple[str, ...]) -> ServerConfig | None:
    """The local server's config, serving only ``models`` on free ports; None for the server given by URL (its
    flags checked: ``ValueError`` naming the one missing or in conflict)."""
    if args.http_url:
        if not (args.grpc_url and args.metrics_url):
            raise ValueError("--http-url needs --grpc-url and --metrics-url too")
        if args.server_cpus:
            raise ValueError("--server-cpus pins a local server: drop --http-url, or pin that server yourself")
        return None
    http, grpc, metrics = free_ports()
    return ServerConfig(
        model_repository=args.repository,
        load_models=models,
        http_port=http,
        grpc_port=grpc,
        metrics_port=metrics,
        exit_timeout_s=10,
        cpus=args.server_cpus,
    )


def lost_server(exc: OSError, endpoints: Endpoints, server=None) -> str:
    """One line for a server that stopped answering in the middle of the work (refused, reset): where, why, and
    for a local server that exited, its exit status and log."""
    reason = str(getattr(exc, "reason", None) or exc).strip().splitlines() or [type(exc).__name__]
    text = f"the server at {endpoints.http} stopped answering during the run ({reason[0]})"
    process = getattr(server, "process", None)
    if process is not None and (code := process.poll()) is not None:
        text += f": tritonserver exited with status {code}; its log: {server.log_path}"
    return text


def run_with_server(args, models: tuple[str, ...], work) -> tuple[int, Any]:
    """``work(endpoints, server)`` against the server given by URL or a local one serving ``models`` (stopped
    afterwards): ``(0, result)``, or ``(2, None)`` for a bad argument and ``(3, None)`` when the server or Locust
    failed (a server that stops answering during the work included: ``lost_server``), the error printed.
    SIGTERM or Ctrl-C stops the work and the local server, and the process exits with ``128 + signum``
    (``deploy/lifecycle.py``)."""
    affinity = os.sched_getaffinity(0)
    try:
        config = server_config(args, models)
        if config is not None:
            print(f"starting tritonserver on {args.repository} with {', '.join(models)} ...", flush=True)
        with local_server(config) as server:
            endpoints = (
                Endpoints.of(server)
                if server is not None
                else Endpoints(args.http_url, args.grpc_url, args.metrics_url)
            )
            if args.client_cpus:
                os.sched_setaffinity(0, args.client_cpus)  # the Locust workers started from here inherit it
            try:
                return ExitStatus.OK, work(endpoints, server)
            except (urllib.error.URLError, ConnectionError) as exc:  # read before the local server is stopped
                raise LoadTestError(lost_server(exc, endpoints, server)) from exc
    except (CampaignError, PayloadError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitStatus.USAGE, None
    except (LoadTestError, ServerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitStatus.BROKEN, None
    finally:
        os.sched_setaffinity(0, affinity)  # a caller in the same process (a test) gets its CPUs back
