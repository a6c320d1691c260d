"""The one model-control client (``deploy.client.ModelControl``) and its one definition of ready, which the
supervisor and the load tools (``loadtest.target.apply``) share. The index entries are the shapes Triton 2.51
answers (``TRITONSERVER_ServerModelIndex``); the requests go over real HTTP to a small stand-in that records
them. The real server's answers: tests/functional/test_digits.py, test_stub_crash.py."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from deploy.client import ModelControl, ModelControlError, is_ready
from deploy.supervisor import Supervisor
from loadtest.errors import VariantError
from loadtest.target import apply

NEVER_LOADED = {"name": "resnet50"}  # a model Triton has not tried to load: its name only
READY = {"name": "digits", "version": "1", "state": "READY"}
UNLOADED = {"name": "minilm", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
LOADING = {"name": "minilm", "version": "2", "state": "LOADING"}


def test_a_model_is_ready_only_when_its_state_says_ready_and_a_missing_state_is_a_model_never_loaded():
    assert [is_ready(e) for e in (NEVER_LOADED, READY, UNLOADED, LOADING)] == [False, True, False, False]


class StandIn(BaseHTTPRequestHandler):
    """Answers model-control requests as ``answers`` says (path -> (status, body)); records each request."""

    answers: dict[str, tuple[int, object]] = {}
    requests: list[tuple[str, str, object]] = []
    headers_seen: list[dict[str, str]] = []

    def _answer(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.requests.append((method, self.path, body))
        self.headers_seen.append(dict(self.headers))
        status, answer = self.answers.get(self.path, (200, None))
        data = b"" if answer is None else json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._answer("GET")

    def do_POST(self):
        self._answer("POST")

    def log_message(self, *args):
        pass


@pytest.fixture
def triton():
    """The stand-in's ``host:port``; its handler class holds the answers and the requests."""
    StandIn.answers, StandIn.requests, StandIn.headers_seen = {}, [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_supervisor_and_the_load_tools_ask_the_same_question_and_get_the_same_answer(triton):
    # The whole index comes back; only the entry whose state is READY counts (one never loaded has no state).
    StandIn.answers["/v2/repository/index"] = (200, [READY, NEVER_LOADED, UNLOADED, LOADING])
    supervisor = Supervisor(1, triton)
    assert supervisor.control.ready_models() == apply.ready_models(triton) == {"digits"}
    assert [r[:2] for r in StandIn.requests] == [("POST", "/v2/repository/index")] * 2


def test_a_load_sends_the_config_as_triton_takes_it_and_checks_the_model_is_ready(triton):
    apply.load(triton, "digits", {"name": "digits", "max_batch_size": 8})
    (method, path, body), ready = StandIn.requests
    assert (method, path) == ("POST", "/v2/repository/models/digits/load")
    assert json.loads(body["parameters"]["config"]) == {"name": "digits", "max_batch_size": 8}
    assert ready[:2] == ("GET", "/v2/models/digits/ready")
    apply.load(triton, "digits")  # from its files: no config parameter
    assert StandIn.requests[2][2] == {}


def test_a_failed_load_is_named_with_tritons_reason(triton):
    reason = "load failed for model 'digits': version 1 is at UNAVAILABLE state: Invalid argument"
    StandIn.answers["/v2/repository/models/digits/load"] = (400, {"error": reason})
    with pytest.raises(VariantError) as error:
        apply.load(triton, "digits", {"name": "digits"})
    assert str(error.value) == f"loading 'digits' with the variant's config failed: {reason}"


def test_a_model_that_is_not_ready_after_its_load_is_an_error(triton):
    StandIn.answers["/v2/models/digits/ready"] = (400, None)
    with pytest.raises(VariantError, match="model 'digits' is not ready after loading"):
        apply.load(triton, "digits")


def test_a_reload_serves_the_same_config_with_a_fresh_parameter_so_triton_makes_new_instances(triton):
    StandIn.answers["/v2/models/digits/config"] = (200, {"name": "digits", "parameters": {}})
    ModelControl(triton).reload("digits")
    ModelControl(triton).reload("digits")
    sent = [json.loads(b["parameters"]["config"]) for m, p, b in StandIn.requests if p.endswith("/load")]
    marks = [config["parameters"].pop("TRITONKIT_RELOAD")["string_value"] for config in sent]
    assert sent == [{"name": "digits", "parameters": {}}] * 2 and marks[0] != marks[1]


def test_a_server_that_is_not_there_is_named_not_raised_as_a_socket_error():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ModelControlError, match=f"cannot reach http://127.0.0.1:{port}"):
        ModelControl(f"127.0.0.1:{port}").index()
    with pytest.raises(VariantError, match=f"cannot list the models at 127.0.0.1:{port}"):
        apply.ready_models(f"127.0.0.1:{port}")


def test_every_model_control_call_sends_the_admin_key(triton):
    StandIn.answers["/v2/repository/index"] = (200, [READY])
    StandIn.answers["/v2/models/digits/config"] = (200, {"name": "digits"})
    control = ModelControl(triton, headers={"admin-key": "k3y"})
    control.ready_models()
    control.is_model_ready("digits")
    control.reload("digits")
    control.unload("digits")
    assert [p for m, p, b in StandIn.requests] == [
        "/v2/repository/index",
        "/v2/models/digits/ready",
        "/v2/models/digits/config",
        "/v2/repository/models/digits/load",
        "/v2/repository/models/digits/unload",
    ]
    assert [h.get("admin-key") for h in StandIn.headers_seen] == ["k3y"] * 5


def test_a_failed_load_is_one_line_naming_the_model_and_tritons_reason_without_the_python_stack(triton):
    reason = "load failed for model 'digits': version 1 is at UNAVAILABLE state: Internal: RuntimeError: boom"
    stack = "\n\nAt:\n  /models/digits/1/model.py(12): initialize\n"
    StandIn.answers["/v2/repository/models/digits/load"] = (400, {"error": reason + stack})
    with pytest.raises(ModelControlError) as error:
        ModelControl(triton).load("digits")
    assert str(error.value) == f"loading 'digits': HTTP 400: {reason}"
    assert (error.value.status, error.value.message) == (400, reason)


def test_a_server_that_does_not_answer_in_time_is_named_after_the_timeout():
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(ModelControlError, match=f"the repository index: cannot reach http://127.0.0.1:{port}"):
            ModelControl(f"127.0.0.1:{port}", timeout_s=0.3).index()
        assert time.monotonic() - started < 5
