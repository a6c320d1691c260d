"""Payloads for any served model: random from its config for every datatype, the dynamic-dim and BYTES errors,
the options' spellings, samples functions, and the built-in models through the same mechanism."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from export import catalog
from export.model_kind import is_decoupled
from loadtest.cli import flags
from loadtest.errors import PayloadError
from loadtest.generators.payloads import PayloadOptions, default_options, input_data_json, payloads, served_model, stack

DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64")


def config(inputs, max_batch_size=8, **extra) -> dict:
    """A served config in Triton's JSON form (as get_model_config over HTTP answers)."""
    return {
        "name": "m",
        "max_batch_size": max_batch_size,
        "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [1]}],
        "input": [
            {"name": n, "data_type": f"TYPE_{t}", "dims": list(d), **o}
            for n, t, d, *rest in inputs
            for o in [rest[0] if rest else {}]
        ],
        **extra,
    }


@pytest.mark.parametrize("datatype", DATATYPES)
def test_random_values_for_every_datatype_with_the_batch_dim(datatype):
    got = payloads(config([("x", datatype, (3, 4))]), PayloadOptions(count=5))
    assert len(got) == 5
    for sample in got:
        array = sample["x"]
        assert array.shape == (1, 3, 4) and array.dtype == np.dtype(
            datatype.lower().replace("fp", "float").replace("bool", "bool_")
        )
        if array.dtype.kind == "f":
            assert 0.0 <= array.min() and array.max() < 1.0
        elif array.dtype.kind in "iu":
            assert 0 <= array.min() and array.max() < 100
    # fresh per sample, the same for the same seed, another for another seed
    assert not all(np.array_equal(got[0]["x"], s["x"]) for s in got[1:]) or datatype == "BOOL"
    again = payloads(config([("x", datatype, (3, 4))]), PayloadOptions(count=5))
    assert all(np.array_equal(a["x"], b["x"]) for a, b in zip(got, again, strict=True))
    other = payloads(config([("x", datatype, (3, 4))]), PayloadOptions(count=5, seed=1))
    assert not all(np.array_equal(a["x"], b["x"]) for a, b in zip(got, other, strict=True))


def test_int_range_and_an_unbatched_model_without_the_batch_dim():
    got = payloads(
        config([("ids", "INT64", (6,)), ("flag", "BOOL", (2,))], max_batch_size=0),
        PayloadOptions(int_range=(1000, 1003), count=20),
    )
    ids = np.stack([s["ids"] for s in got])
    assert ids.shape == (20, 6) and ids.min() >= 1000 and ids.max() <= 1002 and len(np.unique(ids)) == 3
    assert got[0]["flag"].dtype == np.bool_ and {True, False} <= set(np.concatenate([s["flag"] for s in got]).tolist())
    with pytest.raises(PayloadError, match=r"--int-range 0:300 does not fit input 'b' \(UINT8: 0..255\)"):
        payloads(config([("b", "UINT8", (1,))]), PayloadOptions(int_range=(0, 300)))


def test_a_dynamic_dim_needs_shape_naming_the_input_and_the_flag():
    cfg = config([("input_ids", "INT64", (-1,)), ("image", "FP32", (3, -1, -1))])
    with pytest.raises(PayloadError) as info:
        payloads(cfg)
    assert str(info.value) == (
        "input 'input_ids' of model 'm' has a dynamic dim (dims [-1]): give its size with --shape input_ids:N"
    )
    with pytest.raises(PayloadError, match=r"--shape image:3,N,N"):
        payloads(cfg, PayloadOptions(shapes={"input_ids": (16,)}))
    got = payloads(cfg, PayloadOptions(shapes={"input_ids": (16,), "image": (3, 8, 10)}, count=2))
    assert got[0]["input_ids"].shape == (1, 16) and got[0]["image"].shape == (1, 3, 8, 10)
    with pytest.raises(PayloadError, match=r"--shape image:4,8,10 does not fit the config's dims \[3, -1, -1\]"):
        payloads(cfg, PayloadOptions(shapes={"input_ids": (16,), "image": (4, 8, 10)}))
    with pytest.raises(PayloadError, match=r"--shape nope: model 'm' has no such input"):
        payloads(cfg, PayloadOptions(shapes={"nope": (1,)}))


def test_bytes_inputs_need_real_data():
    with pytest.raises(PayloadError) as info:
        payloads(config([("TEXT", "STRING", (1,))]))
    assert str(info.value) == (
        "input 'TEXT' of model 'm' is BYTES: random values cannot stand in for it; give real "
        "data with --input-data FILE.json or --samples FILE.py:FUNC"
    )


def test_optional_inputs_are_left_out_of_random_payloads():
    got = payloads(config([("x", "FP32", (2,)), ("stop", "STRING", (1,), {"optional": True})]), PayloadOptions(count=1))
    assert list(got[0]) == ["x"]


def test_configs_in_every_form_read_alike():
    from tritonclient.grpc import model_config_pb2 as mc

    proto = mc.ModelConfig(
        name="m", max_batch_size=4, input=[mc.ModelInput(name="x", data_type=mc.TYPE_INT32, dims=[-1, 3])]
    )
    proto.model_transaction_policy.decoupled = True
    model = served_model(proto)
    assert model.inputs[0].datatype == "INT32" and model.inputs[0].dims == (-1, 3) and model.decoupled
    grpc_json = {
        "config": {
            "name": "m",
            "max_batch_size": 4,
            "input": [{"name": "x", "data_type": "TYPE_INT32", "dims": ["-1", "3"]}],
        }
    }
    assert served_model(grpc_json).inputs == model.inputs and not is_decoupled(grpc_json)
    assert is_decoupled(config([("x", "FP32", (1,))], model_transaction_policy={"decoupled": True}))
    from export.spec import ModelSpec, TensorSpec

    spec = ModelSpec("m", (TensorSpec("x", "FP16", (5,)),), (TensorSpec("y", "FP32", (1,)),), max_batch_size=2)
    assert payloads(spec, PayloadOptions(count=1))[0]["x"].dtype == np.float16
    with pytest.raises(PayloadError, match="BF16"):
        served_model(config([("x", "BF16", (1,))]))


def test_options_from_flags_and_from_a_campaign_table(tmp_path):
    parser = argparse.ArgumentParser()
    flags.add_payload_flags(parser)
    args = parser.parse_args(
        ["--shape", "input_ids:32", "--shape", "IMAGE:3,224,224", "--int-range", "0:1000", "--payload-seed", "3"]
    )
    options = flags.payload_options(args)
    assert options.shapes == {"input_ids": (32,), "IMAGE": (3, 224, 224)} and options.int_range == (0, 1000)
    assert PayloadOptions.from_table(options.to_table()) == options
    table = {"shape": ["input_ids:32", "IMAGE:3,224,224"], "int_range": "0:1000", "seed": 3}
    assert PayloadOptions.from_table(table) == options
    for bad in (["--shape", "input_ids"], ["--shape", "x:0"], ["--int-range", "9:1"], ["--int-range", "a:b"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)
    with pytest.raises(PayloadError, match=r"scenario 's': payload: unknown keys \['shapes'\]"):
        PayloadOptions.from_table({"shapes": []}, "scenario 's': payload")
    with pytest.raises(PayloadError, match="int_range"):
        PayloadOptions.from_table({"int_range": "1:1"})
    with pytest.raises(PayloadError, match="not both"):
        PayloadOptions(input_data=tmp_path / "a.json", samples="f.py:g")


SAMPLES = """
import numpy as np

def good():
    return [{"x": np.full((1, 2), i, dtype=np.float64), "n": np.array([[i]])} for i in range(3)]

def without_batch_dim():
    return [{"x": np.zeros(2, dtype=np.float32), "n": np.array([7])}]

def wrong_shape():
    return [{"x": np.zeros((1, 3), dtype=np.float32), "n": np.array([[1]])}]

def floats_for_ints():
    return [{"x": np.zeros((1, 2), dtype=np.float32), "n": np.array([[1.5]])}]

def missing():
    return [{"x": np.zeros((1, 2), dtype=np.float32)}]

def not_a_list():
    return {"x": 1}

def raises():
    raise RuntimeError("no data today")
"""


def test_a_samples_function_is_checked_against_the_config(tmp_path):
    (tmp_path / "data.py").write_text(SAMPLES)
    cfg = config([("x", "FP32", (2,)), ("n", "INT64", (1,))])

    def run(func):
        return payloads(cfg, PayloadOptions(samples=f"{tmp_path / 'data.py'}:{func}"))

    got = run("good")
    assert len(got) == 3 and got[2]["x"].dtype == np.float32 and got[2]["n"].dtype == np.int64
    assert got[0]["x"].shape == (1, 2)
    assert run("without_batch_dim")[0]["n"].shape == (1, 1)  # the batch dim is added
    for func, message in (
        ("wrong_shape", r"sample 0: input 'x' has shape \[1, 3\]; the config takes \[1\]\[2\]"),
        ("floats_for_ints", r"sample 0: input 'n': is INT64, got float64 values"),
        ("missing", r"sample 0: input 'n' is missing"),
        ("not_a_list", r"returned dict: it must return a non-empty list of dicts"),
        ("raises", r"raised RuntimeError: no data today"),
        ("nope", r"has no function 'nope'"),
    ):
        with pytest.raises(PayloadError, match=message):
            run(func)
    with pytest.raises(PayloadError, match="no file"):
        payloads(cfg, PayloadOptions(samples="missing.py:good"))
    with pytest.raises(PayloadError, match="is not FILE.py:FUNC"):
        payloads(cfg, PayloadOptions(samples="data.txt"))


def test_the_catalog_names_the_built_in_models_real_data_for_every_variant():
    assert (
        catalog.default_samples("digits")
        == catalog.default_samples("digits_onnx")
        == "export/zoo/digits.py:load_samples"
    )
    assert catalog.default_samples("minilm_fp16") == "export/zoo/minilm.py:load_samples"
    assert catalog.default_samples("scorer") is None
    assert default_options("digits_fp16").samples == "export/zoo/digits.py:load_samples"
    assert default_options("scorer") == PayloadOptions()
    mine = PayloadOptions(samples="mine.py:load")
    assert default_options("digits", mine) is mine  # the user's data wins


def test_stack_and_input_data_json_of_batch_1_samples():
    samples = [{"a": np.full((1, 2), i, np.float32)} for i in range(3)]
    assert stack(samples, 5)["a"][:, 0].tolist() == [0, 1, 2, 0, 1]
    data = input_data_json(samples)
    assert data == {"data": [{"a": {"content": [float(i)] * 2, "shape": [2]}} for i in range(3)]}
    unbatched = input_data_json([{"p": np.array([b"\xff\x00"], dtype=object)}], {"max_batch_size": 0, "input": []})
    assert unbatched["data"][0]["p"]["shape"] == [1] and "b64" in unbatched["data"][0]["p"]["content"]
