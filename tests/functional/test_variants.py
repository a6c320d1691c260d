"""Every built-in export variant, served by the local server, answers like eager PyTorch FP32.

Each variant is held to its own precision's tolerance, with fresh random inputs at several batch
sizes (and sequence lengths for text), over both protocols.
"""

import numpy as np
import pytest
import torch

from deploy.client import infer
from export import catalog, zoo

VARIANTS = [(entry.name, variant) for entry in catalog.load().values() for variant in entry.variants["cpu"]]


@pytest.fixture(scope="module")
def models():
    return {}


@pytest.mark.parametrize("base, variant", VARIANTS, ids=[f"{b}-{v}" for b, v in VARIANTS])
def test_served_variant_equals_eager(client, protocol, models, base, variant):
    entry = catalog.entry(base)
    if entry.builder not in models:
        models[entry.builder] = zoo.build(entry.builder)
    model = models[entry.builder]
    spec = entry.spec(model, variant)
    tolerance = model.tolerances[variant.precision]
    generator = torch.Generator().manual_seed(1)
    worst = 0.0
    for batch in sorted({1, 5, spec.max_batch_size}):
        for seq in model.seq_lengths[:2] or (None,):
            inputs = model.random_inputs(batch, seq, generator)
            with torch.no_grad():
                expected = model.module(*inputs)
            expected = (expected,) if isinstance(expected, torch.Tensor) else tuple(expected)
            served = infer(client, spec.name, {t.name: x.numpy() for t, x in zip(spec.inputs, inputs, strict=True)})
            for out, e in zip(spec.outputs, expected, strict=True):
                e = e.numpy()
                got = served[out.name]
                assert got.shape == e.shape and got.dtype == np.float32
                worst = max(worst, float(np.abs(got - e).max()))
                assert np.all(np.abs(got - e) <= tolerance.atol + tolerance.rtol * np.abs(e)), (
                    f"{spec.name} batch {batch} seq {seq}: max abs {np.abs(got - e).max():.2e}"
                )
    print(f"\n{protocol} {spec.name}: max |served - eager| = {worst:.2e} (atol {tolerance.atol:.0e})")
