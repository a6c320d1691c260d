"""What ``tritonkit loadtest`` checks before a campaign runs: the models the local server must load
(``needed_models``), each scenario's payloads against the configs it will serve (``check_repository_payloads``),
and that a server given by URL answers (``check_reachable``)."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from export import config as config_io
from export import model_kind
from export.model_kind import ModelKind
from loadtest.campaign.file import Campaign
from loadtest.generators.locust.runner import check_payloads


def needed_models(campaign: Campaign, repository: Path | None = None) -> tuple[str, ...]:
    """What the local server must load: each scenario's model under each variant, with the models an
    ensemble runs; a Python model may call any other (BLS), so one loads the whole repository."""
    models = {v.served_model(s.model) for s in campaign.scenarios for v in campaign.variants}
    if repository is None:
        return tuple(sorted(models))
    needed: set[str] = set()
    todo = list(models)
    while todo:
        model = todo.pop()
        if model in needed:
            continue
        needed.add(model)
        path = Path(repository) / model / "config.pbtxt"
        if not path.is_file():
            continue
        config = config_io.parse(path)
        if model_kind.kind(config) is ModelKind.PYTHON:
            return ("*",)
        todo += model_kind.ensemble_steps(config)
    return tuple(sorted(needed))


def check_repository_payloads(campaign: Campaign, repository: Path) -> None:
    """Each scenario's payloads made against its model's ``config.pbtxt`` (PayloadError naming what is wrong)."""
    from google.protobuf import json_format

    for scenario in campaign.scenarios:
        for variant in campaign.variants:
            served = variant.served_model(scenario.model)
            path = Path(repository) / served / "config.pbtxt"
            if path.is_file():
                check_payloads(
                    scenario, served, json_format.MessageToDict(config_io.parse(path), preserving_proto_field_name=True)
                )


def check_reachable(http_url: str, timeout_s: float = 5.0) -> None:
    """A server given by URL answers Triton's liveness check, or a ValueError says it does not."""
    url = f"http://{http_url}/v2/health/live"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            if response.status == 200:
                return
            raise ValueError(f"the server at {http_url} is not live: HTTP {response.status} from {url}")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ValueError(f"no Triton server answers at --http-url {http_url}: {reason}") from None
