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
    from transformers import LlamaConfig, LlamaForCausalLM

    s = smollm.SMOLLM2_135M
    config = LlamaConfig(vocab_size=s.vocab_size, hidden_size=s.hidden_size, intermediate_size=s.intermediate_size,
                         num_hidden_layers=s.num_layers, num_attention_heads=s.num_heads,
                         num_key_value_heads=s.num_kv_heads, head_dim=s.head_dim, rms_norm_eps=s.rms_norm_eps,
                         rope_parameters={"rope_type": "default", "rope_theta": s.rope_theta},
                         tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    model = LlamaForCausalLM(config).eval()
    state = {f"model.{k}": v for k, v in smollm.load_llama().state_dict().items()}
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, strict=False)
    return model


def test_traced_greedy_equals_transformers_generate(traced_steps, hf_model):
    prompt = "Write a short poem about the sea:"
    ids, mask = smollm.encode_batch([prompt])
    ours = smollm.greedy(*traced_steps, ids, mask, max_new_tokens=12)[0]
    with torch.no_grad():
        theirs = hf_model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False,
                                   eos_token_id=None)[0, ids.shape[1]:].tolist()
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
