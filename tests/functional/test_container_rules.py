"""The containers' own commands, run here under the containers' rules (tests/functional/containers.py).

Export: the command of deploy/docker/export.Dockerfile (cpu target), of compose's export-cpu and of the
Kubernetes Job (overlays/cpu/export), which must be one command, runs as uid 1000 with HOME=/tmp, the
project read-only at /opt/tritonkit as the image copies it, a read-only root and the repository at the
top-level /models. It must exit 0 and write .export-complete. Serving: the Triton command of compose's
triton-cpu and of the Deployment (overlays/cpu), again one command, serves that /models read-only, the
Python models importing the project's code from /opt/tritonkit as the Triton image installs it, and
answers a real request for each public model.

The export runs with ``--catalog tests/data/containers/models.toml``: export/models.toml's settings for
digits, efficientnet_lite0, minilm and the SmolLM2 steps with fewer variants, so the run fits CI. It
still has each kind of model the faults were about: one that trains and caches (digits), TorchScript and
ONNX files, the Python models and both ensembles copied by the seed (SmolLM2's weights, dequantised from the
GGUF by the same code outside, are bound in from this checkout's cache: ``warm_weights``). The local
tritonserver stands in for the NGC image's: the project's backends/pytorch and backends/onnxruntime are bound
where the image keeps its native backends (/opt/tritonserver/backends, the server's default backend directory).
"""

from __future__ import annotations

import io
import json
import re
import shutil
import signal
import time
import tomllib
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml

from deploy.client import connect, infer
from deploy.server import PROJECT_ROOT, TritonDistribution, assemble_backends, free_ports
from export.seed import COMPLETE_MARKER
from export.zoo.base import cache_dir
from tests.functional.containers import VENV, Container, missing_tools, stop

pytestmark = pytest.mark.skipif(
    bool(missing_tools()), reason=f"the containers' rules need {', '.join(missing_tools())}"
)

DOCKER = PROJECT_ROOT / "deploy" / "docker"
CATALOG = PROJECT_ROOT / "tests" / "data" / "containers" / "models.toml"
EXPORTED = {"digits", "digits_onnx", "efficientnet_lite0", "minilm", "smollm2_prefill", "smollm2_decode"}
SEEDED = {"image_classifier", "preprocess", "postprocess", "text_embedder", "tokenize", "text_generator"}
PUBLIC = {
    "digits",
    "digits_onnx",
    "efficientnet_lite0",
    "minilm",
    "image_classifier",
    "text_embedder",
    "text_generator",
}
ADMIN_KEY = "container-rules-test-admin-key"


# -- the commands, read from the files that run them ----------------------------------------------------


def dockerfile(name: str) -> tuple[str, list[tuple[str, str]], list[str] | None]:
    """(WORKDIR, [(source, destination)] of COPY, CMD) of deploy/docker/<name>.Dockerfile."""
    text = (DOCKER / f"{name}.Dockerfile").read_text()
    workdir = (re.findall(r"^WORKDIR\s+(\S+)", text, re.M) or ["/"])[-1]
    copies = []
    for line in re.findall(r"^COPY\s+(.+?)\s*$", text, re.M):
        *sources, target = line.split()
        into = target.endswith("/") or target == "." or len(sources) > 1  # Docker: a folder to copy into
        target = target if target.startswith("/") else f"{workdir}/{target}"
        target = str(Path(target))  # "/opt/tritonkit/./" -> "/opt/tritonkit"
        for source in sources:
            copies.append((source, f"{target}/{Path(source).name}" if into else target))
    cmd = re.search(r"^CMD\s+(\[.*\])\s*$", text, re.M)
    return workdir, copies, json.loads(cmd.group(1)) if cmd else None


def compose_services(profile: str = "cpu") -> dict:
    from tests.deploy_tools import compose

    done = compose("--profile", profile, "config", admin_key=ADMIN_KEY)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)["services"]


def k8s_container(overlay: str, kind: str, name: str, container: str) -> dict:
    from tests.k8s_manifests import K8S, render

    (doc,) = [d for d in render(K8S / "overlays" / overlay) if d["kind"] == kind and d["metadata"]["name"] == name]
    spec = doc["spec"]["template"]["spec"]
    (found,) = [c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == container]
    return found


def export_command() -> tuple[list[str], str]:
    """The one export command (cpu target) of the export image, compose and the Job, and its workdir."""
    workdir, _, cmd = dockerfile("export")
    image = [("cpu" if arg == "gpu" else arg) for arg in cmd]  # the image's CMD is the gpu target
    compose = compose_services()["export-cpu"]["command"]
    job = k8s_container("cpu/export", "Job", "export", "export")
    assert image == compose == job["command"], (image, compose, job["command"])
    assert job["workingDir"] == workdir
    env = {e["name"]: e["value"] for e in job["env"]}
    assert env["HOME"] == "/tmp"
    return image, workdir


def triton_command() -> list[str]:
    """The one Triton command of compose's triton-cpu and the Deployment (the admin key filled in)."""
    compose = compose_services()["triton-cpu"]["command"]
    deployment = [
        a.replace("$(TRITON_ADMIN_KEY)", ADMIN_KEY)
        for a in k8s_container("cpu", "Deployment", "triton", "triton")["args"]
    ]
    assert compose[0] == deployment[0] == "tritonserver"
    assert sorted(compose[1:]) == sorted(deployment[1:]), (compose, deployment)
    return compose


def image_binds(name: str) -> list[tuple[Path, str, bool]]:
    """What the image's COPY puts under /opt: the project's folders, read-only."""
    _, copies, _ = dockerfile(name)
    return [(PROJECT_ROOT / source, target, True) for source, target in copies if target.startswith("/opt/")]


def python_path() -> str:
    return f"{VENV}/bin:/usr/local/bin:/usr/bin:/bin"


# -- export --------------------------------------------------------------------------------------------


def _volume(path: Path, owner: int) -> Path:
    """An empty named volume / claim: owned by uid/gid ``owner`` (fsGroup 1000 when the driver applies it)."""
    path.mkdir(parents=True)
    shutil.chown(path, owner, owner)
    path.chmod(0o755)
    return path


CACHE = "/tmp/.cache/tritonkit"
"""The export's cache inside (HOME=/tmp: export.zoo.base.cache_dir), on the container's empty /tmp."""


def warm_weights() -> list[tuple[Path, str, bool]]:
    """SmolLM2's weights as this checkout's export dequantised them from the GGUF, bound read-only where the
    export in the container looks for them: the same code outside a container, half a minute of a 2-core run.
    Everything else of the cache (digits' training, the GGUF's tokenizer) is made and written inside, as uid 1000."""
    return [(p, f"{CACHE}/zoo/{p.name}", True) for p in sorted((cache_dir() / "zoo").glob("smollm2_135m-*.pt"))]


def export_container(scratch: Path, models: Path) -> Container:
    return Container(
        workdir=export_command()[1],
        scratch=scratch,
        env={"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", "PATH": python_path()},
        binds=[*image_binds("export"), (models, "/models", False), *warm_weights()],
        files=[(CATALOG, "/tmp/models.toml")],
        owned=("/tmp/.cache", CACHE, f"{CACHE}/zoo"),
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """/models after the containers' export command: the repository the serving tests read."""
    base = tmp_path_factory.mktemp("container-export")
    models = _volume(base / "models", 1000)
    command, _ = export_command()
    log = base / "export.log"
    code = export_container(base, models).run([*command, "--catalog", "/tmp/models.toml"], log, timeout_s=900)
    output = log.read_text(errors="replace")
    assert code == 0, f"the export command exited {code} under the containers' rules:\n{output[-4000:]}"
    assert "not cached" not in output, "the export could not write its cache under HOME=/tmp:\n" + output[-4000:]
    return models


def test_the_test_catalog_keeps_the_real_settings():
    real = tomllib.loads((PROJECT_ROOT / "export" / "models.toml").read_text())
    subset = tomllib.loads(CATALOG.read_text())
    for name, table in subset.items():
        assert {k: v for k, v in table.items() if k != "variants"} == {
            k: v for k, v in real[name].items() if k != "variants"
        }, name
        assert set(table["variants"]["cpu"]) <= set(real[name]["variants"]["cpu"]), name
    assert {v for t in subset.values() for v in t["variants"]["cpu"]} == {"torchscript/fp32", "onnx/fp32"}


def test_the_export_command_exits_0_and_marks_the_repository_complete(exported):
    marker = json.loads((exported / COMPLETE_MARKER).read_text())
    assert marker["target"] == "cpu" and marker["exports"] == len(EXPORTED) and marker["not_exported"] == []
    assert {p.name for p in exported.iterdir() if p.is_dir()} == EXPORTED | SEEDED
    for name in EXPORTED:
        version = exported / name / "1"
        files = list(version.iterdir())
        assert {f.name for f in files} >= {"manifest.json"} and all(f.stat().st_uid == 1000 for f in files), name
        assert version.stat().st_mode & 0o055 == 0o055, f"{version} is not readable by the volume's group"


def test_the_export_fails_at_once_on_a_volume_it_cannot_write(tmp_path):
    models = _volume(tmp_path / "models", 0)  # root's: a CSI driver that did not apply fsGroup
    command, _ = export_command()
    log = tmp_path / "export.log"
    code = export_container(tmp_path, models).run(command, log, timeout_s=300)
    output = log.read_text(errors="replace")
    assert code == 2, output[-3000:]
    (line,) = [line for line in output.splitlines() if line.startswith("export: error:")]
    assert "/models is not writable by uid 1000 gid 1000" in line and "StorageClass" in line
    assert not list(models.iterdir())


# -- serving -------------------------------------------------------------------------------------------


def serving_container(scratch: Path, models: Path) -> Container:
    dist = TritonDistribution.find()
    backends = assemble_backends(dist, scratch / "backends")
    return Container(
        workdir="/opt/tritonserver",
        scratch=scratch,
        env={
            "HOME": "/tmp",
            "PYTHONDONTWRITEBYTECODE": "1",
            "LD_LIBRARY_PATH": str(dist.libs),
            "PATH": f"{dist.binary.parent}:{python_path()}",
        },
        binds=[*image_binds("triton"), (backends, "/opt/tritonserver/backends", True), (models, "/models", True)],
    )


def with_ports(command: list[str]) -> tuple[list[str], tuple[int, int, int]]:
    ports = free_ports()
    names = {"--http-port": ports[0], "--grpc-port": ports[1], "--metrics-port": ports[2]}
    out = [f"{a.split('=')[0]}={names[a.split('=')[0]]}" if a.split("=")[0] in names else a for a in command]
    assert out != command
    return out, tuple(ports)


def wait_ready(proc, http: int, log: Path, timeout_s: float = 420) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"tritonserver exited {proc.returncode} before ready:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"tritonserver was not ready within {timeout_s:.0f} s:\n{log.read_text()[-4000:]}")


def ask_every_public_model(http: int, grpc: int) -> dict[str, str]:
    """One real request per public model, each answer checked; a line per model for the report."""
    import skimage.data
    from PIL import Image

    from export.zoo import digits, efficientnet, minilm

    http_client, grpc_client = connect("http", f"127.0.0.1:{http}"), connect("grpc", f"127.0.0.1:{grpc}")
    seen = {}
    _, x_test, _, y_test = digits.split()
    for name, client in (("digits", http_client), ("digits_onnx", grpc_client)):
        probabilities = infer(client, name, {"PIXELS": x_test[:64]})["PROBABILITIES"]
        accuracy = float((probabilities.argmax(1) == y_test[:64]).mean())
        assert accuracy > 0.9, (name, accuracy)
        seen[name] = f"accuracy {accuracy:.3f} on 64 held-out scans"

    logits = infer(grpc_client, "efficientnet_lite0", {"image": efficientnet.preprocess(skimage.data.coffee())[None]})[
        "logits"
    ]
    assert int(logits.argmax()) == efficientnet.ESPRESSO
    seen["efficientnet_lite0"] = "coffee -> espresso"

    buffer = io.BytesIO()
    Image.fromarray(skimage.data.coffee()).save(buffer, "JPEG")
    answer = infer(http_client, "image_classifier", {"IMAGE": np.array([[buffer.getvalue()]], dtype=object)})
    assert answer["LABELS"][0, 0] == b"espresso", answer["LABELS"][0]
    seen["image_classifier"] = "JPEG of coffee -> espresso"

    sentences = [
        "A man is playing a guitar on stage.",
        "Someone performs music with a guitar.",
        "The stock market fell sharply on Monday.",
    ]
    embedded = infer(http_client, "text_embedder", {"TEXT": np.array([[s.encode()] for s in sentences], dtype=object)})[
        "EMBEDDING"
    ]
    assert embedded[0] @ embedded[1] > embedded[0] @ embedded[2]
    ids, mask = minilm.tokenize(sentences[:1])
    raw = infer(grpc_client, "minilm", {"input_ids": ids, "attention_mask": mask})["embedding"]
    np.testing.assert_allclose(raw[0], embedded[0], atol=1e-4)
    seen["text_embedder"], seen["minilm"] = "guitar ~ guitar > stock market", "same embedding as text_embedder"

    request = urllib.request.Request(
        f"http://127.0.0.1:{http}/v2/models/text_generator/generate_stream",
        data=json.dumps({"PROMPT": "The capital of France is", "MAX_TOKENS": 8, "TEMPERATURE": 0.0}).encode(),
        headers={"Content-Type": "application/json"},
    )
    pieces = []
    with urllib.request.urlopen(request, timeout=300) as response:
        for line in response:
            if line.startswith(b"data:"):
                event = json.loads(line[5:])
                assert "error" not in event, event
                text = event.get("TEXT", "")
                pieces.append(text[0] if isinstance(text, list) else text)
    assert "".join(pieces).strip(), pieces
    seen["text_generator"] = repr("".join(pieces))
    for client in (http_client, grpc_client):
        client.close()
    return seen


def test_the_triton_command_serves_the_exported_repository_read_only(exported, tmp_path):
    command, (http, grpc, _) = with_ports(triton_command())
    log = tmp_path / "triton.log"
    proc = serving_container(tmp_path, exported).popen(command, log)
    left = ["not stopped"]
    try:
        wait_ready(proc, http, log)
        answers = ask_every_public_model(http, grpc)
        print("\n" + "\n".join(f"  {name}: {what}" for name, what in sorted(answers.items())))
        assert set(answers) == PUBLIC
    finally:
        left = stop(proc, signal.SIGTERM)
    assert left == [], f"left after SIGTERM: {left}\n{log.read_text()[-3000:]}"
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert "Permission denied" not in log.read_text() and "Read-only file system" not in log.read_text()


def test_the_triton_command_fails_fast_on_a_broken_model(exported, tmp_path):
    """The containers keep Triton's all-or-nothing start: the broken model's reason is in the log."""
    models = _volume(tmp_path / "models", 1000)
    shutil.copytree(exported / "digits", models / "digits")
    broken = models / "broken"
    shutil.copytree(exported / "digits", broken)
    config = (broken / "config.pbtxt").read_text().replace('name: "digits"', 'name: "broken"')
    (broken / "config.pbtxt").write_text(config)
    (broken / "1" / "model.pt").write_bytes((exported / "digits" / "1" / "model.pt").read_bytes()[:1000])
    for path in (models, *models.rglob("*")):  # as the export leaves a volume: written by uid 1000
        shutil.chown(path, 1000, 1000)
    command, _ = with_ports(triton_command())
    log = tmp_path / "triton.log"
    code = serving_container(tmp_path, models).run(command, log, timeout_s=300)
    output = log.read_text(errors="replace")
    assert code != 0, output[-3000:]
    assert "broken" in output and "PytorchStreamReader failed reading zip archive" in output, output[-3000:]
