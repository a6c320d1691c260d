"""backends/custom_ops.py: the torch.library ops compute their reference, trace by name, and a saved
TorchScript file needs the op module imported before it loads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import backends.custom_ops as custom_ops
from export.zoo import custom_op as custom_op_zoo

OP = "tritonkit::hardswish_clamp"


def reference(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    return nn.functional.hardswish(x).clamp(lo, hi)


class UsesOp(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        return torch.ops.tritonkit.hardswish_clamp(self.linear(x), -0.25, 4.0)


@pytest.mark.parametrize("bounds", [(-0.25, 4.0), (0.0, 6.0), (-1.0, 100.0), (1.0, 1.0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_op_equals_hardswish_then_clamp(bounds, dtype):
    x = torch.linspace(-8, 8, 4001, dtype=dtype).reshape(1, -1)  # covers both kinks (-3, 3) and the clamps
    x = torch.cat([x, torch.randn(3, 4001, dtype=dtype) * 5])
    before = x.clone()
    out = torch.ops.tritonkit.hardswish_clamp(x, *bounds)
    assert out.dtype == dtype and out.shape == x.shape
    torch.testing.assert_close(out, reference(x, *bounds), rtol=0, atol=1e-6)
    assert torch.equal(x, before)  # the op declares mutates_args=(): the input is left alone


def test_op_rejects_inverted_bounds():
    with pytest.raises(ValueError, match="lo=2.0 is above hi=1.0"):
        torch.ops.tritonkit.hardswish_clamp(torch.zeros(3), 2.0, 1.0)


def test_op_registration_is_sound_and_its_gradient_is_right():
    x = (torch.randn(6, 5, dtype=torch.float64) * 4).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: torch.ops.tritonkit.hardswish_clamp(t, -0.25, 4.0), (x,))
    # Schema, fake (meta) implementation, autograd registration: torch's own consistency checks.
    torch.library.opcheck(torch.ops.tritonkit.hardswish_clamp.default, (torch.randn(4, 3), 0.0, 6.0))
    with torch.device("meta"):
        assert torch.ops.tritonkit.hardswish_clamp(torch.empty(2, 7), 0.0, 6.0).shape == (2, 7)
    assert custom_ops.OPS == ("hardswish_clamp",)


def test_trace_records_the_op_by_name():
    with torch.no_grad():
        traced = torch.jit.freeze(torch.jit.trace(UsesOp().eval(), (torch.randn(2, 8),)))
    kinds = [node.kind() for node in traced.graph.nodes()]
    assert OP in kinds, kinds
    assert "aten::hardswish" not in kinds and "aten::clamp" not in kinds  # recorded as one op, not inlined


def test_zoo_model_traces_to_the_op():
    model = custom_op_zoo.build()
    with torch.no_grad():
        traced = torch.jit.trace(model.module, model.example_inputs)
    assert sum(node.kind() == OP for node in traced.inlined_graph.nodes()) == len(custom_op_zoo.TRAINING["hidden"])


def _load_in_fresh_process(path, import_ops: bool) -> subprocess.CompletedProcess:
    """Outside the project folder, as the server's stub runs: the op module comes from the installed package."""
    code = textwrap.dedent(f"""
        import torch
        {"import backends.custom_ops" if import_ops else ""}
        module = torch.jit.load({str(path)!r})
        x = torch.linspace(-6, 6, 16).reshape(2, 8)
        print(module(x).sum().item())
    """)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=path.parent,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )


def test_saved_file_loads_in_a_fresh_process_only_after_the_op_module_is_imported(tmp_path):
    torch.manual_seed(0)
    module = UsesOp().eval()
    path = tmp_path / "model.pt"
    with torch.no_grad():
        torch.jit.freeze(torch.jit.trace(module, (torch.randn(2, 8),))).save(str(path))
        expected = module(torch.linspace(-6, 6, 16).reshape(2, 8)).sum().item()

    without = _load_in_fresh_process(path, import_ops=False)
    assert without.returncode != 0
    assert f"Unknown builtin op: {OP}" in without.stderr, without.stderr[-2000:]

    with_ops = _load_in_fresh_process(path, import_ops=True)
    assert with_ops.returncode == 0, with_ops.stderr[-2000:]
    assert abs(float(with_ops.stdout.strip()) - expected) <= 1e-5
