"""``tritonkit loadtest``: run a campaign file against the local server (or one already running), write
``reports/<campaign>/`` (results, Markdown, plots, HTML), tune, and gate on the SLO.

Exit status: 0 the SLO held; 1 the SLO gate failed (each failing scenario is named, with by how much);
2 the campaign file or an argument is invalid; 3 the server or Locust failed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from pathlib import Path

from deploy.errors import ServerError
from deploy.server import DEFAULT_REPOSITORY, LocalServer, ServerConfig
from loadtest import campaign as campaign_io
from loadtest.drive.payloads import base_model
from loadtest.drive.target import Endpoints
from loadtest.errors import CampaignError, LoadTestError
from loadtest.execution import execute

CAMPAIGNS = Path(__file__).with_name("campaigns")
REPORTS = Path("reports")
PIPELINES = ("image_classifier", "text_embedder", "text_generator")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "loadtest", help="run a load campaign: Locust through tritonclient, Triton's metrics, report, SLO gate",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("campaign", type=Path,
                        help=f"campaign TOML file (see loadtest/campaign.py; examples in {CAMPAIGNS})")
    parser.add_argument("--out", type=Path, default=REPORTS, help="reports folder (default: reports/)")
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY, help="model repository")
    parser.add_argument("--http-url", help="use the server already running here (host:port, explicit model "
                                           "control) instead of starting one; needs --grpc-url and --metrics-url")
    parser.add_argument("--grpc-url", help="host:port of that server's gRPC endpoint")
    parser.add_argument("--metrics-url", help="full URL of that server's metrics, e.g. http://host:8002/metrics")
    parser.add_argument("--dry-run", action="store_true",
                        help="[tune]: print the config.pbtxt diff of the chosen variant instead of writing it")
    parser.add_argument("--duration", type=float, help="override every scenario's duration_s (seconds)")
    parser.set_defaults(handler=run)


def needed_models(campaign) -> tuple[str, ...]:
    """What the local server must load: each scenario's model under each variant. Pipelines call other
    models, so a campaign with one loads the whole repository."""
    models = {v.served_model(s.model) for s in campaign.scenarios for v in campaign.variants}
    if any(base_model(m) in PIPELINES for m in models):
        return ("*",)
    return tuple(sorted(models))


@contextlib.contextmanager
def _endpoints(args: argparse.Namespace, campaign):
    if args.http_url:
        if not (args.grpc_url and args.metrics_url):
            raise ValueError("--http-url needs --grpc-url and --metrics-url too")
        yield Endpoints(args.http_url, args.grpc_url, args.metrics_url)
        return
    models = needed_models(campaign)
    print(f"starting tritonserver on {args.repository} with {', '.join(models)} ...", flush=True)
    with LocalServer(ServerConfig(model_repository=args.repository, load_models=models)) as server:
        yield Endpoints.of(server)


def run(args: argparse.Namespace) -> int:
    try:
        campaign = campaign_io.load(args.campaign)
        if args.duration:
            scenarios = tuple(dataclasses.replace(s, duration_s=args.duration,
                                                  warmup_s=min(s.warmup_s, args.duration / 4))
                              for s in campaign.scenarios)
            campaign = dataclasses.replace(campaign, scenarios=scenarios)
    except (CampaignError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        with _endpoints(args, campaign) as endpoints:
            return execute(campaign, endpoints, args.repository, args.out / campaign.name, dry_run=args.dry_run)
    except CampaignError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (LoadTestError, ServerError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
