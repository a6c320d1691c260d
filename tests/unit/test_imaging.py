"""backends/imaging.py fuzzed: any bytes -> a decoded image or a clear ``IMAGE`` error; limits before decoding."""

import io

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from backends import imaging


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
    damaged = PNG[:cut] + noise + PNG[cut + len(noise) :]
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
