"""perf_analyzer's input-data format read against a served config: good files in each spelling, and each kind
of bad entry refused before any load with the entry index and the input named."""

from __future__ import annotations

import base64
import json
import struct

import numpy as np
import pytest

from loadtest.errors import PayloadError
from loadtest.generators.input_data import read_input_data, served_model, to_input_data
from loadtest.generators.payloads import PayloadOptions, payloads

CONFIG = {
    "name": "scorer",
    "max_batch_size": 32,
    "output": [{"name": "probs", "data_type": "TYPE_FP32", "dims": [1]}],
    "input": [
        {"name": "user", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "ids", "data_type": "TYPE_INT64", "dims": [-1]},
        {"name": "text", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
    ],
}


def write(tmp_path, document) -> object:
    path = tmp_path / "data.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def read(tmp_path, document, **options):
    return payloads(CONFIG, PayloadOptions(input_data=write(tmp_path, document), **options))


def test_every_spelling_of_an_entry(tmp_path):
    user = [0.5, 1.0, 1.5, 2.0]
    raw_ids = np.array([7, 8, 9], dtype="<i8").tobytes()
    text = b"caf\xc3\xa9"
    entries = [
        {"user": user, "ids": {"content": [1, 2], "shape": [2]}},
        {
            "user": {"content": user, "shape": [4]},
            "ids": {"content": {"b64": base64.b64encode(raw_ids).decode()}, "shape": [3]},
        },
        {
            "user": {"b64": base64.b64encode(np.array(user, "<f4").tobytes()).decode()},
            "ids": {"content": [5], "shape": [1]},
            "text": ["café"],
        },
        {
            "user": user,
            "ids": {"content": [1], "shape": [1]},
            "text": {"b64": base64.b64encode(struct.pack("<I", len(text)) + text).decode()},
        },
    ]
    got = read(tmp_path, {"data": entries})
    assert len(got) == 4
    assert got[0]["user"].dtype == np.float32 and got[0]["user"].shape == (1, 4) and got[0]["user"][0, 3] == 2.0
    assert got[0]["ids"].tolist() == [[1, 2]] and got[1]["ids"].tolist() == [[7, 8, 9]]
    assert np.array_equal(got[2]["user"], got[0]["user"])
    assert got[2]["text"].dtype == object and got[2]["text"].tolist() == [[text]] == got[3]["text"].tolist()
    assert "text" not in got[0]  # optional


def test_flat_lists_take_the_shape_of_a_dynamic_input_from_shape_flag(tmp_path):
    document = {"data": [{"user": [0, 0, 0, 1], "ids": [4, 5, 6]}]}
    assert read(tmp_path, document, shapes={"ids": (3,)})[0]["ids"].shape == (1, 3)
    with pytest.raises(PayloadError) as info:
        read(tmp_path, document)
    assert str(info.value) == (
        f"--input-data {tmp_path / 'data.json'}: entry 0: input 'ids': the config's dims [-1] "
        f'are dynamic: give the entry\'s "shape" or --shape ids:D1,D2'
    )


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"ids": [1]}, r"entry 1: input 'user' is missing"),
        ({"user": [1, 2, 3, 4], "ids": [1], "extra": [1]}, r"entry 1: 'extra' is not an input of model 'scorer'"),
        ({"user": [1, 2, 3], "ids": {"content": [1], "shape": [1]}}, r"entry 1: input 'user': 3 values; shape needs 4"),
        ({"user": [1, 2, 3, 4], "ids": {"content": [1.5], "shape": [1]}}, r"entry 1: input 'ids': is INT64, got 1.5"),
        ({"user": [1, 2, "x", 4], "ids": {"content": [1], "shape": [1]}}, r"entry 1: input 'user': is FP32, got \"x\""),
        ({"user": [1, 2, 3, True], "ids": {"content": [1], "shape": [1]}}, r"input 'user': is FP32, got true"),
        (
            {"user": [[1, 2], [3, 4]], "ids": {"content": [1], "shape": [1]}},
            r"input 'user': values must be a flat list",
        ),
        (
            {"user": {"content": [1, 2, 3, 4], "shape": [2, 2]}, "ids": {"content": [1], "shape": [1]}},
            r"input 'user': shape \[2, 2\] does not fit the config's dims \[4\]",
        ),
        (
            {"user": {"b64": "AAAA"}, "ids": {"content": [1], "shape": [1]}},
            r"input 'user': b64 holds 3 bytes; shape needs 4 FP32 = 16 bytes",
        ),
        ({"user": {"b64": "not base64!"}, "ids": {"content": [1], "shape": [1]}}, r"input 'user': b64 is not base64"),
        ({"user": [1, 2, 3, 4], "ids": {"content": [1], "shape": [1]}, "text": [3]}, r"input 'text': is BYTES"),
        ({"user": [1, 2, 3, 4], "ids": {"content": [1], "shape": [1], "dims": [1]}}, r"input 'ids': unknown keys"),
        ({"user": 7, "ids": {"content": [1], "shape": [1]}}, r"input 'user': int is not a flat list"),
        ([{"user": [1, 2, 3, 4]}], r"entry 1 is a list: sequence streams are not supported"),
        ("user", r"entry 1 is str, not an object of inputs"),
    ],
)
def test_each_kind_of_bad_entry_is_named(tmp_path, entry, message):
    good = {"user": [1, 2, 3, 4], "ids": {"content": [1], "shape": [1]}}
    with pytest.raises(PayloadError, match=message):
        read(tmp_path, {"data": [good, entry]})


@pytest.mark.parametrize(
    "document, message",
    [
        ("{not json", "not a JSON file"),
        ({"data": []}, r"needs \{\"data\": \[ENTRY, ...\]\} with at least one entry"),
        ({"entries": [{}]}, r"needs \{\"data\""),
        ([1, 2], r"needs \{\"data\""),
    ],
)
def test_bad_files_are_refused(tmp_path, document, message):
    with pytest.raises(PayloadError, match=message):
        read(tmp_path, document)
    with pytest.raises(PayloadError, match="no such file"):
        read_input_data(tmp_path / "missing.json", served_model(CONFIG))


def test_integers_out_of_their_datatype_are_refused(tmp_path):
    config = {"name": "m", "max_batch_size": 0, "input": [{"name": "b", "data_type": "TYPE_UINT8", "dims": [2]}]}
    path = write(tmp_path, {"data": [{"b": [1, 256]}]})
    with pytest.raises(PayloadError, match="entry 0: input 'b': values 1..256 do not fit UINT8"):
        payloads(config, PayloadOptions(input_data=path))


def test_written_samples_read_back_the_same(tmp_path):
    samples = [
        {
            "user": np.arange(4, dtype=np.float32)[None] / 3,
            "ids": np.array([[3, 1, 2]], dtype=np.int64),
            "text": np.array([[b"\xff binary"]], dtype=object),
        }
    ]
    path = write(tmp_path, to_input_data(samples))
    again = read_input_data(path, served_model(CONFIG))
    for name in samples[0]:
        assert again[0][name].tolist() == samples[0][name].tolist() and again[0][name].dtype == samples[0][name].dtype
