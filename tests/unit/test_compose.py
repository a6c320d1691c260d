"""docker-compose.yml and deploy/docker: valid for Compose (`docker-compose config`, no engine needed) and
carrying the settings production needs. The stack itself runs only where Docker and a GPU are."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from deploy.server import PROJECT_ROOT
from tests.deploy_tools import compose

ENV = dict(
    line.split("=", 1)
    for line in (PROJECT_ROOT / ".env").read_text().splitlines()
    if line.strip() and not line.startswith("#")
)
RELEASE = ENV["NGC_RELEASE"]
NATIVE_BACKENDS = ("pytorch", "onnxruntime", "tensorrt", "python")
EXIT_TIMEOUT = re.compile(r"--exit-timeout-secs=(\d+)")


@pytest.fixture(scope="module")
def services() -> dict:
    result = compose("config")
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)["services"]


def seconds(text: str) -> float:
    value, unit = re.fullmatch(r"(\d+)(ms|s|m)", text).groups()
    return float(value) * {"ms": 0.001, "s": 1, "m": 60}[unit]


def gpus(service: dict) -> list:
    return service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])


def test_compose_config_is_valid_for_each_profile():
    for profile in ("gpu", "cpu"):
        result = compose("--profile", profile, "config", "-q")
        assert result.returncode == 0, f"profile {profile}: {result.stderr}"


@pytest.mark.parametrize("missing", ["GRAFANA_ADMIN_PASSWORD", "TRITON_ADMIN_KEY"])
def test_secrets_have_no_default(missing):
    result = compose("config", "-q", **{"password" if missing.startswith("GRAFANA") else "admin_key": None})
    assert result.returncode != 0
    assert missing in result.stderr


def test_profiles_split_gpu_and_cpu(services):
    assert services["export"]["profiles"] == ["gpu"] and services["triton"]["profiles"] == ["gpu"]
    assert services["export-cpu"]["profiles"] == ["cpu"] and services["triton-cpu"]["profiles"] == ["cpu"]
    for name in ("prometheus", "grafana", "locust-master", "locust-worker"):
        assert "profiles" not in services[name], f"{name} belongs to both stacks"
    assert ENV["COMPOSE_PROFILES"] == "gpu"
    assert gpus(services["triton"]) and gpus(services["export"])
    assert gpus(services["triton"])[0]["capabilities"] == ["gpu"]
    assert not gpus(services["triton-cpu"]) and not gpus(services["export-cpu"])
    assert "triton" in services["triton-cpu"]["networks"]["default"]["aliases"]


def test_export_and_serving_images_come_from_one_release(services):
    for name in ("export", "export-cpu"):
        assert services[name]["image"] == f"tritonkit/export:{RELEASE}"
        assert services[name]["build"]["args"]["NGC_RELEASE"] == RELEASE
    for name in ("triton", "triton-cpu"):
        assert services[name]["image"] == f"tritonkit/triton:{RELEASE}"
        assert services[name]["build"]["args"]["NGC_RELEASE"] == RELEASE
    assert "FROM nvcr.io/nvidia/pytorch:${NGC_RELEASE}-py3" in dockerfile("export")
    assert "FROM nvcr.io/nvidia/tritonserver:${NGC_RELEASE}-py3" in dockerfile("triton")


@pytest.mark.parametrize("name, target", [("export", "gpu"), ("export-cpu", "cpu")])
def test_export_writes_the_target_into_the_shared_volume(services, name, target):
    command = services[name]["command"]
    assert command[:3] == ["python", "-m", "export"]
    assert command[command.index("--target") + 1] == target
    assert command[command.index("--repository") + 1] == "/models"
    assert "--seed-from" in command
    assert any(v.startswith("model-repository:/models") and not v.endswith(":ro") for v in services[name]["volumes"])


@pytest.mark.parametrize("name, export", [("triton", "export"), ("triton-cpu", "export-cpu")])
def test_triton_service_settings(services, name, export):
    triton = services[name]
    command = triton["command"]
    assert command[0] == "tritonserver"
    assert "--model-repository=/models" in command
    assert "--model-control-mode=none" in command
    assert "--metrics-config=summary_latencies=true" in command
    assert ("--allow-gpu-metrics=true" in command) == (name == "triton")
    assert not any(arg.startswith("--backend-directory") for arg in command), "keep the container's backends"
    assert triton["depends_on"][export]["condition"] == "service_completed_successfully"
    assert {(p["target"], p["published"]) for p in triton["ports"]} >= {(8000, 8000), (8001, 8001), (8002, 8002)}
    assert "model-repository:/models:ro" in triton["volumes"]
    for volume in triton["volumes"]:
        target = volume.split(":")[1]
        assert not target.startswith("/opt/tritonserver/backends"), f"{volume} would shadow a native backend"
    assert any(v.endswith(":/opt/tritonkit/backends:ro") for v in triton["volumes"])
    assert seconds(triton["shm_size"].replace("gb", "").strip() + "s") >= 1  # at least 1 GB of /dev/shm
    assert triton["ulimits"]["memlock"] == -1 and triton["ulimits"]["stack"] >= 64 * 2**20
    health = " ".join(triton["healthcheck"]["test"])
    assert "/v2/health/ready" in health
    assert seconds(triton["healthcheck"]["start_period"]) >= 300
    assert triton["restart"] == "unless-stopped"
    exit_timeout = int(next(EXIT_TIMEOUT.fullmatch(a) for a in command if EXIT_TIMEOUT.fullmatch(a)).group(1))
    assert seconds(triton["stop_grace_period"]) > exit_timeout


def test_every_container_is_unprivileged(services):
    for name, service in services.items():
        assert not service.get("privileged"), name
        assert service.get("network_mode") != "host", name
        assert "no-new-privileges:true" in service.get("security_opt", []), name
        user = service.get("user")
        if user is not None:
            assert user.split(":")[0] not in ("0", "root"), name
        for port in service.get("ports", []):
            assert port["target"] not in (22, 8888), f"{name} opens SSH or Jupyter"
    for name in ("export", "triton", "loadtest"):
        users = re.findall(r"^USER\s+(\S+)", dockerfile(name), re.M)
        assert users and users[-1].split(":")[0] not in ("0", "root"), f"{name}.Dockerfile ends as root"


def test_images_are_pinned(services):
    for name, service in services.items():
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: {image}"
    promtool = subprocess.run(["promtool", "--version"], capture_output=True, text=True).stdout
    checked = re.search(r"version (\d+\.\d+\.\d+)", promtool).group(1)
    assert services["prometheus"]["image"] == f"prom/prometheus:v{checked}", "serve the release the tests check with"


def test_prometheus_and_grafana_read_the_project_files(services):
    prometheus = services["prometheus"]
    assert any(v.startswith(f"{PROJECT_ROOT}/deploy/prometheus:/etc/prometheus") for v in prometheus["volumes"])
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    assert (PROJECT_ROOT / "deploy/prometheus/prometheus.yml").is_file()
    grafana = services["grafana"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"] if v.startswith("/")}
    assert Path(mounts["/etc/grafana/provisioning"]) == PROJECT_ROOT / "deploy/grafana/provisioning"
    assert (Path(mounts["/var/lib/grafana/dashboards"]) / "tritonkit.json").is_file()
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "not-a-real-password"  # from the environment
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] == "false"


def test_locust_master_and_workers_run_the_project_locustfile(services):
    master, worker = services["locust-master"], services["locust-worker"]
    for service in (master, worker):
        command = service["command"]
        assert command[:3] == ["python", "-m", "loadtest.drive.locust_main"]
        assert (PROJECT_ROOT / command[command.index("-f") + 1]).is_file()
        settings = json.loads(service["environment"]["TRITONKIT_LOAD"])
        assert settings["grpc_url"] == "triton:8001" and settings["model"] and settings["protocol"] == "grpc"
    assert "--master" in master["command"] and "--class-picker" in master["command"]
    assert worker["command"][worker["command"].index("--master-host") + 1] == "locust-master"
    assert {p["target"] for p in master["ports"]} == {8089}
    assert "ports" not in worker, "workers scale with --scale; a published port would clash"


def dockerfile(name: str) -> str:
    return (PROJECT_ROOT / "deploy" / "docker" / f"{name}.Dockerfile").read_text()


def lock_versions() -> dict[str, str]:
    pins = {}
    for line in (PROJECT_ROOT / "requirements.lock").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version.strip()
    return pins


@pytest.mark.parametrize("name", ["export", "triton"])
def test_container_requirements_follow_the_lock(name):
    lock = lock_versions()
    for line in (PROJECT_ROOT / "deploy" / "docker" / f"{name}-requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        package, version = line.split("==")
        package = re.sub(r"\[.*\]", "", package).lower()
        if package == "torch":
            assert version.startswith("2.9."), "the torch of the NGC release's libtorch"
        elif package in lock:
            assert version == lock[package], f"{name}-requirements.txt: {package}=={version}, lock has {lock[package]}"
        else:
            assert package == "onnxruntime-gpu" and version == lock["onnxruntime"], package


def test_dockerfiles_copy_what_exists():
    for path in (PROJECT_ROOT / "deploy" / "docker").glob("*.Dockerfile"):
        for source in re.findall(r"^COPY\s+(.+)\s+\S+$", path.read_text(), re.M):
            for item in source.split():
                assert (PROJECT_ROOT / item).exists(), f"{path.name}: COPY {item}"
    ignored = (PROJECT_ROOT / ".dockerignore").read_text()
    for heavy in (".venv", "reports", "model_repository/*/[0-9]*/*.pt", ".env"):
        assert heavy in ignored.splitlines()


def test_make_check_deploy_runs_every_validator():
    """README's one command for validating deploy/ offline: compose, promtool, kustomize + schemas."""
    result = subprocess.run(
        ["make", "-s", "check-deploy"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert (
        "check-deploy: compose, Prometheus config and rules, the autoscaling query, and both stages of both k8s "
        "overlays are valid"
    ) in result.stdout
