"""deploy/signals.py: StopRequest records SIGINT/SIGTERM, unwinds once when asked to, and holds the raise
inside a block that must not be cut. The signals are real, sent to this process."""

import os
import signal
import sys
import threading
import time

import pytest

from deploy.signals import StopRequest

pytestmark = pytest.mark.usefixtures("restore_stop_handlers")


def test_unwinding_raises_at_the_first_signal_only_then_records():
    after_first = []
    with pytest.raises(SystemExit) as exited:
        with StopRequest(unwind=True) as stop:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # cut short by the handler's raise
                after_first.append("ran on")
            finally:
                os.kill(os.getpid(), signal.SIGINT)  # the burst that follows: recorded, never raised
                os.kill(os.getpid(), signal.SIGTERM)
    assert after_first == []
    assert exited.value.code == 128 + signal.SIGTERM
    assert stop.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN


def test_a_signal_inside_held_is_recorded_and_unwinds_as_the_block_ends():
    ran_to_the_end = []
    with StopRequest(unwind=True) as stop:
        with pytest.raises(SystemExit) as exited:
            with stop.held():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                ran_to_the_end.append(bool(stop))
    assert ran_to_the_end == [True]
    assert exited.value.code == 128 + signal.SIGINT


def test_an_error_inside_held_keeps_its_own_exception_and_the_signal_stays_recorded():
    with StopRequest(unwind=True) as stop:
        with pytest.raises(ValueError):
            with stop.held():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                raise ValueError("the start failed")
        assert stop.signum == signal.SIGTERM
        stop.cleaning_up()  # no raise is pending: the caller decides, from `stop`, how to exit


def test_a_polling_stop_request_never_raises():
    with StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert stop()


def test_a_normal_end_restores_the_handlers_from_before():
    before = signal.getsignal(signal.SIGTERM)
    with StopRequest(unwind=True):
        assert signal.getsignal(signal.SIGTERM) != before
    assert signal.getsignal(signal.SIGTERM) == before


def test_entered_from_another_thread_it_installs_nothing():
    before = signal.getsignal(signal.SIGTERM)
    errors, seen = [], []

    def enter():
        try:
            with StopRequest(unwind=True):
                seen.append(signal.getsignal(signal.SIGTERM))
        except ValueError as exc:  # what signal.signal raises outside the main thread
            errors.append(exc)

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert errors == []
    assert seen == [before]


def test_a_signal_during_an_import_unwinds_once_the_import_has_finished(tmp_path, monkeypatch):
    # An import that is signalled halfway: the raise waits for the import to end (it may run inside an
    # extension module's initialisation, where an exception aborts the process), then comes within ~50 ms.
    (tmp_path / "signalled_midway.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(0.2)\nFINISHED = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    previous_alarm = signal.getsignal(signal.SIGALRM)
    with pytest.raises(SystemExit) as raised, StopRequest(unwind=True) as stop:
        import signalled_midway

        assert signalled_midway.FINISHED and stop.signum == signal.SIGTERM
        time.sleep(2)
        pytest.fail("the deferred stop never raised")
    assert raised.value.code == 128 + signal.SIGTERM
    assert getattr(sys.modules.get("signalled_midway"), "FINISHED", False), "the raise cut the import short"
    sys.modules.pop("signalled_midway")
    assert signal.getsignal(signal.SIGALRM) == previous_alarm and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
