"""The stream senders time each response that carries text, whatever the output is named: the gRPC stream's
callback, and HTTP ``generate_stream`` read event by event as the server sends them (a local server that
pauses between events), not the body at once.

``loadtest.generators.locust.users`` imports Locust, which monkey-patches the whole process for gevent, so the senders
run in a child process (``PROBE``) and report what they saw as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[5]
GAP_S = 0.2
"""The local server's pause between two events."""

PROBE = textwrap.dedent(
    """
    import json, threading, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import gevent
    import numpy as np
    from tritonclient.grpc import service_pb2

    from loadtest.generators.locust import users

    out = {}
    # -- gRPC: the stream's callback, fed as Triton 2.51 feeds it ---------------------------------------------
    class Result:
        def __init__(self, response):
            self.response = response

        def get_response(self):
            return self.response

    def response(request_id, outputs, final=False):
        r = service_pb2.ModelInferResponse(id=request_id)
        for name, datatype in outputs:
            o = r.outputs.add()
            o.name, o.datatype = name, datatype
        r.parameters["triton_final_response"].bool_param = final
        return r

    class StreamClient:
        def __init__(self, sender, script, error=None):
            self.sender, self.script, self.error = sender, script, error

        def async_stream_infer(self, model, inputs, request_id, enable_empty_final_response):
            def answer():
                for outputs in self.script:
                    gevent.sleep(0.02)
                    self.sender._on_response(Result(response(request_id, outputs)), None)
                if self.error:
                    self.sender._on_response(None, self.error)
                else:
                    self.sender._on_response(Result(response(request_id, [], final=True)), None)
            gevent.spawn(answer)

    def grpc_sender(script, error=None):
        sender = object.__new__(users.GrpcStreamSender)
        sender.model, sender.requests, sender.pending, sender.counter = "m", [[]], {}, 0
        sender.client = StreamClient(sender, script, error)
        return sender

    times = grpc_sender(
        [[("text_output", "BYTES")], [("TEXT", "BYTES")], [("COUNT", "INT32")], [("text_output", "BYTES")]]
    ).send(0)
    out["grpc_gaps"] = [b - a for a, b in zip(times, times[1:])]
    try:
        grpc_sender([[("TEXT", "BYTES")]], error="[StatusCode.INVALID_ARGUMENT] bad").send(0)
        out["grpc_error"] = None
    except RuntimeError as exc:
        out["grpc_error"] = str(exc)

    # -- HTTP generate_stream: server-sent events with pauses between them --------------------------------------
    EVENTS = [
        {"model_name": "m", "model_version": "1", "text_output": "Hel"},
        {"model_name": "m", "model_version": "1", "text_output": "lo"},
        {"model_name": "m", "model_version": "1"},
    ]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            bad = self.path.startswith("/v2/models/bad/")
            events = [EVENTS[0], {"error": "max_tokens must be > 0"}] if bad else EVENTS
            for event in events:
                data = ("data: " + json.dumps(event) + "\\n\\n").encode()
                self.wfile.write(b"%x\\r\\n%s\\r\\n" % (len(data), data))
                self.wfile.flush()
                time.sleep(GAP_S)
            self.wfile.write(b"0\\r\\n\\r\\n")
            self.wfile.flush()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"127.0.0.1:{server.server_address[1]}"
    payloads = [{"PROMPT": np.array([b"Hello"], dtype=object)}]
    sender = users.HttpStreamSender(url, "m", payloads, 1)
    times = sender.send(0)
    out["http_gaps"] = [b - a for a, b in zip(times, times[1:])]
    out["http_again"] = len(sender.send(0))  # the connection went back to the pool in order
    try:
        users.HttpStreamSender(url, "bad", payloads, 1).send(0)
        out["http_error"] = None
    except RuntimeError as exc:
        out["http_error"] = str(exc)
    server.shutdown()
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def seen() -> dict:
    done = subprocess.run(
        [sys.executable, "-c", f"GAP_S = {GAP_S}\n" + PROBE], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_grpc_sender_times_each_bytes_response_and_ends_at_the_final_one(seen):
    # four responses, one of them without text: three tokens, two gaps of at least the 20 ms between responses
    gaps = seen["grpc_gaps"]
    assert len(gaps) == 2 and all(gap >= 0.015 for gap in gaps), gaps


def test_a_grpc_stream_error_fails_the_request_with_its_message(seen):
    assert seen["grpc_error"] == "[StatusCode.INVALID_ARGUMENT] bad"


def test_the_http_sender_reads_each_event_as_it_comes(seen):
    # read at once, the two text events would come at the same instant
    (gap,) = seen["http_gaps"]
    assert gap >= GAP_S * 0.75, gap
    assert seen["http_again"] == 2


def test_an_error_event_fails_the_http_request_naming_the_error(seen):
    assert seen["http_error"].startswith("HTTP 200: data: ") and "max_tokens must be > 0" in seen["http_error"]


WAIT_PROBE = textwrap.dedent(
    """
    import json, sys, time
    import gevent
    from loadtest.generators.locust import wake

    wake.KERNEL_TIMER = wake.KERNEL_TIMER and sys.argv[1] == "kernel"
    early, answered = [], []
    cpu, waited = time.process_time(), 0.0
    for i in range(30):
        due = time.monotonic() + 0.003 + 0.0007 * (i % 5)
        waited += due - time.monotonic()
        if i % 2:  # an answer in flight: the wait must let it in before the due time
            gevent.spawn(lambda: answered.append(time.monotonic()))
        wake.wait_until(due)
        early.append(due - time.monotonic())
        if i % 2:
            assert answered and answered[-1] <= due, (answered, due)
    print(json.dumps({"early": early, "answered": len(answered), "cpu_share": (time.process_time() - cpu) / waited}))
    """
)


def _wait_probe(timer: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", WAIT_PROBE, timer], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("timer", ["kernel", "yield"])
def test_the_open_loop_never_sends_before_a_request_falls_due_and_lets_answers_in_while_it_waits(timer):
    """gevent's timer alone wakes up to a millisecond late (a late send counts as latency): the loop wakes on it
    ``TIMER_SLACK_S`` early and ``wake.wait_until`` waits out the rest, on a kernel timer or, without one, yielding."""
    seen = _wait_probe(timer)
    assert seen["answered"] == 15
    assert max(seen["early"]) <= 0  # never before it fell due


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's; elsewhere the wait yields")
def test_on_linux_the_open_loop_sleeps_on_a_kernel_timer_instead_of_spinning_until_a_request_falls_due():
    """A loop that yields until the due time holds the interpreter lock that gRPC's answers need (it cost 0.6 ms
    of every request's median at 1,000 req/s): the kernel timer leaves the CPU idle while it waits."""
    from loadtest.generators.locust import wake

    assert wake.KERNEL_TIMER
    assert _wait_probe("kernel")["cpu_share"] < 0.5  # a spin is near 1: the CPU the whole time it waited
