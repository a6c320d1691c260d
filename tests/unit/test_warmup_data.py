"""The pipelines' Python models warm with real data: every warmup file is valid input for its model."""

from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from backends import imaging, text
from export import warmup_data
from export.config import parse

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
PYTHON_MODELS = ("preprocess", "tokenize", "postprocess")


def test_the_committed_files_are_what_the_writer_makes():
    for relative, data in warmup_data.files().items():
        path = REPOSITORY / relative
        assert path.is_file() and path.read_bytes() == data, f"run `python -m export.warmup_data` ({relative})"


def test_each_file_is_one_element_its_model_accepts():
    for name in ("IMAGE_jpeg", "IMAGE_png"):
        raw = warmup_data.deserialize((REPOSITORY / "preprocess" / "warmup" / name).read_bytes())
        pixels = imaging.resize_crop(imaging.decode(raw))
        assert imaging.normalise(np.stack([pixels])).shape == (1, 3, imaging.CROP, imaging.CROP)
    sentence = text.decode_text(warmup_data.deserialize((REPOSITORY / "tokenize" / "warmup" / "TEXT").read_bytes()))
    ids, mask, truncated = text.tokenize([sentence])
    assert ids.shape[1] > 5 and truncated == [False]
    with pytest.raises(ValueError, match="not one BYTES element"):
        warmup_data.deserialize(b"\x05\x00\x00\x00abc")


@pytest.mark.parametrize("model", PYTHON_MODELS)
def test_warmup_covers_batch_one_and_the_largest_batch_with_every_required_input(model):
    config = parse(REPOSITORY / model / "config.pbtxt")
    assert config.model_warmup, f"{model} has no model_warmup: its first request would be cold"
    sizes = {w.batch_size for w in config.model_warmup}
    assert {1, config.max_batch_size} <= sizes and max(sizes) <= config.max_batch_size
    required = {i.name for i in config.input if not i.optional}
    for sample in config.model_warmup:
        assert sample.count >= 1 and set(sample.inputs) >= required, sample.name
        for name, given in sample.inputs.items():
            declared = next(i for i in config.input if i.name == name)
            assert given.data_type == declared.data_type and list(given.dims) == list(declared.dims)
            if given.input_data_file:
                assert (REPOSITORY / model / warmup_data.FOLDER / given.input_data_file).is_file()
            else:  # Triton's zero/random data is no valid image or text
                assert given.random_data and declared.data_type != mc.TYPE_STRING, (model, name)
