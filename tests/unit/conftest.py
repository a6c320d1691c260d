"""Fixtures of the unit tests."""

import signal
from pathlib import Path

import pytest

from deploy.signals import STOP_SIGNALS
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


@pytest.fixture
def restore_stop_handlers():
    """A block stopped by a signal leaves SIGINT/SIGTERM ignored on purpose; pytest gets its handlers back
    (test_signals.py, test_lifecycle.py)."""
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


@pytest.fixture
def failing_setup(tmp_path, monkeypatch) -> Path:
    """A deploy/setup.sh whose every layer fails, as without a network (deploy/tools.py runs it on a tool's first
    use); the folder of its logs."""
    from deploy import tools

    script = tmp_path / "setup.sh"
    script.write_text('echo "setup: installing $1 ($SETUP_WHY)"\necho "pip: no network" >&2\nexit 1\n')
    monkeypatch.setattr(tools, "SETUP", script)
    monkeypatch.setattr(tools, "LOGS", tmp_path / "setup-logs")
    return tmp_path / "setup-logs"
