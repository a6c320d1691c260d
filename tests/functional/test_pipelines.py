"""image_classifier and text_embedder: raw inputs in, answers out, through Python backends and ensembles."""

import io

import numpy as np
import pytest
import skimage.data
import torch
from PIL import Image
from tritonclient.utils import InferenceServerException

from deploy.client import infer
from export.zoo import efficientnet, minilm
from loadtest.core.spec import Candidate
from loadtest.target import apply
from tests.conftest import infer_concurrently

SENTENCES = [
    "A man is playing a guitar on stage.",
    "Someone performs music with a guitar in front of an audience.",
    "The stock market fell sharply on Monday.",
    "Share prices dropped steeply at the start of the week.",
    "The cat sleeps on the warm windowsill.",
]


def encode(array: np.ndarray, fmt: str = "JPEG") -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, fmt)
    return buffer.getvalue()


def images(*payloads: bytes) -> np.ndarray:
    return np.array([[p] for p in payloads], dtype=object)


def texts(*payloads) -> np.ndarray:
    return np.array([[p.encode() if isinstance(p, str) else p] for p in payloads], dtype=object)


def test_photos_are_classified_as_their_subjects(client, protocol):
    answer = infer(
        client,
        "image_classifier",
        {"IMAGE": images(encode(skimage.data.coffee()), encode(skimage.data.chelsea(), "PNG"))},
    )
    ids, labels, scores = answer["CLASS_IDS"], answer["LABELS"], answer["SCORES"]
    print(f"\n{protocol}: coffee -> {labels[0][:3]}, chelsea -> {labels[1][:3]}")
    assert ids.shape == (2, 5) and labels.shape == (2, 5) and scores.dtype == np.float32
    assert ids[0, 0] == efficientnet.ESPRESSO and labels[0, 0] == b"espresso"
    assert set(ids[1, :3]) & set(efficientnet.CAT_CLASSES)
    assert np.all(np.diff(scores, axis=1) <= 0) and np.all(scores.sum(axis=1) <= 1.0 + 1e-6)


def test_top_k_and_agreement_with_eager(client):
    photo = skimage.data.astronaut()
    answer = infer(
        client, "image_classifier", {"IMAGE": images(encode(photo, "PNG")), "TOP_K": np.array([[3]], dtype=np.int32)}
    )
    model = efficientnet.build()
    with torch.no_grad():
        logits = model.module(torch.from_numpy(efficientnet.preprocess(photo))[None])
    expected = torch.softmax(logits, -1).topk(3)
    assert answer["CLASS_IDS"].tolist() == expected.indices.tolist()
    np.testing.assert_allclose(answer["SCORES"], expected.values.numpy(), atol=1e-4)


def test_raw_model_answers_the_classification_extension(server):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.config.http_url)
    tensor = httpclient.InferInput("image", [1, 3, 224, 224], "FP32")
    tensor.set_data_from_numpy(efficientnet.preprocess(skimage.data.coffee())[None])
    result = client.infer(
        "efficientnet_lite0", [tensor], outputs=[httpclient.InferRequestedOutput("logits", class_count=3)]
    )
    top = result.as_numpy("logits")[0]
    print(f"\nclass_count=3: {top}")
    score, index, label = top[0].decode().split(":", 2)
    assert int(index) == efficientnet.ESPRESSO and label == "espresso"


def test_embeddings_match_sentence_transformers(client, protocol):
    from sentence_transformers import SentenceTransformer

    served = infer(client, "text_embedder", {"TEXT": texts(*SENTENCES)})["EMBEDDING"]
    reference = SentenceTransformer(str(minilm.model_path()), device="cpu").encode(SENTENCES)
    cosine = (served * reference).sum(1) / np.linalg.norm(served, axis=1) / np.linalg.norm(reference, axis=1)
    print(f"\n{protocol}: cosine with sentence-transformers, least {cosine.min():.7f}")
    assert cosine.min() >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(served, axis=1), 1.0, atol=1e-5)
    similarity = served @ served.T
    assert similarity[0, 1] > max(similarity[0, 2], similarity[0, 4], similarity[1, 3])
    assert similarity[2, 3] > max(similarity[2, 0], similarity[2, 4], similarity[3, 1])


def test_long_text_is_truncated_and_flagged(client):
    answer = infer(client, "text_embedder", {"TEXT": texts("word " * 600, "short text")})
    assert answer["TRUNCATED"].ravel().tolist() == [True, False]
    assert answer["EMBEDDING"].shape == (2, 384)


def _big_png() -> bytes:
    """7000x7000 pixels (over the 40M limit) that compress to a small file."""
    return encode(np.zeros((7000, 7000, 3), dtype=np.uint8), "PNG")


BAD = {
    # name: (model, inputs, words the message must contain)
    "corrupt image": (
        "image_classifier",
        {"IMAGE": images(b"\x89PNG\r\n\x1a\n" + b"garbage" * 50)},
        ["IMAGE", "not a readable image"],
    ),
    "truncated image": (
        "image_classifier",
        {"IMAGE": images(encode(skimage.data.coffee())[:2000])},
        ["IMAGE", "not a readable image"],
    ),
    "zero-byte image": ("image_classifier", {"IMAGE": images(b"")}, ["IMAGE is empty"]),
    "image over the pixel limit": ("image_classifier", {"IMAGE": images(_big_png())}, ["7000x7000", "limit"]),
    "TOP_K of 0": (
        "image_classifier",
        {"IMAGE": images(encode(skimage.data.coffee())), "TOP_K": np.array([[0]], dtype=np.int32)},
        ["TOP_K", "got 0"],
    ),
    "empty text": ("text_embedder", {"TEXT": texts("")}, ["TEXT is empty"]),
    "non-UTF-8 text": ("text_embedder", {"TEXT": texts(b"caf\xe9 \xff")}, ["TEXT is not valid UTF-8"]),
    "text over the size limit": ("text_embedder", {"TEXT": texts("x" * 70_000)}, ["70000 bytes", "limit"]),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_gets_its_own_clear_error(client, protocol, case):
    model, inputs, words = BAD[case]
    with pytest.raises(InferenceServerException) as info:
        infer(client, model, inputs)
    status, message = str(info.value.status()), info.value.message()
    print(f"\n{protocol} {case}: {status} {message[:160]}")
    assert status.endswith("400" if protocol == "http" else "INVALID_ARGUMENT")
    for word in words:
        assert word in message
    assert client.is_server_ready()


def test_a_bad_image_does_not_fail_the_good_ones_batched_with_it(server):
    """Concurrent requests share preprocess batches; only the corrupt one fails."""
    good, bad = encode(skimage.data.coffee()), b"not an image at all"
    payloads = [good, bad, good, good, bad, good]
    results = infer_concurrently(
        server.config.http_url, "image_classifier", [{"IMAGE": images(p)} for p in payloads], "CLASS_IDS"
    )
    for payload, result in zip(payloads, results, strict=True):
        if payload is good:
            assert result[0, 0] == efficientnet.ESPRESSO
        else:
            assert isinstance(result, InferenceServerException) and "not a readable image" in result.message()


def test_a_member_models_queue_refusal_reaches_the_ensemble_client_as_retryable(server, protocol):
    """efficientnet_lite0's queue policy refuses the excess; through image_classifier the client must still get
    the retryable status (HTTP 503 / gRPC UNAVAILABLE) that its retries look for, not an INTERNAL error."""
    http = server.config.http_url
    before = apply.served_config(http, "efficientnet_lite0")
    # Requests linger in the queue (a 50 ms batching window, one instance), so a queue of one overflows at once.
    tiny = Candidate.of(
        "tiny-queue",
        ("efficientnet_lite0",),
        max_queue_delay_us=50000,
        instances=1,
        max_queue_size=1,
        default_timeout_us=0,
    )
    apply.apply(http, tiny, "efficientnet_lite0")
    try:
        url = http if protocol == "http" else server.config.grpc_url
        photo = encode(skimage.data.coffee())
        results = infer_concurrently(
            url, "image_classifier", [{"IMAGE": images(photo)}] * 12, "CLASS_IDS", protocol=protocol
        )
    finally:
        apply.load(http, "efficientnet_lite0", before)
    refused = [r for r in results if isinstance(r, InferenceServerException)]
    answered = [r for r in results if not isinstance(r, InferenceServerException)]
    print(f"\n{protocol}: {len(answered)} answered, {len(refused)} refused: {refused[0].message() if refused else ''}")
    assert refused and answered
    for exc in refused:
        assert str(exc.status()).endswith("503" if protocol == "http" else "UNAVAILABLE"), exc
        assert "image_classifier" in exc.message() and "queue" in exc.message()
    for result in answered:
        assert result[0, 0] == efficientnet.ESPRESSO
    assert apply.served_config(http, "efficientnet_lite0") == before
