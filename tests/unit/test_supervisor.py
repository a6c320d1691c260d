"""The supervisor's detection and reload logic, and the client retry policy, without a server."""

import random

import pytest
from tritonclient.utils import InferenceServerException

from deploy import supervisor as sup
from deploy.server import ServerConfig
from deploy.supervisor import (RecoveryEvent, RetryPolicy, StubInfo, StubWatch, Supervisor, call_with_retry,
                               parse_stub, retryable)

# A real 2.51 stub command line (digits served by backends/pytorch), as psutil read it.
CMDLINE = ("/tmp/tritonkit-server-x/backends/python/triton_python_backend_stub", "/tmp/repo/digits/1/model.pt",
           "triton_pytorch_backend_shm_region_3989ccbf", "1048576", "1048576", "18132",
           "/tmp/tritonkit-server-x/backends/python", "336", "digits_0_1", "/tmp/tritonkit-server-x/backends/pytorch")


def stub(pid, instance="digits_0_1", status="sleeping", created=100.0, model="digits"):
    cmdline = () if status == "zombie" else (*CMDLINE[:1], f"/tmp/repo/{model}/1/model.pt", *CMDLINE[2:8],
                                              instance, CMDLINE[9])
    return StubInfo(pid, status, created, cmdline)


def test_parse_stub_names_model_and_instance():
    assert parse_stub(CMDLINE) == ("digits", "digits_0_1")
    python_model = list(CMDLINE)
    python_model[1], python_model[8] = "/repo/text_generator/1/model.py", "text_generator_0_0"
    assert parse_stub(python_model) == ("text_generator", "text_generator_0_0")
    assert parse_stub(["/usr/bin/python3", "x.py"]) is None
    assert parse_stub([]) is None


def test_parse_stub_falls_back_to_the_instance_name_when_the_path_is_elsewhere():
    moved = list(CMDLINE)
    moved[1] = "/tmp/override/1/model.pt"  # files passed to model control live in a temporary folder
    assert parse_stub(moved) == ("digits", "digits_0_1")


def test_a_zombie_stub_is_reported_once_after_the_confirm_time():
    watch = StubWatch(confirm_s=0.2)
    assert watch.observe([stub(1), stub(2, "digits_0_0")], now=10.0) == []
    assert watch.observe([stub(1, status="zombie"), stub(2, "digits_0_0")], now=10.25) == []  # first sight
    dead = watch.observe([stub(1, status="zombie"), stub(2, "digits_0_0")], now=10.5)
    assert [(d.pid, d.model, d.instance, d.last_alive) for d in dead] == [(1, "digits", "digits_0_1", 10.0)]
    assert watch.observe([stub(1, status="zombie"), stub(2, "digits_0_0")], now=10.75) == []  # handled already


def test_a_stub_reaped_at_once_is_a_stop_on_purpose_not_a_crash():
    watch = StubWatch(confirm_s=0.2)
    watch.observe([stub(1)], now=1.0)
    assert watch.observe([], now=1.25) == []  # gone without lingering as a zombie: Triton stopped it
    assert watch.observe([stub(1, status="gone")], now=1.5) == []
    assert watch.known == {}


def test_a_zombie_whose_instance_was_replaced_by_a_newer_stub_needs_no_reload():
    watch = StubWatch(confirm_s=0.0)
    watch.observe([stub(1, created=100.0)], now=1.0)
    watch.observe([stub(1, created=100.0), stub(5, created=200.0)], now=1.1)  # the model was reloaded
    assert watch.observe([stub(1, status="zombie"), stub(5, created=200.0)], now=1.2) == []


def test_unknown_zombies_are_ignored():
    watch = StubWatch(confirm_s=0.0)
    assert watch.observe([stub(9, status="zombie")], now=1.0) == []
    assert watch.observe([stub(9, status="zombie")], now=2.0) == []


class FakeControl:
    def __init__(self, ready=("digits",), failures=0):
        self.ready, self.failures, self.reloads = set(ready), failures, []

    def ready_models(self):
        return self.ready

    def reload(self, model):
        self.reloads.append(model)
        if self.failures:
            self.failures -= 1
            raise RuntimeError("HTTP 400: load failed")


FRESH = [stub(11, "digits_0_1", created=999.0), stub(12, "digits_0_0", created=999.0)]


def _supervisor(monkeypatch, snapshots, control, after=FRESH):
    """A supervisor whose polls see ``snapshots`` in turn, then ``after`` (by default: new stubs, reloaded)."""
    feed = iter(snapshots)
    monkeypatch.setattr(sup, "snapshot", lambda pid: next(feed, after))
    s = Supervisor(123, "127.0.0.1:1", confirm_s=0.0, backoff_s=0.01)
    s.control = control
    return s


def test_two_dead_stubs_of_one_model_cost_one_reload(monkeypatch):
    control = FakeControl()
    s = _supervisor(monkeypatch, [[stub(1), stub(2, "digits_0_0")],
                                  [stub(1, status="zombie"), stub(2, "digits_0_0", status="zombie")]], control)
    assert s.poll() == []
    (event,) = s.poll()
    assert control.reloads == ["digits"]
    assert event.ok and event.attempts == 1 and sorted(event.instances) == ["digits_0_0", "digits_0_1"]
    assert event.recovery_s >= 0 and event.downtime_s >= event.recovery_s
    assert "reloaded in" in event.describe()


def test_a_failed_reload_is_tried_again_with_backoff_then_given_up(monkeypatch):
    control = FakeControl(failures=5)
    s = _supervisor(monkeypatch, [[stub(1)], [stub(1, status="zombie")]], control)
    s.poll()
    (event,) = s.poll()
    assert control.reloads == ["digits"] * 3 and not event.ok and event.attempts == 3
    assert "HTTP 400" in event.error and "reload failed" in event.describe()


def test_a_load_that_leaves_the_dead_stub_in_place_does_not_count_as_recovered(monkeypatch):
    control = FakeControl()  # Triton answers a load of an unchanged config at once and changes nothing
    s = _supervisor(monkeypatch, [[stub(1)], [stub(1, status="zombie")]], control, after=[])
    s.poll()
    (event,) = s.poll()
    assert control.reloads == ["digits"] * 3 and not event.ok and "not replaced" in event.error


def test_a_model_no_longer_ready_is_not_reloaded(monkeypatch):
    control = FakeControl(ready=())
    s = _supervisor(monkeypatch, [[stub(1)], [stub(1, status="zombie")]], control)
    s.poll()
    (event,) = s.poll()
    assert control.reloads == [] and event.skipped and not event.ok


def test_the_thread_stops_promptly(monkeypatch):
    monkeypatch.setattr(sup, "snapshot", lambda pid: [])
    s = Supervisor(123, "127.0.0.1:1", interval_s=0.05)
    s.start()
    s.stop(timeout_s=2)
    assert not s.is_alive()


def test_supervise_needs_explicit_mode(tmp_path):
    with pytest.raises(ValueError, match="explicit"):
        ServerConfig(model_repository=tmp_path, http_port=1, grpc_port=2, metrics_port=3, model_control_mode="poll",
                     supervise=True)
    assert not ServerConfig(model_repository=tmp_path, http_port=1, grpc_port=2, metrics_port=3).supervise


def test_event_without_reload_has_no_recovery_time():
    event = RecoveryEvent("digits", ["digits_0_1"], [1], 1.0, 2.0)
    assert event.recovery_s is None and event.downtime_s is None and not event.ok


# -- client retry -------------------------------------------------------------------------------
@pytest.mark.parametrize("exc, expected", [
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
])
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
    result = call_with_retry(send, RetryPolicy(attempts=3, backoff_ms=10), sleep=slept.append,
                             on_retry=retried.append)
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
