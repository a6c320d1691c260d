"""Real requests for the repository's pipelines (``image_classifier``, ``text_embedder``, ``text_generator``):
samples functions for the load tests, ``--samples export/zoo/pipelines.py:FUNC``.

The pipelines are ensembles and Python models committed under ``model_repository/``, not exported from a
builder, so their data lives here, beside the builders whose data they reuse. Each function returns a list
of dicts, input name -> numpy array, one request each (batch 1; ``text_generator`` is unbatched: shape [1]).
"""

from __future__ import annotations

import io

import numpy as np

PROMPTS = (
    "The capital of France is",
    "Write a haiku about the sea.",
    "Explain in one sentence why the sky is blue.",
    "List three uses of a paperclip:",
    "Translate to French: good morning",
    "The best way to learn a new language is",
)
CHAT_PROMPTS = frozenset(
    {
        "Write a haiku about the sea.",
        "Explain in one sentence why the sky is blue.",
        "Translate to French: good morning",
    }
)
"""The instructions among ``PROMPTS``: sent with ``CHAT`` true (the model's chat template); the others raw."""
GENERATED_TOKENS = 16
"""``MAX_TOKENS`` of each ``text_generator`` request."""


def _bytes(value: bytes | str) -> np.ndarray:
    return np.array([[value.encode() if isinstance(value, str) else value]], dtype=object)


def jpegs(quality: int = 90) -> list[bytes]:
    """The photos of ``efficientnet_lite0``'s reference data as JPEG files, as a client would upload them."""
    from PIL import Image

    from export.zoo.efficientnet import photos

    out = []
    for _, image in photos():
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, "JPEG", quality=quality)
        out.append(buffer.getvalue())
    return out


def image_classifier_samples() -> list[dict[str, np.ndarray]]:
    """``IMAGE`` BYTES [1, 1] (a JPEG) and ``TOP_K`` INT32 [1, 1] = 5."""
    return [{"IMAGE": _bytes(jpeg), "TOP_K": np.array([[5]], dtype=np.int32)} for jpeg in jpegs()]


def text_embedder_samples() -> list[dict[str, np.ndarray]]:
    """``TEXT`` BYTES [1, 1]: the sentences ``minilm`` is load-tested with."""
    from export.zoo.minilm import LOAD_SENTENCES

    return [{"TEXT": _bytes(sentence)} for sentence in LOAD_SENTENCES]


def text_generator_samples() -> list[dict[str, np.ndarray]]:
    """``PROMPT`` BYTES [1], ``MAX_TOKENS`` INT32 [1], ``TEMPERATURE`` FP32 [1] (greedy) and ``CHAT`` BOOL [1]
    (true for the instructions): unbatched, no batch dim."""
    return [
        {
            "PROMPT": np.array([prompt.encode()], dtype=object),
            "MAX_TOKENS": np.array([GENERATED_TOKENS], dtype=np.int32),
            "TEMPERATURE": np.array([0.0], dtype=np.float32),
            "CHAT": np.array([prompt in CHAT_PROMPTS]),
        }
        for prompt in PROMPTS
    ]
