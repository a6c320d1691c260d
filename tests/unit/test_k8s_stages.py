"""deploy/k8s, continued: the export stage before the serving stage, the wait with its timeout, the GPU
product pin, and the monitoring objects the serving stage ships (the rules as a PrometheusRule, the
autoscaling query and its promtool test)."""

import os
import signal
import subprocess
import time

import yaml

from deploy import monitoring
from export.seed import COMPLETE_MARKER
from tests.deploy_tools import promtool
from tests.k8s_manifests import (
    GPU,
    K8S,
    container,
    expected,
    export_stage,
    flags,
    one,
    pod_spec,
    render,
    stage,
    stage_path,
)

PRODUCT = "nvidia.com/gpu.product"


def _requests_gpu(doc: dict) -> bool:
    return any(GPU in c.get("resources", {}).get("limits", {}) for c in pod_spec(doc)["containers"])


# --- two stages -------------------------------------------------------------------------------------


def test_the_export_stage_holds_the_claim_and_the_job_and_the_serving_stage_the_rest(overlay):
    export = {(d["kind"], d["metadata"]["name"]) for d in stage(overlay, "export")}
    serve = {(d["kind"], d["metadata"]["name"]) for d in stage(overlay, "serve")}
    assert export == export_stage(overlay)
    assert serve == expected(overlay) - export_stage(overlay) | {("Namespace", "tritonkit")}


def test_no_stage_asks_for_a_gpu_twice():
    """Applied together on a one-GPU node, a Triton pod waiting for the export holds the GPU the Job needs."""
    for name in ("export", "serve"):
        workloads = [d for d in stage("gpu", name) if d["kind"] in ("Job", "Deployment") and _requests_gpu(d)]
        assert len(workloads) == 1, [d["metadata"]["name"] for d in workloads]


def _wait_script(overlay: str) -> tuple[str, dict]:
    init = pod_spec(one(overlay, "Deployment", "triton"))["initContainers"][0]  # first: the others need the marker
    assert init["name"] == "wait-for-repository" and init["command"][:2] == ["sh", "-c"]
    env = {e["name"]: e["value"] for e in init["env"]}
    return init["command"][2], env


def test_the_wait_for_the_export_gives_up_with_a_line_that_says_what_to_do(overlay, tmp_path):
    script, env = _wait_script(overlay)
    assert f"/models/{COMPLETE_MARKER}" in script
    assert int(env["WAIT_TIMEOUT_SECONDS"]) >= 600  # an export of the big models takes minutes
    models = tmp_path / "models"
    models.mkdir()
    run = script.replace("/models", str(models))  # the container's own script, pointed at a folder here

    done = subprocess.run(
        ["sh", "-c", run], env={**os.environ, "WAIT_TIMEOUT_SECONDS": "0"}, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    for words in (
        "has not finished",
        "kubectl -n tritonkit get job export",
        "overlays/<gpu|cpu>/export",
        "holds the GPU",
    ):
        assert words in line, line

    (models / COMPLETE_MARKER).write_text('{"target": "cpu"}\n')
    done = subprocess.run(
        ["sh", "-c", run], env={**os.environ, "WAIT_TIMEOUT_SECONDS": "0"}, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0 and '{"target": "cpu"}' in done.stdout


# --- one GPU product --------------------------------------------------------------------------------


def _with_component(tmp_path, overlay_stage: str, component: str):
    site = tmp_path / overlay_stage.replace("/", "-")
    site.mkdir()
    (site / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(K8S / "overlays" / overlay_stage, site)],
                "components": [os.path.relpath(K8S / "components" / component, site)],
            }
        )
    )
    return list(render(site))


def test_the_gpu_product_pin_puts_the_job_and_triton_on_the_same_product(tmp_path):
    job = one_of(_with_component(tmp_path, "gpu/export", "gpu-product"), "Job", "export")
    triton = one_of(_with_component(tmp_path, "gpu", "gpu-product"), "Deployment", "triton")
    terms = []
    for doc in (job, triton):
        required = pod_spec(doc)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ((expression,),) = [t["matchExpressions"] for t in required["nodeSelectorTerms"]]
        assert expression["key"] == PRODUCT and expression["operator"] == "In"
        terms.append(expression["values"])
    assert terms[0] == terms[1] and len(terms[0]) == 1
    component = (K8S / "components" / "gpu-product" / "kustomization.yaml").read_text()
    assert component.count(terms[0][0]) == 1, "the product is written in one place"
    for kustomization in (stage_path("gpu", "serve"), stage_path("gpu", "export")):
        assert "components/gpu-product" in (kustomization / "kustomization.yaml").read_text()


def one_of(docs: list, kind: str, name: str) -> dict:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


# --- the rules for the Prometheus Operator, and the autoscaling query -------------------------------


def test_generated_monitoring_files_are_up_to_date():
    for path, text in monitoring.render_generated().items():
        assert path.read_text() == text, f"{path} is stale: run python -m deploy.monitoring"


def test_the_prometheus_rule_ships_the_compose_rules_for_the_podmonitors_job(overlay, tmp_path):
    rule = one(overlay, "PrometheusRule", "triton")
    groups = [g for path in monitoring.RULE_FILES for g in monitoring.load_rule_groups(path)]
    assert rule["spec"]["groups"] == groups
    # Its selectors name the job the PodMonitor produces (its jobLabel's value on the Triton pods).
    monitor = one(overlay, "PodMonitor", "triton")
    pods = one(overlay, "Deployment", "triton")["spec"]["template"]["metadata"]["labels"]
    job = (
        pods[monitor["spec"]["jobLabel"]]
        if "jobLabel" in monitor["spec"]
        else f"tritonkit/{monitor['metadata']['name']}"
    )
    exprs = " ".join(r["expr"] for g in groups for r in g["rules"])
    assert f'job="{job}"' in exprs and exprs.count('job="') == exprs.count(f'job="{job}"')
    rules_file = tmp_path / "rules.yml"
    rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    promtool("check", "rules", str(rules_file))


def test_the_autoscaling_query_reads_the_worst_model_per_pod():
    """promtool on the adapter's own query: a busy light model and an ensemble no longer hide a saturated one."""
    tests = sorted((monitoring.K8S_MONITORING / "tests").glob("*_test.yml"))
    assert tests
    out = promtool("test", "rules", *[p.name for p in tests], cwd=tests[0].parent).stdout
    assert out.count("SUCCESS") == len(tests), out
    rules = yaml.safe_load(monitoring.ADAPTER_RULES.read_text())["groups"][0]["rules"]
    assert rules[0]["expr"] == monitoring.adapter_query()


def test_the_containers_fail_fast_on_a_model_that_does_not_load(overlay):
    """Unlike `tritonkit serve` (which serves what loads), a container with a broken model must not start:
    a half-served repository behind a readiness probe would hide the broken export (docs/production.md)."""
    args = flags(container(one(overlay, "Deployment", "triton"), "triton")["args"][1:])
    assert args["--exit-on-error"] == "true" and args["--strict-readiness"] == "true"
    compose = yaml.safe_load((K8S.parents[1] / "docker-compose.yml").read_text())["services"]
    for name in ("triton", "triton-cpu"):
        command = flags(compose[name]["command"][1:])
        assert command["--exit-on-error"] == "true" and command["--strict-readiness"] == "true", name


# --- storage: the access mode and class of every claim ----------------------------------------------


def _claims(docs: list) -> dict:
    return {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "PersistentVolumeClaim"}


def test_only_the_multi_node_gpu_overlay_asks_for_read_write_many(overlay):
    """ReadWriteMany binds only with a shared-filesystem class; one node (and the cpu overlay) asks for what every
    provisioner gives. No overlay names a class: the cluster's default, or components/storage-class."""
    claims = _claims(stage(overlay, "export"))
    assert set(claims) == {"model-repository"} | ({"trt-engine-cache"} if overlay.startswith("gpu") else set())
    for name, spec in claims.items():
        assert spec["accessModes"] == (["ReadWriteMany"] if overlay == "gpu" else ["ReadWriteOnce"]), name
        assert "storageClassName" not in spec, name
    assert not _claims(stage(overlay, "serve")), "the serving stage holds no claim: deleting it keeps the data"


def test_the_storage_class_knob_names_the_class_of_every_claim(tmp_path):
    for overlay in ("gpu", "gpu-single-node", "cpu"):
        claims = _claims(_with_component(tmp_path, f"{overlay}/export", "storage-class"))
        assert len(claims) >= 1
        classes = {spec["storageClassName"] for spec in claims.values()}
        assert len(classes) == 1 and "" not in classes, (overlay, classes)
    component = (K8S / "components" / "storage-class" / "kustomization.yaml").read_text()
    assert component.count(classes.pop()) == 1, "the class is written in one place"
    assert "components/storage-class" in (stage_path("gpu", "export") / "kustomization.yaml").read_text()


def test_the_documented_wait_is_the_script_that_stops_on_a_failed_job():
    """`kubectl wait --for=condition=complete` waits out its timeout on a failed Job or an unbound claim."""
    docs_text = {p: p.read_text() for p in (K8S / "README.md", K8S.parents[1] / "docs" / "production.md")}
    docs_text |= {p: p.read_text() for p in (K8S / "overlays").rglob("kustomization.yaml")}
    docs_text[K8S / "export" / "kustomization.yaml"] = (K8S / "export" / "kustomization.yaml").read_text()
    for path, text in docs_text.items():
        assert "wait --for=condition=complete" not in text, f"{path} still documents kubectl wait on the Job"
    for path in (K8S / "README.md", K8S.parents[1] / "docs" / "production.md"):
        assert "deploy/k8s/wait_for_export.py" in docs_text[path], path


# --- ONNX Runtime's TensorRT engines, kept across pods (gpu overlays) ---------------------------------


def _cache_containers(overlay: str) -> tuple[dict, dict, dict]:
    spec = pod_spec(one(overlay, "Deployment", "triton"))
    inits = [c["name"] for c in spec["initContainers"]]
    assert inits == ["wait-for-repository", "seed-engine-cache"], "the seed reads the marker the wait waits for"
    (seed,) = [c for c in spec["initContainers"] if c["name"] == "seed-engine-cache"]
    (publish,) = [c for c in spec["containers"] if c["name"] == "publish-engine-cache"]
    return spec, seed, publish


def test_the_engine_cache_is_the_path_the_configs_name_and_lives_on_its_claim(overlay):
    from export import config as config_io

    triton = container(one(overlay, "Deployment", "triton"), "triton")
    engines = {m["mountPath"]: m["name"] for m in triton["volumeMounts"]}
    assert engines.get(config_io.TRT_CACHE_DIR) == "trt-engines", "the configs' trt_engine_cache_path is not mounted"
    if not overlay.startswith("gpu"):
        return
    spec, seed, publish = _cache_containers(overlay)
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes["trt-engines"], "each pod builds into its own folder"
    assert volumes["engine-cache"]["persistentVolumeClaim"] == {"claimName": "trt-engine-cache"}
    for c in (seed, publish):
        env = {e["name"]: e.get("value") for e in c["env"]}
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        assert env["ORT_ENGINE_CACHE"] == config_io.TRT_CACHE_DIR and mounts[env["ORT_ENGINE_CACHE"]] == "trt-engines"
        assert mounts[env["SHARED_ENGINE_CACHE"]] == "engine-cache"
        assert env["ENGINE_CACHE_SCOPE"] == "node-$(NODE_NAME)"  # an engine runs on the GPU product that built it
    assert spec["securityContext"]["fsGroup"] == 1000  # a new claim's root becomes writable by the pods' gid


def _script(c: dict) -> str:
    assert c["command"][:2] == ["sh", "-c"]
    return c["command"][2]


def _cache_env(tmp_path, local: str, export: str = '{"finished": "1"}') -> dict:
    models, engines = tmp_path / "models", tmp_path / local
    for folder in (models, engines, tmp_path / "claim"):
        folder.mkdir(exist_ok=True)
    (models / COMPLETE_MARKER).write_text(export)
    return {
        "PATH": os.environ["PATH"],
        "HOSTNAME": local,
        "ORT_ENGINE_CACHE": str(engines),
        "SHARED_ENGINE_CACHE": str(tmp_path / "claim"),
        "EXPORT_MARKER": str(models / COMPLETE_MARKER),
        "ENGINE_CACHE_SCOPE": "node-a",
        "ENGINE_CACHE_KEEP_DAYS": "7",
        "ENGINE_CACHE_SETTLE_MINUTES": "1",
    }


def _engine(folder, name: str, age_s: float, body: bytes = b"engine") -> None:
    path = folder / f"TensorrtExecutionProvider_{name}"
    path.write_bytes(body)
    os.utime(path, (time.time() - age_s, time.time() - age_s))


def _publish_once(script: str, env: dict) -> str:
    """The sidecar's first pass, then its stop (SIGTERM: one more pass); its output."""
    pod = subprocess.Popen(["sh", "-c", script], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        time.sleep(0.5)  # the first pass runs at start
        pod.send_signal(signal.SIGTERM)
        out, _ = pod.communicate(timeout=20)
    finally:
        if pod.poll() is None:
            os.killpg(pod.pid, signal.SIGKILL)
    assert pod.returncode == 0, out
    return out


def test_engines_one_pod_built_seed_the_next_and_a_new_export_starts_empty(tmp_path):
    _, seed, publish = _cache_containers("gpu")
    first = _cache_env(tmp_path, "pod-a")
    done = subprocess.run(["sh", "-c", _script(seed)], env=first, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "0 engine file(s)" in done.stdout, done.stderr

    a = tmp_path / "pod-a"
    _engine(a, "graph_1_sm90.engine", age_s=120)
    _engine(a, "graph_2_sm90.engine", age_s=0)  # still being written, as far as anyone can tell
    out = _publish_once(_script(publish), first)
    (folder,) = (tmp_path / "claim").glob("*/node-a")
    kept = sorted(p.name for p in folder.iterdir())
    assert kept == [".last-seeded", "TensorrtExecutionProvider_graph_1_sm90.engine"], (kept, out)
    assert out.count("kept TensorrtExecutionProvider_graph_1_sm90.engine") == 1, "published again unchanged"

    second = _cache_env(tmp_path, "pod-b")
    done = subprocess.run(["sh", "-c", _script(seed)], env=second, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "1 engine file(s)" in done.stdout
    assert (tmp_path / "pod-b" / "TensorrtExecutionProvider_graph_1_sm90.engine").read_bytes() == b"engine"
    assert "kept" not in _publish_once(_script(publish), second), "a seeded engine is not copied back"

    stale = tmp_path / "claim" / "0123456789abcdef"  # an export served last month
    stale.mkdir()
    os.utime(stale, (time.time() - 8 * 86400, time.time() - 8 * 86400))
    newer = _cache_env(tmp_path, "pod-c", export='{"finished": "2"}')  # new weights, same graphs
    done = subprocess.run(["sh", "-c", _script(seed)], env=newer, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "0 engine file(s)" in done.stdout
    assert not list((tmp_path / "pod-c").glob("TensorrtExecutionProvider_*"))
    assert folder.exists() and not stale.exists(), "only folders unused for ENGINE_CACHE_KEEP_DAYS go"


def test_an_engine_cache_it_cannot_write_costs_the_pod_its_cache_not_its_start(tmp_path):
    _, seed, publish = _cache_containers("gpu")
    env = {**_cache_env(tmp_path, "pod-a"), "SHARED_ENGINE_CACHE": "/dev/null/engine-cache"}
    done = subprocess.run(["sh", "-c", _script(seed)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0
    (line,) = done.stderr.strip().splitlines()
    assert "not writable by uid" in line and "deploy/k8s/README.md" in line
    assert "idle" in _publish_once(_script(publish), env)
