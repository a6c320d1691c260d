"""The FP16 steps the GPU generator runs (``smollm2_*_fp16``) decode greedily like eager FP32 on real prompts.

They are traced as ``export --target gpu`` traces them (``export.formats.torchscript``: the module at FP16
behind FP32 inputs and outputs) and driven by the generator's own in-flight batch
(``backends.inflight.RunningBatch``). The real model needs CUDA (skipped, with the reason, where torch
sees none); the tiny one runs its FP16 steps here too, on the CPU, for what FP16 does to left padding.
"""

from __future__ import annotations

import pytest
import torch

from backends.inflight import RunningBatch
from export.formats.torchscript import at_precision, trace
from export.zoo import smollm

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="the real FP16 steps run on a GPU and torch sees no CUDA device here")
PROMPTS = smollm.PROMPTS + ("Explain in simple words why the sky is blue.", "Here is a recipe for pancakes:")
TOKENS = 16


class Steps:
    def __init__(self, prefill, decode, device):
        self.prefill_module, self.decode_module, self.device = prefill, decode, torch.device(device)

    def prefill(self, ids, mask):
        with torch.inference_mode():
            return self.prefill_module(ids, mask)

    def decode(self, ids, mask, keys, values):
        with torch.inference_mode():
            return self.decode_module(ids, mask, keys, values)


def greedy(steps, prompts, tokens):
    batch = RunningBatch(steps)
    new = batch.prefill([smollm.tokenizer().encode(p).ids for p in prompts])
    chosen = new.logits.argmax(-1)
    batch.add(new, chosen, range(len(prompts)))
    out = [[t] for t in chosen.tolist()]
    for _ in range(tokens - 1):
        chosen = batch.decode().argmax(-1)
        batch.advance(chosen, range(len(prompts)))
        for row, t in zip(out, chosen.tolist(), strict=True):
            row.append(t)
    return out


def fp16(prefill, decode, device):
    traced = []
    for zoo in (prefill, decode):
        module = at_precision(zoo, "fp16").to(device)
        traced.append(trace(module, tuple(x.to(device) for x in zoo.example_inputs), freeze=False))
    return Steps(*traced, device)


@pytest.fixture(scope="module")
def fp16_steps():
    return fp16(smollm.build_prefill(), smollm.build_decode(), "cuda")


@needs_cuda
def test_fp16_steps_on_the_gpu_decode_greedily_like_eager_fp32(fp16_steps):
    llama = smollm.load_llama()
    eager = Steps(smollm.Prefill(llama).eval(), smollm.Decode(llama).eval(), "cpu")
    for prompt in PROMPTS:  # one at a time: no padding in either, so a difference is FP16's own
        expected = greedy(eager, [prompt], TOKENS)[0]
        assert greedy(fp16_steps, [prompt], TOKENS)[0] == expected, prompt


@needs_cuda
def test_fp16_in_flight_batch_on_the_gpu_matches_each_prompt_alone(fp16_steps):
    alone = [greedy(fp16_steps, [p], TOKENS)[0] for p in PROMPTS]
    assert greedy(fp16_steps, list(PROMPTS), TOKENS) == alone


def test_fp16_left_padding_stays_finite_and_each_row_decodes_as_alone():
    """At FP16 the mask's large negative bias would round to -inf: a fully masked (padding) position
    then turns NaN and poisons the real rows through the KV cache. The bias stays FP32 (smollm.Attention)."""
    device = "cuda" if CUDA else "cpu"
    steps = fp16(smollm.build_tiny_prefill(), smollm.build_tiny_decode(), device)
    batch = RunningBatch(steps)
    new = batch.prefill([smollm.tokenizer().encode(p).ids for p in PROMPTS])
    assert torch.isfinite(new.keys).all() and torch.isfinite(new.logits).all()
    alone = [greedy(steps, [p], 6)[0] for p in PROMPTS]
    assert greedy(steps, list(PROMPTS), 6) == alone
