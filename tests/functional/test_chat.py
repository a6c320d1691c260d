"""text_generator's CHAT input: instruct prompts through the model's own chat template, over gRPC and HTTP.

The real SmolLM2-135M-Instruct (session server) answers a templated question greedily exactly as
transformers' ``generate`` does on the same templated prompt, and stops where the model ends its turn.
Bad ``CHAT`` values are refused for that request alone, on the session's server of the tiny random-weight
steps (tests/functional/conftest.py), which also serves a generator without a chat template.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient

from export.zoo import smollm
from tests.generation_helpers import GrpcStream, http_generate
from tests.smollm_reference import chat_generate

QUESTIONS = ("What is the capital of France?", "What is 2 + 2?")
MAX_TOKENS = 64


def chat_inputs(prompt: bytes, max_tokens: int, chat_value: np.ndarray, datatype: str = "BOOL"):
    inputs = []
    for name, array, dtype in (
        ("PROMPT", np.array([prompt], dtype=np.object_), "BYTES"),
        ("MAX_TOKENS", np.array([max_tokens], dtype=np.int32), "INT32"),
        ("CHAT", chat_value, datatype),
    ):
        tensor = grpcclient.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def grpc_chat(server, prompt: bytes, max_tokens: int, chat_value, datatype="BOOL", model="text_generator"):
    stream = GrpcStream(server.config.grpc_url, model)
    try:
        stream.client.async_stream_infer(
            model, chat_inputs(prompt, max_tokens, chat_value, datatype), enable_empty_final_response=True
        )
        return stream.collect()
    finally:
        stream.close()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_chat_answers_like_transformers_generate_and_ends_at_the_end_of_turn(server, protocol):
    for question in QUESTIONS:
        expected_ids = chat_generate(question, MAX_TOKENS)
        assert expected_ids[-1] == 2 and len(expected_ids) < MAX_TOKENS, "the reference did not end its turn"
        expected = smollm.tokenizer().decode(expected_ids[:-1])
        if protocol == "grpc":
            pieces, error = grpc_chat(server, question.encode(), MAX_TOKENS, np.array([True]))
            assert error is None, error
        else:
            status, pieces, error = http_generate(server, {"PROMPT": question, "MAX_TOKENS": MAX_TOKENS, "CHAT": True})
            assert status == 200 and error is None, (status, error)
        answer = "".join(pieces)
        print(f"\n{protocol} CHAT {question!r} -> {answer!r} ({len(expected_ids) - 1} tokens, then <|im_end|>)")
        assert answer == expected
        assert "<|im_end|>" not in answer and "<|im_start|>" not in answer


def test_chat_false_is_the_raw_prompt(server):
    raw_ids = smollm.greedy(
        smollm.Prefill(smollm.load_llama()),
        smollm.Decode(smollm.load_llama()),
        *smollm.encode_batch(["The capital of France is"]),
        max_new_tokens=4,
    )[0]
    pieces, error = grpc_chat(server, b"The capital of France is", 4, np.array([False]))
    assert error is None and "".join(pieces) == smollm.tokenizer().decode(raw_ids)


# -- bad values ---------------------------------------------------------------------------------------------
@pytest.fixture
def tiny_server(tiny_generator):
    """The session's server of the tiny steps (tests/functional/conftest.py): ``text_generator`` with its
    chat template, ``no_chat`` without."""
    return tiny_generator


BAD_GRPC = {
    "INT32 where BOOL is taken": (
        np.array([1], dtype=np.int32),
        "INT32",
        "text_generator",
        ["'CHAT'", "INT32", "BOOL"],
    ),
    "two values": (np.array([True, False]), "BOOL", "text_generator", ["'CHAT'", "shape", "[2]"]),
    "a [1, 1] tensor": (np.array([[True]]), "BOOL", "text_generator", ["'CHAT'", "shape", "[1,1]"]),
    "true without a chat template": (np.array([True]), "BOOL", "no_chat", ["CHAT is true", "no chat template"]),
}


@pytest.mark.parametrize("case", sorted(BAD_GRPC))
def test_a_bad_chat_value_over_grpc_fails_that_request_alone(tiny_server, case):
    value, datatype, model, words = BAD_GRPC[case]
    pieces, error = grpc_chat(tiny_server, b"Hello", 4, value, datatype, model)
    assert error is not None and not pieces, case
    assert all(w in error.message() for w in words), error.message()
    pieces, error = grpc_chat(tiny_server, b"Hello", 2, np.array([True]), model="text_generator")
    assert error is None and pieces


BAD_HTTP = {
    "two values": ("text_generator", [True, False], 400, ["'CHAT'", "shape"]),
    "true without a chat template": ("no_chat", True, 400, ["CHAT is true", "no chat template"]),
    # Refused by the server binary while it parses the JSON, before any model sees it: a 500, as for a
    # string where MAX_TOKENS is taken (docs/limits.md).
    "a string": ("text_generator", "yes", 500, ["non-boolean as boolean"]),
    "a number": ("text_generator", 1, 500, ["non-boolean as boolean"]),
}


@pytest.mark.parametrize("case", sorted(BAD_HTTP))
def test_a_bad_chat_value_over_http_is_refused(tiny_server, case):
    model, value, status, words = BAD_HTTP[case]
    url = f"http://{tiny_server.config.http_url}/v2/models/{model}/generate_stream"
    response = requests.post(url, json={"PROMPT": "Hello", "MAX_TOKENS": 4, "CHAT": value}, timeout=60)
    assert response.status_code == status, (response.status_code, response.text)
    body = response.text.strip()  # {"error": ...}, or a server-sent event holding one
    error = json.loads(body.removeprefix("data:").strip().splitlines()[0])["error"]
    assert all(w in error for w in words), error
    assert http_generate(tiny_server, {"PROMPT": "Hello", "MAX_TOKENS": 2, "CHAT": True})[0] == 200
