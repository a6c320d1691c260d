"""docker-compose.yml and deploy/docker: valid for Compose (`docker-compose config`, no engine needed) and
carrying the settings production needs. The stack itself runs only where Docker and a GPU are."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from deploy.server import PROJECT_ROOT
from export.config import TRT_CACHE_DIR
from loadtest.campaign import command as loadtest_cli
from tests.deploy_tools import compose
from tritonkit_cli import build_parser

ENV = dict(
    line.split("=", 1)
    for line in (PROJECT_ROOT / ".env").read_text().splitlines()
    if line.strip() and not line.startswith("#")
)
RELEASE = ENV["NGC_RELEASE"]
# Where the configs tell ONNX Runtime to keep TensorRT engines (trt_engine_cache_path).
ENGINE_CACHE = TRT_CACHE_DIR
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


def published(service: dict) -> list[tuple[str, int, int]]:
    """(host address, host port, container port) of each published port. docker-compose 1.29 renders a port
    with a host address as a string, ``127.0.0.1:8000:8000/tcp``, and one without as a mapping."""
    out = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            out.append(("", int(port["published"]), int(port["target"])))
        else:
            address, host, target = re.fullmatch(r"(?:(.+):)?(\d+):(\d+)(?:/\w+)?", port).groups()
            out.append((address or "", int(host), int(target)))
    return out


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
    for name in ("prometheus", "grafana"):
        assert "profiles" not in services[name], f"{name} belongs to both stacks"
    for name in ("locust-master", "locust-worker"):  # a load campaign is started on demand, against either stack
        assert services[name]["profiles"] == ["loadtest"], name
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
    assert {(host, target) for _, host, target in published(triton)} == {(8000, 8000), (8001, 8001), (8002, 8002)}
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
        for _, _, target in published(service):
            assert target not in (22, 8888), f"{name} opens SSH or Jupyter"
    for name in ("export", "triton", "loadtest"):
        users = re.findall(r"^USER\s+(\S+)", dockerfile(name), re.M)
        assert users and users[-1].split(":")[0] not in ("0", "root"), f"{name}.Dockerfile ends as root"


def test_images_are_pinned(services):
    for name, service in services.items():
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: {image}"
    # Prometheus and Alertmanager: the releases whose promtool and amtool check deploy/ in the tests.
    for service, tool in (("prometheus", "promtool"), ("alertmanager", "amtool")):
        version = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout
        checked = re.search(r"version (\d+\.\d+\.\d+)", version).group(1)
        assert services[service]["image"] == f"prom/{service}:v{checked}", f"serve the {service} {tool} checks"


# -- published ports --------------------------------------------------------------------------------
PUBLISHED = {
    "triton": {8000: "TRITON_HTTP_PORT", 8001: "TRITON_GRPC_PORT", 8002: "TRITON_METRICS_PORT"},
    "prometheus": {9090: "PROMETHEUS_PORT"},
    "alertmanager": {9093: "ALERTMANAGER_PORT"},
    "grafana": {3000: "GRAFANA_PORT"},
    "openai": {9000: "OPENAI_PORT"},
}


def test_every_published_port_listens_on_this_host_only_by_default(monkeypatch):
    for name in ["PUBLISH_ADDRESS", *(v for ports in PUBLISHED.values() for v in ports.values())]:
        monkeypatch.delenv(name, raising=False)
    assert ENV["PUBLISH_ADDRESS"] == "127.0.0.1"
    result = compose("config")  # every service of both profiles
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    ports = {name: set(published(s)) for name, s in services.items() if s.get("ports")}
    assert set(ports) == set(PUBLISHED) | {"triton-cpu"}, "the services that publish ports"
    for name, bound in ports.items():
        expected = PUBLISHED["triton" if name == "triton-cpu" else name]
        assert bound == {("127.0.0.1", port, port) for port in expected}, name


def test_one_setting_publishes_every_port_on_all_interfaces_and_each_host_port_can_move(tmp_path):
    # Through an env file: the compose helper keeps GRAFANA_* and TRITON* of the test's environment out.
    moved = {variable: port + 10000 for ports in PUBLISHED.values() for port, variable in ports.items()}
    env_file = tmp_path / ".env"
    env_file.write_text(
        (PROJECT_ROOT / ".env").read_text()
        + "PUBLISH_ADDRESS=0.0.0.0\n"
        + "".join(f"{variable}={port}\n" for variable, port in moved.items())
    )
    result = compose("--env-file", str(env_file), "config")
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    for name, ports in PUBLISHED.items():
        expected = {("0.0.0.0", moved[variable], port) for port, variable in ports.items()}
        assert set(published(services[name])) == expected, name


def test_env_documents_every_port_variable():
    text = (PROJECT_ROOT / ".env").read_text()
    for variable in (v for ports in PUBLISHED.values() for v in ports.values()):
        assert re.search(rf"\b{variable}=\d+", text), f".env does not name {variable}"
    compose_file = (PROJECT_ROOT / "docker-compose.yml").read_text()
    assert not re.search(r'^\s*- "\d+:\d+', compose_file, re.M), "a port published without PUBLISH_ADDRESS"


# -- the engine cache -------------------------------------------------------------------------------
def test_the_gpu_server_keeps_its_tensorrt_engines_on_a_volume_emptied_when_the_export_changes(services):
    triton, step = services["triton"], services["engine-cache"]
    assert f"trt-engine-cache:{ENGINE_CACHE}:rw" in triton["volumes"]
    assert "model-repository:/models:ro" in triton["volumes"] and any(
        v.endswith(":/opt/tritonkit/backends:ro") for v in triton["volumes"]
    )
    # export, then the cache step, then the server.
    assert step["depends_on"] == {"export": {"condition": "service_completed_successfully"}}
    assert triton["depends_on"]["engine-cache"]["condition"] == "service_completed_successfully"
    assert step["profiles"] == ["gpu"] and step["image"] == triton["image"] and step["user"] == "1000:1000"
    assert step["command"][-2:] == ["/models", ENGINE_CACHE]
    assert f"trt-engine-cache:{ENGINE_CACHE}:rw" in step["volumes"] and "model-repository:/models:ro" in step["volumes"]
    assert step["network_mode"] == "none" and step["restart"] == "no"
    # The image ships the step and hands the (empty, new) volume's folder to the server's uid.
    triton_image = dockerfile("triton")
    assert f"COPY deploy/docker/engine_cache.py {step['command'][1]}" in triton_image
    assert f"mkdir -p {ENGINE_CACHE} && chown 1000:1000 {ENGINE_CACHE}" in triton_image
    assert triton_image.index("chown 1000:1000 " + ENGINE_CACHE) < triton_image.index("USER 1000:1000")


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


def test_locust_master_and_workers_run_tritonkit_loadtest_with_the_real_flags(services):
    master, worker = services["locust-master"], services["locust-worker"]
    parser = build_parser()
    for service in (master, worker):
        assert service["command"][:2] == ["tritonkit", "loadtest"]
    m = parser.parse_args(master["command"][1:])
    w = parser.parse_args(worker["command"][1:])
    assert m.master and not m.worker and w.worker and not w.master
    loadtest_cli.master_of(m)  # the checks a real run makes first: none refuses these flags
    loadtest_cli.model_campaign(m)
    assert m.expect_workers == 1 and w.processes == 1, "one worker container, one Locust process, by default"
    assert "${LOCUST_WORKERS:-1}" in (PROJECT_ROOT / "docker-compose.yml").read_text(), "the count follows --scale"
    # The master reaches either profile's server by its alias; the workers reach the master by its service name.
    assert (m.http_url, m.grpc_url, m.metrics_url) == ("triton:8000", "triton:8001", "http://triton:8002/metrics")
    assert w.master_host == "locust-master" and w.master_port == m.master_bind_port
    # The report goes to a volume uid 1000 can write (its home in the image); no environment carries settings.
    assert any(v.startswith("locust-reports:") and str(m.out).startswith(v.split(":")[1]) for v in master["volumes"])
    assert master["restart"] == "no" and "environment" not in worker
    assert "ports" not in master and "ports" not in worker, "nothing to publish: the master has no web UI"


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


@pytest.fixture(scope="module")
def all_services() -> dict:
    result = compose("--profile", "gpu", "--profile", "openai", "config")
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)["services"]


def test_the_openai_front_serves_the_generator_with_its_own_tokenizer_folder(all_services):
    """Triton's OpenAI-compatible frontend (r25.10 main.py's flags): vLLM tensors, the generator's version folder
    as --tokenizer (a Hugging Face folder in the repository export seeds from), only the generator loaded."""
    openai = all_services["openai"]
    command = openai["command"]
    flag = {command[i]: command[i + 1] for i in range(len(command) - 1) if command[i].startswith("--")}
    assert flag["--backend"] == "vllm" and flag["--model-control-mode"] == "explicit"
    assert flag["--load-model"] == "text_generator" and flag["--model-repository"] == "/models"
    folder = PROJECT_ROOT / "model_repository" / Path(flag["--tokenizer"]).relative_to("/models")
    assert {"tokenizer.json", "tokenizer_config.json", "chat_template.json"} <= {p.name for p in folder.iterdir()}
    assert openai["working_dir"] == "/opt/tritonserver/python/openai" and command[1] == "openai_frontend/main.py"
    assert openai["build"]["target"] == "openai" and all_services["triton"]["build"]["target"] == "triton"
    assert gpus(openai) and openai["profiles"] == ["openai"], "a second server on the GPU, only when asked for"
    dockerfile = (PROJECT_ROOT / "deploy" / "docker" / "triton.Dockerfile").read_text()
    assert re.search(r"^FROM triton AS openai$", dockerfile, re.M) and "openai-requirements.txt" in dockerfile


def test_optional_variants_are_load_checked_between_the_cache_and_the_server(all_services):
    check = all_services["serving-check"]
    assert check["command"][-4:] == ["-m", "export.serving_check", "--repository", "/models"]
    assert set(check["depends_on"]) == {"engine-cache"} and "serving-check" in all_services["triton"]["depends_on"]
    # docker-compose 1.29 renders named volumes as "source:target[:mode]"
    mounts = {v.split(":")[1]: v.split(":")[2] for v in check["volumes"]}
    assert mounts == {"/models": "rw", ENGINE_CACHE: "rw"}, "it removes what does not load; its engines are kept"
