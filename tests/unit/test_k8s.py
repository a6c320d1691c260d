"""deploy/k8s: each overlay's two stages (export, then serving) render with kustomize, validate against the
Kubernetes schemas, and say what the deployment needs to say (GPU or not, probes, drain, read-only models,
non-root); the stages, the GPU pin and the monitoring objects are in test_k8s_stages.py; autoscaling,
disruption and the load-test stage in test_k8s_scaling.py.

Offline: `kubectl kustomize` from the venv renders, `kubernetes_validate` checks against bundled
schemas; no cluster is involved.
"""

import re

import kubernetes_validate
import pytest
import yaml

from tests.k8s_manifests import (
    CRD_GROUPS,
    EXPORT_COMMAND,
    GPU,
    K8S,
    all_containers,
    container,
    docs,
    dotenv,
    expected,
    flags,
    one,
    pod_spec,
    pod_templates,
    quantity,
    selects,
    target,
)

# --- rendering and schemas -------------------------------------------------------------------------


def test_overlay_renders_the_expected_resources(overlay):
    assert {(d["kind"], d["metadata"]["name"]) for d in docs(overlay)} == expected(overlay)
    namespaced = [d for d in docs(overlay) if d["kind"] != "Namespace"]
    assert {d["metadata"].get("namespace") for d in namespaced} == {"tritonkit"}


def test_builtin_resources_validate_strictly(overlay):
    version = kubernetes_validate.latest_version()
    checked = 0
    for doc in docs(overlay):
        if doc["apiVersion"].startswith(CRD_GROUPS):
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{overlay} {doc['kind']}/{doc['metadata']['name']} invalid for {version}: {error}")
        checked += 1
    assert checked == len(expected(overlay)) - 2  # PodMonitor and PrometheusRule are CRDs


def test_podmonitor_scrapes_the_triton_metrics_port(overlay):
    monitor = one(overlay, "PodMonitor", "triton")
    triton = one(overlay, "Deployment", "triton")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    # No schema to lean on: refuse keys the operator does not know (a typo would scrape nothing).
    assert set(monitor["spec"]) <= {
        "selector",
        "podMetricsEndpoints",
        "namespaceSelector",
        "jobLabel",
        "podTargetLabels",
        "sampleLimit",
    }
    assert selects(monitor["spec"]["selector"], triton["spec"]["template"]["metadata"]["labels"])
    # The job label is the pods' app.kubernetes.io/name, "triton", which the shipped rules select.
    assert triton["spec"]["template"]["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "triton"
    ports = {p["name"]: p["containerPort"] for p in container(triton, "triton")["ports"]}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert set(endpoint) <= {
        "port",
        "path",
        "interval",
        "scrapeTimeout",
        "scheme",
        "honorLabels",
        "relabelings",
        "metricRelabelings",
    }
    assert endpoint["port"] == "metrics" and ports["metrics"] == 8002
    assert endpoint.get("path", "/metrics") == "/metrics"
    interval = int(re.fullmatch(r"(\d+)s", endpoint["interval"]).group(1))
    assert 5 <= interval <= 15
    assert int(endpoint["scrapeTimeout"].rstrip("s")) < interval


# --- Triton ----------------------------------------------------------------------------------------


def test_gpu_limits_only_on_the_gpu_overlay(overlay):
    for name, doc, cname in (
        ("triton", one(overlay, "Deployment", "triton"), "triton"),
        ("export", one(overlay, "Job", "export"), "export"),
    ):
        limits = container(doc, cname)["resources"].get("limits", {})
        tolerations = pod_spec(doc).get("tolerations", [])
        if target(overlay) == "gpu":
            assert str(limits.get(GPU)) == "1", f"{name}: {limits}"
            assert {"key": GPU, "operator": "Exists", "effect": "NoSchedule"} in tolerations
        else:
            assert GPU not in limits and not tolerations
    if target(overlay) == "cpu":
        assert GPU not in yaml.safe_dump_all(docs(overlay)), "the cpu overlay mentions GPUs"


def test_triton_args(overlay):
    triton = container(one(overlay, "Deployment", "triton"), "triton")
    assert "command" not in triton, "keep the NGC entrypoint: pass tritonserver as args"
    args = triton["args"]
    assert args[0] == "tritonserver"
    got = flags(args[1:])
    assert got["--model-repository"] == "/models"
    assert got["--model-control-mode"] == "none"
    assert got["--metrics-config"] == "summary_latencies=true"
    assert got["--allow-metrics"] == "true"
    assert got["--allow-gpu-metrics"] == ("true" if target(overlay) == "gpu" else "false")
    ports = {p["name"]: p["containerPort"] for p in triton["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    assert (int(got["--http-port"]), int(got["--grpc-port"]), int(got["--metrics-port"])) == (8000, 8001, 8002)


def _probe_port(probe: dict, ports: dict) -> int:
    port = probe["httpGet"]["port"]
    return ports[port] if isinstance(port, str) else port


def test_triton_probes(overlay):
    triton = container(one(overlay, "Deployment", "triton"), "triton")
    ports = {p["name"]: p["containerPort"] for p in triton["ports"]}
    for kind, path in (
        ("startupProbe", "/v2/health/ready"),
        ("readinessProbe", "/v2/health/ready"),
        ("livenessProbe", "/v2/health/live"),
    ):
        assert triton[kind]["httpGet"]["path"] == path, kind
        assert _probe_port(triton[kind], ports) == 8000, kind
    startup = triton["startupProbe"]
    budget = startup.get("initialDelaySeconds", 0) + startup.get("periodSeconds", 10) * startup.get(
        "failureThreshold", 3
    )
    assert budget >= 300, f"startup probe gives model load + warmup only {budget} s"


def test_termination_outlasts_drain_and_exit_timeout(overlay):
    deployment = one(overlay, "Deployment", "triton")
    triton = container(deployment, "triton")
    exit_timeout = int(flags(triton["args"])["--exit-timeout-secs"])
    pre_stop = triton["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep" and int(pre_stop[1]) >= 5, pre_stop
    grace = pod_spec(deployment)["terminationGracePeriodSeconds"]
    assert grace > exit_timeout
    assert grace > int(pre_stop[1]) + exit_timeout, "the kubelet would SIGKILL during Triton's drain"


def _mounts_by_path(c: dict, spec: dict) -> dict:
    volumes = {v["name"]: v for v in spec["volumes"]}
    return {m["mountPath"]: (m, volumes[m["name"]]) for m in c.get("volumeMounts", [])}


def test_model_repository_read_only_for_triton_written_by_export(overlay):
    claim = one(overlay, "PersistentVolumeClaim", "model-repository")
    # ReadWriteMany only where replicas may land on several nodes (test_k8s_stages.py: the storage knobs).
    assert claim["spec"]["accessModes"] == (["ReadWriteMany"] if overlay == "gpu" else ["ReadWriteOnce"])
    triton_deployment = one(overlay, "Deployment", "triton")
    spec = pod_spec(triton_deployment)
    readers = {c["name"] for c in all_containers(spec) if "/models" in _mounts_by_path(c, spec)}
    assert {"triton", "wait-for-repository"} <= readers
    for c in all_containers(spec):
        for mount, volume in _mounts_by_path(c, spec).values():
            if volume.get("persistentVolumeClaim", {}).get("claimName") == "model-repository":
                assert mount["mountPath"] == "/models" and mount.get("readOnly") is True, c["name"]
                assert volume["persistentVolumeClaim"] == {"claimName": "model-repository", "readOnly": True}
    assert "replicas" not in triton_deployment["spec"], "the HPA owns the replica count"

    job = one(overlay, "Job", "export")
    export = container(job, "export")
    assert export["command"] == [a.format(target=target(overlay)) for a in EXPORT_COMMAND]
    assert export["workingDir"] == "/opt/tritonkit"
    mount, volume = _mounts_by_path(export, pod_spec(job))["/models"]
    assert not mount.get("readOnly") and volume["persistentVolumeClaim"]["claimName"] == "model-repository"
    assert pod_spec(job)["securityContext"]["fsGroup"] == 1000  # Triton's uid 1000 reads what export writes


def test_shared_memory_and_tmp(overlay):
    deployment = one(overlay, "Deployment", "triton")
    mounts = _mounts_by_path(container(deployment, "triton"), pod_spec(deployment))
    shm = mounts["/dev/shm"][1]["emptyDir"]
    assert shm["medium"] == "Memory" and quantity(shm["sizeLimit"]) >= 2**30
    assert "emptyDir" in mounts["/tmp"][1]
    limits = container(deployment, "triton")["resources"]["limits"]
    assert quantity(limits["memory"]) > quantity(shm["sizeLimit"]), "the shm tmpfs counts against the memory limit"


def test_every_container_runs_non_root_without_privileges(overlay):
    for doc in pod_templates(overlay):
        spec = pod_spec(doc)
        where = f"{overlay} {doc['kind']}/{doc['metadata']['name']}"
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(key), f"{where}: {key}"
        assert not any("hostPath" in v for v in spec.get("volumes", [])), f"{where}: hostPath volume"
        pod_ctx = spec.get("securityContext", {})
        assert pod_ctx.get("seccompProfile", {}).get("type") == "RuntimeDefault", where
        for c in all_containers(spec):
            ctx = {**pod_ctx, **c.get("securityContext", {})}
            who = f"{where} container {c['name']}"
            assert ctx.get("runAsNonRoot") is True, who
            assert ctx.get("runAsUser") == 1000, who
            assert ctx.get("allowPrivilegeEscalation") is False, who
            assert not ctx.get("privileged"), who
            assert "ALL" in ctx.get("capabilities", {}).get("drop", []), who
            assert not ctx.get("capabilities", {}).get("add"), who
            assert ctx.get("readOnlyRootFilesystem") is True, who
            assert "resources" in c and c["resources"].get("requests"), f"{who}: no resource requests"


def test_triton_service_ports(overlay):
    service = one(overlay, "Service", "triton")
    pods = one(overlay, "Deployment", "triton")["spec"]["template"]["metadata"]["labels"]
    assert selects({"matchLabels": service["spec"]["selector"]}, pods)
    named = {p["name"] for p in container(one(overlay, "Deployment", "triton"), "triton")["ports"]}
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert {n: p for n, (p, _) in ports.items()} == {"http": 8000, "grpc": 8001, "metrics": 8002}
    assert {t for _, t in ports.values()} <= named, "a Service targetPort names no container port"


# --- images -----------------------------------------------------------------------------------------


def test_images_are_pinned_to_the_release(overlay):
    pins = dotenv()
    release = pins["NGC_RELEASE"]
    images = {c["name"]: c["image"] for doc in pod_templates(overlay) for c in all_containers(pod_spec(doc))}
    assert images["triton"] == f"tritonkit/triton:{release}"
    assert images["wait-for-repository"] == f"tritonkit/triton:{release}"
    assert images["export"] == f"tritonkit/export:{release}"
    for doc in pod_templates(overlay):
        for c in all_containers(pod_spec(doc)):
            name, _, tag = c["image"].rpartition(":")
            assert name and tag and tag != "latest", f"{doc['metadata']['name']}/{c['name']}: {c['image']}"


def test_tags_live_only_in_the_kustomization():
    tagged = [p for p in K8S.rglob("kustomization.yaml") if "newTag" in p.read_text()]
    assert tagged == [K8S / "components" / "common" / "kustomization.yaml"], tagged
    for path in K8S.rglob("*.yaml"):
        if path.name != "kustomization.yaml":
            assert not re.search(r"image:\s*\S+:\S+", path.read_text()), f"{path.name} pins a tag itself"


def test_triton_waits_for_the_export_to_finish(overlay):
    from export.seed import COMPLETE_MARKER

    (triton,) = [d for d in pod_templates(overlay) if d["kind"] == "Deployment" and d["metadata"]["name"] == "triton"]
    (init,) = [c for c in pod_spec(triton)["initContainers"] if c["name"] == "wait-for-repository"]
    assert f"/models/{COMPLETE_MARKER}" in " ".join(init["command"])


def test_the_export_job_load_checks_optional_variants_in_the_serving_image_after_exporting(overlay):
    """export/serving_check.py runs after the export (its init container), in Triton's image, on the same
    writable claim, with a GPU where the variants are TensorRT ones; the Job completes only when it has."""
    spec = pod_spec(one(overlay, "Job", "export"))
    assert [c["name"] for c in spec["initContainers"]] == ["export"]
    (check,) = spec["containers"]
    assert check["name"] == "serving-check" and check["image"].startswith("tritonkit/triton:")
    assert check["args"] == ["python3", "-m", "export.serving_check", "--repository", "/models"]
    assert "command" not in check, "the NGC entrypoint must still run"
    mounts = {m["mountPath"]: m for m in check["volumeMounts"]}
    assert mounts["/models"]["name"] == "model-repository" and not mounts["/models"].get("readOnly")
    assert "/var/cache/tritonkit/trt" in mounts, "the configs' engine cache path must be writable"
    assert (str(check["resources"].get("limits", {}).get(GPU)) == "1") == (target(overlay) == "gpu")
