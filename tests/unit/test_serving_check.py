"""Optional variants cannot take the server down: ``export.serving_check`` loads each optional variant in the
serving runtime and removes those that do not load, before a fail-fast server reads the repository. The
server here is a stand-in that answers Triton's HTTP model-control calls as ``tritonserver`` does."""

from __future__ import annotations

import json
import sys
import textwrap

from export import serving_check
from export.seed import COMPLETE_MARKER


def repository(tmp_path, optional=("digits_onnx", "digits_trt_fp16"), required=("digits",)):
    for name in (*optional, *required):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "config.pbtxt").write_text(f'name: "{name}"\n')
    marker = {"target": "gpu", "exports": 3, "not_exported": ["digits_onnx_fp16"], "optional": list(optional)}
    (tmp_path / COMPLETE_MARKER).write_text(json.dumps(marker) + "\n")
    return tmp_path


def test_an_optional_variant_that_does_not_load_leaves_the_repository(tmp_path):
    repo = repository(tmp_path)
    lines = []
    loaded = []

    def load(name):
        loaded.append(name)
        return "onnx runtime error 1: TensorRT EP failed to create engine" if name == "digits_onnx" else None

    removed = serving_check.check(repo, serving_check.read_marker(repo), load, lines.append)
    assert loaded == ["digits_onnx", "digits_trt_fp16"], "only the optional variants are loaded"
    assert removed == {"digits_onnx": "onnx runtime error 1: TensorRT EP failed to create engine"}
    assert not (repo / "digits_onnx").exists() and (repo / "digits_trt_fp16").is_dir() and (repo / "digits").is_dir()
    assert lines[0].startswith("serving-check: digits_onnx: removed (optional; it does not load in this server)")
    marker = json.loads((repo / COMPLETE_MARKER).read_text())
    assert marker["optional"] == ["digits_trt_fp16"]
    assert marker["not_exported"] == ["digits_onnx_fp16", "digits_onnx"]
    assert marker["serving_check"]["loaded"] == ["digits_trt_fp16"] and marker["target"] == "gpu"


def test_nothing_optional_starts_no_server(tmp_path, capsys):
    repo = repository(tmp_path, optional=())
    assert serving_check.run(repo, command=["/nonexistent/tritonserver"]) == 0
    assert "nothing to load" in capsys.readouterr().out
    assert json.loads((repo / COMPLETE_MARKER).read_text())["serving_check"]["removed"] == {}


def test_an_unfinished_export_is_refused_with_status_2(tmp_path, capsys):
    assert serving_check.run(tmp_path) == 2
    assert "the export has not finished" in capsys.readouterr().err


def test_a_server_that_does_not_start_fails_the_check_with_its_output(tmp_path, capsys):
    repo = repository(tmp_path)
    command = [sys.executable, "-c", "import sys; print('error: unrecognized option'); sys.exit(1)"]
    assert serving_check.run(repo, command=command) == 3
    err = capsys.readouterr().err
    assert "tritonserver exited with 1 at start: error: unrecognized option" in err
    assert (repo / "digits_onnx").is_dir(), "nothing is removed on a check that did not run"


STAND_IN = textwrap.dedent(
    """
    import json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer

    args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
    assert args["--model-control-mode"] == "explicit" and args["--http-address"] == "127.0.0.1", args
    assert args["--allow-grpc"] == "false" and args["--exit-on-error"] == "false", args

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/v2/health/live" else 404)
            self.end_headers()

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            model = self.path.split("/")[4]
            failed = model.startswith("digits_onnx")
            error = f"load failed for model '{model}': version 1 is at UNAVAILABLE state"
            body = json.dumps({"error": error} if failed else {})
            self.send_response(400 if failed else 200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

    HTTPServer(("127.0.0.1", int(args["--http-port"])), Handler).serve_forever()
    """
)


def test_the_check_server_loads_through_tritons_model_control_and_is_stopped(tmp_path, capsys):
    repo = repository(tmp_path / "models")
    (tmp_path / "stand_in.py").write_text(STAND_IN)
    assert serving_check.run(repo, command=[sys.executable, str(tmp_path / "stand_in.py")]) == 0
    out = capsys.readouterr().out
    assert "serving-check: digits_onnx: removed (optional; it does not load in this server): load failed for " in out
    assert "serving-check: digits_trt_fp16: loads" in out and "1 loaded, 1 removed" in out
    assert not (repo / "digits_onnx").exists() and (repo / "digits_trt_fp16").is_dir()
