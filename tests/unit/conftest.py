"""Fixtures of the unit tests."""

import pytest

from tests.k8s_manifests import OVERLAYS


@pytest.fixture(params=OVERLAYS)
def overlay(request) -> str:
    """Each Kubernetes overlay of deploy/k8s in turn (the tests of its manifests)."""
    return request.param
