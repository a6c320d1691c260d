"""export.config against the real server: what Triton serves reads back to the repository's spec, and a spec
changed with ServingChanges loads through model control and is then what the server serves."""

import json

import numpy as np
import pytest
import tritonclient.http as httpclient

from export.changes import ServingChanges
from export.config import as_served, from_json, parse, read, to_json
from export.errors import ConfigError


@pytest.fixture
def admin(server):
    client = httpclient.InferenceServerClient(server.config.http_url, network_timeout=600.0, connection_timeout=600.0)
    yield client
    client.close()


def out_of_band(spec) -> dict:
    return {
        "labels": spec.labels,
        "description": spec.description,
        "precision": spec.precision,
        "version": spec.version,
    }


def test_every_served_config_reads_back_to_the_repository_spec(server, admin):
    ready = sorted(m["name"] for m in admin.get_model_repository_index() if m.get("state") == "READY")
    assert {"digits", "minilm_onnx", "postprocess", "text_generator", "image_classifier"} <= set(ready)
    for name in ready:
        folder = server.config.model_repository / name
        served = admin.get_model_config(name)
        if parse(folder / "config.pbtxt").HasField("ensemble_scheduling"):
            with pytest.raises(ConfigError, match="ensemble_scheduling"):
                from_json(served)
            continue
        spec = read(folder)
        assert from_json(served, **out_of_band(spec)) == as_served(spec), name


def test_a_changed_spec_loads_and_is_served(server, admin):
    name = "digits_onnx"
    original = admin.get_model_config(name)
    spec = read(server.config.model_repository / name)
    changed = ServingChanges(
        instances=1, max_queue_delay_us=0, preferred_batch_sizes=(4,), default_timeout_us=100_000, max_queue_size=32
    ).apply(spec)
    try:
        admin.load_model(name, config=json.dumps(to_json(changed)))
        assert admin.is_model_ready(name)
        served = admin.get_model_config(name)
        assert served["dynamic_batching"]["default_queue_policy"]["max_queue_size"] == 32
        assert from_json(served, **out_of_band(changed)) == as_served(changed)
        pixels = httpclient.InferInput("PIXELS", [2, 64], "FP32")
        pixels.set_data_from_numpy(np.random.default_rng(0).random((2, 64), dtype=np.float32))
        probabilities = admin.infer(name, [pixels]).as_numpy("PROBABILITIES")
        assert probabilities.shape == (2, 10) and np.allclose(probabilities.sum(axis=1), 1, atol=1e-4)
    finally:
        admin.load_model(name, config=json.dumps(original))
    assert from_json(admin.get_model_config(name), **out_of_band(spec)) == as_served(spec)
