"""Requests no well-behaved client sends: malformed JSON, corrupt binary tensor data, malformed protobuf.

Sent raw, with ``http.client`` (HTTP/REST) and a ``grpc`` channel with the ``tritonclient`` protobuf
stubs (gRPC), so nothing on the client side repairs them. Each case states what the real Triton 2.51
answers, over each protocol where the protocol can express it (``None``: it cannot; docs/limits.md
gives the counterpart). After each, the server is ready and a good ``digits`` request answers over
both protocols. We cannot change the server binary: where it answers 500 (unparsable JSON) or
accepts something odd (an extra ``raw_input_contents`` entry), the test asserts what it really does.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import struct
from collections.abc import Callable

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

ZEROS = np.zeros(64, dtype=np.float32).tobytes()  # one digits row, 256 bytes
GOOD_JSON = {"inputs": [{"name": "PIXELS", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 64}]}
BIG = 64 * 1024 * 1024  # 64 MiB: no server-level limit in 2.51 refuses it


def pixels_json(data=None, **extra) -> bytes:
    tensor = {"name": "PIXELS", "shape": [1, 64], "datatype": "FP32", **extra}
    if data is not None:
        tensor["data"] = data
    return json.dumps({"inputs": [tensor]}).encode()


def binary(tensor: dict, payload: bytes, header_delta: int = 0) -> tuple[bytes, dict]:
    """A binary-data request: JSON header + payload, Inference-Header-Content-Length off by ``header_delta``."""
    header = json.dumps({"inputs": [tensor]}).encode()
    return header + payload, {
        "Inference-Header-Content-Length": str(len(header) + header_delta),
        "Content-Type": "application/octet-stream",
    }


def pixels_binary(declared: int, payload: bytes, header_delta: int = 0):
    return binary(
        {"name": "PIXELS", "shape": [1, 64], "datatype": "FP32", "parameters": {"binary_data_size": declared}},
        payload,
        header_delta,
    )


def text_binary(blob: bytes):
    return binary(
        {"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "parameters": {"binary_data_size": len(blob)}}, blob
    )


def grpc_request(
    model="digits",
    version="",
    name="PIXELS",
    datatype="FP32",
    shape=(1, 64),
    raw=(ZEROS,),
    fp32=None,
    bytes_contents=None,
) -> bytes:
    request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    if name is not None:
        tensor = request.inputs.add()
        tensor.name, tensor.datatype = name, datatype
        tensor.shape.extend(shape)
        if fp32 is not None:
            tensor.contents.fp32_contents.extend(fp32)
        if bytes_contents is not None:
            tensor.contents.bytes_contents.extend(bytes_contents)
    request.raw_input_contents.extend(raw)
    return request.SerializeToString()


def length_prefixed(data: bytes) -> bytes:
    return struct.pack("<I", len(data)) + data


@dataclasses.dataclass(frozen=True)
class Raw:
    case: str
    http: Callable[[], tuple] | None
    """-> (path, body, headers) for POST, or None where HTTP cannot express it."""
    http_status: int | None
    http_words: tuple[str, ...]
    grpc: Callable[[], tuple] | None
    """-> (method, serialized request) for ModelInfer / ModelStreamInfer, or None."""
    grpc_code: str | None
    """A status code name; ``OK`` means answered (unary) or ended without a message (stream)."""
    grpc_words: tuple[str, ...]
    nan_answer: bool = False
    """The answer is a 200 / OK whose PROBABILITIES are all NaN."""


def infer_path(model="digits", version=None):
    return f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"


CASES = [
    Raw(
        "malformed JSON / malformed protobuf",
        lambda: (infer_path(), b'{"inputs": [', {}),
        500,
        ("failed to parse the request JSON buffer",),
        lambda: ("ModelInfer", b"\xff\xff\xff\xff not a protobuf"),
        "INTERNAL",
        ("Unable to parse request",),
    ),
    Raw(
        "truncated JSON / truncated protobuf",
        lambda: (infer_path(), json.dumps(GOOD_JSON).encode()[:60], {}),
        500,
        ("failed to parse",),
        lambda: ("ModelInfer", grpc_request()[:40]),
        "INTERNAL",
        ("Unable to parse request",),
    ),
    Raw(
        "JSON without 'inputs' / request without inputs",
        lambda: (infer_path(), b'{"foo": 1}', {}),
        500,
        ("Unable to parse 'inputs'",),
        lambda: ("ModelInfer", grpc_request(name=None, raw=())),
        "INVALID_ARGUMENT",
        ("expected 1 inputs but got 0",),
    ),
    Raw(
        "empty body / empty message",
        lambda: (infer_path(), b"", {}),
        400,
        ("byte size mismatch", "got 0"),
        lambda: ("ModelInfer", b""),
        "NOT_FOUND",
        ("unknown model: ''",),
    ),
    Raw(
        "strings where FP32 is taken (JSON data / bytes_contents)",
        lambda: (infer_path(), pixels_json(["a"] * 64), {}),
        500,
        ("Unable to parse 'data'", "non-number"),
        lambda: ("ModelInfer", grpc_request(raw=(), bytes_contents=[b"a"] * 64)),
        "INVALID_ARGUMENT",
        ("PIXELS", "BYTES", "FP32"),
    ),
    Raw(
        "63 values for shape [1, 64]",
        lambda: (infer_path(), pixels_json([0.0] * 63), {}),
        500,
        ("Shape does not match",),
        lambda: ("ModelInfer", grpc_request(raw=(), fp32=[0.0] * 63)),
        "INVALID_ARGUMENT",
        ("byte size mismatch", "Expected 256, got 252"),
    ),
    Raw(
        "tensor without data",
        lambda: (infer_path(), pixels_json(), {}),
        400,
        ("no field is set",),
        lambda: ("ModelInfer", grpc_request(raw=())),
        "INVALID_ARGUMENT",
        ("unable to find data", "PIXELS"),
    ),
    Raw(
        "data given twice (JSON data + binary / contents + raw)",
        lambda: (
            infer_path(),
            *binary(
                {
                    "name": "PIXELS",
                    "shape": [1, 64],
                    "datatype": "FP32",
                    "data": [0.0] * 64,
                    "parameters": {"binary_data_size": 256},
                },
                ZEROS,
            ),
        ),
        400,
        ("only one of", "binary_data_size"),
        lambda: ("ModelInfer", grpc_request(fp32=[0.0] * 64)),
        "INVALID_ARGUMENT",
        ("contents field must not be",),
    ),
    Raw(
        "NaN in the data (JSON NaN literal / raw NaN)",
        lambda: (infer_path(), pixels_json([float("nan")] + [0.0] * 63), {}),
        200,
        (),
        lambda: ("ModelInfer", grpc_request(raw=(np.full(64, np.nan, np.float32).tobytes(),))),
        "OK",
        (),
        nan_answer=True,
    ),
    Raw(
        "number beyond double (1e999)",
        lambda: (infer_path(), pixels_json([0.0] * 64).replace(b"0.0", b"1e999", 1), {}),
        500,
        ("Number too big",),
        None,
        None,
        (),
    ),
    Raw(
        "binary data shorter than binary_data_size / raw contents 200 of 256 bytes",
        lambda: (infer_path(), *pixels_binary(256, ZEROS[:200])),
        400,
        ("expecting 56 additional bytes",),
        lambda: ("ModelInfer", grpc_request(raw=(ZEROS[:200],))),
        "INVALID_ARGUMENT",
        ("Expected 256, got 200",),
    ),
    Raw(
        "binary data longer than binary_data_size / raw contents 300 of 256 bytes",
        lambda: (infer_path(), *pixels_binary(256, ZEROS + bytes(44))),
        400,
        ("unexpected additional input data",),
        lambda: ("ModelInfer", grpc_request(raw=(ZEROS + bytes(44),))),
        "INVALID_ARGUMENT",
        ("Expected 256, got 300",),
    ),
    Raw(
        "binary_data_size below the tensor's size / raw contents 255 bytes",
        lambda: (infer_path(), *pixels_binary(200, ZEROS[:200])),
        400,
        ("Expected 256, got 200",),
        lambda: ("ModelInfer", grpc_request(raw=(ZEROS[:255],))),
        "INVALID_ARGUMENT",
        ("Expected 256, got 255",),
    ),
    Raw(
        "Inference-Header-Content-Length past the body",
        lambda: (infer_path(), *pixels_binary(256, ZEROS, header_delta=1000)),
        400,
        ("inference header size should be in range",),
        None,
        None,
        (),
    ),
    Raw(
        "Inference-Header-Content-Length inside the JSON",
        lambda: (infer_path(), *pixels_binary(256, ZEROS, header_delta=-5)),
        500,
        ("failed to parse",),
        None,
        None,
        (),
    ),
    Raw(
        "one raw_input_contents entry too many (accepted, the extra ignored)",
        None,
        None,
        (),
        lambda: ("ModelInfer", grpc_request(raw=(ZEROS, ZEROS))),
        "OK",
        (),
    ),
    Raw(
        "BYTES element whose length prefix says 1000, 10 bytes follow",
        lambda: (infer_path("text_embedder"), *text_binary(struct.pack("<I", 1000) + b"x" * 10)),
        400,
        ("incomplete string data", "TEXT", "1000"),
        lambda: (
            "ModelInfer",
            grpc_request(
                "text_embedder", name="TEXT", datatype="BYTES", shape=(1, 1), raw=(struct.pack("<I", 1000) + b"x" * 10,)
            ),
        ),
        "INVALID_ARGUMENT",
        ("incomplete string data", "TEXT", "1000"),
    ),
    Raw(
        "BYTES length prefix cut short (2 of 4 bytes)",
        lambda: (infer_path("text_embedder"), *text_binary(b"\x01\x00")),
        400,
        ("incomplete string length indicator",),
        lambda: (
            "ModelInfer",
            grpc_request("text_embedder", name="TEXT", datatype="BYTES", shape=(1, 1), raw=(b"\x01\x00",)),
        ),
        "INVALID_ARGUMENT",
        ("incomplete string length indicator",),
    ),
    Raw(
        "unknown model",
        lambda: (infer_path("no_such_model"), json.dumps(GOOD_JSON).encode(), {}),
        404,
        ("no_such_model", "not found"),
        lambda: ("ModelInfer", grpc_request("no_such_model")),
        "NOT_FOUND",
        ("no_such_model", "not found"),
    ),
    Raw(
        "unknown version 7",
        lambda: (infer_path(version="7"), json.dumps(GOOD_JSON).encode(), {}),
        404,
        ("version 7 is not found",),
        lambda: ("ModelInfer", grpc_request(version="7")),
        "NOT_FOUND",
        ("version 7 is not found",),
    ),
    Raw(
        "version that is not a number ('abc')",
        lambda: (infer_path(version="abc"), json.dumps(GOOD_JSON).encode(), {}),
        404,
        ("Not Found",),
        lambda: ("ModelInfer", grpc_request(version="abc")),
        "INVALID_ARGUMENT",
        ("integral value",),
    ),
    Raw(
        "non-streaming inference on the decoupled text_generator",
        lambda: (
            infer_path("text_generator"),
            json.dumps(
                {
                    "inputs": [
                        {"name": "PROMPT", "shape": [1], "datatype": "BYTES", "data": ["Hello"]},
                        {"name": "MAX_TOKENS", "shape": [1], "datatype": "INT32", "data": [2]},
                    ]
                }
            ).encode(),
            {},
        ),
        501,
        ("decoupled",),
        lambda: (
            "ModelInfer",
            grpc_request(
                "text_generator", name="PROMPT", datatype="BYTES", shape=(1,), raw=(length_prefixed(b"Hello"),)
            ),
        ),
        "UNIMPLEMENTED",
        ("decoupled",),
    ),
    Raw(
        "malformed JSON to generate_stream / malformed protobuf on a stream",
        lambda: ("/v2/models/text_generator/generate_stream", b'{"PROMPT": "Hi", ', {}),
        500,
        ("failed to parse the request JSON buffer",),
        lambda: ("ModelStreamInfer", b"\xff\xff garbage"),
        "OK",
        (),
    ),
    Raw(
        "64 MiB of garbage (no server-level size limit)",
        lambda: (infer_path(), b"x" * BIG, {}),
        500,
        ("failed to parse the request JSON buffer",),
        lambda: ("ModelInfer", grpc_request(raw=(b"x" * BIG,))),
        "INVALID_ARGUMENT",
        ("Expected 256, got 67108864",),
    ),
    Raw(
        "64 MiB image (refused by MAX_IMAGE_BYTES, not by the server)",
        lambda: (
            infer_path("image_classifier"),
            *binary(
                {"name": "IMAGE", "shape": [1, 1], "datatype": "BYTES", "parameters": {"binary_data_size": BIG + 4}},
                length_prefixed(b"\xff" * BIG),
            ),
        ),
        400,
        ("IMAGE is 67108864 bytes", "MAX_IMAGE_BYTES"),
        lambda: (
            "ModelInfer",
            grpc_request(
                "image_classifier", name="IMAGE", datatype="BYTES", shape=(1, 1), raw=(length_prefixed(b"\xff" * BIG),)
            ),
        ),
        "INVALID_ARGUMENT",
        ("IMAGE is 67108864 bytes", "MAX_IMAGE_BYTES"),
    ),
]


# -- raw clients ---------------------------------------------------------------------------------------------
def http_post(url: str, path: str, body: bytes, headers: dict) -> tuple[int, str]:
    host, port = url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        connection.close()


@pytest.fixture(scope="module")
def channel(server):
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(server.config.grpc_url, options=options) as channel:
        yield channel


def grpc_call(channel, method: str, payload: bytes):
    """(code name, details, responses) of one raw call; a stream call sends ``payload`` as its only message."""
    path = f"/inference.GRPCInferenceService/{method}"
    try:
        if method == "ModelInfer":
            call = channel.unary_unary(
                path, request_serializer=lambda b: b, response_deserializer=service_pb2.ModelInferResponse.FromString
            )
            return "OK", "", [call(payload, timeout=120)]
        call = channel.stream_stream(
            path, request_serializer=lambda b: b, response_deserializer=service_pb2.ModelStreamInferResponse.FromString
        )
        return "OK", "", list(call(iter([payload]), timeout=120))
    except grpc.RpcError as exc:
        return exc.code().name, exc.details() or "", []


def assert_still_serving(server, channel) -> None:
    status, body = http_post(server.config.http_url, infer_path(), json.dumps(GOOD_JSON).encode(), {})
    assert status == 200 and json.loads(body)["outputs"][0]["shape"] == [1, 10], body[:300]
    host, port = server.config.http_url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("GET", "/v2/health/ready")
    assert connection.getresponse().status == 200
    connection.close()
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    assert stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=30).ready
    response = stub.ModelInfer(service_pb2.ModelInferRequest.FromString(grpc_request()), timeout=30)
    assert len(response.raw_output_contents[0]) == 40


def probabilities_are_nan(raw: bytes) -> bool:
    return bool(np.isnan(np.frombuffer(raw, dtype=np.float32)).all())


# A case one protocol cannot express is in the other's list only.
HTTP_CASES = [c for c in CASES if c.http is not None]
GRPC_CASES = [c for c in CASES if c.grpc is not None]


@pytest.mark.parametrize("case", HTTP_CASES, ids=[c.case for c in HTTP_CASES])
def test_raw_http(server, channel, case: Raw):
    path, body, headers = case.http()
    status, text = http_post(server.config.http_url, path, body, headers)
    print(f"\nHTTP {case.case}: {status} {text[:200]}")
    assert status == case.http_status, f"{case.case}: got {status} {text[:300]!r}, want {case.http_status}"
    for word in case.http_words:
        assert word in text, f"{case.case}: {word!r} missing from {text[:500]!r}"
    if case.nan_answer:
        data = json.loads(text.replace("NaN", '"NaN"'))["outputs"][0]["data"]
        assert data == ["NaN"] * 10, data
    assert_still_serving(server, channel)


@pytest.mark.parametrize("case", GRPC_CASES, ids=[c.case for c in GRPC_CASES])
def test_raw_grpc(server, channel, case: Raw):
    method, payload = case.grpc()
    code, details, responses = grpc_call(channel, method, payload)
    print(f"\ngRPC {case.case}: {code} {details[:200]} ({len(responses)} responses)")
    assert code == case.grpc_code, f"{case.case}: got {code} {details[:300]!r}, want {case.grpc_code}"
    for word in case.grpc_words:
        assert word in details, f"{case.case}: {word!r} missing from {details[:500]!r}"
    if method == "ModelStreamInfer":  # a malformed stream message: the stream ends, nothing answered
        assert responses == []
    elif case.nan_answer:
        assert probabilities_are_nan(responses[0].raw_output_contents[0])
    assert_still_serving(server, channel)
