"""backends/text.py fuzzed: any bytes -> text or a clear ``TEXT`` error; the tokeniser pads a batch to one
length within its limit."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from backends import text


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
