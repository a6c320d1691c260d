"""The pipelines are warm before READY: every Python member of an ensemble runs its ``model_warmup`` while
loading, so the server's statistics show those executions before any client request, and the first
request through the ensemble is answered correctly.

The server serves a throw-away repository with just the two ensembles and their members (the one
``python -m loadtest.probes.first_request`` builds for each), with their warmup kept. How fast the first request is
against the steady median is printed by that command, not asserted here.
"""

import pytest

from deploy.client import connect, infer
from deploy.server import DEFAULT_REPOSITORY
from export.config import parse
from export.zoo import efficientnet
from loadtest.probes.first_request import _serving_repository, payload_for
from tests.conftest import server_config, start_or_fail

PIPELINES = {"image_classifier": ("preprocess", "postprocess"), "text_embedder": ("tokenize",)}


@pytest.fixture(scope="module")
def pipelines_server(repository, tmp_path_factory):
    """One server of both pipelines and their members (no member is shared, so neither's requests reach the
    other's statistics), each config with its warmup kept."""
    target = tmp_path_factory.mktemp("pipelines") / "repo"
    served = {}
    for pipeline in sorted(PIPELINES):
        served.update(_serving_repository(repository, pipeline, target, keep_warmup=True))
    server = start_or_fail(server_config(target, load_models=tuple(served)))
    yield server
    assert server.stop() == []


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_the_python_members_ran_their_warmup_before_ready(repository, pipelines_server, pipeline):
    client = connect("grpc", pipelines_server.config.grpc_url)
    try:
        for member in PIPELINES[pipeline]:
            samples = parse(DEFAULT_REPOSITORY / member / "config.pbtxt").model_warmup
            stats = client.get_inference_statistics(member, as_json=True)["model_stats"][0]
            executions = int(stats.get("execution_count", 0))
            print(f"\n{member}: {executions} executions before any request ({len(samples)} warmup samples)")
            assert executions == len(samples) > 0, (member, stats)
        answer = infer(client, pipeline, payload_for(repository, pipeline))
        if pipeline == "image_classifier":
            assert answer["CLASS_IDS"][0, 0] == efficientnet.ESPRESSO  # the payload's first photo: coffee
        else:
            assert answer["EMBEDDING"].shape == (1, 384)
    finally:
        client.close()
