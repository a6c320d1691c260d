"""transformers' own Llama with SmolLM2's dequantised weights: the reference the generation tests compare with.

Built from the same state dict the export uses (transformers' GGUF model loading needs accelerate, which is
absent here); its tokenizer is transformers' GGUF tokenizer, with the GGUF's chat template.
"""

from __future__ import annotations

import os
from functools import lru_cache

from export.zoo import smollm

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@lru_cache(maxsize=1)
def transformers_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    s = smollm.SMOLLM2_135M
    config = LlamaConfig(
        vocab_size=s.vocab_size,
        hidden_size=s.hidden_size,
        intermediate_size=s.intermediate_size,
        num_hidden_layers=s.num_layers,
        num_attention_heads=s.num_heads,
        num_key_value_heads=s.num_kv_heads,
        head_dim=s.head_dim,
        rms_norm_eps=s.rms_norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": s.rope_theta},
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    model = LlamaForCausalLM(config).eval()
    state = {f"model.{k}": v for k, v in smollm.load_llama().state_dict().items()}
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, strict=False)
    return model


@lru_cache(maxsize=1)
def transformers_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm.gguf_path().parent), gguf_file=smollm.GGUF_NAME)


def chat_generate(question: str, max_new_tokens: int) -> list[int]:
    """Greedy ``generate`` on the chat-templated question, until the end of turn: the new token ids."""
    import torch

    tokenizer = transformers_tokenizer()
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], tokenize=True, add_generation_prompt=True, return_tensors="pt"
    )["input_ids"]
    with torch.no_grad():
        out = transformers_llama().generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=tokenizer.eos_token_id,
        )
    return out[0, ids.shape[1] :].tolist()
