"""digits served by the real tritonserver: equal to eager PyTorch, accurate, and batched."""

import threading
import time

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient

from deploy.client import connect, infer, metrics, model_metric
from export.zoo import build
from export.zoo.digits import accuracy, split
from loadtest.target import apply

ATOL = 1e-5  # FP32 on the same CPU; batching changes the summation order, not more


@pytest.fixture(scope="module")
def eager():
    return build("digits").module


def test_answers_equal_eager(client, protocol, eager):
    _, x_test, _, _ = split()
    batch = x_test[:64]
    served = infer(client, "digits", {"PIXELS": batch})["PROBABILITIES"]
    with torch.no_grad():
        expected = eager(torch.from_numpy(batch)).numpy()
    error = float(np.abs(served - expected).max())
    print(f"\n{protocol}: max |served - eager| over 64 held-out scans = {error:.2e}")
    assert served.shape == (64, 10) and served.dtype == np.float32
    assert error <= ATOL
    np.testing.assert_allclose(served.sum(axis=1), 1.0, atol=1e-5)


def test_held_out_accuracy_equals_in_process(client, protocol, eager):
    _, x_test, _, y_test = split()
    served = np.concatenate(
        [infer(client, "digits", {"PIXELS": x_test[i : i + 64]})["PROBABILITIES"] for i in range(0, len(x_test), 64)]
    )
    with torch.no_grad():
        in_process = accuracy(eager(torch.from_numpy(x_test)).numpy(), y_test)
    served_accuracy = accuracy(served, y_test)
    print(f"\n{protocol}: served accuracy {served_accuracy:.4f}, in-process {in_process:.4f} on {len(y_test)} scans")
    assert served_accuracy == in_process
    assert served_accuracy >= 0.95


@pytest.fixture
def batching_window(server):
    """digits served with a 2 ms batching window for one test, then back to its served config. The
    repository's digits config is the tuner's pick (export/tuned.toml), which may batch only what queues while
    the instances are busy; what is checked here is Triton's batcher, so the test sets the window it needs."""
    with apply.ServedConfigs(server.config.http_url) as configs:
        window = {"dynamic_batching": {"max_queue_delay_microseconds": 2000}}
        configs.load("digits", {**configs.original("digits"), **window})
        yield


def test_a_changed_config_is_served_back_when_the_command_changing_it_fails(server):
    http = server.config.http_url
    before = apply.served_config(http, "digits")
    with pytest.raises(RuntimeError, match="the command failed"), apply.ServedConfigs(http) as configs:
        configs.load("digits", {**before, "dynamic_batching": {"max_queue_delay_microseconds": 3000}})
        assert int(apply.served_config(http, "digits")["dynamic_batching"]["max_queue_delay_microseconds"]) == 3000
        raise RuntimeError("the command failed")
    assert apply.served_config(http, "digits") == before
    assert configs.changed == set() and configs.originals == {"digits": before}


def test_dynamic_batching_merges_concurrent_requests(server, batching_window):
    """16 closed-loop clients, one scan per request, a 2 ms batching window: Triton runs far fewer
    executions than inferences.

    The clients are 16 requests kept in flight with gRPC ``async_infer`` (each answer sends the next),
    so the client side is not what limits concurrency on a 2-core machine.
    """
    _, x_test, _, _ = split()
    clients, total = 16, 320
    url = server.config.metrics_url
    before = metrics(url)
    client = connect("grpc", server.config.grpc_url)
    lock, done, sent, errors = threading.Lock(), threading.Semaphore(0), [0], []

    def send():
        tensor = grpcclient.InferInput("PIXELS", [1, 64], "FP32")
        tensor.set_data_from_numpy(x_test[sent[0] % len(x_test)][None])
        sent[0] += 1
        client.async_infer("digits", [tensor], callback=answered)

    def answered(result, error):
        if error is not None:
            errors.append(error)
        with lock:
            if sent[0] < total:
                send()
        done.release()

    with lock:
        for _ in range(clients):
            send()
    for _ in range(total):
        assert done.acquire(timeout=60), "a request got no answer within 60 s"
    client.close()
    assert not errors, errors[:3]

    deadline = time.monotonic() + 10  # counters are updated when a request is released
    while True:
        after = metrics(url)
        inferences = model_metric(after, "nv_inference_count", "digits") - model_metric(
            before, "nv_inference_count", "digits"
        )
        if inferences >= total or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    executions = model_metric(after, "nv_inference_exec_count", "digits") - model_metric(
        before, "nv_inference_exec_count", "digits"
    )
    print(
        f"\n{int(inferences)} inferences in {int(executions)} executions "
        f"(mean batch {inferences / max(executions, 1):.1f})"
    )
    assert inferences == total
    assert executions <= inferences / 2
