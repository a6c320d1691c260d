"""The Python-backend decoders and tokeniser, fuzzed: any bytes or text -> an answer or a clear error."""

import io

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from backends import imaging, text


def _png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((height, width, 3), dtype=np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


PNG = _png(9, 7)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4096))
def test_image_decoder_never_crashes_on_random_bytes(data):
    try:
        image = imaging.decode(data)
    except imaging.ImageError as exc:
        assert str(exc).startswith("IMAGE")
    else:
        assert imaging.resize_crop(image).shape == (224, 224, 3)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=len(PNG)), st.binary(max_size=64))
def test_image_decoder_never_crashes_on_damaged_images(cut, noise):
    damaged = PNG[:cut] + noise + PNG[cut + len(noise):]
    try:
        imaging.decode(damaged)
    except imaging.ImageError as exc:
        assert str(exc).startswith("IMAGE")


def test_image_limits_are_checked_before_decoding():
    big = _png(3000, 3000)
    try:
        imaging.decode(big, max_pixels=1000)
    except imaging.ImageError as exc:
        assert "3000x3000" in str(exc)
    else:
        raise AssertionError("an image over the pixel limit was accepted")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048))
def test_text_decoder_never_crashes_on_random_bytes(raw):
    try:
        decoded = text.decode_text(raw)
    except text.TextError as exc:
        assert str(exc).startswith("TEXT")
    else:
        ids, mask, truncated = text.tokenize([decoded])
        assert ids.shape == mask.shape and ids.shape[1] <= text.MAX_TOKENS and len(truncated) == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=600), min_size=1, max_size=4))
def test_tokenizer_pads_a_batch_to_one_length_and_never_exceeds_the_limit(batch):
    ids, mask, truncated = text.tokenize(batch)
    assert ids.shape == mask.shape == (len(batch), ids.shape[1])
    assert ids.shape[1] <= text.MAX_TOKENS
    assert set(np.unique(mask)) <= {0, 1}
    assert len(truncated) == len(batch)
