"""``preprocess``: encoded image bytes -> FP32 [3, 224, 224] for efficientnet_lite0.

A request whose image is empty, too large, corrupt or truncated gets its own INVALID_ARG error
naming the problem; the other images of the batch are answered.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

from backends import imaging


class TritonPythonModel:
    def initialize(self, args):
        params = {k: v["string_value"] for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}
        self.max_bytes = int(params.get("MAX_IMAGE_BYTES", imaging.MAX_IMAGE_BYTES))
        self.max_pixels = int(params.get("MAX_IMAGE_PIXELS", imaging.MAX_IMAGE_PIXELS))

    def execute(self, requests):
        responses = [None] * len(requests)
        crops, owners = [], []
        for i, request in enumerate(requests):
            try:
                images = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy().reshape(-1)
                decoded = [imaging.resize_crop(imaging.decode(_as_bytes(b), self.max_bytes, self.max_pixels))
                           for b in images]
            except imaging.ImageError as exc:
                responses[i] = pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG))
                continue
            crops.extend(decoded)
            owners.append((i, len(decoded)))
        if crops:
            batch = imaging.normalise(np.stack(crops))  # every accepted image scaled in one pass
            start = 0
            for i, count in owners:
                tensor = pb_utils.Tensor("image", batch[start:start + count])
                responses[i] = pb_utils.InferenceResponse(output_tensors=[tensor])
                start += count
        return responses


def _as_bytes(item) -> bytes:
    return item if isinstance(item, bytes) else bytes(item)
