"""Request payloads from real data, one list of batch-1 samples per public model.

Tensor names and dtypes come from the served ``config.pbtxt`` (written from the model's ``ModelSpec``), so
nothing here re-types them; what each model is fed is real: the digits test split, the sample photos of
scikit-learn and scikit-image, English sentences, instruction prompts. A load generator cycles through
the samples, so the server's response cache (off by default) would not make a run look faster.

``real_batch`` / ``real_samples``: the same payloads stacked into batches (the in-process ceiling, the bench)
or as single items (perf_analyzer's ``--input-data``).
"""

from __future__ import annotations

import io
from functools import lru_cache
from pathlib import Path

import numpy as np

from backends.imaging import preprocess
from export.config import parse
from export.errors import UnknownModelError

SENTENCES = (
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The new movie is awesome and everyone should see it this weekend.",
    "The cat sits outside on the warm stones of the garden wall.",
    "The new server cut the p99 latency of the search service in half.",
    "Do you know a good restaurant near the train station that is open late?",
    "Please cancel my order and refund the payment to the original card.",
    "Heavy rain is expected in the north of the country tomorrow morning.",
    "She finished the marathon in just under four hours despite the heat.",
)
PROMPTS = (
    "The capital of France is",
    "Write a haiku about the sea.",
    "Explain in one sentence why the sky is blue.",
    "List three uses of a paperclip:",
    "Translate to French: good morning",
    "The best way to learn a new language is",
)
CHAT_PROMPTS = frozenset({"Write a haiku about the sea.", "Explain in one sentence why the sky is blue.",
                          "Translate to French: good morning"})
"""The instructions among ``PROMPTS``: sent with ``CHAT`` true (the model's chat template); the others raw."""
PHOTOS = ("coffee", "chelsea", "astronaut", "rocket", "cat")
STEP_MODELS = ("smollm2_prefill", "smollm2_decode", "smollm2_tiny_prefill", "smollm2_tiny_decode")
MINILM_SEQ_LEN = 32
"""Every minilm request is padded to this length so that any two can share a batch."""


def base_model(name: str) -> str:
    """``digits_onnx`` -> ``digits``: variants take the same inputs as their model."""
    for suffix in ("_trt_fp16", "_onnx_fp16", "_onnx", "_fp16"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


@lru_cache(maxsize=None)
def _photos() -> tuple[np.ndarray, ...]:
    import skimage.data
    from sklearn.datasets import load_sample_images

    images = [np.asarray(getattr(skimage.data, n)())[..., :3] for n in PHOTOS]
    images += list(load_sample_images().images)
    return tuple(img if img.ndim == 3 else np.stack([img] * 3, -1) for img in images)


def _jpegs() -> list[bytes]:
    from PIL import Image

    out = []
    for image in _photos():
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, "JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


def _digits() -> list[dict[str, np.ndarray]]:
    from export.zoo.digits import split  # torch

    x_test = split()[1]
    return [{"PIXELS": row[None, :]} for row in x_test]


def _images() -> list[dict[str, np.ndarray]]:
    return [{"image": preprocess(photo)[None]} for photo in _photos()]


@lru_cache(maxsize=None)
def minilm_tokens(texts: tuple[str, ...] = SENTENCES, seq_len: int = MINILM_SEQ_LEN) -> list[dict[str, np.ndarray]]:
    from export.zoo.minilm import tokenize  # torch

    out = []
    for sentence in texts:
        ids, mask = tokenize([sentence], max_length=seq_len)
        pad = seq_len - ids.shape[1]
        out.append({"input_ids": np.pad(ids, ((0, 0), (0, pad))).astype(np.int64),
                    "attention_mask": np.pad(mask, ((0, 0), (0, pad))).astype(np.int64)})
    return out


def _bytes(values) -> np.ndarray:
    return np.array([[v if isinstance(v, bytes) else v.encode()] for v in values], dtype=object)


BUILDERS = {
    "digits": _digits,
    "efficientnet_lite0": _images,
    "resnet50": _images,
    "minilm": minilm_tokens,
    "image_classifier": lambda: [{"IMAGE": _bytes([jpeg]), "TOP_K": np.array([[5]], dtype=np.int32)} for jpeg in _jpegs()],
    "text_embedder": lambda: [{"TEXT": _bytes([s])} for s in SENTENCES],
    # Decoupled and unbatched: shape [1], no batch dimension.
    "text_generator": lambda: [{"PROMPT": _bytes([p])[0], "MAX_TOKENS": np.array([16], dtype=np.int32),
                                "TEMPERATURE": np.array([0.0], dtype=np.float32),
                                "CHAT": np.array([p in CHAT_PROMPTS])} for p in PROMPTS],
}


@lru_cache(maxsize=None)
def samples(model: str) -> list[dict[str, np.ndarray]]:
    """Batch-1 request inputs (numpy, batch dimension first) for a served model or one of its variants."""
    name = base_model(model)
    if name in STEP_MODELS:
        raise UnknownModelError(f"model {model!r} is an internal generation step; load-test text_generator instead")
    if name not in BUILDERS:
        raise UnknownModelError(f"no load-test payloads for model {model!r}; known: {sorted(BUILDERS)}")
    return BUILDERS[name]()


def output_names(repository: Path, model: str) -> list[str]:
    """The outputs a client asks for, read from the model's config in the repository."""
    return [o.name for o in parse(repository / model / "config.pbtxt").output]


def user_class_name(model: str, protocol: str) -> str:
    """``digits``, ``grpc`` -> ``DigitsGrpcUser``: the locustfile's user class for them."""
    return "".join(part.capitalize() for part in model.split("_")) + protocol.capitalize() + "User"


def is_streaming(model: str) -> bool:
    """Decoupled models answer on a stream (gRPC) or server-sent events (HTTP)."""
    return base_model(model) == "text_generator"


# -- batches of real payloads ---------------------------------------------------------------------
def real_batch(model: str, batch: int, seq_len: int = MINILM_SEQ_LEN, offset: int = 0) -> dict[str, np.ndarray]:
    """``batch`` items of the load test's own payloads, batch first, cycling, so
    the in-process rows compute on exactly what the served rows are sent. ``seq_len``: minilm only."""
    items = minilm_tokens(seq_len=seq_len) if base_model(model) == "minilm" else samples(model)
    picked = [items[(offset + i) % len(items)] for i in range(batch)]
    return {name: np.concatenate([item[name] for item in picked]) for name in picked[0]}


def real_samples(model: str, count: int, seq_len: int = MINILM_SEQ_LEN) -> list[dict[str, np.ndarray]]:
    """``count`` single items (no batch dimension), e.g. for perf_analyzer's ``--input-data``."""
    arrays = real_batch(model, count, seq_len)
    return [{name: a[i] for name, a in arrays.items()} for i in range(count)]
