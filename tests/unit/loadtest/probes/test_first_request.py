"""loadtest/probes/first_request.py without a server: the repository it serves (the warmup dropped, an
ensemble with its members) and the payload it sends."""

from __future__ import annotations

import numpy as np
import pytest

from deploy.server import DEFAULT_REPOSITORY
from loadtest.errors import PayloadError
from loadtest.generators.payloads import PayloadOptions
from loadtest.probes.first_request import _serving_repository, members, payload_for


def test_the_first_request_repository_drops_only_the_warmup(tmp_path):
    source = tmp_path / "src" / "m"
    (source / "1").mkdir(parents=True)
    (source / "1" / "model.pt").write_bytes(b"weights")
    (source / "labels.txt").write_text("a\nb\n")
    (source / "config.pbtxt").write_text(
        'name: "m"\nplatform: "pytorch_libtorch"\nmax_batch_size: 4\n'
        'input { name: "x" data_type: TYPE_FP32 dims: 2 }\noutput { name: "y" data_type: TYPE_FP32 dims: 2 }\n'
        "dynamic_batching { max_queue_delay_microseconds: 100 }\n"
        'model_warmup { name: "w1" batch_size: 1 inputs { key: "x" value { data_type: TYPE_FP32 dims: 2 '
        "zero_data: true } } }\n"
    )
    assert _serving_repository(tmp_path / "src", "m", tmp_path / "on", keep_warmup=True) == {"m": 1}
    assert _serving_repository(tmp_path / "src", "m", tmp_path / "off", keep_warmup=False) == {"m": 0}
    off = tmp_path / "off" / "m"
    text = (off / "config.pbtxt").read_text()
    assert "model_warmup" not in text and "max_queue_delay_microseconds: 100" in text
    assert "model_warmup" in (tmp_path / "on" / "m" / "config.pbtxt").read_text()
    assert (off / "1").is_symlink() and (off / "1" / "model.pt").read_bytes() == b"weights"
    assert (off / "labels.txt").read_text() == "a\nb\n"


def test_an_ensemble_is_served_with_its_members_each_without_its_warmup(tmp_path):
    assert members(DEFAULT_REPOSITORY, "image_classifier") == [
        "image_classifier",
        "preprocess",
        "efficientnet_lite0",
        "postprocess",
    ]
    assert members(DEFAULT_REPOSITORY, "text_embedder") == ["text_embedder", "tokenize", "minilm"]
    on = _serving_repository(DEFAULT_REPOSITORY, "image_classifier", tmp_path / "on", keep_warmup=True)
    off = _serving_repository(DEFAULT_REPOSITORY, "image_classifier", tmp_path / "off", keep_warmup=False)
    assert list(on) == list(off) == members(DEFAULT_REPOSITORY, "image_classifier")
    assert on["image_classifier"] == 0 and all(on[m] > 0 for m in ("preprocess", "efficientnet_lite0", "postprocess"))
    assert set(off.values()) == {0}
    for name in off:
        assert "model_warmup" not in (tmp_path / "off" / name / "config.pbtxt").read_text()
    assert (tmp_path / "off" / "preprocess" / "1").is_symlink()


def _model(tmp_path, config: str):
    (tmp_path / "m").mkdir(parents=True, exist_ok=True)
    (tmp_path / "m" / "config.pbtxt").write_text('name: "m"\nbackend: "python"\n' + config)
    return tmp_path


def test_a_payload_for_a_model_of_ones_own(tmp_path):
    repo = _model(
        tmp_path,
        'max_batch_size: 4\ninput { name: "x" data_type: TYPE_FP32 dims: [3, -1] }\n'
        'input { name: "n" data_type: TYPE_INT64 dims: 1 }\n'
        'input { name: "o" data_type: TYPE_FP32 dims: 1 optional: true }\n'
        'output { name: "y" data_type: TYPE_FP32 dims: 2 }\n',
    )
    with pytest.raises(PayloadError, match=r"'x' of model 'm' has a dynamic dim .* --shape x:3,N"):
        payload_for(repo, "m")
    made = payload_for(repo, "m", PayloadOptions(shapes={"x": (3, 8)}))
    assert set(made) == {"x", "n"} and made["x"].shape == (1, 3, 8) and made["x"].dtype == np.float32
    assert made["n"].shape == (1, 1) and made["n"].dtype == np.int64
    data = tmp_path / "input.json"
    data.write_text('{"data": [{"x": {"content": [1, 2, 3, 4, 5, 6], "shape": [3, 2]}, "n": [7]}]}')
    given = payload_for(repo, "m", PayloadOptions(input_data=data))
    assert given["x"].tolist() == [[[1, 2], [3, 4], [5, 6]]] and given["n"].tolist() == [[7]]


def test_a_model_without_a_payload_is_one_clear_error(tmp_path):
    repo = _model(
        tmp_path,
        'max_batch_size: 0\ninput { name: "TEXT" data_type: TYPE_STRING dims: 1 }\n'
        'output { name: "y" data_type: TYPE_FP32 dims: 2 }\n',
    )
    with pytest.raises(PayloadError, match="'TEXT' of model 'm' is BYTES.* --input-data FILE.json or --samples"):
        payload_for(repo, "m")
    data = tmp_path / "input.json"
    data.write_text('{"data": [{"TEXT": ["hello"]}]}')
    assert payload_for(repo, "m", PayloadOptions(input_data=data))["TEXT"].tolist() == [b"hello"]
    data.write_text('{"data": [{}]}')
    with pytest.raises(PayloadError, match="entry 0.*'TEXT'"):
        payload_for(repo, "m", PayloadOptions(input_data=data))
    with pytest.raises(PayloadError, match="decoupled"):
        payload_for(DEFAULT_REPOSITORY, "text_generator")
    with pytest.raises(FileNotFoundError, match="no .*nope/config.pbtxt"):
        payload_for(tmp_path, "nope")


def test_the_pipelines_payloads_are_their_own_real_samples():
    image = payload_for(DEFAULT_REPOSITORY, "image_classifier")
    assert image["IMAGE"].shape == (1, 1) and image["IMAGE"][0, 0][:2] == b"\xff\xd8"  # a JPEG
    assert payload_for(DEFAULT_REPOSITORY, "text_embedder")["TEXT"].dtype == object
