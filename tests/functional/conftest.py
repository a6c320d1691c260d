"""Session fixtures of the functional tests that several modules serve from: each is built once per session
(docs/testing.md, "The server fixture")."""

from __future__ import annotations

import pytest
import tritonclient.http as httpclient

from loadtest.target import server_trace
from tests.conftest import server_config, start_or_fail
from tests.generation_helpers import tiny_generator_repository


@pytest.fixture(scope="session")
def tiny_generator_repo(tmp_path_factory):
    """The tiny generator steps' repository (tests/generation_helpers.py: ``tiny_generator_repository``), exported
    once: the tiny server below and the stop-signal test of `tritonkit genai-perf` serve it."""
    return tiny_generator_repository(tmp_path_factory.mktemp("tiny_generator"))


@pytest.fixture(scope="session")
def tiny_generator(tiny_generator_repo):
    """A server of the tiny generator repository, shared by test_text_generator.py and test_chat.py: one export
    of the steps and one server start, not two."""
    server = start_or_fail(server_config(tiny_generator_repo))
    yield server
    assert server.stop() == []


@pytest.fixture(scope="session")
def server_traces(server) -> bool:
    """Whether the session's Triton is traced (``server_trace.traces_safely``: 2.57.0 and later). The local
    tritonserver is 2.51, which can crash while tracing: its floors are means from its metrics."""
    client = httpclient.InferenceServerClient(server.config.http_url)
    try:
        return server_trace.traces_safely(client.get_server_metadata()["version"])
    finally:
        client.close()
