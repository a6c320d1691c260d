"""``postprocess``: logits -> softmax -> top-k class ids, scores and ImageNet names.

``TOP_K`` is optional (default 5) and must be 1..1000; a request outside that range gets its own
INVALID_ARG error. The names are backends/data/imagenet_labels.txt (``backends.imagenet``), the file
efficientnet_lite0's export takes its labels from.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

from backends.batching import invalid
from backends.imagenet import labels


class TritonPythonModel:
    def initialize(self, args):
        params = {k: v["string_value"] for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}
        self.default_k = int(params.get("DEFAULT_TOP_K", 5))
        self.labels = np.array(labels(), dtype=object)

    def execute(self, requests):
        responses = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, "logits").as_numpy()
            top_k = pb_utils.get_input_tensor_by_name(request, "TOP_K")
            k = int(top_k.as_numpy().reshape(-1)[0]) if top_k is not None else self.default_k
            if not 1 <= k <= logits.shape[-1]:
                responses.append(invalid(ValueError(f"TOP_K must be between 1 and {logits.shape[-1]}, got {k}")))
                continue
            shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
            probabilities = shifted / shifted.sum(axis=-1, keepdims=True)
            ids = np.argsort(-probabilities, axis=-1, kind="stable")[:, :k]
            scores = np.take_along_axis(probabilities, ids, axis=-1).astype(np.float32)
            names = np.vectorize(lambda i: self.labels[i].encode("utf-8"), otypes=[object])(ids)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("LABELS", names),
                        pb_utils.Tensor("CLASS_IDS", ids.astype(np.int64)),
                        pb_utils.Tensor("SCORES", scores),
                    ]
                )
            )
        return responses
