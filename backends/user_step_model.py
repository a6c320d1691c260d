"""The Python model that serves a user's pre- or post-processing function (``backends/user_steps.py``).

``tritonkit export --preprocess/--postprocess`` writes a ``model.py`` that imports this class, copies the
user's file beside it, and names the function in the config's parameters ``FUNCTION`` (``file.py:name``) and
``STEP`` (``preprocess`` or ``postprocess``). Requests the dynamic batcher merged run as one call when their
inputs have the same shapes (``backends/batching.py``); a call that fails is retried request by request, so
only the request at fault gets INVALID_ARG, naming the model, the step and its inputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from backends import user_steps
from backends.batching import BatchingModel, RequestError


class UserStepModel(BatchingModel):
    honoured_parameters = frozenset({"FUNCTION", "STEP"})

    def load(self, args) -> None:
        file_name, _, function_name = self.parameters["FUNCTION"].rpartition(":")
        path = Path(args["model_repository"]) / args["model_version"] / file_name
        where = f"{self.name}: {self.parameters.get('STEP', 'step')} {function_name}"
        self.function = user_steps.load_function(path, function_name, f"user_step_{self.name}")
        self.where = where
        self.declared = [
            user_steps.Declared(t["name"], _datatype(t["data_type"]), tuple(int(d) for d in t["dims"]))
            for t in self.config["output"]
        ]

    def to_array(self, tensor):
        return tensor.as_numpy()

    def from_array(self, name: str, array):
        return pb_utils.Tensor(name, array)

    def concat(self, arrays: list):
        return np.concatenate(arrays)

    def forward(self, inputs: list) -> list:
        try:
            batch = dict(zip(self.inputs, inputs, strict=True))
            results = user_steps.run(self.function, batch, self.declared, self.where)
        except user_steps.StepError as exc:
            raise RequestError(str(exc)) from None
        return [results[name] for name in self.outputs]


def _datatype(config_type: str) -> str:
    """``TYPE_FP32`` -> ``FP32``; the config's ``TYPE_STRING`` is KServe's ``BYTES``."""
    name = config_type.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name
