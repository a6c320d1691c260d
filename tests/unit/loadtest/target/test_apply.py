"""A server that restricts its model-config API (the production stacks) still gives load generators what they
need without the admin key: ``loadtest.target.apply`` reads the model's metadata instead, and refuses by name
what only the config could do (variants, tuning). The real server's answers: tests/functional/test_restricted_api.py.
"""

from __future__ import annotations

import pytest
from tritonclient.utils import InferenceServerException

from deploy import security
from loadtest.core.spec import Candidate
from loadtest.errors import VariantError
from loadtest.generators.payloads import PayloadOptions, payloads, served_model
from loadtest.target import apply

HTTP_REFUSAL = "This API is restricted, expecting header 'admin-key'"
GRPC_REFUSAL = "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'"
DIGITS_METADATA = {
    "name": "digits",
    "versions": ["1"],
    "platform": "pytorch_libtorch",
    "inputs": [{"name": "PIXELS", "datatype": "FP32", "shape": [-1, 64]}],
    "outputs": [{"name": "PROBABILITIES", "datatype": "FP32", "shape": [-1, 10]}],
}


class FakeClient:
    """``tritonclient.http.InferenceServerClient`` answering as the test says."""

    config_error: str | None = HTTP_REFUSAL
    metadata_error: str | None = None

    def __init__(self, url, **_kwargs):
        self.url = url

    def get_model_config(self, model):
        if self.config_error:
            raise InferenceServerException(self.config_error, status="403")
        return {"name": model, "max_batch_size": 8}

    def get_model_metadata(self, model):
        if self.metadata_error:
            raise InferenceServerException(self.metadata_error, status="400")
        return {**DIGITS_METADATA, "name": model}

    def close(self):
        pass


@pytest.fixture
def client(monkeypatch):
    monkeypatch.setattr(apply.httpclient, "InferenceServerClient", FakeClient)
    monkeypatch.setattr(apply, "_NOTED", set())
    yield FakeClient
    FakeClient.config_error, FakeClient.metadata_error = HTTP_REFUSAL, None


def test_both_protocols_refusals_are_recognised_and_other_errors_are_not():
    assert security.is_refusal(HTTP_REFUSAL) and security.is_refusal(GRPC_REFUSAL)
    assert not security.is_refusal("Request for unknown model: 'digits' is not found")
    assert not security.is_refusal("failed to connect to all addresses") and not security.is_refusal(None)


def test_a_refused_config_is_read_from_the_metadata_once_noted(client, capsys):
    config = apply.served_config("triton:8000", "digits")
    apply.served_config("triton:8000", "digits")
    model = served_model(config)
    assert model.batched and [(t.name, t.datatype, t.dims) for t in model.inputs] == [("PIXELS", "FP32", (64,))]
    assert model.outputs == ("PROBABILITIES",) and not model.decoupled
    err = capsys.readouterr().err
    assert err.count("note: triton:8000 restricts its model-config API") == 1


def test_the_metadata_config_makes_batch_one_payloads():
    config = apply.metadata_config(DIGITS_METADATA)
    samples = payloads(config, PayloadOptions(count=3))
    assert len(samples) == 3 and all(s["PIXELS"].shape == (1, 64) for s in samples)


def test_a_model_without_a_leading_dynamic_dim_everywhere_does_not_batch():
    metadata = {
        "name": "tokenize",
        "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1]}],
        "outputs": [{"name": "input_ids", "datatype": "INT64", "shape": [-1, 128]}],
    }
    config = apply.metadata_config(metadata, decoupled=True)
    model = served_model(config)
    assert not model.batched and model.decoupled
    assert [(t.datatype, t.dims) for t in model.inputs] == [("BYTES", (1,))]


def test_grpc_metadata_shapes_given_as_strings_are_numbers():
    metadata = {**DIGITS_METADATA, "inputs": [{"name": "PIXELS", "datatype": "FP32", "shape": ["-1", "64"]}]}
    assert apply.metadata_config(metadata)["input"][0]["dims"] == [64]


def test_a_missing_model_on_a_restricted_server_is_named_not_served(client):
    client.metadata_error = "Request for unknown model: 'nope' is not found"
    with pytest.raises(VariantError, match="model 'nope' is not served at triton:8000: Request for unknown"):
        apply.served_config("triton:8000", "nope")


def test_a_server_refusing_config_and_metadata_names_both_fixes(client):
    client.metadata_error = HTTP_REFUSAL
    with pytest.raises(VariantError) as info:
        apply.served_config("triton:8000", "digits")
    message = str(info.value)
    assert "refuses both the config and the metadata" in message and "\n" not in message
    assert "RESTRICTED_APIS" in message and '"config"' in message


def test_an_unrestricted_error_is_not_hidden_behind_the_metadata(client):
    client.config_error = "Request for unknown model: 'nope' is not found"
    with pytest.raises(VariantError, match="'nope' is not served"):
        apply.served_config("triton:8000", "nope")


def test_a_variant_of_a_metadata_config_is_refused_naming_the_key(client):
    config = apply.served_config("triton:8000", "digits")
    candidate = Candidate.of("batch8", instances=2)
    with pytest.raises(VariantError, match="variant 'batch8': triton:8000 restricts its model-config API") as info:
        apply.override(config, candidate)
    assert security.KEY_HEADER in str(info.value) and "server of your own" in str(info.value)
    with pytest.raises(VariantError, match="model 'digits': triton:8000 restricts"):
        apply.served_spec("triton:8000", "digits")
