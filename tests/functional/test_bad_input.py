"""Every public model's bad inputs, over HTTP and gRPC, with what the real server answers.

One table, ``TABLE``: (model, case, inputs, HTTP status, gRPC code, words the message must contain).
Each row is sent over both protocols through ``tritonclient`` (``text_generator`` through HTTP
``generate_stream`` and a gRPC stream); after each, the server is ready and a good ``digits`` request
still answers. docs/limits.md carries the same table. Raw-protocol cases (malformed JSON, corrupt
binary data, malformed protobuf) are in test_bad_input_raw.py.

gRPC code ``STREAM``: ``text_generator`` is decoupled, so its requests go over a gRPC stream, and
Triton 2.51 sends a per-request error there as the stream message's ``error_message`` with no status
code (the stream itself stays OK). ``OK`` / ``200``: the server answers; ``check`` says what with.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable
from functools import cache

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from PIL import Image
from tritonclient.utils import InferenceServerException

from backends import generation, imaging, text
from deploy.client import connect, infer
from tests.conftest import infer_concurrently

GOOD = np.zeros((1, 64), dtype=np.float32)
F32, I32, I64 = np.float32, np.int32, np.int64


def objects(*rows) -> np.ndarray:
    """A BYTES tensor [len(rows), 1]."""
    return np.array([[r] for r in rows], dtype=object).reshape(len(rows), 1)


def with_value(shape, index, value, dtype=F32) -> np.ndarray:
    array = np.zeros(shape, dtype=dtype)
    array[index] = value
    return array


@cache
def small_jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((32, 32, 3), 128, dtype=np.uint8)).save(buffer, "JPEG")
    return buffer.getvalue()


@cache
def png_over_pixel_limit() -> bytes:
    """7000x7000 pixels (49 M, over the 40 M limit) that compress to a small file."""
    buffer = io.BytesIO()
    Image.new("L", (7000, 7000)).save(buffer, "PNG")
    return buffer.getvalue()


def all_nan(output: str):
    def check(answer: dict) -> None:
        assert np.isnan(answer[output]).all(), answer[output]

    return check


@dataclasses.dataclass(frozen=True)
class Case:
    model: str
    case: str
    inputs: Callable[[], dict] | None
    """numpy inputs by name, built when the case runs (some are large); for text_generator the gRPC stream's."""
    http: str
    """HTTP status; ``n/a`` where the protocol cannot express the case."""
    grpc: str
    """gRPC status code name, ``STREAM`` (error message on a gRPC stream) or ``n/a``."""
    words: tuple[str, ...]
    http_body: str | None = None
    """text_generator only: the raw JSON body for ``generate_stream``."""
    version: str = ""
    http_words: tuple[str, ...] | None = None
    """Words of the HTTP message where they differ from ``words``."""
    check: Callable[[dict], None] | None = None
    """For a case the server answers: what the answer must be."""

    @property
    def id(self) -> str:
        return f"{self.model}: {self.case}"


def gen_body(**fields) -> str:
    return json.dumps(fields)


P_OK, M_OK = objects(b"Hello").reshape(1), np.array([2], dtype=I32)
MAX_PROMPT_BYTES = generation.MAX_PROMPT_BYTES  # the committed text_generator config uses the defaults
MAX_STOP_BYTES = generation.MAX_STOP_BYTES


def gen_inputs(prompt=P_OK, max_tokens=M_OK, **more) -> Callable[[], dict]:
    return lambda: {"PROMPT": prompt, "MAX_TOKENS": max_tokens, **more}


TABLE = [
    # -- digits: PIXELS FP32 [64], max batch 64 (TorchScript, backends/pytorch on the local server) ----------
    Case(
        "digits",
        "wrong datatype (FP64)",
        lambda: {"PIXELS": np.zeros((1, 64), np.float64)},
        "400",
        "INVALID_ARGUMENT",
        ("PIXELS", "FP64", "FP32"),
    ),
    Case(
        "digits",
        "wrong shape [1, 63]",
        lambda: {"PIXELS": np.zeros((1, 63), F32)},
        "400",
        "INVALID_ARGUMENT",
        ("shape", "PIXELS", "63"),
    ),
    Case(
        "digits",
        "no batch dimension [64]",
        lambda: {"PIXELS": np.zeros(64, F32)},
        "400",
        "INVALID_ARGUMENT",
        ("shape", "PIXELS", "[64]"),
    ),
    Case(
        "digits",
        "empty batch [0, 64]",
        lambda: {"PIXELS": np.zeros((0, 64), F32)},
        "400",
        "INVALID_ARGUMENT",
        ("byte size mismatch", "PIXELS", "got 0"),
    ),
    Case(
        "digits",
        "batch 65 over max_batch_size 64",
        lambda: {"PIXELS": np.zeros((65, 64), F32)},
        "400",
        "INVALID_ARGUMENT",
        ("batch-size", "64"),
    ),
    Case(
        "digits",
        "NaN pixel (propagates)",
        lambda: {"PIXELS": with_value((1, 64), (0, 3), np.nan)},
        "200",
        "OK",
        (),
        check=all_nan("PROBABILITIES"),
    ),
    Case(
        "digits",
        "+inf pixel (NaN out)",
        lambda: {"PIXELS": with_value((1, 64), (0, 3), np.inf)},
        "200",
        "OK",
        (),
        check=all_nan("PROBABILITIES"),
    ),
    Case(
        "digits",
        "strings where FP32 is taken",
        lambda: {"PIXELS": np.full((1, 64), b"1", dtype=object)},
        "400",
        "INVALID_ARGUMENT",
        ("PIXELS", "BYTES", "FP32"),
    ),
    Case("digits", "wrong input name", lambda: {"PIXEL": GOOD}, "400", "INVALID_ARGUMENT", ("PIXEL",)),
    Case(
        "digits",
        "oversized payload (16 MiB tensor)",
        lambda: {"PIXELS": np.zeros((1, 4 * 1024 * 1024), F32)},
        "400",
        "INVALID_ARGUMENT",
        ("shape", "PIXELS", "4194304"),
    ),
    Case(
        "digits",
        "unknown version 7",
        lambda: {"PIXELS": GOOD},
        "404",
        "NOT_FOUND",
        ("digits", "version 7"),
        version="7",
    ),
    Case("no_such_model", "unknown model", lambda: {"PIXELS": GOOD}, "404", "NOT_FOUND", ("no_such_model",)),
    # -- efficientnet_lite0: image FP32 [3, 224, 224], max batch 16 ------------------------------------------
    Case(
        "efficientnet_lite0",
        "wrong datatype (FP16)",
        lambda: {"image": np.zeros((1, 3, 224, 224), np.float16)},
        "400",
        "INVALID_ARGUMENT",
        ("image", "FP16", "FP32"),
    ),
    Case(
        "efficientnet_lite0",
        "wrong shape [1, 3, 200, 224]",
        lambda: {"image": np.zeros((1, 3, 200, 224), F32)},
        "400",
        "INVALID_ARGUMENT",
        ("shape", "image", "200"),
    ),
    Case(
        "efficientnet_lite0",
        "empty batch",
        lambda: {"image": np.zeros((0, 3, 224, 224), F32)},
        "400",
        "INVALID_ARGUMENT",
        ("byte size mismatch", "image", "got 0"),
    ),
    Case(
        "efficientnet_lite0",
        "batch 17 over max_batch_size 16",
        lambda: {"image": np.zeros((17, 3, 224, 224), F32)},
        "400",
        "INVALID_ARGUMENT",
        ("batch-size", "16"),
    ),
    Case(
        "efficientnet_lite0",
        "NaN pixel (propagates)",
        lambda: {"image": with_value((1, 3, 224, 224), (0, 0, 5, 5), np.nan)},
        "200",
        "OK",
        (),
        check=all_nan("logits"),
    ),
    Case(
        "efficientnet_lite0",
        "+inf pixel (NaN out)",
        lambda: {"image": with_value((1, 3, 224, 224), (0, 0, 5, 5), np.inf)},
        "200",
        "OK",
        (),
        check=all_nan("logits"),
    ),
    # -- minilm: input_ids, attention_mask INT64 [-1], max batch 32 ------------------------------------------
    Case(
        "minilm",
        "wrong datatype (FP32 ids)",
        lambda: {"input_ids": np.ones((1, 3), F32), "attention_mask": np.ones((1, 3), I64)},
        "400",
        "INVALID_ARGUMENT",
        ("input_ids", "FP32", "INT64"),
    ),
    Case(
        "minilm",
        "missing attention_mask",
        lambda: {"input_ids": np.ones((1, 3), I64)},
        "400",
        "INVALID_ARGUMENT",
        ("attention_mask", "missing"),
    ),
    Case(
        "minilm",
        "token id out of the vocabulary",
        lambda: {"input_ids": np.array([[101, 10**9, 102]], I64), "attention_mask": np.ones((1, 3), I64)},
        "400",
        "INVALID_ARGUMENT",
        ("index out of range",),
    ),
    Case(
        "minilm",
        "negative token id",
        lambda: {"input_ids": np.array([[101, -5, 102]], I64), "attention_mask": np.ones((1, 3), I64)},
        "400",
        "INVALID_ARGUMENT",
        ("index out of range",),
    ),
    Case(
        "minilm",
        "600 tokens, over 512 positions",
        lambda: {"input_ids": np.full((1, 600), 1000, I64), "attention_mask": np.ones((1, 600), I64)},
        "400",
        "INVALID_ARGUMENT",
        ("600", "512"),
    ),
    Case(
        "minilm",
        "mask shorter than ids",
        lambda: {"input_ids": np.array([[101, 1000, 102]], I64), "attention_mask": np.ones((1, 2), I64)},
        "400",
        "INVALID_ARGUMENT",
        ("must match",),
    ),
    Case(
        "minilm",
        "empty sequence [1, 0]",
        lambda: {"input_ids": np.ones((1, 0), I64), "attention_mask": np.ones((1, 0), I64)},
        "400",
        "INVALID_ARGUMENT",
        ("0 elements",),
    ),
    Case(
        "minilm",
        "empty batch [0, 8]",
        lambda: {"input_ids": np.ones((0, 8), I64), "attention_mask": np.ones((0, 8), I64)},
        "400",
        "INVALID_ARGUMENT",
        ("byte size mismatch", "got 0"),
    ),
    Case(
        "minilm",
        "batch 33 over max_batch_size 32",
        lambda: {"input_ids": np.ones((33, 4), I64), "attention_mask": np.ones((33, 4), I64)},
        "400",
        "INVALID_ARGUMENT",
        ("batch-size", "32"),
    ),
    # -- image_classifier (ensemble): IMAGE BYTES [1], TOP_K INT32 [1], max batch 16 ---------------------------
    Case(
        "image_classifier",
        "tensor where BYTES is taken",
        lambda: {"IMAGE": np.zeros((1, 1), F32)},
        "400",
        "INVALID_ARGUMENT",
        ("IMAGE", "FP32", "BYTES"),
    ),
    Case(
        "image_classifier",
        "TOP_K of the wrong datatype (INT64)",
        lambda: {"IMAGE": objects(small_jpeg()), "TOP_K": np.array([[3]], I64)},
        "400",
        "INVALID_ARGUMENT",
        ("TOP_K", "INT64", "INT32"),
    ),
    Case(
        "image_classifier",
        "TOP_K over 1000",
        lambda: {"IMAGE": objects(small_jpeg()), "TOP_K": np.array([[1001]], I32)},
        "400",
        "INVALID_ARGUMENT",
        ("TOP_K", "1001"),
    ),
    Case(
        "image_classifier",
        "empty batch",
        lambda: {"IMAGE": np.zeros((0, 1), dtype=object)},
        "400",
        "INVALID_ARGUMENT",
        ("IMAGE", "got 0"),
    ),
    Case(
        "image_classifier",
        "batch 17 over max_batch_size 16",
        lambda: {"IMAGE": objects(*[small_jpeg()] * 17)},
        "400",
        "INVALID_ARGUMENT",
        ("batch-size", "16"),
    ),
    Case(
        "image_classifier",
        "image over MAX_IMAGE_BYTES (16 MiB + 1)",
        lambda: {"IMAGE": objects(b"\xff" * (imaging.MAX_IMAGE_BYTES + 1))},
        "400",
        "INVALID_ARGUMENT",
        ("IMAGE", f"{imaging.MAX_IMAGE_BYTES + 1} bytes", "MAX_IMAGE_BYTES"),
    ),
    Case(
        "image_classifier",
        "image over MAX_IMAGE_PIXELS (7000x7000)",
        lambda: {"IMAGE": objects(png_over_pixel_limit())},
        "400",
        "INVALID_ARGUMENT",
        ("IMAGE", "7000x7000", "MAX_IMAGE_PIXELS"),
    ),
    Case(
        "image_classifier",
        "not an image",
        lambda: {"IMAGE": objects(b"just some text")},
        "400",
        "INVALID_ARGUMENT",
        ("IMAGE", "not a readable image"),
    ),
    # -- text_embedder (ensemble): TEXT BYTES [1], max batch 32 ----------------------------------------------
    Case(
        "text_embedder",
        "tensor where BYTES is taken",
        lambda: {"TEXT": np.array([[3]], I32)},
        "400",
        "INVALID_ARGUMENT",
        ("TEXT", "INT32", "BYTES"),
    ),
    Case(
        "text_embedder",
        "two texts in one row [1, 2]",
        lambda: {"TEXT": np.array([[b"a", b"b"]], dtype=object)},
        "400",
        "INVALID_ARGUMENT",
        ("shape", "TEXT"),
    ),
    Case(
        "text_embedder",
        "empty batch",
        lambda: {"TEXT": np.zeros((0, 1), dtype=object)},
        "400",
        "INVALID_ARGUMENT",
        ("TEXT", "got 0"),
    ),
    Case(
        "text_embedder",
        "batch 33 over max_batch_size 32",
        lambda: {"TEXT": objects(*[b"hi"] * 33)},
        "400",
        "INVALID_ARGUMENT",
        ("batch-size", "32"),
    ),
    Case(
        "text_embedder",
        "text over MAX_TEXT_BYTES (64 KiB + 1)",
        lambda: {"TEXT": objects(b"x" * (text.MAX_TEXT_BYTES + 1))},
        "400",
        "INVALID_ARGUMENT",
        ("TEXT", f"{text.MAX_TEXT_BYTES + 1} bytes", "MAX_TEXT_BYTES"),
    ),
    Case(
        "text_embedder",
        "non-UTF-8 text",
        lambda: {"TEXT": objects(b"caf\xe9 \xff")},
        "400",
        "INVALID_ARGUMENT",
        ("TEXT", "UTF-8"),
    ),
    # -- text_generator (decoupled): HTTP generate_stream (JSON body) / gRPC stream (tensors) -----------------
    Case(
        "text_generator",
        "NaN TEMPERATURE",
        gen_inputs(TEMPERATURE=np.array([np.nan], F32)),
        "400",
        "STREAM",
        ("TEMPERATURE", "finite", "nan"),
        http_body='{"PROMPT": "Hello", "MAX_TOKENS": 2, "TEMPERATURE": NaN}',
    ),
    Case(
        "text_generator",
        "infinite TEMPERATURE",
        gen_inputs(TEMPERATURE=np.array([np.inf], F32)),
        "400",
        "STREAM",
        ("TEMPERATURE", "finite", "inf"),
        http_body='{"PROMPT": "Hello", "MAX_TOKENS": 2, "TEMPERATURE": Infinity}',
    ),
    Case(
        "text_generator",
        "TEMPERATURE 1e39 (over FP32: inf)",
        None,
        "400",
        "n/a",
        ("TEMPERATURE", "inf"),
        http_body='{"PROMPT": "Hello", "MAX_TOKENS": 2, "TEMPERATURE": 1e39}',
    ),
    Case(
        "text_generator",
        "TEMPERATURE 1e999 (not a JSON double)",
        None,
        "500",
        "n/a",
        ("failed to parse the request JSON",),
        http_body='{"PROMPT": "Hello", "MAX_TOKENS": 2, "TEMPERATURE": 1e999}',
    ),
    Case(
        "text_generator",
        "wrong datatype (FP64 TEMPERATURE)",
        gen_inputs(TEMPERATURE=np.array([0.5], np.float64)),
        "n/a",
        "STREAM",
        ("TEMPERATURE", "FP64", "FP32"),
    ),
    Case(
        "text_generator",
        "string where MAX_TOKENS INT32 is taken",
        gen_inputs(max_tokens=np.array([b"two"], dtype=object)),
        "500",
        "STREAM",
        ("MAX_TOKENS", "BYTES", "INT32"),
        http_body=gen_body(PROMPT="Hello", MAX_TOKENS="two"),
        http_words=("Unable to parse 'data'", "signed-integer"),
    ),
    Case(
        "text_generator",
        "wrong shape (two prompts)",
        gen_inputs(prompt=np.array([b"a", b"b"], dtype=object)),
        "400",
        "STREAM",
        ("PROMPT", "shape"),
        http_body=gen_body(PROMPT=["a", "b"], MAX_TOKENS=2),
    ),
    Case(
        "text_generator",
        "empty batch (no prompt element)",
        gen_inputs(prompt=np.zeros(0, dtype=object)),
        "400",
        "STREAM",
        ("PROMPT", "shape"),
        http_body=gen_body(PROMPT=[], MAX_TOKENS=2),
    ),
    Case(
        "text_generator",
        "missing MAX_TOKENS",
        lambda: {"PROMPT": P_OK},
        "400",
        "STREAM",
        ("MAX_TOKENS",),
        http_body=gen_body(PROMPT="Hello"),
    ),
    Case(
        "text_generator",
        "prompt over MAX_PROMPT_BYTES",
        gen_inputs(prompt=np.array([b"x" * (MAX_PROMPT_BYTES + 1)], dtype=object)),
        "400",
        "STREAM",
        ("PROMPT", f"{MAX_PROMPT_BYTES + 1} bytes", "MAX_PROMPT_BYTES"),
        http_body=gen_body(PROMPT="x" * (MAX_PROMPT_BYTES + 1), MAX_TOKENS=2),
    ),
    Case(
        "text_generator",
        "STOP over MAX_STOP_BYTES",
        gen_inputs(STOP=np.array([b"s" * (MAX_STOP_BYTES + 1)], dtype=object)),
        "400",
        "STREAM",
        ("STOP", "MAX_STOP_BYTES"),
        http_body=gen_body(PROMPT="Hello", MAX_TOKENS=2, STOP="s" * (MAX_STOP_BYTES + 1)),
    ),
    Case(
        "text_generator",
        "MAX_TOKENS over MAX_NEW_TOKENS",
        gen_inputs(max_tokens=np.array([generation.MAX_NEW_TOKENS + 1], I32)),
        "400",
        "STREAM",
        ("MAX_TOKENS", str(generation.MAX_NEW_TOKENS)),
        http_body=gen_body(PROMPT="Hello", MAX_TOKENS=generation.MAX_NEW_TOKENS + 1),
    ),
    Case(
        "text_generator",
        "non-UTF-8 prompt",
        gen_inputs(prompt=np.array([b"caf\xe9 \xff"], dtype=object)),
        "n/a",
        "STREAM",
        ("PROMPT", "UTF-8"),
    ),
    Case(
        "text_generator",
        "unknown version 7",
        gen_inputs(),
        "404",
        "STREAM",
        ("text_generator", "version 7"),
        http_body=gen_body(PROMPT="Hello", MAX_TOKENS=2),
        version="7",
    ),
]


# -- sending ----------------------------------------------------------------------------------------------
def generate_http(server, case: Case) -> tuple[str, str]:
    """POST generate_stream; (status, error text) -- the error of an SSE stream, or the JSON body's."""
    version = f"/versions/{case.version}" if case.version else ""
    url = f"http://{server.config.http_url}/v2/models/{case.model}{version}/generate_stream"
    response = requests.post(url, data=case.http_body, headers={"Content-Type": "application/json"}, timeout=120)
    error = ""
    for line in response.text.splitlines():
        payload = line[len("data: ") :] if line.startswith("data: ") else line
        try:
            event = json.loads(payload)
        except ValueError:
            continue
        if isinstance(event, dict) and "error" in event:
            error = event["error"]
    return str(response.status_code), error


def generate_grpc(server, case: Case) -> tuple[str, str]:
    """One request on a gRPC stream; ('STREAM', message) for an error there, ('OK', '') for a finished stream."""
    import queue

    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.config.grpc_url)
    client.start_stream(callback=lambda result, error: events.put(error))
    try:
        inputs = []
        for name, array in case.inputs().items():
            datatype = {
                np.dtype(object): "BYTES",
                np.dtype(np.int32): "INT32",
                np.dtype(np.float32): "FP32",
                np.dtype(np.float64): "FP64",
            }[array.dtype]
            tensor = grpcclient.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        client.async_stream_infer(case.model, inputs, model_version=case.version, enable_empty_final_response=True)
        error = events.get(timeout=120)
        return ("STREAM", error.message()) if error is not None else ("OK", "")
    finally:
        client.stop_stream()
        client.close()


def assert_still_serving(server) -> None:
    for protocol, url in (("http", server.config.http_url), ("grpc", server.config.grpc_url)):
        client = connect(protocol, url)
        try:
            assert client.is_server_ready(), f"not ready over {protocol}"
            assert infer(client, "digits", {"PIXELS": GOOD})["PROBABILITIES"].shape == (1, 10)
        finally:
            client.close()


# A case one protocol cannot express ("n/a", see docs/limits.md) runs over the other only.
SENDABLE = [
    (case, protocol)
    for case in TABLE
    for protocol in ("http", "grpc")
    if (case.http if protocol == "http" else case.grpc) != "n/a"
]


@pytest.mark.parametrize("case, protocol", SENDABLE, ids=[f"{c.id}-{p}" for c, p in SENDABLE])
def test_bad_input_table(server, case: Case, protocol):
    expected = case.http if protocol == "http" else case.grpc
    if case.model == "text_generator":
        status, message = (generate_http if protocol == "http" else generate_grpc)(server, case)
        answer = None
    else:
        client = connect(protocol, server.config.http_url if protocol == "http" else server.config.grpc_url)
        try:
            answer, status, message = infer(client, case.model, case.inputs(), model_version=case.version), "", ""
            status = "200" if protocol == "http" else "OK"
        except InferenceServerException as exc:
            answer, status, message = None, str(exc.status()), exc.message()
        finally:
            client.close()
    print(f"\n{protocol} {case.id}: {status} {message[:200]}")
    assert status.endswith(expected), f"{case.id} over {protocol}: got {status} {message[:300]!r}, want {expected}"
    for word in case.http_words if protocol == "http" and case.http_words is not None else case.words:
        assert word in message, f"{case.id} over {protocol}: {word!r} missing from {message[:500]!r}"
    if case.check is not None:
        case.check(answer)
    assert_still_serving(server)


def test_the_table_names_every_public_model():
    models = {c.model for c in TABLE}
    assert {"digits", "efficientnet_lite0", "minilm", "image_classifier", "text_embedder", "text_generator"} <= models


# -- a refused request does not fail the others of its batch --------------------------------------------------
def test_an_oversized_text_fails_alone_in_its_batch(server):
    """Concurrent requests share tokenize batches; only the texts over MAX_TEXT_BYTES fail."""
    good, big = b"A man is playing a guitar.", b"y" * (text.MAX_TEXT_BYTES + 1)
    payloads = [good, big, good, good, big, good]
    results = infer_concurrently(
        server.config.http_url, "text_embedder", [{"TEXT": objects(p)} for p in payloads], "EMBEDDING"
    )
    for payload, result in zip(payloads, results, strict=True):
        if payload is good:
            assert not isinstance(result, Exception) and result.shape == (1, 384), result
        else:
            assert isinstance(result, InferenceServerException) and "MAX_TEXT_BYTES" in result.message(), result
    assert_still_serving(server)


def test_an_oversized_image_fails_alone_in_its_batch(server):
    good, big = small_jpeg(), b"\xff" * (imaging.MAX_IMAGE_BYTES + 1)
    payloads = [good, big, good, good]
    results = infer_concurrently(
        server.config.http_url, "image_classifier", [{"IMAGE": objects(p)} for p in payloads], "CLASS_IDS"
    )
    for payload, result in zip(payloads, results, strict=True):
        if payload is good:
            assert not isinstance(result, Exception) and result.shape == (1, 5), result
        else:
            assert isinstance(result, InferenceServerException) and "MAX_IMAGE_BYTES" in result.message(), result


def test_an_oversized_prompt_fails_alone_on_its_stream(server):
    """On one gRPC stream: good, too big, good -- the good ones stream text, the big one gets its error."""
    results = []
    client = grpcclient.InferenceServerClient(server.config.grpc_url)
    import queue

    events: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    try:
        for prompt in (b"Hello", b"x" * (MAX_PROMPT_BYTES + 1), b"Hello"):
            inputs = []
            for name, array, datatype in (
                ("PROMPT", np.array([prompt], dtype=object), "BYTES"),
                ("MAX_TOKENS", np.array([2], I32), "INT32"),
            ):
                tensor = grpcclient.InferInput(name, [1], datatype)
                tensor.set_data_from_numpy(array)
                inputs.append(tensor)
            client.async_stream_infer("text_generator", inputs, enable_empty_final_response=True)
            pieces, error = [], None
            while True:
                result, error = events.get(timeout=120)
                if error is not None:
                    break
                response = result.get_response()
                if response.outputs:
                    pieces.append(result.as_numpy("TEXT")[0])
                if response.parameters["triton_final_response"].bool_param:
                    break
            results.append((pieces, error))
    finally:
        client.stop_stream()
        client.close()
    (first, e1), (_, e2), (third, e3) = results
    assert e1 is None and first and e3 is None and third
    assert e2 is not None and "MAX_PROMPT_BYTES" in e2.message()
