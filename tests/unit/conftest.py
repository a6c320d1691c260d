"""Fixtures of the unit tests."""

from pathlib import Path

import pytest

from tests.k8s_manifests import OVERLAYS


@pytest.fixture(params=OVERLAYS)
def overlay(request) -> str:
    """Each Kubernetes overlay of deploy/k8s in turn (the tests of its manifests)."""
    return request.param


@pytest.fixture(scope="module")
def tiny_module(tmp_path_factory) -> Path:
    """A scripted TorchScript module, ``y = 2 * x + offset.sum(dim=1)``: inputs ``x`` (FP32) and ``offset``
    (INT64), one output, any batch (test_fastapi_app.py, test_inprocess.py)."""
    import torch  # here, so the unit tests that need no torch do not import it

    class Scale(torch.nn.Module):
        def forward(self, x: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
            return x * 2.0 + offset.to(x.dtype).sum(dim=1, keepdim=True)

    path = tmp_path_factory.mktemp("tiny") / "model.pt"
    torch.jit.script(Scale()).save(str(path))
    return path
