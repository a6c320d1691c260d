"""text_generator: decoupled streaming generation over the exported prefill and decode steps.

Each request, in the LLM convention of Triton's vLLM backend (``text_input``, ``stream``,
``sampling_parameters``, ...: backends/llm_request.py) or the model's own names (``PROMPT``, ``MAX_TOKENS``,
optional ``TEMPERATURE`` and ``STOP``), is checked and tokenised in ``execute``; a bad one gets its own
INVALID_ARG error and nothing else changes. Good ones join a queue; one background thread keeps a running
batch (in-flight batching, ``backends/inflight.py``): at every step it prefills the requests that arrived
(up to ``MAX_BATCH`` streams and ``MAX_PREFILL_TOKENS`` padded prompt tokens per call), merges them into
the batch's KV caches, runs ONE decode step for all running streams, sends each stream's new text as its
own response (``text_output``, or ``TEXT`` for the own names, BYTES [1], complete UTF-8 characters only;
backends/generator_stream.py) and retires the streams that hit end of sequence, ``STOP``, ``MAX_TOKENS``
or a cancellation; then the final flag goes out.

Optional ``CHAT`` BOOL [1] (default false): true makes ``PROMPT`` a user message, formatted with the
model's own chat template (``chat_template.json`` beside ``tokenizer.json``, written from the GGUF by
``python -m backends.chat``), and the stream then ends at the template's end-of-turn token.

Config parameters: ``PREFILL_MODEL`` / ``DECODE_MODEL`` (the step models, by name, in this
repository), ``STEP_MODE`` (``inprocess``: the steps' TorchScript files run inside this process;
``bls``: each step is a BLS request to the served step model), ``MAX_BATCH``, ``MAX_PREFILL_TOKENS``,
``WARMUP`` (``true``: prefill and decode run at the shapes requests will bring before the model
reports ready; in-process only, as Triton refuses BLS requests before ``initialize`` returns),
``INTRA_OP_THREAD_COUNT`` (torch threads; default: the cores this process may use),
``DISABLE_OPTIMIZED_EXECUTION`` (as the libtorch backend reads it), and the limits
``MAX_PROMPT_BYTES`` (checked before the prompt is decoded or tokenised), ``MAX_PROMPT_TOKENS``,
``MAX_NEW_TOKENS`` and ``MAX_STOP_BYTES`` (see docs/limits.md).

Device: a ``KIND_GPU`` instance runs on ``cuda:<model_instance_device_id>``: in-process, the steps
load there and the KV caches never leave it; with ``bls`` the steps' outputs are asked for in GPU
memory (``preferred_memory``) and passed on through DLPack. docs/gpu.md explains the two modes.

Metrics (Triton's custom metrics API, on the server's metrics port, labelled ``model``): streams waiting
and running, time to first token, tokens generated (``GeneratorMetrics``; docs/production.md).
"""

from __future__ import annotations

import collections
import json
import os
import queue
import threading
import time
from pathlib import Path

import numpy as np
import torch
import triton_python_backend_utils as pb_utils

from backends import chat
from backends.generation import (
    GenerationInputError,
    Limits,
    TokenBytes,
    TokenStreamer,
    choose_tokens,
    parse_request,
)
from backends.generator_stream import Stream
from backends.inflight import RunningBatch, TorchScriptSteps, prefill_group
from backends.llm_request import REFUSED_FLAGS, RETURN_FLAGS, parse_convention

CANCEL_CHECK_S = 0.05
"""How often the running streams are asked whether their client went away (each ask is a round trip
to the server process)."""
WARMUP_PROMPT_LENGTHS = (8, 64, 256)
OWN_INPUTS = ("PROMPT", "MAX_TOKENS", "TEMPERATURE", "STOP", "CHAT")
CONVENTION_INPUTS = (
    *("text_input", "stream", "exclude_input_in_output", "sampling_parameters"),
    *RETURN_FLAGS,
    *REFUSED_FLAGS,
)
# The generator's own metrics: execute returns at once and streams wait inside this model, so Triton's
# queue time cannot see the backlog; the HPA (deploy/k8s) scales on STREAMS_WAITING instead.
STREAMS_WAITING = "tritonkit_generator_streams_waiting"
STREAMS_RUNNING = "tritonkit_generator_streams_running"
TTFT_SECONDS = "tritonkit_generator_ttft_seconds"
TOKENS_TOTAL = "tritonkit_generator_tokens_total"
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
METRICS_EVERY_S = 0.5
"""Each metric update is a round trip to the server process: they are sent at most this often while
streams run (Prometheus scrapes every 10-15 s), and at once when the loop goes idle."""


def flag(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


class BlsSteps:
    """Each step a BLS request to the served step model (tensors cross processes through shared memory,
    or stay in GPU memory when this instance is on a GPU)."""

    OUTPUTS = ["logits", "present_keys", "present_values"]

    def __init__(self, prefill: str, decode: str, device: torch.device):
        self.prefill_model, self.decode_model, self.device = prefill, decode, device
        self.memory = {}
        if device.type == "cuda":
            self.memory["preferred_memory"] = pb_utils.PreferredMemory(
                pb_utils.TRITONSERVER_MEMORY_GPU, device.index or 0
            )

    def _call(self, model, named):
        inputs = [
            pb_utils.Tensor.from_dlpack(name, torch.utils.dlpack.to_dlpack(t.contiguous())) for name, t in named.items()
        ]
        response = pb_utils.InferenceRequest(
            model_name=model, inputs=inputs, requested_output_names=self.OUTPUTS, **self.memory
        ).exec()
        if response.has_error():
            raise RuntimeError(f"{model}: {response.error().message()}")
        return tuple(
            torch.from_dlpack(pb_utils.get_output_tensor_by_name(response, n).to_dlpack()).to(self.device).clone()
            for n in self.OUTPUTS
        )

    def prefill(self, ids, mask):
        return self._call(self.prefill_model, {"input_ids": ids, "attention_mask": mask})

    def decode(self, ids, mask, keys, values):
        return self._call(
            self.decode_model, {"input_ids": ids, "attention_mask": mask, "past_keys": keys, "past_values": values}
        )


class GeneratorMetrics:
    """The loop's figures as Triton custom metrics. Only the loop thread calls this (a ``Metric`` is not
    safe to share between threads). Any failure turns the metrics off with one warning; generation goes on.
    One instance per model: two instances would share these series (same labels) and overwrite the gauges."""

    def __init__(self, model: str):
        self.model, self.on = model, True
        self.shown, self.tokens, self.ttfts, self.sent = (0, 0), 0, [], 0.0
        labels = {"model": model}
        try:
            family = pb_utils.MetricFamily
            self.families = [
                family(name=STREAMS_WAITING, description="Streams received, not yet in the batch", kind=family.GAUGE),
                family(name=STREAMS_RUNNING, description="Streams in the running batch", kind=family.GAUGE),
                family(name=TTFT_SECONDS, description="Request received to first token, s", kind=family.HISTOGRAM),
                family(name=TOKENS_TOTAL, description="Tokens generated", kind=family.COUNTER),
            ]
            self.waiting, self.running = (f.Metric(labels=labels) for f in self.families[:2])
            self.ttft = self.families[2].Metric(labels=labels, buckets=list(TTFT_BUCKETS))
            self.generated = self.families[3].Metric(labels=labels)
        except Exception as exc:  # noqa: BLE001 - a server without the API still generates
            self._off(exc)

    def first_tokens(self, streams) -> None:
        now = time.perf_counter()
        self.ttfts.extend(now - s.arrived for s in streams)
        self.tokens += len(streams)

    def publish(self, waiting: int, running: int) -> None:
        """Send what changed, at most every METRICS_EVERY_S, and at once when nothing waits or runs."""
        if not self.on or ((waiting, running) == self.shown and not self.tokens and not self.ttfts):
            return
        now = time.monotonic()
        if (waiting or running) and now - self.sent < METRICS_EVERY_S:
            return
        try:
            if waiting != self.shown[0]:
                self.waiting.set(waiting)
            if running != self.shown[1]:
                self.running.set(running)
            self.shown = (waiting, running)
            if self.tokens:
                self.generated.increment(self.tokens)
            for ttft in self.ttfts:
                self.ttft.observe(ttft)
        except Exception as exc:  # noqa: BLE001
            self._off(exc)
        self.tokens, self.ttfts, self.sent = 0, [], now

    def _off(self, exc: Exception) -> None:
        self.on = False
        pb_utils.Logger.log_warn(f"{self.model}: metrics off, generation goes on: {exc}")


class TritonPythonModel:
    def initialize(self, args):
        self.config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in self.config.get("parameters", {}).items()}
        self.name = args["model_name"]
        model_dir = Path(args["model_repository"])
        repository = model_dir.parent
        self.prefill_name = params.get("PREFILL_MODEL", "smollm2_prefill")
        self.decode_name = params.get("DECODE_MODEL", "smollm2_decode")
        self.mode = params.get("STEP_MODE", "inprocess")
        try:  # MAX_PROMPT_TOKENS, MAX_NEW_TOKENS, MAX_PROMPT_BYTES, MAX_STOP_BYTES; defaults in backends/generation.py
            self.limits = Limits.from_parameters(params)
            self.max_batch = self._positive(params, "MAX_BATCH", 32)
            self.prefill_budget = self._positive(params, "MAX_PREFILL_TOKENS", 4096)
            threads = self._positive(params, "INTRA_OP_THREAD_COUNT", max(1, len(os.sched_getaffinity(0))))
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"{self.name}: {exc}") from None
        if args.get("model_instance_kind") == "GPU":
            self.device = torch.device(f"cuda:{int(args['model_instance_device_id'])}")
        else:
            self.device = torch.device("cpu")
        torch.set_num_threads(threads)
        optimized = not flag(params.get("DISABLE_OPTIMIZED_EXECUTION", "false"))
        if self.mode == "inprocess":
            steps = TorchScriptSteps(
                repository / self.prefill_name / "1" / "model.pt",
                repository / self.decode_name / "1" / "model.pt",
                self.device,
                optimized,
            )
        elif self.mode == "bls":
            steps = BlsSteps(self.prefill_name, self.decode_name, self.device)
        else:
            raise pb_utils.TritonModelException(f"{self.name}: STEP_MODE {self.mode!r} is not inprocess or bls")
        self.batch = RunningBatch(steps)
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(model_dir / args["model_version"] / "tokenizer.json"))
        self.chat = None  # CHAT requests are refused without a template
        template_file = model_dir / args["model_version"] / chat.FILE_NAME
        if template_file.is_file():
            try:
                self.chat = chat.ChatTemplate.load(template_file)
                self.chat.check_tokenizer(self.tokenizer)
                self.chat.render("warm")  # compile once, before the first request
            except chat.ChatTemplateError as exc:
                raise pb_utils.TritonModelException(f"{self.name}: {exc}") from None
        self.token_bytes = TokenBytes(self.tokenizer)
        self.generator = torch.Generator(device=self.device).manual_seed(0)
        if flag(params.get("WARMUP", "true")):
            if self.mode == "bls":  # Triton allows BLS requests only once initialize has returned
                pb_utils.Logger.log_info(
                    f"{self.name}: no warmup with STEP_MODE bls: the step models warm through their own model_warmup"
                )
            else:
                self._warm()
        self.incoming: queue.Queue = queue.Queue()
        self.running = True
        self.step_times: list[float] = []
        self.tokens_out = 0
        self.metrics = GeneratorMetrics(self.name)
        self.loop = threading.Thread(target=self._loop, name="text_generator-loop", daemon=True)
        self.loop.start()

    @staticmethod
    def _positive(params, key, default):
        raw = params.get(key, "").strip()
        if not raw:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"parameter {key} is not an integer: {raw!r}") from None
        if value < 1:
            raise ValueError(f"parameter {key} must be at least 1, got {value}")
        return value

    def _warm(self):
        """Run the steps at the shapes requests bring, before ready: TorchScript's executor specialises
        over its first calls and the kernels' first runs allocate, which would otherwise land on the
        first requests."""
        started = time.perf_counter()
        text = " ".join(["The quick brown fox jumps over the lazy dog."] * 40)
        parse_request(self.tokenizer, np.array([b"Hello"], dtype=np.object_), np.array([1]), limits=self.limits)
        ids = self.tokenizer.encode(text).ids
        lengths = sorted({min(n, self.limits.max_prompt_tokens, len(ids)) for n in WARMUP_PROMPT_LENGTHS})
        for length in lengths:
            for _ in range(2):
                self.batch.prefill([ids[:length]])
        sizes = sorted({b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= self.max_batch} | {self.max_batch})
        for size in sizes:
            new = self.batch.prefill([ids[:8]] * size)
            self.batch.add(new, new.logits.argmax(-1), range(size))
            for _ in range(3):
                self.batch.advance(self.batch.decode().argmax(-1), range(size))
            self.batch.clear()
        streamer = TokenStreamer(self.token_bytes)
        streamer.push(ids[0])
        choose_tokens(torch.zeros(1, 4, device=self.device), [1.0], self.generator)
        pb_utils.Logger.log_info(
            f"{self.name}: warmed up in {time.perf_counter() - started:.2f} s: prefill at "
            f"{lengths} tokens, decode at batch {sizes} ({self.mode}, {self.device})"
        )

    # -- requests ----------------------------------------------------------------------------------
    def execute(self, requests):
        for request in requests:

            def raw(name, request=request):
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                return None if tensor is None else tensor.as_numpy()

            try:
                stream = self._parse(request, raw)
            except GenerationInputError as exc:
                request.get_response_sender().send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            self.incoming.put(stream)
        return None

    def _parse(self, request, raw) -> Stream:
        """The LLM convention (``text_input``, backends/llm_request.py) or the model's own names (``PROMPT``)."""
        own = [n for n in OWN_INPUTS if raw(n) is not None]
        convention = [n for n in CONVENTION_INPUTS if raw(n) is not None]
        if own and convention:
            raise GenerationInputError(
                f"give the LLM convention's inputs ({', '.join(convention)}) or the model's own ({', '.join(own)}), "
                "not both"
            )
        streamer = TokenStreamer(self.token_bytes)
        if own:
            parsed = parse_request(
                self.tokenizer,
                raw("PROMPT"),
                raw("MAX_TOKENS"),
                raw("TEMPERATURE"),
                raw("STOP"),
                self.limits,
                chat=raw("CHAT"),
                template=self.chat,
            )
            return Stream(request, parsed, streamer)
        got = parse_convention(
            self.tokenizer,
            raw("text_input"),
            raw("stream"),
            raw("exclude_input_in_output"),
            raw("sampling_parameters"),
            request.parameters(),
            self.limits,
            self.chat,
            flags={name: raw(name) for name in (*RETURN_FLAGS, *REFUSED_FLAGS)},
        )
        return Stream(request, got.parsed, streamer, "text_output", got.stream, got.echo, got.returns)

    # -- the generation loop -------------------------------------------------------------------------
    def _loop(self):
        streams: list[Stream] = []  # row i of self.batch is streams[i]
        waiting: collections.deque = collections.deque()
        group: list[Stream] = []
        checked = time.monotonic()
        while self.running:
            try:
                if not streams and not waiting:
                    try:
                        waiting.append(self.incoming.get(timeout=0.1))
                    except queue.Empty:
                        continue
                while True:
                    try:
                        waiting.append(self.incoming.get_nowait())
                    except queue.Empty:
                        break
                if waiting and len(streams) < self.max_batch:
                    group = self._next_group(waiting, self.max_batch - len(streams))
                    if group:
                        streams = streams + self._admit(group)
                    group = []
                if streams and time.monotonic() - checked >= CANCEL_CHECK_S:
                    checked = time.monotonic()
                    streams = self._drop_cancelled(streams)
                if streams:
                    streams = self._step(streams)
            except Exception as exc:  # noqa: BLE001 - fail the streams in flight, keep serving
                pb_utils.Logger.log_error(f"{self.name}: generation step failed: {exc}")
                for stream in streams + group:
                    stream.fail(f"generation failed: {exc}")
                streams, group = [], []
                self.batch.clear()
            finally:  # once per loop turn; it sends nothing while nothing changed
                self.metrics.publish(len(waiting) + self.incoming.qsize(), len(streams))

    def _next_group(self, waiting, room):
        """The next streams to prefill together, in arrival order (cancelled ones are answered here)."""
        while waiting and waiting[0].request.is_cancelled():
            waiting.popleft().finish("cancelled")
        count = prefill_group([len(s.parsed.prompt_ids) for s in waiting], self.prefill_budget, room)
        return [waiting.popleft() for _ in range(count)]

    def _admit(self, group):
        """Prefill ``group`` together, stream each first token, merge the survivors into the batch."""
        new = self.batch.prefill([s.parsed.prompt_ids for s in group])
        tokens = choose_tokens(new.logits, [s.parsed.temperature for s in group], self.generator)
        for s, t in zip(group, tokens.tolist(), strict=True):
            s.take(t)
        self.tokens_out += len(group)
        self.metrics.first_tokens(group)
        keep = [i for i, s in enumerate(group) if not s.done]
        self.batch.add(new, tokens, keep)
        return [group[i] for i in keep]

    def _drop_cancelled(self, streams):
        for s in streams:
            if s.request.is_cancelled():
                pb_utils.Logger.log_info(f"{self.name}: request cancelled after {s.generated} tokens")
                s.finish("cancelled")
        keep = [i for i, s in enumerate(streams) if not s.done]
        if len(keep) < len(streams):
            self.batch.retain(keep)
            if not keep:
                self._log_steps()
        return [streams[i] for i in keep]

    def _step(self, streams):
        """One decode step for every running stream; drop the finished ones."""
        started = time.perf_counter()
        logits = self.batch.decode()
        tokens = choose_tokens(logits, [s.parsed.temperature for s in streams], self.generator)
        chosen = tokens.tolist()  # waits for the step (on a GPU too)
        self.step_times.append(time.perf_counter() - started)
        for s, t in zip(streams, chosen, strict=True):
            s.take(t)
        self.tokens_out += len(streams)
        self.metrics.tokens += len(streams)
        keep = [i for i, s in enumerate(streams) if not s.done]
        self.batch.advance(tokens, keep)
        if not keep:
            self._log_steps()
        return [streams[i] for i in keep]

    def _log_steps(self):
        if self.step_times:
            times = sorted(self.step_times)
            pb_utils.Logger.log_info(
                f"{self.name}: {len(times)} decode steps ({self.mode}), {self.tokens_out} tokens, "
                f"median {1000 * times[len(times) // 2]:.2f} ms"
            )
        self.step_times, self.tokens_out = [], 0

    def finalize(self):
        self.running = False
        self.loop.join(timeout=10)
