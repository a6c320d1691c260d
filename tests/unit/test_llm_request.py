"""The LLM convention's request parsing (backends/llm_request.py): defaults as the vLLM backend has them, numbers
and flags as JSON values or strings (GenAI-Perf sends strings), and one error naming the field for each bad value."""

from __future__ import annotations

import json

import numpy as np
import pytest

from backends.generation import GenerationInputError, Limits
from backends.llm_request import DEFAULT_MAX_TOKENS, parse_convention


class Words:
    """A tokenizer stand-in: one id per word (the parsing, not the tokenizer, is under test)."""

    class Encoding:
        def __init__(self, ids):
            self.ids = ids

    def encode(self, text):
        return self.Encoding([len(word) for word in text.split()])


def one(value, dtype=None):
    if isinstance(value, str):
        return np.array([value.encode()], dtype=np.object_)
    return np.array([value], dtype=dtype)


def parse(sampling=None, parameters=None, text="Hello there", **inputs):
    raw = None if sampling is None else one(sampling if isinstance(sampling, str) else json.dumps(sampling))
    return parse_convention(
        Words(), one(text), sampling=raw, request_parameters=parameters, limits=Limits(max_new_tokens=64), **inputs
    )


def test_defaults_follow_the_vllm_backend():
    got = parse()
    assert got.parsed.max_tokens == DEFAULT_MAX_TOKENS and got.parsed.temperature == 0.0
    assert not got.stream and got.echo == "Hello there", "not streaming: the prompt is in the output unless excluded"
    streamed = parse(stream=one(True), exclude_input_in_output=None)
    assert streamed.stream and streamed.echo == ""


def test_numbers_and_flags_come_as_json_values_or_strings():
    as_strings = parse({"max_tokens": "12", "temperature": "0.5", "ignore_eos": "true", "stop": ["."]})
    as_values = parse({"max_tokens": 12, "temperature": 0.5, "ignore_eos": True, "stop": "."})
    for got in (as_strings, as_values):
        assert (got.parsed.max_tokens, got.parsed.temperature, got.parsed.stop) == (12, 0.5, ".")
        assert got.parsed.stop_ids == frozenset(), "ignore_eos: only max_tokens or the stop string ends it"


def test_without_the_tensor_the_requests_parameters_are_read_and_tritons_own_ignored():
    got = parse(parameters=json.dumps({"max_tokens": 5, "triton_enable_empty_final_response": True}))
    assert got.parsed.max_tokens == 5


@pytest.mark.parametrize(
    ("sampling", "inputs", "message"),
    [
        ("{max", {}, "sampling_parameters is not JSON: Expecting property name"),
        ("[1]", {}, "sampling_parameters must be a JSON object, got list"),
        (
            {"guided_decoding": "{}"},
            {},
            "sampling_parameters: 'guided_decoding' not applied by this model; its keys are",
        ),
        ({"max_tokens": "lots"}, {}, "sampling_parameters: max_tokens must be a number, got 'lots'"),
        ({"max_tokens": 2.5}, {}, "max_tokens must be integer >= 1"),
        ({"max_tokens": 0}, {}, "max_tokens must be at least 1, got 0"),
        ({"max_tokens": 65}, {}, "max_tokens 65 is over the limit of 64 (MAX_NEW_TOKENS)"),
        ({"temperature": -1}, {}, "temperature must be a finite number >= 0"),
        ({"stop": ["a", "b"]}, {}, "stop must be a string, or a list of at most one string"),
        ({"chat": "maybe"}, {}, "sampling_parameters: chat must be true or false, got 'maybe'"),
        ({"chat": True}, {}, "chat is true but this model has no chat template"),
        (None, {"stream": one(True), "exclude_input_in_output": one(False)}, "not allowed with stream true"),
        (None, {"stream": one(1, np.int32)}, "stream must be one BOOL"),
    ],
)
def test_each_bad_value_is_one_error_naming_the_field(sampling, inputs, message):
    with pytest.raises(GenerationInputError) as error:
        parse(sampling, **inputs)
    assert message in str(error.value)


def test_an_empty_or_missing_text_input_is_named():
    with pytest.raises(GenerationInputError, match="text_input is empty"):
        parse(text="  ")
    with pytest.raises(GenerationInputError, match="text_input is missing"):
        parse_convention(Words(), None)


def test_min_tokens_holds_the_end_of_sequence_back_and_must_fit_max_tokens():
    assert parse({"max_tokens": "8", "min_tokens": "8"}).parsed.min_tokens == 8  # GenAI-Perf's deterministic length
    with pytest.raises(GenerationInputError, match=r"min_tokens must be from 0 to max_tokens \(8\), got 9"):
        parse({"max_tokens": 8, "min_tokens": 9})


def test_keys_the_model_does_not_apply_pass_only_at_the_value_that_changes_nothing():
    openai_defaults = {"n": 1, "top_p": 1, "frequency_penalty": 0, "presence_penalty": 0, "logprobs": False}
    assert parse({**openai_defaults, "temperature": 1, "max_tokens": 4}).parsed.temperature == 1.0
    assert parse({"top_k": "-1", "repetition_penalty": "1.0"}).parsed.max_tokens == DEFAULT_MAX_TOKENS
    with pytest.raises(GenerationInputError, match="top_p 0.9 is not applied by this model; only 1, which changes"):
        parse({"top_p": 0.9})
    with pytest.raises(GenerationInputError, match="n 2 is not applied"):
        parse({"n": 2})


# What Triton's OpenAI-compatible frontend (server r25.10, python/openai, `--backend vllm`) sends for a chat and a
# completion request that set only the model and the messages or prompt: its pydantic defaults, minus the
# fields it excludes, plus max_tokens (its --default-max-tokens, 16) and the two usage flags.
FRONTEND_CHAT = {"frequency_penalty": 0, "ignore_eos": False, "logprobs": False, "n": 1, "presence_penalty": 0}
FRONTEND_CHAT |= {"temperature": 0.7, "top_p": 1, "max_tokens": 16}
FRONTEND_COMPLETION = {"best_of": 1, "frequency_penalty": 0, "ignore_eos": False, "n": 1, "presence_penalty": 0}
FRONTEND_COMPLETION |= {"temperature": 1, "top_p": 1, "max_tokens": 16}
USAGE_FLAGS = {"return_num_input_tokens": one(True), "return_num_output_tokens": one(True)}


@pytest.mark.parametrize("sampling", [FRONTEND_CHAT, FRONTEND_COMPLETION], ids=["chat", "completion"])
def test_the_openai_frontends_default_request_is_taken_with_its_usage_flags(sampling):
    got = parse(sampling, stream=one(True), exclude_input_in_output=one(True), flags=USAGE_FLAGS)
    assert got.returns == {"num_input_tokens", "num_output_tokens"}
    assert (got.parsed.max_tokens, got.stream, got.echo) == (16, True, "")


def test_return_flags_ask_for_their_outputs_and_logprobs_only_at_false():
    assert parse().returns == frozenset(), "no flag: only the text"
    got = parse(flags={"return_finish_reason": one(True), "return_num_input_tokens": one(False)})
    assert got.returns == {"finish_reason"}
    assert parse(flags={"return_logprobs": one(False)}).returns == frozenset()
    with pytest.raises(GenerationInputError, match="return_logprobs true is not supported: this model returns no"):
        parse(flags={"return_logprobs": one(True)})
    with pytest.raises(GenerationInputError, match="return_num_output_tokens must be one BOOL"):
        parse(flags={"return_num_output_tokens": one(1, np.int32)})
