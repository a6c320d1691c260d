"""SmolLM2 as two traced steps (prefill, decode) decodes exactly like transformers' ``generate``."""

import os

import pytest
import torch

from export.formats.torchscript import trace
from export.zoo import smollm

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def traced_steps():
    # The zoo modules traced as the export traces them (unfrozen here: freezing 135M weights costs ~20 s).
    llama = smollm.load_llama()
    prefill, decode = smollm.Prefill(llama).eval(), smollm.Decode(llama).eval()
    example = smollm.encode_batch([smollm.PROMPTS[0], smollm.PROMPTS[3]])
    decode_example = smollm._decode_inputs_from(prefill, *example)
    return trace(prefill, example, freeze=False), trace(decode, decode_example, freeze=False)


@pytest.fixture(scope="module")
def hf_model():
    """transformers' own Llama with the same dequantised weights (GGUF loading needs accelerate, absent here)."""
    from tests.smollm_reference import transformers_llama

    return transformers_llama()


def test_traced_greedy_equals_transformers_generate(traced_steps, hf_model):
    prompt = "Write a short poem about the sea:"
    ids, mask = smollm.encode_batch([prompt])
    ours = smollm.greedy(*traced_steps, ids, mask, max_new_tokens=12)[0]
    with torch.no_grad():
        theirs = hf_model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False, eos_token_id=None
        )[0, ids.shape[1] :].tolist()
    assert ours == theirs, (smollm.tokenizer().decode(ours), smollm.tokenizer().decode(theirs))


def test_left_padded_batch_decodes_like_each_prompt_alone(traced_steps):
    prompts = [smollm.PROMPTS[0], smollm.PROMPTS[3]]
    ids, mask = smollm.encode_batch(prompts)
    batched = smollm.greedy(*traced_steps, ids, mask, max_new_tokens=6)
    alone = [smollm.greedy(*traced_steps, *smollm.encode_batch([p]), max_new_tokens=6)[0] for p in prompts]
    assert batched == alone


def test_the_capital_of_france_is_paris(traced_steps):
    ids, mask = smollm.encode_batch(["The capital of France is"])
    text = smollm.tokenizer().decode(smollm.greedy(*traced_steps, ids, mask, max_new_tokens=3)[0])
    assert text.strip().startswith("Paris"), text


def test_chat_greedy_equals_transformers_generate_and_ends_at_the_end_of_turn(traced_steps, hf_model):
    """CHAT: the templated prompt (as text_generator tokenises it), answered until the template's end of turn."""
    import numpy as np

    from backends.chat import ChatTemplate
    from backends.generation import parse_request

    template = ChatTemplate.from_gguf(smollm.gguf_path())
    parsed = parse_request(
        smollm.tokenizer(),
        np.array([b"What is the capital of France?"], dtype=np.object_),
        np.array([48], dtype=np.int32),
        chat=np.array([True]),
        template=template,
    )
    ids = torch.tensor([parsed.prompt_ids])
    mask = torch.ones_like(ids)
    stop = sorted(parsed.stop_ids)
    ours = smollm.greedy(*traced_steps, ids, mask, max_new_tokens=parsed.max_tokens)[0]
    ended = [i for i, t in enumerate(ours) if t in stop]
    assert ended, f"no end of turn in {parsed.max_tokens} tokens: {smollm.tokenizer().decode(ours)!r}"
    with torch.no_grad():
        theirs = hf_model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=parsed.max_tokens, do_sample=False, eos_token_id=stop
        )[0, ids.shape[1] :].tolist()
    answer = smollm.tokenizer().decode(ours[: ended[0]])
    print(f"\nCHAT answer ({ended[0]} tokens, then {template.end_of_turn_token}): {answer!r}")
    assert ours[: ended[0] + 1] == theirs, (answer, smollm.tokenizer().decode(theirs))
    assert "Paris" in answer
