"""``tokenize``: UTF-8 text -> input_ids and attention_mask for minilm, with the model's own tokenizer.

Texts over the model's 256-token limit are truncated and flagged in the output ``TRUNCATED`` (the
Python backend of Triton 2.51 cannot set response parameters); empty, non-UTF-8 or oversized texts get their own
INVALID_ARG error while the other texts of the batch are answered.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

from backends import text
from backends.batching import gather, scatter


class TritonPythonModel:
    def initialize(self, args):
        params = {k: v["string_value"] for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}
        self.max_bytes = int(params.get("MAX_TEXT_BYTES", text.MAX_TEXT_BYTES))
        text.tokenizer()  # load once, before the first request

    def execute(self, requests):
        responses, texts, owners = gather(
            requests, "TEXT", lambda raw: text.decode_text(raw, "TEXT", self.max_bytes), (text.TextError,)
        )
        if texts:
            ids, mask, truncated = text.tokenize(texts)  # one padding length for the whole batch
            flags = np.array(truncated, dtype=bool).reshape(-1, 1)
            for i, part in scatter(owners):
                responses[i] = pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("input_ids", ids[part]),
                        pb_utils.Tensor("attention_mask", mask[part]),
                        pb_utils.Tensor("TRUNCATED", flags[part]),
                    ]
                )
        return responses
