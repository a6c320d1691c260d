"""A user's Python model that declares its tensors in ``auto_complete_config`` loads on the local server and
serves the completed config: the server keeps Triton's auto-completion on for a repository that has one (it
turns it off otherwise, deploy/server.py's ``auto_complete``)."""

import numpy as np
import psutil

from deploy.client import connect, infer
from tests.conftest import server_config, start_or_fail

MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.set_max_batch_size(8)
        config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4]})
        config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]})
        return config

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", (x * 2).astype(np.float32))]))
        return out
"""


def test_a_model_completing_its_own_config_is_served_with_it(tmp_path):
    folder = tmp_path / "repo" / "doubler"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(MODEL)
    (folder / "config.pbtxt").write_text('name: "doubler"\nbackend: "python"\n')  # no tensors: the model adds them
    config = server_config(tmp_path / "repo", load_models=("doubler",))
    server = start_or_fail(config)
    try:
        assert "--disable-auto-complete-config" not in psutil.Process(server.process.pid).cmdline()
        client = connect("http", server.config.http_url)
        served = client.get_model_config("doubler")
        assert served["max_batch_size"] == 8 and [t["name"] for t in served["input"]] == ["IN"]
        got = infer(client, "doubler", {"IN": np.arange(8, dtype=np.float32).reshape(2, 4)})
        client.close()
        np.testing.assert_array_equal(got["OUT"], np.arange(8, dtype=np.float32).reshape(2, 4) * 2)
    finally:
        assert server.stop() == []
