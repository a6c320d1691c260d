"""A `transformers` encoder as a user brings it to `tritonkit export --model-file`: a tiny BertModel with random
weights and default settings, so its forward returns a ModelOutput and takes many optional keyword arguments."""

import torch
from transformers import BertConfig, BertModel

VOCAB_SIZE = 30522  # all-MiniLM-L6-v2's tokenizer (tests/data/hf_pipeline.py); the export's random ids are 0..99


def build():
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return BertModel(config).eval()
