"""export/zoo: the real-weight zoo models: right interface, right answers on real data, traceable, honest tolerances.

Each model is built once per session (a few seconds each on two cores); every check runs small batches.
"""

from __future__ import annotations

import copy
import inspect
import os

import numpy as np
import pytest
import torch

from export import parity, zoo
from export.zoo import efficientnet, minilm, resnet

NAMES = ("efficientnet_lite0", "minilm", "resnet50")
DTYPES = {"FP32": torch.float32, "INT64": torch.int64}

pytestmark = pytest.mark.filterwarnings(
    "ignore::torch.jit.TracerWarning", "ignore::DeprecationWarning", "ignore::FutureWarning"
)


@pytest.fixture(scope="module")
def built():
    cache = {}

    def get(name: str):
        if name not in cache:
            cache[name] = zoo.build(name)
        return cache[name]

    return get


def eager(model, *inputs):
    with torch.no_grad():
        return model.module(*inputs)


def traced(model):
    return torch.jit.trace(model.module, model.example_inputs)


def no_grad(module):
    def run(*inputs):
        with torch.no_grad():
            return module(*inputs)

    return run


def as_half(model):
    """FP16 weights, FP16 float inputs, FP32 outputs: what an FP16 export computes, run on CPU."""
    half = copy.deepcopy(model.module).half()

    def run(*inputs):
        with torch.no_grad():
            return half(*(x.half() if x.is_floating_point() else x for x in inputs)).float()

    return run


# --- every model -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_interface_matches_the_spec(built, name):
    model = built(name)
    assert model.name == name
    assert not model.module.training
    forward_args = list(inspect.signature(model.module.forward).parameters)
    assert forward_args == [t.name for t in model.inputs]  # Triton binds inputs by these names
    assert {"fp32", "fp16"} <= set(model.tolerances)
    assert model.example_inputs[0].shape[0] != model.reference_inputs[0].shape[0]
    seq = model.seq_lengths[1] if model.seq_lengths else None
    for batch in (1, 3):
        inputs = model.random_inputs(batch, seq, torch.Generator().manual_seed(batch))
        for tensor, spec in zip(inputs, model.inputs, strict=True):
            assert tensor.dtype == DTYPES[spec.datatype]
            assert tensor.shape[0] == batch
            assert all(d == -1 or d == s for d, s in zip(spec.dims, tensor.shape[1:], strict=True))
    (out,) = model.outputs
    assert eager(model, *model.reference_inputs).shape == (model.reference_inputs[0].shape[0], *out.dims)


@pytest.mark.parametrize("name", NAMES)
def test_trace_equals_eager_at_other_batch_sizes(built, name):
    model = built(name)
    module = traced(model)
    cases = [
        model.reference_inputs,
        model.random_inputs(1, model.seq_lengths[0] if model.seq_lengths else None, torch.Generator().manual_seed(7)),
    ]
    for inputs in cases:
        with torch.no_grad():
            torch.testing.assert_close(module(*inputs), eager(model, *inputs), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_fp16_on_cpu_passes_its_own_tolerance(built, name):
    """The declared FP16 bounds hold for FP16 weights (batch 1 random + the reference data)."""
    model = built(name)
    report = parity.check(model, as_half(model), "fp16", max_batch_size=1)
    assert report.ok, report.message


# --- efficientnet_lite0 ----------------------------------------------------------------------------


def test_imagenet_labels_file():
    labels = efficientnet.labels()
    assert len(labels) == 1000 and all(labels)
    assert (labels[0], labels[281], labels[282], labels[285]) == ("tench", "tabby", "tiger cat", "Egyptian cat")
    assert (labels[967], labels[999]) == ("espresso", "toilet tissue")


def test_preprocess_resizes_crops_and_scales():
    from PIL import Image

    wide = np.zeros((300, 600, 3), np.uint8)
    wide[:, 300:] = 255  # right half white: after the centre crop, half the columns are white
    x = efficientnet.preprocess(wide)
    assert x.shape == (3, 224, 224) and x.dtype == np.float32
    assert x.min() == pytest.approx(-127 / 128) and x.max() == pytest.approx(128 / 128)
    assert x[:, :, :100].max() == pytest.approx(-127 / 128) and x[:, :, 124:].min() == pytest.approx(1.0)
    grey = Image.fromarray(np.full((256, 300), 127, np.uint8), mode="L")
    assert np.allclose(efficientnet.preprocess(grey), 0.0)


def test_efficientnet_recognises_the_photos(built):
    model = built("efficientnet_lite0")
    names = [name for name, _ in efficientnet.photos()]
    assert names == ["coffee", "chelsea", "astronaut", "china", "flower"]
    logits = eager(model, *model.reference_inputs)
    top3 = logits.topk(3, dim=1).indices
    assert int(top3[0, 0]) == efficientnet.ESPRESSO, model.labels[int(top3[0, 0])]
    assert set(top3[1].tolist()) & set(efficientnet.CAT_CLASSES), [model.labels[i] for i in top3[1]]


# --- minilm ----------------------------------------------------------------------------------------


def test_tokenize_pads_to_longest_and_truncates():
    ids, mask = minilm.tokenize(["Hi", "A somewhat longer sentence here."])
    assert ids.dtype == mask.dtype == np.int64 and ids.shape == mask.shape
    assert ids[0, 0] == minilm.CLS and ids[0, 2] == minilm.SEP and ids[0, 3:].tolist() == [0] * (ids.shape[1] - 3)
    assert mask[0].tolist() == [1, 1, 1] + [0] * (ids.shape[1] - 3) and mask[1].all()
    ids, mask = minilm.tokenize(["word " * 400])
    assert ids.shape == (1, minilm.MAX_LENGTH) and ids[0, -1] == minilm.SEP
    assert minilm.tokenize(["word " * 400], max_length=16)[0].shape == (1, 16)


def test_minilm_random_inputs_are_valid():
    ids, mask = minilm.random_inputs(4, 33, torch.Generator().manual_seed(0))
    assert (ids[:, 0] == minilm.CLS).all()
    lengths = mask.sum(dim=1)
    assert lengths[0] == 33 and (lengths[1::2] < 33).all()  # odd rows padded
    for row, length in enumerate(lengths.tolist()):
        assert ids[row, length - 1] == minilm.SEP and mask[row, :length].all()
        assert (ids[row, length:] == 0).all() and (mask[row, length:] == 0).all()
        assert (
            (ids[row, 1 : length - 1] >= minilm.FIRST_WORD_ID) & (ids[row, 1 : length - 1] < minilm.VOCAB_SIZE)
        ).all()


def test_minilm_matches_sentence_transformers(built):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    model = built("minilm")
    ours = eager(model, *model.reference_inputs)
    st = SentenceTransformer(str(minilm.model_path()), device="cpu")
    theirs = st.encode(list(minilm.SENTENCES), convert_to_tensor=True)
    cosine = torch.nn.functional.cosine_similarity(ours, theirs, dim=-1)
    assert cosine.min() >= 0.9999, cosine


def test_minilm_similar_sentences_score_higher(built):
    model = built("minilm")
    embeddings = eager(model, *model.reference_inputs)
    assert torch.allclose(embeddings.norm(dim=1), torch.ones(len(minilm.SENTENCES)), atol=1e-5)
    sim = embeddings @ embeddings.T
    for i, j in minilm.SIMILAR_PAIRS:
        others = [k for k in range(len(minilm.SENTENCES)) if k not in (i, j)]
        assert sim[i, j] > sim[i, others].max() and sim[i, j] > sim[j, others].max(), (i, j, sim[i, j])


def test_minilm_padding_does_not_change_the_embedding(built):
    model = built("minilm")
    alone = eager(model, *(torch.from_numpy(a) for a in minilm.tokenize([minilm.SENTENCES[7]])))
    in_batch = eager(model, *model.reference_inputs)[7:8]  # "Hi" padded from 3 to 33 tokens
    torch.testing.assert_close(in_batch, alone, atol=1e-5, rtol=1e-4)


def test_minilm_parity_over_sequence_lengths(built):
    """The parity check the pipeline runs, on the trace: batches 1, 3 x every sequence length, plus cosine."""
    model = built("minilm")
    report = parity.check(model, no_grad(traced(model)), "fp32", max_batch_size=3)
    assert report.ok, report.message
    assert {c["seq_len"] for c in report.cases} == set(minilm.SEQ_LENGTHS)
    assert report.real_data["value"] >= 0.99999


# --- resnet50 --------------------------------------------------------------------------------------


def test_resnet50_is_the_standard_architecture(built):
    model = built("resnet50")
    assert sum(p.numel() for p in model.module.parameters()) == 25_557_032  # as torchvision's resnet50
    assert "random weights, for speed comparisons only" in model.description
    assert model.real_data_check is None and model.labels == ()


def test_resnet50_weights_are_seeded():
    a, b = resnet.build().module.state_dict(), resnet.build().module.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in ("conv1.weight", "layer3.2.conv2.weight", "fc.weight"))
