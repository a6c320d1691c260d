"""Security settings of every way the server runs: loopback by default, admin APIs behind a key wherever
other hosts can reach it, secrets only from the environment, nothing that opens a shell or a notebook.
(Non-root users and read-only repositories are asserted in test_compose.py and test_k8s.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml

from deploy import security
from deploy.server import PROJECT_ROOT, ServerConfig
from tests.deploy_tools import compose
from tests.k8s_manifests import OVERLAYS, all_containers, docs, pod_spec, pod_templates

KEY = "a-test-key-0123456789"
SETTING = f"{','.join(security.RESTRICTED_APIS)}:{security.KEY_HEADER}="
SHELLS = re.compile(r"jupyter|notebook|sshd|openssh|ttyd|code-server", re.I)


# -- deploy/security.py ------------------------------------------------------------------------------


def test_loopback_needs_no_key_and_is_the_default():
    assert ServerConfig.__dataclass_fields__["address"].default == "127.0.0.1"
    for address in ("127.0.0.1", "::1", "localhost"):
        assert security.flags_for(address, environ={}) == []


@pytest.mark.parametrize("address", ["0.0.0.0", "10.1.2.3", "::"])
def test_other_addresses_refuse_to_start_without_a_key(address):
    with pytest.raises(security.InsecureServerError, match=security.KEY_ENV):
        security.flags_for(address, environ={})
    http, grpc = security.flags_for(address, environ={security.KEY_ENV: KEY})
    assert http == f"--http-restricted-api={SETTING}{KEY}"
    assert grpc == f"--grpc-restricted-protocol={SETTING}{KEY}"


@pytest.mark.parametrize("key", ["short", "has,comma-in-it-123", "has:colon-in-it-1234", "has space in it 12345"])
def test_weak_or_unparsable_keys_are_refused(key):
    with pytest.raises(security.InsecureServerError, match="at least"):
        security.restricted_flags(key)


# -- docker-compose.yml ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose_services() -> dict:
    result = compose("config", admin_key=KEY)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)["services"]


@pytest.mark.parametrize("name", ["triton", "triton-cpu"])
def test_compose_restricts_the_admin_apis_with_the_key_from_the_environment(compose_services, name):
    command = compose_services[name]["command"]
    assert f"--http-restricted-api={SETTING}{KEY}" in command
    assert f"--grpc-restricted-protocol={SETTING}{KEY}" in command
    raw = (PROJECT_ROOT / "docker-compose.yml").read_text()
    assert "admin-key=${TRITON_ADMIN_KEY:?" in raw, "the key must come from the environment, with no default"


def test_compose_opens_no_shell_or_notebook(compose_services):
    for name, service in compose_services.items():
        text = " ".join(
            [service["image"], *map(str, service.get("command") or []), *map(str, service.get("entrypoint") or [])]
        )
        assert not SHELLS.search(text), f"{name}: {text}"
        # docker-compose 1.29 renders a port with a host address as a string, "127.0.0.1:8000:8000/tcp".
        targets = {
            int(p.split(":")[-1].split("/")[0]) if isinstance(p, str) else p["target"] for p in service.get("ports", [])
        }
        assert not {22, 8888} & targets, name


# -- deploy/k8s --------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_restricts_the_admin_apis_with_the_key_from_a_secret(overlay):
    (triton,) = [d for d in pod_templates(overlay) if d["kind"] == "Deployment" and d["metadata"]["name"] == "triton"]
    (container,) = [c for c in pod_spec(triton)["containers"] if c["name"] == "triton"]
    assert f"--http-restricted-api={SETTING}$({security.KEY_ENV})" in container["args"]
    assert f"--grpc-restricted-protocol={SETTING}$({security.KEY_ENV})" in container["args"]
    env = {e["name"]: e for e in container["env"]}
    assert env[security.KEY_ENV]["valueFrom"]["secretKeyRef"] == {"name": "triton-admin", "key": "admin-key"}
    assert not any(d["kind"] == "Secret" for d in docs(overlay)), "secrets are created on the cluster, never committed"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_opens_no_shell_or_notebook(overlay):
    for doc in pod_templates(overlay):
        for c in all_containers(pod_spec(doc)):
            text = " ".join([c["image"], *c.get("command", []), *c.get("args", [])])
            assert not SHELLS.search(text), f"{doc['metadata']['name']}/{c['name']}: {text}"
            assert not {22, 8888} & {p["containerPort"] for p in c.get("ports", [])}
    for doc in docs(overlay):
        if doc["kind"] == "Service":
            assert doc["spec"].get("type", "ClusterIP") == "ClusterIP", f"{doc['metadata']['name']} is exposed outside"


# -- the repository ----------------------------------------------------------------------------------


def test_no_secret_is_committed():
    files = subprocess.run(["git", "ls-files"], cwd=PROJECT_ROOT, capture_output=True, text=True).stdout.split()
    assert ".env" in files
    keys = {
        line.split("=")[0]
        for line in (PROJECT_ROOT / ".env").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert keys == {"NGC_RELEASE", "TRITONKIT_VERSION", "COMPOSE_PROFILES", "PUBLISH_ADDRESS"}, (
        ".env holds release pins and the address ports are published on only"
    )
    leaks = []
    for name in files:
        path = PROJECT_ROOT / name
        if path.suffix not in (".yml", ".yaml", ".json", ".env", ".toml", ".sh", ".Dockerfile") and name != ".env":
            continue
        for line in path.read_text(errors="replace").splitlines():
            if (
                re.search(r"(PASSWORD|admin-key)\s*[:=]\s*(?![\s\"']*\$)(?!\s*$)['\"]?[\w-]{6,}", line)
                and "secretKeyRef" not in line
            ):
                leaks.append(f"{name}: {line.strip()}")
    assert leaks == []


# -- the local server --------------------------------------------------------------------------------


def test_local_server_beyond_loopback_needs_the_key(monkeypatch, tmp_path):
    from deploy.server import DEFAULT_REPOSITORY, LocalServer

    monkeypatch.delenv(security.KEY_ENV, raising=False)
    with pytest.raises(security.InsecureServerError):
        ServerConfig(model_repository=DEFAULT_REPOSITORY, address="0.0.0.0")
    monkeypatch.setenv(security.KEY_ENV, KEY)
    command = LocalServer(
        ServerConfig(model_repository=DEFAULT_REPOSITORY, address="0.0.0.0"), workdir=tmp_path
    ).command()
    assert security.restricted_flags(KEY) == [a for a in command if "restricted" in a]
    loopback = LocalServer(ServerConfig(model_repository=DEFAULT_REPOSITORY), workdir=tmp_path / "l").command()
    assert not any("restricted" in a for a in loopback)


def test_serve_refuses_an_open_address_without_a_key():
    env = {k: v for k, v in os.environ.items() if k != security.KEY_ENV}
    result = subprocess.run(
        [sys.executable, "-m", "tritonkit_cli", "serve", "--address", "0.0.0.0"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert security.KEY_ENV in result.stderr and "serve: error" in result.stderr
