"""Session fixtures of the functional tests that several modules serve from: each is built once per session
(docs/testing.md, "The server fixture")."""

from __future__ import annotations

import pytest

from tests.conftest import server_config, start_or_fail
from tests.generation_helpers import tiny_generator_repository


@pytest.fixture(scope="session")
def tiny_generator(tmp_path_factory):
    """A server of the tiny generator steps (tests/generation_helpers.py: ``tiny_generator_repository``), shared
    by test_text_generator.py and test_chat.py: one export of the steps and one server start, not two."""
    server = start_or_fail(server_config(tiny_generator_repository(tmp_path_factory.mktemp("tiny_generator"))))
    yield server
    assert server.stop() == []
