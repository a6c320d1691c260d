"""The supervisor's detection and reload logic, without a server."""

import time
from pathlib import Path

import pytest

from deploy import supervisor as sup
from deploy.errors import ServerError
from deploy.server import ServerConfig
from deploy.supervisor import RecoveryEvent, StubInfo, StubWatch, Supervisor, parse_stub

# A real 2.51 stub command line (digits served by backends/pytorch), as psutil read it.
CMDLINE = (
    "/tmp/tritonkit-server-x/backends/python/triton_python_backend_stub",
    "/tmp/repo/digits/1/model.pt",
    "triton_pytorch_backend_shm_region_3989ccbf",
    "1048576",
    "1048576",
    "18132",
    "/tmp/tritonkit-server-x/backends/python",
    "336",
    "digits_0_1",
    "/tmp/tritonkit-server-x/backends/pytorch",
)


def stub(pid, instance="digits_0_1", status="sleeping", created=100.0, model="digits"):
    cmdline = (
        ()
        if status == "zombie"
        else (*CMDLINE[:1], f"/tmp/repo/{model}/1/model.pt", *CMDLINE[2:8], instance, CMDLINE[9])
    )
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


def test_a_stub_caught_while_it_exits_is_decided_on_a_later_poll():
    # A SIGKILLed stub loses its command line before it turns zombie; a poll in that instant saw it as gone
    # (a stop on purpose), and the crash went unrepaired (CI, tests/functional/test_stub_crash.py).
    watch = StubWatch(confirm_s=0.2)
    watch.observe([stub(1), stub(2, "digits_0_0")], now=1.0)
    assert watch.observe([StubInfo(1, "exiting", 100.0), stub(2, "digits_0_0")], now=1.25) == []
    assert watch.observe([StubInfo(1, "unknown", 0.0), stub(2, "digits_0_0")], now=1.5) == []
    assert 1 in watch.known
    assert watch.observe([stub(1, status="zombie"), stub(2, "digits_0_0")], now=1.75) == []
    (dead,) = watch.observe([stub(1, status="zombie"), stub(2, "digits_0_0")], now=2.0)
    assert (dead.pid, dead.last_alive) == (1, 1.0)
    # ... while one that exits and is reaped was stopped on purpose.
    watch.observe([stub(3, "digits_0_1", created=300.0)], now=3.0)
    assert watch.observe([StubInfo(3, "exiting", 300.0)], now=3.25) == []
    assert watch.observe([], now=3.5) == [] and 3 not in watch.known


def test_a_reused_pid_is_a_new_process_not_the_known_stub():
    watch = StubWatch(confirm_s=0.0)
    watch.observe([stub(1, created=100.0)], now=1.0)
    # pid 1 was reaped (stopped on purpose) and reused by a newer stub that then crashed: no report of
    # the old one, and the new one is watched from its own first sight.
    assert watch.observe([stub(1, "digits_0_0", created=150.0)], now=1.1) == []
    assert 1 not in watch.known
    watch.observe([stub(1, "digits_0_0", created=150.0)], now=1.2)
    assert watch.known[1].instance == "digits_0_0"


def test_snapshot_reads_real_processes(tmp_path):
    """Real children of this process: a stub-named one alive, then killed (a zombie until waited), and
    a child that is no stub, left out."""
    import os
    import shutil
    import signal
    import subprocess

    binary = tmp_path / sup.STUB_BINARY
    binary.symlink_to(shutil.which("sleep"))
    stub_proc = subprocess.Popen([str(binary), "30"])
    other = subprocess.Popen([shutil.which("sleep"), "30"])
    try:
        # Popen returns once exec closed the error pipe, a moment before the kernel sets the new command
        # line; snapshot rightly reads such a child as "exiting", so wait until both have theirs.
        deadline = time.monotonic() + 10
        for proc in (stub_proc, other):
            while not Path(f"/proc/{proc.pid}/cmdline").read_bytes():
                assert time.monotonic() < deadline
                time.sleep(0.01)
        seen = {s.pid: s for s in sup.snapshot(os.getpid())}
        assert other.pid not in seen
        assert seen[stub_proc.pid].cmdline[0] == str(binary) and seen[stub_proc.pid].status != "zombie"
        os.kill(stub_proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (status := {s.pid: s for s in sup.snapshot(os.getpid())}[stub_proc.pid].status) != "zombie":
            assert time.monotonic() < deadline, status
            time.sleep(0.01)
        zombie = {s.pid: s for s in sup.snapshot(os.getpid())}[stub_proc.pid]
        assert zombie.cmdline == () and zombie.create_time == seen[stub_proc.pid].create_time
    finally:
        for proc in (stub_proc, other):
            proc.kill()
            proc.wait()
    assert stub_proc.pid not in {s.pid for s in sup.snapshot(os.getpid())}  # reaped: gone


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
    s = _supervisor(
        monkeypatch,
        [[stub(1), stub(2, "digits_0_0")], [stub(1, status="zombie"), stub(2, "digits_0_0", status="zombie")]],
        control,
    )
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


class FakeProcess:
    killed: list[int] = []

    def __init__(self, pid):
        self.pid = pid

    def create_time(self):
        return {2: 100.0, 3: 100.0}.get(self.pid, 999.0)

    def kill(self):
        FakeProcess.killed.append(self.pid)


def _recovered(monkeypatch):
    """A supervisor that has reloaded digits after stub 1 (digits_0_1) died; stub 2 (digits_0_0) was its
    healthy sibling."""
    FakeProcess.killed = []
    monkeypatch.setattr(sup.psutil, "Process", FakeProcess)
    s = _supervisor(
        monkeypatch,
        [[stub(1), stub(2, "digits_0_0")], [stub(1, status="zombie"), stub(2, "digits_0_0")]],
        FakeControl(),
    )
    s.poll()
    (event,) = s.poll()
    assert event.ok and event.settled_at is None
    return s, event


def test_replaced_stubs_that_triton_kept_are_ended_after_the_grace(monkeypatch):
    s, event = _recovered(monkeypatch)
    # Triton kept the old instances: the dead stub is still an unreaped zombie, its sibling still alive.
    kept = [stub(1, status="zombie"), stub(2, "digits_0_0"), *FRESH]
    monkeypatch.setattr(sup, "snapshot", lambda pid: kept)
    assert s.settle(event.reloaded_at + s.orphan_grace_s - 1) == [] and event.settled_at is None  # not yet
    assert s.settle(event.reloaded_at + s.orphan_grace_s) == [2]
    assert FakeProcess.killed == [2] and event.orphans == [2] and event.settled_at is not None
    assert "ended 1 orphaned stub(s)" in event.describe()
    assert s.settle(event.reloaded_at + 2 * s.orphan_grace_s) == []  # once


def test_replaced_stubs_stopping_on_their_own_are_left_alone(monkeypatch):
    s, event = _recovered(monkeypatch)
    # Triton reaped the dead stub: it is finalizing the old instances, so stub 2 exits by itself.
    monkeypatch.setattr(sup, "snapshot", lambda pid: [stub(2, "digits_0_0"), *FRESH])
    assert s.settle(event.reloaded_at + s.orphan_grace_s) == []
    assert FakeProcess.killed == [] and event.orphans == [] and event.settled_at is not None


def test_only_replaced_stubs_of_the_crashed_generation_are_ended(monkeypatch):
    s, event = _recovered(monkeypatch)
    others = [
        stub(3, "digits_0_2"),  # no newer stub of its instance: still serving
        stub(4, "text_generator_0_0", model="text_generator", created=100.0),  # another model
        stub(5, "text_generator_0_0", model="text_generator", created=999.0),
    ]
    monkeypatch.setattr(sup, "snapshot", lambda pid: [stub(1, status="zombie"), stub(2, "digits_0_0"), *FRESH, *others])
    assert s.settle(event.reloaded_at + s.orphan_grace_s) == [2]


def test_an_event_without_reload_is_settled_at_once(monkeypatch):
    s = _supervisor(monkeypatch, [[stub(1)], [stub(1, status="zombie")]], FakeControl(ready=()))
    s.poll()
    (event,) = s.poll()
    assert event.skipped and event.settled_at is not None and s.wait_for_events(1, 0.1, settled=True) == [event]


@pytest.mark.parametrize("value, grace", [(None, 30.0), ("", 30.0), ("2.5", 2.5), (" 5 ", 5.0)])
def test_the_orphan_grace_comes_from_the_environment_or_is_30_s(value, grace):
    environ = {} if value is None else {sup.ORPHAN_GRACE_ENV: value}
    assert sup.orphan_grace_from_env(environ) == grace


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan", "inf"])
def test_a_bad_orphan_grace_is_refused_naming_the_variable(value):
    with pytest.raises(ServerError, match=f"TRITONKIT_ORPHAN_GRACE_S={value!r} is not a number of seconds above 0"):
        sup.orphan_grace_from_env({sup.ORPHAN_GRACE_ENV: value})


def test_the_supervisor_takes_its_orphan_grace_from_the_environment(monkeypatch):
    monkeypatch.setenv(sup.ORPHAN_GRACE_ENV, "4")
    assert Supervisor(123, "127.0.0.1:1").orphan_grace_s == 4.0
    assert Supervisor(123, "127.0.0.1:1", orphan_grace_s=7.0).orphan_grace_s == 7.0


def test_the_thread_stops_promptly(monkeypatch):
    monkeypatch.setattr(sup, "snapshot", lambda pid: [])
    s = Supervisor(123, "127.0.0.1:1", interval_s=0.05)
    s.start()
    s.stop(timeout_s=2)
    assert not s.is_alive()


def test_supervise_needs_explicit_mode(tmp_path):
    with pytest.raises(ValueError, match="explicit"):
        ServerConfig(
            model_repository=tmp_path,
            http_port=1,
            grpc_port=2,
            metrics_port=3,
            model_control_mode="poll",
            supervise=True,
        )
    assert not ServerConfig(model_repository=tmp_path, http_port=1, grpc_port=2, metrics_port=3).supervise


def test_event_without_reload_has_no_recovery_time():
    event = RecoveryEvent("digits", ["digits_0_1"], [1], 1.0, 2.0)
    assert event.recovery_s is None and event.downtime_s is None and not event.ok
