"""Clients and configs for the ``text_generator`` model, shared by test_text_generator.py and test_chat.py:
the committed generator's config pointed at other step models, a gRPC bidirectional stream that records each
response, and ``generate_stream`` over HTTP."""

from __future__ import annotations

import json
import queue
import time
from pathlib import Path

import numpy as np
import requests
import tritonclient.grpc as grpcclient

GENERATOR = Path(__file__).resolve().parents[1] / "model_repository" / "text_generator"
"""The committed generator, copied into the tests' own repositories."""


def generator_config(name: str, prefill: str, decode: str, **params: str) -> str:
    text = (GENERATOR / "config.pbtxt").read_text().replace('name: "text_generator"', f'name: "{name}"')
    text = text.replace('"smollm2_prefill"', f'"{prefill}"').replace('"smollm2_decode"', f'"{decode}"')
    for key, value in params.items():
        start = text.index(f'key: "{key}"')
        old = text[start : text.index("}", start)]
        text = text.replace(old, old[: old.index("string_value:")] + f'string_value: "{value}" ')
    return text


def grpc_inputs(prompt, max_tokens, temperature=None, stop=None):
    values = [
        ("PROMPT", np.array([prompt.encode() if isinstance(prompt, str) else prompt], dtype=np.object_), "BYTES"),
        ("MAX_TOKENS", np.array([max_tokens], dtype=np.int32), "INT32"),
    ]
    if temperature is not None:
        values.append(("TEMPERATURE", np.array([temperature], dtype=np.float32), "FP32"))
    if stop is not None:
        values.append(("STOP", np.array([stop.encode()], dtype=np.object_), "BYTES"))
    inputs = []
    for name, array, datatype in values:
        tensor = grpcclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


class GrpcStream:
    """One gRPC bidirectional stream; each event is (seconds since start, text | None, final, error)."""

    def __init__(self, url: str, model: str = "text_generator"):
        self.client = grpcclient.InferenceServerClient(url)
        self.model = model
        self.events: queue.Queue = queue.Queue()
        self.results: queue.Queue = queue.Queue()  # each response whole, for its other outputs
        self.started = time.perf_counter()
        self.client.start_stream(callback=self._on_response)

    def _on_response(self, result, error):
        now = time.perf_counter() - self.started
        if error is not None:
            self.events.put((now, None, True, error))
            return
        response = result.get_response()
        # TEXT for the model's own names, text_output for the LLM convention; a final response may carry only
        # the token counts a request asked for (return_num_output_tokens)
        names = {out.name for out in response.outputs} & {"TEXT", "text_output"}
        text = result.as_numpy(names.pop()).reshape(-1)[0].decode() if names else None
        self.events.put((now, text, response.parameters["triton_final_response"].bool_param, None))
        self.results.put(result)

    def send(self, prompt, max_tokens, **kwargs):
        self.client.async_stream_infer(
            self.model, grpc_inputs(prompt, max_tokens, **kwargs), enable_empty_final_response=True
        )

    def send_convention(self, inputs: dict):
        """The LLM convention's tensors: ``text_input``, ``stream``, ``sampling_parameters`` (a dict is sent as
        JSON), ``exclude_input_in_output``; ``PROMPT`` and the other own names too, to mix them."""
        tensors = []
        for name, value in inputs.items():
            if isinstance(value, dict):
                value = json.dumps(value)
            if isinstance(value, bool):
                array, datatype = np.array([value], dtype=bool), "BOOL"
            elif isinstance(value, int):
                array, datatype = np.array([value], dtype=np.int32), "INT32"
            else:
                array, datatype = np.array([value.encode() if isinstance(value, str) else value], np.object_), "BYTES"
            tensor = grpcclient.InferInput(name, [1], datatype)
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        self.client.async_stream_infer(self.model, tensors, enable_empty_final_response=True)

    def collect(self, timeout=60.0):
        pieces = []
        while True:
            at, text, final, error = self.events.get(timeout=timeout)
            if error is not None:
                return pieces, error
            if text is not None:
                pieces.append(text)
            if final:
                return pieces, None

    def close(self, cancel=False):
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def grpc_generate(server, prompt, max_tokens, model="text_generator", **kwargs):
    stream = GrpcStream(server.config.grpc_url, model)
    try:
        stream.send(prompt, max_tokens, **kwargs)
        return stream.collect()
    finally:
        stream.close()


def http_generate(server, payload: dict, model: str = "text_generator"):
    """POST generate_stream; (status, pieces, error text) from the server-sent events."""
    url = f"http://{server.config.http_url}/v2/models/{model}/generate_stream"
    with requests.post(url, json=payload, stream=True, timeout=120) as response:
        pieces, error = [], None
        for line in response.iter_lines():
            if not line.startswith(b"data: "):
                continue
            event = json.loads(line[len(b"data: ") :])
            if "error" in event:
                error = event["error"]
            elif "TEXT" in event or "text_output" in event:
                pieces.append(event.get("TEXT", event.get("text_output")))
        return response.status_code, pieces, error


def http_generate_once(server, payload: dict, model: str = "text_generator"):
    """POST generate (one JSON response); (status, the response's JSON)."""
    url = f"http://{server.config.http_url}/v2/models/{model}/generate"
    response = requests.post(url, json=payload, timeout=120)
    return response.status_code, response.json()


TINY_MAX_PROMPT_TOKENS = 64
TINY_MAX_NEW_TOKENS = 4096
"""The limits of the tiny repository's ``text_generator`` and ``text_generator_bls``, which the bad-input tests hit."""


def tiny_generator_repository(repo: Path) -> Path:
    """The tiny random-weight steps (``smollm2_tiny_prefill`` / ``smollm2_tiny_decode``, exported through the
    export pipeline) behind three copies of the committed generator: ``text_generator`` (in-process steps,
    the limits above, its chat template), ``text_generator_bls`` (the same with a BLS request per step) and
    ``no_chat`` (the committed parameters, no chat template)."""
    import shutil

    from backends import chat
    from export import catalog, pipeline

    for name in ("smollm2_tiny_prefill", "smollm2_tiny_decode"):
        assert all(done.result.ok for done in pipeline.export_entry(catalog.entry(name), repo))
    limits = {"MAX_PROMPT_TOKENS": str(TINY_MAX_PROMPT_TOKENS), "MAX_NEW_TOKENS": str(TINY_MAX_NEW_TOKENS)}
    generators = {
        "text_generator": {"STEP_MODE": "inprocess", **limits},
        "text_generator_bls": {"STEP_MODE": "bls", **limits},
    }
    for name, params in {**generators, "no_chat": {}}.items():
        shutil.copytree(GENERATOR, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
        config = generator_config(name, "smollm2_tiny_prefill", "smollm2_tiny_decode", **params)
        (repo / name / "config.pbtxt").write_text(config)
    (repo / "no_chat" / "1" / chat.FILE_NAME).unlink()
    return repo
