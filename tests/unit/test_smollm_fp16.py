"""The FP16 steps the GPU generator runs (``smollm2_*_fp16``) decode greedily like eager FP32 on real prompts.

They are traced as ``export --target gpu`` traces them (``export.formats.torchscript``: the module at FP16
behind FP32 inputs and outputs, on CUDA) and driven by the generator's own in-flight batch
(``backends.inflight.RunningBatch``). Needs CUDA: skipped, with the reason, where torch sees none.
"""

from __future__ import annotations

import pytest
import torch

from backends.inflight import RunningBatch
from export.formats.torchscript import at_precision, trace
from export.zoo import smollm

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="FP16 steps run on a GPU and torch sees no CUDA device here")
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
        for row, t in zip(out, chosen.tolist()):
            row.append(t)
    return out


@pytest.fixture(scope="module")
def fp16_steps():
    prefill, decode = smollm.build_prefill(), smollm.build_decode()
    traced = []
    for zoo in (prefill, decode):
        module = at_precision(zoo, "fp16").to("cuda")
        traced.append(trace(module, tuple(x.to("cuda") for x in zoo.example_inputs), freeze=False))
    return Steps(*traced, "cuda")


def test_fp16_steps_on_the_gpu_decode_greedily_like_eager_fp32(fp16_steps):
    llama = smollm.load_llama()
    eager = Steps(smollm.Prefill(llama).eval(), smollm.Decode(llama).eval(), "cpu")
    for prompt in PROMPTS:  # one at a time: no padding in either, so a difference is FP16's own
        expected = greedy(eager, [prompt], TOKENS)[0]
        assert greedy(fp16_steps, [prompt], TOKENS)[0] == expected, prompt


def test_fp16_in_flight_batch_on_the_gpu_matches_each_prompt_alone(fp16_steps):
    alone = [greedy(fp16_steps, [p], TOKENS)[0] for p in PROMPTS]
    batched = greedy(fp16_steps, list(PROMPTS), TOKENS)
    agree = sum(a == b for a, b in zip(alone, batched))
    assert agree >= len(PROMPTS) - 1, (alone, batched)  # FP16 padding may flip one near-tie
