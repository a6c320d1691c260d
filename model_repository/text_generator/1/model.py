"""text_generator: decoupled streaming generation over the exported prefill and decode steps.

Each request (``PROMPT``, ``MAX_TOKENS``, optional ``TEMPERATURE`` and ``STOP``) is checked and
tokenised in ``execute``; a bad one gets its own INVALID_ARG error and nothing else changes. Good
ones join a queue; one background thread keeps a running batch (in-flight batching): at every step
it admits the requests that arrived (prefill, KV caches left-padded to the batch's length with mask
0), runs ONE decode step for all running streams, sends each stream's new text as its own response
(``TEXT`` BYTES [1], complete UTF-8 characters only) and retires the streams that hit end of
sequence, ``STOP``, ``MAX_TOKENS`` or a cancellation; then the final flag goes out.

Optional ``CHAT`` BOOL [1] (default false): true makes ``PROMPT`` a user message, formatted with the
model's own chat template (``chat_template.json`` beside ``tokenizer.json``, written from the GGUF by
``python -m backends.chat``), and the stream then ends at the template's end-of-turn token.

Config parameters: ``PREFILL_MODEL`` / ``DECODE_MODEL`` (the step models, by name, in this
repository), ``STEP_MODE`` (``inprocess``: the steps' TorchScript files run inside this process;
``bls``: each step is a BLS request to the served step model), ``MAX_BATCH``, and the limits
``MAX_PROMPT_BYTES`` (checked before the prompt is decoded or tokenised), ``MAX_PROMPT_TOKENS``,
``MAX_NEW_TOKENS`` and ``MAX_STOP_BYTES`` (see docs/limits.md).

In-process is kept. Measured with ``python -m loadtest.generation_bench`` (SmolLM2-135M FP32, 2-core
CPU, one stream, 32 tokens; median decode step as the server logs it, KV cache included), two runs:

    prompt       in-process       BLS (to the served smollm2_decode)
    5 tokens     55.7 / 64.6 ms   59.1 / 61.7 ms   (within the noise of this machine)
    ~300 tokens  80.0 / 90.8 ms   89.2 / 99.8 ms   (BLS +9 ms per step, both runs)

A BLS step copies the whole KV cache into the step model's process and back (30 layers x K and V x
3 heads x 64 x 4 bytes = 46 KB per cached token per stream), so its extra cost grows with the
context; in-process the tensors never leave this process, and no second process competes for the
two cores. ``bls`` stays selectable (e.g. to put the steps on another device or instance group).
"""

from __future__ import annotations

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
from backends.generation import (GenerationInputError, Limits, StopMatcher, TokenBytes, TokenStreamer, choose_tokens,
                                 parse_request)

class Stream:
    """One request being generated."""

    def __init__(self, request, parsed, streamer):
        self.request = request
        self.sender = request.get_response_sender()
        self.parsed = parsed
        self.streamer = streamer
        self.stop = StopMatcher(parsed.stop)
        self.generated = 0
        self.arrived = time.perf_counter()
        self.done = False
        self.reason = ""

    def send_text(self, text: str) -> None:
        if text:
            out = pb_utils.Tensor("TEXT", np.array([text.encode("utf-8")], dtype=np.object_))
            self.sender.send(pb_utils.InferenceResponse(output_tensors=[out]))

    def take(self, token: int) -> None:
        """Account one generated token: stream its text, decide whether the stream is finished."""
        self.generated += 1
        if token in self.parsed.stop_ids:
            self.finish("eos")
            return
        self.send_text(self.stop.push(self.streamer.push(token)))
        if self.stop.stopped:
            self.finish("stop")
        elif self.generated >= self.parsed.max_tokens:
            self.finish("max_tokens")

    def finish(self, reason: str) -> None:
        if self.done:
            return
        self.done, self.reason = True, reason
        try:
            if reason == "cancelled":
                self.sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "request cancelled", pb_utils.TritonError.CANCELLED)),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            if reason != "stop":
                self.send_text(self.stop.push(self.streamer.flush()) + self.stop.flush())
            self.sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception as exc:  # noqa: BLE001 - the client may be gone; the loop goes on
            pb_utils.Logger.log_warn(f"text_generator: could not finish a stream: {exc}")


class InProcessSteps:
    """The exported TorchScript steps loaded into this process."""

    def __init__(self, repository: Path, prefill: str, decode: str):
        self.prefill_module = torch.jit.load(str(repository / prefill / "1" / "model.pt")).eval()
        self.decode_module = torch.jit.load(str(repository / decode / "1" / "model.pt")).eval()

    def prefill(self, ids, mask):
        with torch.inference_mode():
            return self.prefill_module(ids, mask)

    def decode(self, ids, mask, keys, values):
        with torch.inference_mode():
            return self.decode_module(ids, mask, keys, values)


class BlsSteps:
    """Each step a BLS request to the served step model (tensors cross processes through shared memory)."""

    OUTPUTS = ["logits", "present_keys", "present_values"]

    def __init__(self, prefill: str, decode: str):
        self.prefill_model, self.decode_model = prefill, decode

    def _call(self, model, named):
        inputs = [pb_utils.Tensor.from_dlpack(name, torch.utils.dlpack.to_dlpack(t.contiguous()))
                  for name, t in named.items()]
        response = pb_utils.InferenceRequest(model_name=model, inputs=inputs,
                                             requested_output_names=self.OUTPUTS).exec()
        if response.has_error():
            raise RuntimeError(f"{model}: {response.error().message()}")
        return tuple(torch.from_dlpack(pb_utils.get_output_tensor_by_name(response, n).to_dlpack()).clone()
                     for n in self.OUTPUTS)

    def prefill(self, ids, mask):
        return self._call(self.prefill_model, {"input_ids": ids, "attention_mask": mask})

    def decode(self, ids, mask, keys, values):
        return self._call(self.decode_model, {"input_ids": ids, "attention_mask": mask, "past_keys": keys,
                                              "past_values": values})


def left_pad(tensor: torch.Tensor, length: int, dim: int, value=0) -> torch.Tensor:
    missing = length - tensor.shape[dim]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([torch.full(shape, value, dtype=tensor.dtype), tensor], dim=dim)


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
        self.max_batch = int(params.get("MAX_BATCH", "8"))
        try:  # MAX_PROMPT_TOKENS, MAX_NEW_TOKENS, MAX_PROMPT_BYTES, MAX_STOP_BYTES; defaults in backends/generation.py
            self.limits = Limits.from_parameters(params)
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"{self.name}: {exc}") from None
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
        if self.mode == "inprocess":
            self.steps = InProcessSteps(repository, self.prefill_name, self.decode_name)
        elif self.mode == "bls":
            self.steps = BlsSteps(self.prefill_name, self.decode_name)
        else:
            raise pb_utils.TritonModelException(f"{self.name}: STEP_MODE {self.mode!r} is not inprocess or bls")
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
        self.generator = torch.Generator().manual_seed(0)
        self.incoming: queue.Queue = queue.Queue()
        self.running = True
        self.step_times: list[float] = []
        self.loop = threading.Thread(target=self._loop, name="text_generator-loop", daemon=True)
        self.loop.start()

    # -- requests ----------------------------------------------------------------------------------
    def execute(self, requests):
        for request in requests:
            def raw(name):
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                return None if tensor is None else tensor.as_numpy()

            try:
                parsed = parse_request(self.tokenizer, raw("PROMPT"), raw("MAX_TOKENS"), raw("TEMPERATURE"),
                                       raw("STOP"), self.limits, chat=raw("CHAT"), template=self.chat)
            except GenerationInputError as exc:
                request.get_response_sender().send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            self.incoming.put(Stream(request, parsed, TokenStreamer(self.token_bytes)))
        return None

    # -- the generation loop -------------------------------------------------------------------------
    def _loop(self):
        batch: list[Stream] = []
        state = None  # (last tokens [B,1], mask [B,S], keys, values)
        while self.running:
            try:
                first = None
                if not batch:
                    try:
                        first = self.incoming.get(timeout=0.1)
                    except queue.Empty:
                        continue
                batch, state = self._admit(batch, state, first)
                if batch:
                    batch, state = self._step(batch, state)
            except Exception as exc:  # noqa: BLE001 - fail the streams in flight, keep serving
                pb_utils.Logger.log_error(f"{self.name}: generation step failed: {exc}")
                for stream in batch:
                    if not stream.done:
                        stream.done = True
                        try:
                            stream.sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                                f"generation failed: {exc}")), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                        except Exception:  # noqa: BLE001
                            pass
                batch, state = [], None

    def _admit(self, batch, state, first=None):
        """Prefill the newly arrived streams together and merge them into the running batch."""
        new = []
        while len(batch) + len(new) < self.max_batch:
            if first is not None:
                stream, first = first, None
            else:
                try:
                    stream = self.incoming.get_nowait()
                except queue.Empty:
                    break
            if stream.request.is_cancelled():
                stream.finish("cancelled")
                continue
            new.append(stream)
        if not new:
            return batch, state
        longest = max(len(s.parsed.prompt_ids) for s in new)
        ids = torch.full((len(new), longest), 2, dtype=torch.int64)
        mask = torch.zeros((len(new), longest), dtype=torch.int64)
        for row, s in enumerate(new):
            n = len(s.parsed.prompt_ids)
            ids[row, longest - n:] = torch.tensor(s.parsed.prompt_ids, dtype=torch.int64)
            mask[row, longest - n:] = 1
        logits, keys, values = self.steps.prefill(ids, mask)
        tokens = choose_tokens(logits, [s.parsed.temperature for s in new], self.generator)
        for s, t in zip(new, tokens.tolist()):
            s.take(t)
        keep = [i for i, s in enumerate(new) if not s.done]
        if not keep:
            return batch, state
        index = torch.tensor(keep)
        new_state = (tokens[index][:, None], mask[index], keys[index], values[index])
        new = [new[i] for i in keep]
        if state is None:
            return new, new_state
        length = max(state[1].shape[1], new_state[1].shape[1])
        merged = (
            torch.cat([state[0], new_state[0]]),
            torch.cat([left_pad(state[1], length, 1), left_pad(new_state[1], length, 1)]),
            torch.cat([left_pad(state[2], length, 3), left_pad(new_state[2], length, 3)]),
            torch.cat([left_pad(state[3], length, 3), left_pad(new_state[3], length, 3)]),
        )
        return batch + new, merged

    def _step(self, batch, state):
        """One decode step for every running stream; drop the finished ones."""
        for s in batch:
            if s.request.is_cancelled():
                pb_utils.Logger.log_info(f"{self.name}: request cancelled after {s.generated} tokens")
                s.finish("cancelled")
        tokens, mask, keys, values = state
        alive = [i for i, s in enumerate(batch) if not s.done]
        if len(alive) < len(batch):
            index = torch.tensor(alive, dtype=torch.int64)
            batch = [batch[i] for i in alive]
            if not batch:
                return [], None
            tokens, mask, keys, values = tokens[index], mask[index], keys[index], values[index]
            # Columns no remaining stream attends to (left padding of the longest gone) go too.
            first = int((mask.sum(0) > 0).nonzero()[0])
            if first:
                mask, keys, values = mask[:, first:], keys[:, :, :, first:], values[:, :, :, first:]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        started = time.perf_counter()
        logits, keys, values = self.steps.decode(tokens, mask, keys, values)
        self.step_times.append(time.perf_counter() - started)
        chosen = choose_tokens(logits, [s.parsed.temperature for s in batch], self.generator)
        for s, t in zip(batch, chosen.tolist()):
            s.take(t)
        alive = [i for i, s in enumerate(batch) if not s.done]
        if not alive:
            self._log_steps()
            return [], None
        index = torch.tensor(alive, dtype=torch.int64)
        state = (chosen[index][:, None], mask[index], keys[index], values[index])
        return [batch[i] for i in alive], state

    def _log_steps(self):
        if self.step_times:
            times = sorted(self.step_times)
            pb_utils.Logger.log_info(
                f"{self.name}: {len(times)} decode steps ({self.mode}), median {1000 * times[len(times) // 2]:.2f} ms")
            self.step_times = []

    def finalize(self):
        self.running = False
        self.loop.join(timeout=10)
