"""export.user.model: a user's model file as it comes. Inputs bind to forward by name (keyword-only too), outputs
are picked from what forward returns (nested tuples, dicts), every format exports the same adapter, and each
wrong request is one clear error."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from export import catalog, pipeline
from export import config as config_io
from export.errors import SpecError, UserModelError
from export.formats import torchscript
from export.spec import TensorSpec
from export.user.model import load_user_model
from export.variants import Variant

HF_ENCODER = Path(__file__).resolve().parents[1] / "data" / "hf_encoder.py"

MODELS = textwrap.dedent('''
    import collections

    import torch
    from torch import nn


    class Output(collections.OrderedDict):
        """As transformers' ModelOutput: an OrderedDict subclass."""


    class Nested(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 3)

        def forward(self, features):
            y = self.linear(features)
            return (y, (torch.tanh(y), None)), y.sum(dim=1, keepdim=True)


    class KeywordOnly(nn.Module):
        def forward(self, *, scale, features):
            return {"scaled": features * scale, "extra": None, "stats": {"mean": features.mean(dim=1, keepdim=True)}}


    class Encoder(nn.Module):
        """Optional parameters and a dict out, as a transformers encoder has."""

        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(100, 8)

        def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, use_cache=None):
            states = self.embed(input_ids) * (attention_mask > 0).unsqueeze(-1)
            return Output(last_hidden_state=states, pooled=states.mean(dim=1), past=states * 2)


    class Difference(nn.Module):
        def forward(self, a, b):
            return a - b


    class Extra(nn.Module):
        def forward(self, x, **extra):
            return x + extra["bias"]


    class Twice(nn.Module):
        def forward(self, x):
            return x * 2


    class NoTensor(nn.Module):
        def forward(self, x):
            return {"a": None, "b": "text"}


    class Total(nn.Module):
        def forward(self, x):
            return x.sum()


    def nested():
        torch.manual_seed(0)
        return Nested()


    keyword_only, encoder, difference, extra, twice, no_tensor, total = (
        KeywordOnly, Encoder, Difference, Extra, Twice, NoTensor, Total
    )
''')


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "models.py"
    path.write_text(MODELS)
    return path


def vec(name, n=4, datatype="FP32"):
    return TensorSpec(name, datatype, (n,))


def ids(name):
    return TensorSpec(name, "INT64", (-1,))


def test_inputs_bind_by_name_whatever_their_order(models):
    model = load_user_model(f"{models}:difference", "m", [vec("b"), vec("a")], ["diff"])
    a, b = torch.full((2, 4), 5.0), torch.ones(2, 4)
    assert torch.equal(model.module(b, a), a - b)
    assert [t.name for t in model.outputs] == ["diff"]


def test_keyword_only_parameters_bind_by_name_and_a_dicts_outputs_are_named_by_key(models, capsys):
    model = load_user_model(f"{models}:keyword_only", "m", [vec("features"), vec("scale", 1)], [])
    assert [(t.name, t.dims) for t in model.outputs] == [("scaled", (4,)), ("stats_mean", (1,))]
    features, scale = torch.ones(3, 4), torch.full((3, 1), 2.0)
    scaled, mean = model.module(features, scale)
    assert torch.equal(scaled, features * 2) and torch.equal(mean, torch.ones(3, 1))
    assert capsys.readouterr().out == "m: outputs scaled, stats_mean; left out: extra (NoneType)\n"


def test_a_forward_with_many_optional_parameters_gets_only_those_named(models, capsys):
    model = load_user_model(f"{models}:encoder", "enc", [ids("input_ids"), ids("attention_mask")], ["pooled"])
    assert [(t.name, t.dims) for t in model.outputs] == [("pooled", (8,))]
    left = "last_hidden_state (not asked for), past (not asked for)"
    assert capsys.readouterr().out == f"enc: outputs pooled; left out: {left}\n"


def test_a_forward_taking_kwargs_also_gets_names_it_does_not_list(models):
    model = load_user_model(f"{models}:extra", "m", [vec("x"), vec("bias")], ["y"])
    assert torch.equal(model.module(torch.ones(1, 4), torch.full((1, 4), 3.0)), torch.full((1, 4), 4.0))


def test_inputs_go_in_order_when_no_name_is_a_parameter(models, capsys):
    model = load_user_model(f"{models}:twice", "m", [vec("features")], ["y"])
    assert torch.equal(model.module(torch.ones(1, 4)), torch.full((1, 4), 2.0))
    assert capsys.readouterr().out == ""  # every output asked for, none left out: nothing to say


def test_an_input_that_names_no_parameter_is_an_error_listing_them(models):
    with pytest.raises(SpecError) as caught:
        load_user_model(f"{models}:encoder", "m", [ids("input_ids"), ids("mask")], [])
    assert str(caught.value) == (
        f"{models}:encoder: --input 'mask' is not a parameter of forward; its parameters are "
        f"input_ids, attention_mask, token_type_ids, use_cache"
    )


def test_a_parameter_without_a_default_and_without_an_input_is_an_error(models):
    with pytest.raises(SpecError) as caught:
        load_user_model(f"{models}:difference", "m", [vec("a")], [])
    assert str(caught.value) == (
        f"{models}:difference: forward's parameter(s) 'b' have no default: give each an --input NAME:DTYPE:DIMS"
    )


def test_a_forward_returning_no_tensor_is_one_error(models):
    with pytest.raises(UserModelError) as caught:
        load_user_model(f"{models}:no_tensor", "m", [vec("x")], [])
    assert str(caught.value) == f"{models}:no_tensor: forward returned no tensor: dict {{a: NoneType, b: str}}"


def test_an_output_without_a_batch_dim_is_an_error(models):
    with pytest.raises(SpecError, match=r"output 'output_0' has shape \(\) at batch 2 and \(\) at batch 3"):
        load_user_model(f"{models}:total", "m", [vec("x")], [])


def test_an_output_that_names_no_output_exits_2_with_one_line(models, tmp_path):
    args = ["--model-file", f"{models}:encoder", "--name", "m", "--input", "input_ids:INT64:-1"]
    args += ["--input", "attention_mask:INT64:-1", "--output", "pooler_output", "--repository", str(tmp_path)]
    done = subprocess.run([sys.executable, "-m", "export", *args], capture_output=True, text=True)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"export: error: {models}:encoder: --output 'pooler_output' names no output; "
        f"forward returns last_hidden_state, pooled, past"
    ]


@pytest.mark.parametrize(
    "factory, inputs, wanted, served",
    [
        ("nested", [vec("features")], ["y", "tanh", "total"], ["y", "tanh", "total"]),
        ("keyword_only", [vec("features"), vec("scale", 1)], [], ["scaled", "stats_mean"]),
        ("encoder", [ids("input_ids"), ids("attention_mask")], ["pooled", "last_hidden_state"], None),
    ],
)
def test_every_format_exports_the_chosen_outputs_and_passes_parity(models, tmp_path, factory, inputs, wanted, served):
    model = load_user_model(f"{models}:{factory}", "m", inputs, wanted)
    entry = catalog.CatalogEntry("m", f"{models}:{factory}", {"cpu": (), "gpu": ()}, {"max_batch_size": 4})
    done = pipeline.export_entry(entry, tmp_path, variants=[Variant("torchscript"), Variant("onnx")], model=model)
    assert [d.result.status for d in done] == ["ok", "ok"], [d.result.summary() for d in done]
    for name in ("m", "m_onnx"):
        config = config_io.parse(tmp_path / name / "config.pbtxt")
        assert [o.name for o in config.output] == (served or wanted)
    traced = torch.jit.load(str(tmp_path / "m" / "1" / "model.pt"))
    # The TorchScript runtimes match a request's inputs to these names.
    assert [a.name for a in traced.forward.schema.arguments][1:] == [t.name for t in inputs]


def test_a_tiny_bert_traces_and_answers_as_eager_on_a_padded_batch(tmp_path):
    model = load_user_model(f"{HF_ENCODER}:build", "enc", [ids("input_ids"), ids("attention_mask")], [])
    assert [(t.name, t.dims) for t in model.outputs] == [("last_hidden_state", (-1, 32)), ("pooler_output", (32,))]
    torchscript.convert(model, Variant("torchscript"), tmp_path / "model.pt")
    run = torchscript.load(tmp_path / "model.pt")
    input_ids = torch.tensor([[2, 15, 27, 40, 3], [2, 9, 3, 0, 0]])
    attention_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    with torch.no_grad():
        eager = model.module.inner(input_ids=input_ids, attention_mask=attention_mask)  # the factory's BertModel
    states, pooled = run(input_ids, attention_mask)
    torch.testing.assert_close(states, eager.last_hidden_state, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(pooled, eager.pooler_output, atol=1e-5, rtol=1e-5)
