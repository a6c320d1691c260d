"""The client retry policy (deploy/retry.py), without a server."""

import random

import pytest
from tritonclient.utils import InferenceServerException

from deploy.retry import RetryPolicy, call_with_retry, retryable


@pytest.mark.parametrize(
    "exc, expected",
    [
        (InferenceServerException("Stub process 'digits_0_1' is not healthy.", status="500"), True),
        (InferenceServerException("Stub process 'digits_0_1' is not healthy.", status="StatusCode.INTERNAL"), True),
        (InferenceServerException("Exceeds maximum queue size", status="503"), True),
        (InferenceServerException("too many", status="429"), True),
        (InferenceServerException("Exceeds maximum queue size", status="StatusCode.UNAVAILABLE"), True),
        (InferenceServerException("Request for unknown model: 'digits' is not ready", status="400"), True),
        (InferenceServerException("unexpected shape for input 'PIXELS'", status="400"), False),
        (InferenceServerException("[StatusCode.INVALID_ARGUMENT] bad", status="StatusCode.INVALID_ARGUMENT"), False),
        (InferenceServerException("model crashed", status="500"), False),
        (RuntimeError("HTTP 503: busy"), True),
        (RuntimeError("HTTP 400: empty prompt"), False),
        (ConnectionRefusedError(111, "Connection refused"), True),
        (TimeoutError("timed out"), False),
    ],
)
def test_retryable(exc, expected):
    assert retryable(exc) is expected


def test_backoff_is_exponential_capped_and_jittered():
    policy = RetryPolicy(attempts=8, backoff_ms=100, max_backoff_ms=500)
    rng = random.Random(1)
    for retry, full in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.5), (7, 0.5)]:
        delays = [policy.delay_s(retry, rng) for _ in range(200)]
        assert full / 2 <= min(delays) and max(delays) <= full
        assert max(delays) - min(delays) > full / 4  # jittered, not a fixed wait


def test_retry_settings_contract():
    assert RetryPolicy.from_settings({}) is None
    assert RetryPolicy.from_settings({"retry": None}) is None
    policy = RetryPolicy.from_settings({"retry": {"attempts": 5, "backoff_ms": 20}})
    assert policy == RetryPolicy(attempts=5, backoff_ms=20.0, max_backoff_ms=2000.0)
    with pytest.raises(ValueError):
        RetryPolicy.from_settings({"retry": {"attempts": 0, "backoff_ms": 20}})
    with pytest.raises(ValueError):
        RetryPolicy.from_settings({"retry": {"attempts": 2, "backof": 20}})


def _flaky(errors):
    calls = []

    def send():
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return "answer"

    return send, calls


def test_call_with_retry_succeeds_after_retryable_failures_and_counts_them():
    unhealthy = InferenceServerException("Stub process 'digits_0_1' is not healthy.", status="500")
    send, calls = _flaky([unhealthy, unhealthy])
    slept, retried = [], []
    result = call_with_retry(send, RetryPolicy(attempts=3, backoff_ms=10), sleep=slept.append, on_retry=retried.append)
    assert result == ("answer", 2) and len(calls) == 3 and len(slept) == 2 and len(retried) == 2


def test_call_with_retry_gives_up_after_the_attempts_and_never_retries_input_errors():
    unhealthy = InferenceServerException("Stub process 'x' is not healthy.", status="500")
    send, calls = _flaky([unhealthy] * 5)
    with pytest.raises(InferenceServerException):
        call_with_retry(send, RetryPolicy(attempts=3, backoff_ms=0), sleep=lambda s: None)
    assert len(calls) == 3
    send, calls = _flaky([InferenceServerException("unexpected shape", status="400")])
    with pytest.raises(InferenceServerException):
        call_with_retry(send, RetryPolicy(attempts=3, backoff_ms=0), sleep=lambda s: None)
    assert len(calls) == 1
    send, calls = _flaky([unhealthy])
    with pytest.raises(InferenceServerException):
        call_with_retry(send, None)  # the default: no retry
    assert len(calls) == 1
