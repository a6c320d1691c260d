"""The size limits of images, texts and prompts, without a server: checked before any decode, with
messages naming the field and the limit, and the committed configs agreeing with the code's defaults."""

from __future__ import annotations

import io
import math
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from backends import generation, imaging, text
from backends.generation import GenerationInputError, Limits, parse_request

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"


def png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("L", (width, height)).save(buffer, "PNG")
    return buffer.getvalue()


class NoTokenizer:
    """Fails the test if anything is tokenised."""

    def encode(self, text):
        raise AssertionError("tokenised a request that should have been refused first")


class CountingTokenizer:
    def __init__(self):
        self.calls = 0

    def encode(self, text):
        self.calls += 1

        class Encoding:
            ids = list(range(len(text.split())))

        return Encoding()


def one(value, dtype=object):
    return np.array([value], dtype=dtype)


# -- images ---------------------------------------------------------------------------------------------
def test_an_image_over_the_byte_limit_is_refused_before_it_is_opened(monkeypatch):
    monkeypatch.setattr(imaging.Image, "open", lambda *a, **k: pytest.fail("opened an oversized image"))
    with pytest.raises(
        imaging.ImageError, match=r"IMAGE is 1001 bytes, over the limit of 1000 bytes \(MAX_IMAGE_BYTES\)"
    ):
        imaging.decode(b"\x89PNG" + bytes(997), max_bytes=1000)


def test_an_image_over_the_pixel_limit_is_refused_from_its_header(monkeypatch):
    data = png(2000, 1000)
    monkeypatch.setattr(imaging.Image.Image, "load", lambda self: pytest.fail("decoded pixels"))
    with pytest.raises(
        imaging.ImageError, match=r"2000x1000 pixels, over the limit of 1999999 pixels \(MAX_IMAGE_PIXELS\)"
    ):
        imaging.decode(data, max_pixels=1_999_999)


def test_an_image_at_the_limits_is_accepted():
    data = png(100, 50)
    assert imaging.decode(data, max_bytes=len(data), max_pixels=5000).size == (100, 50)


def test_the_default_image_limits():
    assert imaging.MAX_IMAGE_BYTES == 16 * 1024 * 1024 and imaging.MAX_IMAGE_PIXELS == 40_000_000
    with pytest.raises(imaging.ImageError, match="MAX_IMAGE_BYTES"):
        imaging.decode(bytes(imaging.MAX_IMAGE_BYTES + 1))


# -- texts ----------------------------------------------------------------------------------------------
def test_a_text_over_the_byte_limit_is_refused_before_it_is_decoded():
    # Not UTF-8 either: the size is what is reported, so nothing was decoded.
    with pytest.raises(text.TextError, match=r"TEXT is 11 bytes, over the limit of 10 bytes \(MAX_TEXT_BYTES\)"):
        text.decode_text(b"\xff" * 11, max_bytes=10)


def test_a_text_at_the_limit_is_accepted():
    assert text.decode_text(("é" * 5).encode(), max_bytes=10) == "é" * 5  # 10 bytes


def test_the_default_text_limit():
    assert text.MAX_TEXT_BYTES == 64 * 1024
    with pytest.raises(text.TextError, match="65537 bytes"):
        text.decode_text(b"a" * (64 * 1024 + 1))
    assert text.decode_text(b"a" * (64 * 1024)) == "a" * (64 * 1024)


# -- prompts --------------------------------------------------------------------------------------------
def test_a_prompt_over_the_byte_limit_is_refused_before_decoding_or_tokenising():
    limits = Limits(max_prompt_bytes=100)
    with pytest.raises(
        GenerationInputError, match=r"PROMPT is too long: 101 bytes, over the limit of 100 bytes \(MAX_PROMPT_BYTES\)"
    ):
        parse_request(NoTokenizer(), one(b"\xff" * 101), one(4, np.int32), limits=limits)


def test_a_prompt_at_the_byte_limit_is_tokenised():
    tokenizer = CountingTokenizer()
    parsed = parse_request(tokenizer, one(b"a " * 50), one(4, np.int32), limits=Limits(max_prompt_bytes=100))
    assert tokenizer.calls == 1 and len(parsed.prompt_ids) == 50


def test_a_prompt_over_the_token_limit_is_refused_after_tokenising():
    with pytest.raises(
        GenerationInputError, match=r"PROMPT is too long: 11 tokens, the limit is 10 \(MAX_PROMPT_TOKENS\)"
    ):
        parse_request(CountingTokenizer(), one(b"w " * 11), one(4, np.int32), limits=Limits(max_prompt_tokens=10))


def test_a_stop_over_its_limit_is_refused_before_tokenising():
    with pytest.raises(
        GenerationInputError, match=r"STOP is too long: 9 bytes, over the limit of 8 bytes \(MAX_STOP_BYTES\)"
    ):
        parse_request(
            NoTokenizer(), one(b"Hello"), one(4, np.int32), stop=one(b"s" * 9), limits=Limits(max_stop_bytes=8)
        )


def test_max_tokens_over_the_limit_names_the_parameter():
    with pytest.raises(GenerationInputError, match=r"MAX_TOKENS 6 is over the limit of 5 \(MAX_NEW_TOKENS\)"):
        parse_request(NoTokenizer(), one(b"Hello"), one(6, np.int32), limits=Limits(max_new_tokens=5))


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -0.5])
def test_a_non_finite_or_negative_temperature_is_refused(value):
    with pytest.raises(GenerationInputError, match="TEMPERATURE must be a finite number >= 0"):
        parse_request(NoTokenizer(), one(b"Hello"), one(4, np.int32), one(value, np.float32))


def test_limits_from_config_parameters():
    assert Limits.from_parameters({}) == Limits()
    assert Limits() == Limits(
        generation.MAX_PROMPT_TOKENS, generation.MAX_NEW_TOKENS, generation.MAX_PROMPT_BYTES, generation.MAX_STOP_BYTES
    )
    limits = Limits.from_parameters({"MAX_PROMPT_BYTES": "2048", "MAX_NEW_TOKENS": " 16 ", "STEP_MODE": "bls"})
    assert limits.max_prompt_bytes == 2048 and limits.max_new_tokens == 16
    assert limits.max_prompt_tokens == generation.MAX_PROMPT_TOKENS
    with pytest.raises(ValueError, match="MAX_PROMPT_BYTES is not an integer"):
        Limits.from_parameters({"MAX_PROMPT_BYTES": "32k"})
    with pytest.raises(ValueError, match="MAX_STOP_BYTES must be at least 1"):
        Limits.from_parameters({"MAX_STOP_BYTES": "0"})


# -- the committed configs ---------------------------------------------------------------------------------
def config_parameters(model: str) -> dict[str, str]:
    text_ = (REPOSITORY / model / "config.pbtxt").read_text()
    return dict(re.findall(r'key:\s*"(\w+)"\s*value\s*\{\s*string_value:\s*"([^"]*)"', text_))


def test_the_committed_configs_set_the_code_defaults():
    assert config_parameters("preprocess")["MAX_IMAGE_BYTES"] == str(imaging.MAX_IMAGE_BYTES)
    assert config_parameters("preprocess")["MAX_IMAGE_PIXELS"] == str(imaging.MAX_IMAGE_PIXELS)
    assert config_parameters("tokenize")["MAX_TEXT_BYTES"] == str(text.MAX_TEXT_BYTES)
    generator = config_parameters("text_generator")
    assert Limits.from_parameters(generator) == Limits()
    assert {"MAX_PROMPT_BYTES", "MAX_PROMPT_TOKENS", "MAX_NEW_TOKENS", "MAX_STOP_BYTES"} <= set(generator)


def test_the_limits_document_states_the_configured_values():
    doc = (REPOSITORY.parent / "docs" / "limits.md").read_text()
    for name, value in [
        ("MAX_IMAGE_BYTES", imaging.MAX_IMAGE_BYTES),
        ("MAX_IMAGE_PIXELS", imaging.MAX_IMAGE_PIXELS),
        ("MAX_TEXT_BYTES", text.MAX_TEXT_BYTES),
        ("MAX_PROMPT_BYTES", generation.MAX_PROMPT_BYTES),
        ("MAX_PROMPT_TOKENS", generation.MAX_PROMPT_TOKENS),
        ("MAX_NEW_TOKENS", generation.MAX_NEW_TOKENS),
        ("MAX_STOP_BYTES", generation.MAX_STOP_BYTES),
    ]:
        assert f"`{name}`" in doc and f"{value:,}" in doc, name
