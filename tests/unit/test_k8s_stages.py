"""deploy/k8s, continued: the export stage before the serving stage, the wait with its timeout, the GPU
product pin, and the monitoring objects the serving stage ships (the rules as a PrometheusRule, the
autoscaling query and its promtool test)."""

import os
import subprocess

import yaml

from deploy import monitoring
from export.seed import COMPLETE_MARKER
from tests.deploy_tools import promtool
from tests.k8s_manifests import (
    EXPECTED,
    EXPORT_STAGE,
    GPU,
    K8S,
    container,
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
    assert export == EXPORT_STAGE
    assert serve == EXPECTED - EXPORT_STAGE | {("Namespace", "tritonkit")}


def test_no_stage_asks_for_a_gpu_twice():
    """Applied together on a one-GPU node, a Triton pod waiting for the export holds the GPU the Job needs."""
    for name in ("export", "serve"):
        workloads = [d for d in stage("gpu", name) if d["kind"] in ("Job", "Deployment") and _requests_gpu(d)]
        assert len(workloads) == 1, [d["metadata"]["name"] for d in workloads]


def _wait_script(overlay: str) -> tuple[str, dict]:
    (init,) = pod_spec(one(overlay, "Deployment", "triton"))["initContainers"]
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
