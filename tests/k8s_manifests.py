"""deploy/k8s as the tests read it: each overlay's stages rendered with ``kubectl kustomize`` (once per
process), the documents, pods and containers in them, and the names the manifests must agree on. Shared by
tests/unit/test_k8s*.py, test_security.py, test_tensorrt.py and tests/functional/test_container_rules.py;
the ``overlay`` fixture (each overlay in turn) is in tests/unit/conftest.py."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
ADAPTER_VALUES = K8S / "monitoring" / "prometheus-adapter-values.yaml"
# Next to the interpreter running the tests, unresolved: .venv/bin/python is a symlink out of the venv.
KUBECTL = Path(sys.executable).parent / "kubectl"
OVERLAYS = ("gpu", "gpu-single-node", "cpu")
"""gpu-single-node is the gpu overlay for one GPU node: ReadWriteOnce claims, a rollout that frees the GPU first."""
STAGES = ("export", "serve")
"""Each overlay's two kustomizations: overlays/<o>/export (claim and Job), then overlays/<o> (Triton)."""
GPU = "nvidia.com/gpu"
CRD_GROUPS = ("monitoring.coreos.com/",)  # no schema bundled: checked by hand below
EXPORT_COMMAND = [
    "python",
    "-m",
    "export",
    "--target",
    "{target}",
    "--repository",
    "/models",
    "--seed-from",
    "/opt/tritonkit/model_repository",
]
EXPECTED = {
    ("Namespace", "tritonkit"),
    ("PersistentVolumeClaim", "model-repository"),
    ("Job", "export"),
    ("Deployment", "triton"),
    ("Service", "triton"),
    ("PodMonitor", "triton"),
    ("HorizontalPodAutoscaler", "triton"),
    ("PodDisruptionBudget", "triton"),
    ("NetworkPolicy", "triton"),
    ("PrometheusRule", "triton"),
}
EXPORT_STAGE = {("Namespace", "tritonkit"), ("PersistentVolumeClaim", "model-repository"), ("Job", "export")}
ENGINE_CACHE_CLAIM = ("PersistentVolumeClaim", "trt-engine-cache")
"""The gpu overlays' export stage also holds the claim of ONNX Runtime's TensorRT engines."""


def target(overlay: str) -> str:
    """The export target (and hardware) of an overlay: gpu or cpu."""
    return "gpu" if overlay.startswith("gpu") else "cpu"


def expected(overlay: str) -> set:
    """The objects both stages of ``overlay`` render together."""
    return EXPECTED | ({ENGINE_CACHE_CLAIM} if target(overlay) == "gpu" else set())


def export_stage(overlay: str) -> set:
    """The objects of ``overlay``'s export stage."""
    return EXPORT_STAGE | ({ENGINE_CACHE_CLAIM} if target(overlay) == "gpu" else set())


@functools.cache
def render(path: Path) -> tuple:
    """``kubectl kustomize PATH``: the documents it would apply."""
    if not KUBECTL.exists():
        pytest.fail(f"{KUBECTL} is missing: run make setup (it installs kubectl into the venv)")
    done = subprocess.run([str(KUBECTL), "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"kubectl kustomize {path} failed:\n{done.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def stage_path(overlay: str, stage: str) -> Path:
    return K8S / "overlays" / overlay / ("export" if stage == "export" else "")


def stage(overlay: str, stage_name: str) -> list:
    return list(render(stage_path(overlay, stage_name)))


@functools.cache
def _render(overlay: str) -> tuple:
    """Both stages of ``overlay`` together (the Namespace, which both apply, once)."""
    out, seen = [], set()
    for name in STAGES:
        for doc in render(stage_path(overlay, name)):
            key = (doc["kind"], doc["metadata"]["name"])
            if key not in seen:
                seen.add(key)
                out.append(doc)
    return tuple(out)


def docs(overlay: str) -> list:
    return list(_render(overlay))


def one(overlay: str, kind: str, name: str) -> dict:
    found = [d for d in docs(overlay) if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{overlay}: expected one {kind}/{name}, found {len(found)}"
    return found[0]


def pod_spec(doc: dict) -> dict:
    return doc["spec"]["template"]["spec"]


def container(doc: dict, name: str) -> dict:
    (found,) = [c for c in all_containers(pod_spec(doc)) if c["name"] == name]
    return found


def pod_templates(overlay: str) -> list:
    return [d for d in docs(overlay) if d["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet")]


def all_containers(spec: dict) -> list:
    return spec.get("initContainers", []) + spec["containers"]


def selects(selector: dict, labels: dict) -> bool:
    """A label selector (matchLabels only; matchExpressions are refused, not guessed at)."""
    assert set(selector) <= {"matchLabels"}, f"unsupported selector form {selector}"
    wanted = selector["matchLabels"]
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def flags(args: list) -> dict:
    out = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if key.startswith("--"):
            assert key not in out, f"flag {key} given twice"
            out[key] = value if sep else None
    return out


def dotenv() -> dict:
    """The root .env (the one place container tags are pinned), as KEY -> value."""
    env = ROOT / ".env"
    assert env.exists(), f"{env} is missing: it pins NGC_RELEASE for every container image"
    out = {}
    for line in env.read_text().splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and not key.startswith("#"):
            out[key.strip()] = value.strip().strip("'\"")
    assert out.get("NGC_RELEASE"), f"no NGC_RELEASE=... line in {env}"
    return out


def adapter_rule() -> dict:
    values = yaml.safe_load(ADAPTER_VALUES.read_text())
    rules = values["rules"]["custom"]
    matching = [r for r in rules if "nv_inference_queue_duration_us" in r["seriesQuery"]]
    assert len(matching) == 1, rules
    return matching[0]


def quantity(text) -> float:
    """A Kubernetes quantity as a number (enough of the grammar for these manifests)."""
    units = {"m": 1e-3, "": 1, "k": 1e3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    number, unit = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(text)).groups()
    return float(number) * units[unit]
