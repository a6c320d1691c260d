"""text_generator: decoupled streaming generation over gRPC and HTTP ``generate_stream``.

The session's ``tiny_generator`` server (tests/functional/conftest.py, shared with test_chat.py) serves a
temporary repository: the tiny random-weight steps (``smollm2_tiny_prefill`` / ``smollm2_tiny_decode``,
exported through the export pipeline) and the committed ``model_repository/text_generator`` pointed at them,
so these tests run in seconds. The last test uses the session server and the real SmolLM2-135M.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

import tritonkit_cli
from backends.generation import GenerationInputError, Limits, StopMatcher, TokenBytes, TokenStreamer, parse_request
from export.zoo import smollm
from loadtest.studies.aiperf import command as aiperf
from loadtest.studies.genai_perf import command as genai_perf
from tests.generation_helpers import (
    TINY_MAX_NEW_TOKENS,
    GrpcStream,
    grpc_generate,
    http_generate,
    http_generate_once,
)

MAX_NEW_TOKENS = TINY_MAX_NEW_TOKENS


@pytest.fixture
def gen_server(tiny_generator):
    """The session's server of the tiny steps (tests/functional/conftest.py)."""
    return tiny_generator


@pytest.fixture(scope="module")
def tiny_reference():
    """Greedy text of the tiny model, computed in this process with the eager steps."""
    llama = smollm.load_llama(tiny=True)
    prefill, decode = smollm.Prefill(llama), smollm.Decode(llama)

    def reference(prompt: str, tokens: int) -> str:
        ids = smollm.greedy(prefill, decode, *smollm.encode_batch([prompt]), max_new_tokens=tokens)[0]
        cut = next((i for i, t in enumerate(ids) if t in (0, 2)), len(ids))
        return smollm.tokenizer().decode(ids[:cut])

    return reference


# -- clients -------------------------------------------------------------------------------------------
def generate(server, protocol, prompt, max_tokens, model="text_generator", **kwargs):
    if protocol == "grpc":
        pieces, error = grpc_generate(server, prompt, max_tokens, model, **kwargs)
        assert error is None, error
        return pieces
    payload = {"PROMPT": prompt, "MAX_TOKENS": max_tokens}
    payload.update({k.upper(): v for k, v in kwargs.items() if v is not None})
    status, pieces, error = http_generate(server, payload, model)
    assert status == 200 and error is None, (status, error)
    return pieces


def server_ready(server) -> bool:
    return requests.get(f"http://{server.config.http_url}/v2/health/ready", timeout=5).status_code == 200


# -- behaviour ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["text_generator", "text_generator_bls"])
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_greedy_stream_equals_the_in_process_reference(gen_server, tiny_reference, protocol, model):
    """Both step modes: the steps' TorchScript in the generator's process, and a BLS request per step."""
    for prompt in smollm.PROMPTS[:3]:
        pieces = generate(gen_server, protocol, prompt, 12, model)
        assert len(pieces) > 1, "the text did not come as a stream of pieces"
        assert "".join(pieces) == tiny_reference(prompt, 12)


@pytest.mark.parametrize("model", ["text_generator", "text_generator_bls"])
def test_concurrent_streams_share_decode_steps_and_each_gets_its_own_text(gen_server, tiny_reference, model):
    """Streams that arrive together are prefilled and decoded as one batch (padding, merging, retiring
    rows of different lengths), in both step modes; each stream's text is what it gets alone."""
    prompts = [smollm.PROMPTS[i % len(smollm.PROMPTS)] for i in range(6)]
    lengths = [3, 12, 7, 12, 1, 9]
    results: dict[int, list[str]] = {}

    def one(i):
        results[i] = generate(gen_server, "grpc", prompts[i], lengths[i], model)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for i, prompt in enumerate(prompts):
        assert "".join(results[i]) == tiny_reference(prompt, lengths[i]), (i, prompt)
    steps = [line for line in gen_server.log_text().splitlines() if f'"{model}: ' in line and "decode steps" in line]
    assert steps, "the generator logged no batch run"


def test_the_generator_is_warm_before_it_reports_ready(gen_server):
    """WARMUP true (the committed default): prefill and decode ran while loading, once, inside the instance's
    initialize (which returns before Triton calls the model loaded). The stub's log lines reach Triton's log
    through the backend's log thread, so the warmup line can land a few lines after 'successfully loaded' (one
    CI run saw it 79 bytes later): its place is judged against the start of the instance's initialize."""
    log = gen_server.log_text()
    initializing = log.find("TRITONBACKEND_ModelInstanceInitialize: text_generator_0_0 ")
    warmed = log.find('"text_generator: warmed up in ')
    assert 0 <= initializing < warmed, "no warmup logged after the instance's initialize began"
    assert log.count('"text_generator: warmed up in ') == 1, "warmed up more than once: not while loading alone"
    assert "successfully loaded 'text_generator'" in log
    line = log[warmed : log.index("\n", warmed)]
    assert "decode at batch [1, 2, 4, 8, 16, 32]" in line, line
    # In BLS mode Triton refuses requests from initialize: the generator says so instead of warming.
    assert "text_generator_bls: no warmup with STEP_MODE bls" in log


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_max_tokens_and_stop_are_honoured(gen_server, tiny_reference, protocol):
    prompt = smollm.PROMPTS[2]
    assert "".join(generate(gen_server, protocol, prompt, 3)) == tiny_reference(prompt, 3)
    full = tiny_reference(prompt, 12)
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    expected = full[: full.find(stop)]
    assert len(expected) < len(full)
    assert "".join(generate(gen_server, protocol, prompt, 12, stop=stop)) == expected


def test_a_temperature_samples_away_from_the_greedy_text_and_0_is_greedy(gen_server, tiny_reference):
    """At TEMPERATURE 2 the tiny model's likeliest next token has about 12 % (measured): 12 sampled tokens
    equal to the greedy ones, or two runs alike, would take odds under 1e-9. A server that ignored the
    temperature would send the greedy text each time."""
    prompt = smollm.PROMPTS[0]
    greedy = tiny_reference(prompt, 12)
    assert "".join(generate(gen_server, "grpc", prompt, 12, temperature=0.0)) == greedy
    sampled = ["".join(generate(gen_server, protocol, prompt, 12, temperature=2.0)) for protocol in ("grpc", "http")]
    sampled.append("".join(generate(gen_server, "grpc", prompt, 12, temperature=2.0)))
    assert all(text != greedy for text in sampled), (greedy, sampled)
    assert len(set(sampled)) == len(sampled), sampled


def test_a_new_stream_joins_the_running_batch(gen_server):
    """B arrives while A is generating 1000 tokens; B's tokens and final flag come before A ends."""
    a, b = GrpcStream(gen_server.config.grpc_url), GrpcStream(gen_server.config.grpc_url)
    try:
        a.send(smollm.PROMPTS[0], 1000)
        a.events.get(timeout=60)  # A is generating
        b.send(smollm.PROMPTS[1], 5)
        b_pieces, b_error = b.collect()
        with a.events.mutex:  # A's responses so far, when B's final one has come
            a_before_b_ended = list(a.events.queue)
        a_pieces, a_error = a.collect(timeout=120)
        assert a_error is None and b_error is None
        assert not any(final for _, _, final, _ in a_before_b_ended), "B waited for A to finish: no in-flight batching"
        a_after_b_ended = len(a_pieces) - sum(text is not None for _, text, _, _ in a_before_b_ended)
        print(f"\nB ended with {len(a_before_b_ended)} of A's responses queued; A then streamed {a_after_b_ended} more")
        assert a_after_b_ended > 0, "A did not go on generating after B ended"
        assert len(b_pieces) >= 1 and len(a_pieces) > 50
    finally:
        a.close()
        b.close()


def test_a_cancelled_grpc_stream_stops_generating(gen_server):
    before = len(cancellations(gen_server))
    stream = GrpcStream(gen_server.config.grpc_url)
    stream.send(smollm.PROMPTS[0], MAX_NEW_TOKENS)
    for _ in range(3):
        stream.events.get(timeout=60)
    stream.close(cancel=True)
    deadline = time.monotonic() + 20
    while len(cancellations(gen_server)) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    found = cancellations(gen_server)[before:]
    assert found, "the generator did not notice the cancellation"
    assert found[0] < MAX_NEW_TOKENS
    assert "".join(generate(gen_server, "grpc", smollm.PROMPTS[1], 4))  # and it still serves


def cancellations(server) -> list[int]:
    marker = "text_generator: request cancelled after "
    return [int(line.split(marker)[1].split()[0]) for line in server.log_text().splitlines() if marker in line]


def test_closing_the_http_connection_stops_generating(gen_server):
    before = len(cancellations(gen_server))
    url = f"http://{gen_server.config.http_url}/v2/models/text_generator/generate_stream"
    response = requests.post(
        url, json={"PROMPT": smollm.PROMPTS[0], "MAX_TOKENS": MAX_NEW_TOKENS}, stream=True, timeout=60
    )
    events = (line for line in response.iter_lines() if line.startswith(b"data: "))
    for _ in range(3):
        next(events)
    response.close()
    deadline = time.monotonic() + 20
    while len(cancellations(gen_server)) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    found = cancellations(gen_server)[before:]
    assert found, "the generator did not notice the closed connection"
    assert found[0] < MAX_NEW_TOKENS
    assert generate(gen_server, "http", "Hello", 2) and server_ready(gen_server)


def generator_metrics(server, model="text_generator") -> dict[tuple[str, str], float]:
    """The generator's samples on Triton's metrics port for one model, {(sample name, le or ""): value}."""
    text = requests.get(server.config.metrics_url, timeout=10).text
    return {
        (sample.name, sample.labels.get("le", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("tritonkit_generator_") and sample.labels.get("model") == model
    }


def test_the_generator_exports_waiting_and_running_streams_ttft_and_tokens(gen_server):
    """Its own metrics, since Triton's queue time cannot see streams that wait inside a decoupled model."""
    before = generator_metrics(gen_server)
    pieces = generate(gen_server, "grpc", smollm.PROMPTS[0], 8)
    # The loop publishes once it is idle, just after the final response: wait for that.
    deadline = time.monotonic() + 10
    while True:
        after = generator_metrics(gen_server)
        grew = {name: after[name] - before.get(name, 0) for name in after}
        if grew.get(("tritonkit_generator_ttft_seconds_count", ""), 0) >= 1 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    print(f"\nmetrics after one stream of {len(pieces)} pieces: {sorted(after.items())}")
    assert after[("tritonkit_generator_streams_waiting", "")] == 0
    assert after[("tritonkit_generator_streams_running", "")] == 0
    # Every piece is one token's text; an end token or an incomplete character sends none.
    assert len(pieces) <= grew[("tritonkit_generator_tokens_total", "")] <= 8
    assert grew[("tritonkit_generator_ttft_seconds_count", "")] == 1
    assert grew[("tritonkit_generator_ttft_seconds_bucket", "+Inf")] == 1
    assert 0 < grew[("tritonkit_generator_ttft_seconds_sum", "")] < 30


# -- bad input -----------------------------------------------------------------------------------------
BAD_HTTP = {
    "empty prompt": ({"PROMPT": "", "MAX_TOKENS": 4}, "PROMPT is empty"),
    "prompt over the token limit": ({"PROMPT": "word " * 5000, "MAX_TOKENS": 4}, "PROMPT is too long"),
    "MAX_TOKENS of 0": ({"PROMPT": "Hello", "MAX_TOKENS": 0}, "MAX_TOKENS must be at least 1"),
    "MAX_TOKENS over the limit": ({"PROMPT": "Hello", "MAX_TOKENS": MAX_NEW_TOKENS + 1}, "MAX_TOKENS 4097 is over"),
    "negative temperature": ({"PROMPT": "Hello", "MAX_TOKENS": 4, "TEMPERATURE": -0.5}, "TEMPERATURE must be"),
}


@pytest.mark.parametrize("case", sorted(BAD_HTTP))
def test_bad_input_over_http_is_a_400_naming_the_problem(gen_server, case):
    payload, message = BAD_HTTP[case]
    status, pieces, error = http_generate(gen_server, payload)
    assert status == 400 and message in (error or ""), (status, error)
    assert not pieces
    assert generate(gen_server, "http", "Hello", 2) and server_ready(gen_server)


BAD_GRPC = {
    "empty prompt": ((b"", 4), {}, "PROMPT is empty"),
    "prompt over the token limit": ((b"word " * 100, 4), {}, "PROMPT is too long: 101 tokens, the limit is 64"),
    "non-UTF-8 bytes": ((b"caf\xe9 \xff", 4), {}, "PROMPT is not valid UTF-8"),
    "MAX_TOKENS of 0": ((b"Hello", 0), {}, "MAX_TOKENS must be at least 1"),
    "MAX_TOKENS over the limit": ((b"Hello", 100000), {}, "over the limit"),
    "negative temperature": ((b"Hello", 4), {"temperature": -1.0}, "TEMPERATURE must be"),
}


def test_bad_input_over_grpc_fails_that_request_alone(gen_server):
    """Bad requests on one stream, between good ones: each gets its own error; the good ones their text.

    On a gRPC stream Triton 2.51 sends a per-request error as the stream message's ``error_message``
    (the stream itself stays open and OK), so what the client sees is the message, not a status code.
    """
    stream = GrpcStream(gen_server.config.grpc_url)
    try:
        for case, ((prompt, max_tokens), kwargs, message) in BAD_GRPC.items():
            stream.send(prompt, max_tokens, **kwargs)
            pieces, error = stream.collect()
            assert error is not None and message in error.message(), (case, error)
            stream.send("Hello", 2)
            pieces, error = stream.collect()
            assert error is None and pieces, case
    finally:
        stream.close()
    assert server_ready(gen_server)


# -- the LLM convention (vLLM backend's tensors; backends/llm_request.py) ----------------------------------
def test_the_convention_streams_over_grpc_what_the_own_names_stream(gen_server, tiny_reference):
    """text_input + stream true + sampling_parameters (max_tokens as GenAI-Perf sends it, a string): the same
    greedy pieces as PROMPT/MAX_TOKENS give; stream false: one response with the whole text."""
    prompt = smollm.PROMPTS[0]
    own = generate(gen_server, "grpc", prompt, 12)
    stream = GrpcStream(gen_server.config.grpc_url)
    try:
        stream.send_convention({"text_input": prompt, "stream": True, "sampling_parameters": {"max_tokens": "12"}})
        pieces, error = stream.collect()
        assert error is None and pieces == own and "".join(pieces) == tiny_reference(prompt, 12)
        stream.send_convention({"text_input": prompt, "sampling_parameters": {"max_tokens": 12, "temperature": 0}})
        whole, error = stream.collect()
        # stream false: one response with the whole text, the prompt first unless excluded (as in vLLM)
        assert error is None and whole == [prompt + "".join(own)], whole
    finally:
        stream.close()


def test_the_generate_endpoint_takes_the_conventions_json(gen_server, tiny_reference):
    prompt = smollm.PROMPTS[1]
    expected = tiny_reference(prompt, 8)
    # non-streaming includes the prompt unless told otherwise, as the vLLM backend does
    status, body = http_generate_once(gen_server, {"text_input": prompt, "max_tokens": 8})
    assert status == 200 and body["text_output"] == prompt + expected, body
    payload = {"text_input": prompt, "exclude_input_in_output": True, "parameters": {"max_tokens": "8"}}
    status, body = http_generate_once(gen_server, payload)
    assert status == 200 and body["text_output"] == expected, body
    payload = {"text_input": prompt, "stream": True, "sampling_parameters": json.dumps({"max_tokens": 8})}
    status, pieces, error = http_generate(gen_server, payload)
    assert status == 200 and error is None and len(pieces) > 1 and "".join(pieces) == expected


def test_genai_perf_drives_the_generator_and_reports_ttft_and_itl(gen_server, tmp_path):
    """NVIDIA's GenAI-Perf (its own venv, the project's perf_analyzer) through `tritonkit genai-perf`, briefly."""
    c = gen_server.config
    urls = ["--http-url", c.http_url, "--grpc-url", c.grpc_url, "--metrics-url", c.metrics_url]
    argv = ["--requests", "4", "--input-tokens", "16", "--output-tokens", "8", "--out", str(tmp_path)]
    status = genai_perf._handler(
        tritonkit_cli.build_parser().parse_args(["genai-perf", *argv, "--repository", str(c.model_repository), *urls])
    )
    assert status == 0
    found = genai_perf.figures(tmp_path)
    for name in ("time_to_first_token", "inter_token_latency"):
        assert found[name]["avg"] > 0 and found[name]["unit"] == "ms", found
    assert found["output_token_throughput"]["avg"] > 0, found
    export = next(tmp_path.glob("artifacts/*/profile_export_genai_perf.json"))
    assert json.loads(export.read_text())["output_sequence_length"]["avg"] == 8, "min_tokens = max_tokens"


def run_aiperf(server, out, *argv: str) -> tuple[int, dict]:
    """`tritonkit aiperf` against ``server`` by its URLs: its exit status and its results.json."""
    c = server.config
    urls = ["--http-url", c.http_url, "--grpc-url", c.grpc_url, "--metrics-url", c.metrics_url]
    args = ["aiperf", *argv, "--out", str(out), "--repository", str(c.model_repository), *urls]
    left_before = set(Path(tempfile.gettempdir()).glob("*aiperf*"))
    status = aiperf._handler(tritonkit_cli.build_parser().parse_args(args))
    left = set(Path(tempfile.gettempdir()).glob("*aiperf*")) - left_before
    assert not left, f"AIPerf's files were left in the temp folder: {sorted(left)}"
    results = out / "results.json"
    return status, json.loads(results.read_text()) if results.is_file() else {}


def test_aiperf_streams_from_the_generator_over_http_and_every_answer_has_the_asked_length(gen_server, tmp_path):
    """NVIDIA AIPerf (its own venv) through `tritonkit aiperf`: generate_stream, briefly."""
    budgets = ["--slo-ttft-ms", "60000", "--slo-itl-ms", "10000"]
    argv = ["--requests", "8", "--concurrency", "2", "--input-tokens", "16", "--output-tokens", "8", *budgets]
    status, data = run_aiperf(gen_server, tmp_path, *argv)
    assert status == 0, (tmp_path / "aiperf.log").read_text()[-2000:]
    found = data["aiperf"]
    for name in ("time_to_first_token", "inter_token_latency"):
        assert found[name]["avg"] > 0 and found[name]["unit"] == "ms", found[name]
    assert found["output_token_throughput"]["avg"] > 0 and found["request_count"]["avg"] == 8
    assert data["lengths"] == {"checked": True, "asked": 8, "answers": 8, "by_length": {"8": 8}, "ok": True}
    assert found["good_request_count"]["avg"] == 8, "every request is within budgets this wide"
    assert data["server"]["requests"] == 8 and data["server"]["failures"] == 0, "Triton counted the same requests"
    assert "every answer had the 8 tokens asked" in (tmp_path / "summary.md").read_text()


def test_aiperf_drives_the_embedder_through_infer(server, tmp_path):
    """The session server (the whole repository): text_embedder's infer endpoint, its embedding read back."""
    status, data = run_aiperf(server, tmp_path, "--model", "text_embedder", "--requests", "8", "--input-tokens", "16")
    assert status == 0, (tmp_path / "aiperf.log").read_text()[-2000:]
    assert data["endpoint"] == "/v2/models/text_embedder/infer" and not data["streaming"]
    assert data["aiperf"]["request_count"]["avg"] == 8 and data["aiperf"]["request_error_rate"]["avg"] == 0
    assert data["aiperf"]["request_latency"]["avg"] > 0
    assert data["server"]["requests"] == 8 and data["server"]["failures"] == 0


BAD_CONVENTION = {
    "missing text_input": ({"sampling_parameters": {"max_tokens": 4}}, "text_input is missing"),
    "empty text_input": ({"text_input": " "}, "text_input is empty"),
    "sampling_parameters not JSON": (
        {"text_input": "Hi", "sampling_parameters": "{max"},
        "sampling_parameters is not JSON",
    ),
    "an unknown key": ({"text_input": "Hi", "sampling_parameters": {"seed": 5}}, "'seed' not applied by this model"),
    "a key the model does not apply": (
        {"text_input": "Hi", "sampling_parameters": {"top_k": 5}},
        "top_k 5 is not applied by this model",
    ),
    "max_tokens of the wrong type": (
        {"text_input": "Hi", "sampling_parameters": {"max_tokens": "many"}},
        "max_tokens must be a number, got 'many'",
    ),
    "max_tokens out of range": (
        {"text_input": "Hi", "sampling_parameters": {"max_tokens": MAX_NEW_TOKENS + 1}},
        "max_tokens 4097 is over the limit of 4096",
    ),
    "streaming with the prompt in": (
        {"text_input": "Hi", "stream": True, "exclude_input_in_output": False},
        "exclude_input_in_output false is not allowed with stream true",
    ),
    "both naming sets": ({"text_input": "Hi", "PROMPT": "Hi"}, "not both"),
}


def test_bad_convention_input_is_invalid_argument_naming_the_field_over_both_protocols(gen_server):
    stream = GrpcStream(gen_server.config.grpc_url)
    try:
        for case, (inputs, message) in BAD_CONVENTION.items():
            stream.send_convention(inputs)
            pieces, error = stream.collect()
            assert error is not None and message in error.message() and not pieces, (case, error)
            payload = {k: json.dumps(v) if isinstance(v, dict) else v for k, v in inputs.items()}
            status, body = http_generate_once(gen_server, payload)
            assert status == 400 and message in body.get("error", ""), (case, status, body)
        stream.send_convention({"text_input": "Hello", "stream": True, "sampling_parameters": {"max_tokens": 2}})
        pieces, error = stream.collect()
        assert error is None and pieces, "the generator stopped serving after bad requests"
    finally:
        stream.close()
    assert server_ready(gen_server)


# -- the helpers, fuzzed -----------------------------------------------------------------------------
def test_the_openai_frontends_request_gets_its_usage_counts_over_grpc(gen_server):
    """The tensors Triton's OpenAI-compatible frontend sends (server r25.10, python/openai, --backend vllm):
    text_input, stream, exclude_input_in_output, sampling_parameters with the OpenAI defaults, and the two usage
    flags. Every response carries the prompt's token count; the streamed responses' num_output_tokens add up to
    the tokens generated (the frontend sums them into usage.completion_tokens); the reason ends the stream."""
    prompt = smollm.PROMPTS[0]
    prompt_tokens = len(smollm.tokenizer().encode(prompt).ids)
    sampling = {"frequency_penalty": 0, "ignore_eos": True, "logprobs": False, "n": 1, "presence_penalty": 0}
    sampling |= {"temperature": 0, "top_p": 1, "max_tokens": 12}
    flags = {"return_num_input_tokens": True, "return_num_output_tokens": True, "return_finish_reason": True}
    for streaming in (True, False):
        stream = GrpcStream(gen_server.config.grpc_url)
        try:
            request = {"text_input": prompt, "stream": streaming, "exclude_input_in_output": True}
            stream.send_convention({**request, "sampling_parameters": sampling, **flags})
            pieces, error = stream.collect()
            results = [stream.results.get(timeout=5) for _ in range(stream.results.qsize())]
        finally:
            stream.close()
        assert error is None and pieces, (error, pieces)  # the text itself: the tests above
        counts = [r.as_numpy("num_input_tokens") for r in results if r.as_numpy("num_input_tokens") is not None]
        assert len(counts) == len(results) and all(c.tolist() == [prompt_tokens] for c in counts), counts
        assert sum(int(r.as_numpy("num_output_tokens")[0]) for r in results) == 12, "ignore_eos: all 12 counted"
        reasons = [r.as_numpy("finish_reason") for r in results]
        assert [x.tolist() for x in reasons if x is not None] == [[b"length"]], "once, in the last response"
        assert reasons[-1] is not None
        assert streaming or len(results) == 1, "stream false: one response, the whole text and its counts"


def test_the_usage_counts_come_through_the_generate_endpoint_and_logprobs_are_refused(gen_server):
    payload = {"text_input": smollm.PROMPTS[1], "max_tokens": 5, "ignore_eos": True, "return_num_output_tokens": True}
    status, body = http_generate_once(gen_server, payload)
    assert status == 200 and body["num_output_tokens"] == 5 and "num_input_tokens" not in body, body
    status, body = http_generate_once(gen_server, {"text_input": "Hi", "return_logprobs": True})
    assert status == 400 and "return_logprobs true is not supported" in body["error"], body
    assert server_ready(gen_server)


@pytest.fixture(scope="module")
def token_bytes():
    return TokenBytes(smollm.tokenizer())


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(st.binary(max_size=300), st.integers(-5, 10_000))
def test_parse_request_takes_any_bytes_without_crashing(raw, max_tokens):
    try:
        parsed = parse_request(
            smollm.tokenizer(),
            np.array([raw], dtype=np.object_),
            np.array([max_tokens]),
            limits=Limits(max_prompt_tokens=64, max_new_tokens=512),
        )
    except GenerationInputError as exc:
        assert str(exc)
    else:
        assert 1 <= len(parsed.prompt_ids) <= 64 and 1 <= parsed.max_tokens <= 512


@FUZZ
@given(st.text(max_size=200))
def test_streaming_decode_of_any_text_is_the_text(token_bytes, text):
    ids = smollm.tokenizer().encode(text).ids
    streamer = TokenStreamer(token_bytes)
    pieces = [streamer.push(i) for i in ids] + [streamer.flush()]
    decoded = smollm.tokenizer().decode(ids)
    assert "".join(pieces) == decoded
    if decoded == text:  # the vocabulary lacks a few bytes: characters made of them do not survive encoding
        assert all("\ufffd" not in p for p in pieces) or "\ufffd" in text


@FUZZ
@given(st.lists(st.integers(-10, 60_000), max_size=100))
def test_streaming_decode_of_any_token_ids_is_their_bytes_decoded_at_once(token_bytes, ids):
    """Never fails, never splits a character: the pieces are the tokens' bytes decoded in one go (ids out of
    the vocabulary stand for nothing, an invalid sequence becomes U+FFFD)."""
    streamer = TokenStreamer(token_bytes)
    text = "".join(streamer.push(i) for i in ids) + streamer.flush()
    assert text == b"".join(token_bytes(i) for i in ids).decode("utf-8", errors="replace")


@FUZZ
@given(st.lists(st.text(max_size=8), max_size=20), st.text(min_size=1, max_size=4))
def test_stop_matcher_cuts_before_the_first_stop(pieces, stop):
    matcher = StopMatcher(stop)
    out = "".join(matcher.push(p) for p in pieces) + matcher.flush()
    full = "".join(pieces)
    assert out == (full[: full.find(stop)] if stop in full else full)


# -- the real model --------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_real_smollm2_says_paris(server, protocol):
    text = "".join(generate(server, protocol, "The capital of France is", 4))
    assert text.strip().startswith("Paris"), text
