"""deploy/lifecycle.py's contract where no server is needed: attached to a server given by URL, the block still
unwinds on SIGTERM/SIGINT and exits 128 + signum; errors pass through; the handlers come back after a normal end.
With a real server (started, signalled, nothing left behind): tests/functional/test_stop_signals.py."""

import argparse
import ast
import inspect
import os
import signal
import sys
import time

import pytest

from deploy.lifecycle import local_server
from deploy.signals import StopRequest

pytestmark = pytest.mark.usefixtures("restore_stop_handlers")


def test_attached_by_url_the_block_gets_no_server():
    with local_server(None) as server:
        assert server is None


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_in_the_block_exits_with_128_plus_its_number_whatever_follows(signum):
    after_signal = []
    with pytest.raises(SystemExit) as exited:
        with local_server(None):
            try:
                os.kill(os.getpid(), signum)
                time.sleep(5)  # cut short by the unwinding
                after_signal.append("ran on")
            finally:  # a burst (Docker, Kubernetes, a second Ctrl-C) during the cleanup: recorded only
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGTERM)
    assert after_signal == []
    assert exited.value.code == 128 + signum
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # the rest of the burst cannot kill the exit


def test_an_error_in_the_block_passes_through_and_the_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyError, match="the work failed"):
        with local_server(None):
            raise KeyError("the work failed")
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_normal_end_restores_the_handlers_from_before():
    before = signal.getsignal(signal.SIGINT)
    with local_server(None):
        assert signal.getsignal(signal.SIGINT) != before
    assert signal.getsignal(signal.SIGINT) == before


def test_with_the_callers_stop_request_a_signal_is_left_to_the_caller():
    with StopRequest() as stop:  # tritonkit serve's: polled, exit 0 on a stop
        with local_server(None, signals=stop):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            still_running = True
        assert still_running and stop.signum == signal.SIGTERM


# The commands that start a server of their own. tests/functional/test_stop_signals.py sends a stop signal to
# the long-running ones for real; this checks that every one goes through the same lifecycle.
SERVER_COMMANDS = (
    "serve",
    "loadtest",
    "tune",
    "compare",
    "capacity",
    "overload",
    "soak",
    "floor",
    "genai-perf",
    "aiperf",
    "bench",
    "bench-generation",
    "first-request",
    "demo",
    "analyzer",  # Model Analyzer starts the server; the lifecycle unwinds the command on a signal
)


STARTED_IN = {"first-request": ("loadtest.probes.first_request",)}
"""Commands whose server is started by the measurement their command module runs, not by the module itself."""


def _calls(module) -> set[str]:
    tree = ast.parse(inspect.getsource(module))
    return {
        node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
    }


@pytest.mark.parametrize("command", SERVER_COMMANDS)
def test_every_command_that_starts_a_server_holds_it_through_the_one_lifecycle(command):
    import tritonkit_cli
    from loadtest.target import endpoints as target

    parser = tritonkit_cli.build_parser()
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    handler = subparsers.choices[command].get_default("handler")
    # A study's handler is its Study's bound command: the study's module is its class's.
    owner = type(handler.__self__) if inspect.ismethod(handler) else handler
    module = sys.modules[owner.__module__]
    assert "local_server" in _calls(target)  # run_with_server is local_server and the work
    calls = _calls(module).union(*(_calls(sys.modules[m]) for m in STARTED_IN.get(command, ())))
    assert calls & {"run_with_server", "local_server"}, f"{command}: {module.__name__} starts no server"


def test_a_server_that_stops_answering_during_the_work_is_one_line_and_exit_3(capsys):
    import urllib.error

    from loadtest.target import endpoints as target

    args = argparse.Namespace(
        http_url="127.0.0.1:9", grpc_url="127.0.0.1:10", metrics_url="http://127.0.0.1:11/metrics", server_cpus=None
    )
    args.client_cpus = None

    def work(endpoints, server):
        raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))

    assert target.run_with_server(args, (), work) == (3, None)
    err = capsys.readouterr().err.splitlines()
    assert err == ["error: the server at 127.0.0.1:9 stopped answering during the run ([Errno 111] Connection refused)"]

    def reset(endpoints, server):
        raise ConnectionResetError(104, "Connection reset by peer")

    assert target.run_with_server(args, (), reset) == (3, None)
    assert "stopped answering during the run ([Errno 104] Connection reset by peer)" in capsys.readouterr().err
