"""``preprocess``: encoded image bytes -> FP32 [3, 224, 224] for efficientnet_lite0.

A request whose image is empty, too large, corrupt or truncated gets its own INVALID_ARG error
naming the problem; the other images of the batch are answered.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

from backends import imaging
from backends.batching import gather, scatter


class TritonPythonModel:
    def initialize(self, args):
        params = {k: v["string_value"] for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}
        self.max_bytes = int(params.get("MAX_IMAGE_BYTES", imaging.MAX_IMAGE_BYTES))
        self.max_pixels = int(params.get("MAX_IMAGE_PIXELS", imaging.MAX_IMAGE_PIXELS))

    def execute(self, requests):
        responses, crops, owners = gather(
            requests,
            "IMAGE",
            lambda data: imaging.resize_crop(imaging.decode(data, self.max_bytes, self.max_pixels)),
            (imaging.ImageError,),
        )
        if crops:
            batch = imaging.normalise(np.stack(crops))  # every accepted image scaled in one pass
            for i, part in scatter(owners):
                responses[i] = pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("image", batch[part])])
        return responses
