"""Bad requests get a clear 4xx / INVALID_ARGUMENT or NOT_FOUND naming the problem; the server stays up."""

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from deploy.client import infer

GOOD = np.zeros((1, 64), dtype=np.float32)

CASES = {
    # name: (model, inputs, HTTP status, gRPC code, words the message must contain)
    "wrong datatype": ("digits", {"PIXELS": np.zeros((1, 64), np.float64)}, "400", "INVALID_ARGUMENT",
                       ["FP64", "PIXELS", "FP32"]),
    "wrong shape": ("digits", {"PIXELS": np.zeros((1, 63), np.float32)}, "400", "INVALID_ARGUMENT",
                    ["shape", "PIXELS", "63"]),
    "batch above max_batch_size": ("digits", {"PIXELS": np.zeros((65, 64), np.float32)}, "400",
                                   "INVALID_ARGUMENT", ["batch-size", "64"]),
    "wrong input name": ("digits", {"PIXEL": GOOD}, "400", "INVALID_ARGUMENT", ["PIXEL"]),
    "unknown model": ("no_such_model", {"PIXELS": GOOD}, ("400", "404"), ("NOT_FOUND", "INVALID_ARGUMENT"),
                      ["no_such_model"]),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_refused_clearly_and_server_stays_up(client, protocol, case):
    model, inputs, http_status, grpc_code, words = CASES[case]
    with pytest.raises(InferenceServerException) as info:
        infer(client, model, inputs)
    status, message = str(info.value.status()), info.value.message()
    print(f"\n{protocol} {case}: {status} {message}")
    expected = http_status if protocol == "http" else grpc_code
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert any(status.endswith(code) for code in expected), f"{case}: got {status}, want {expected}"
    for word in words:
        assert word in message, f"{case}: {word!r} missing from {message!r}"
    assert client.is_server_ready()
    assert infer(client, "digits", {"PIXELS": GOOD})["PROBABILITIES"].shape == (1, 10)
