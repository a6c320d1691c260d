"""deploy/k8s, continued: autoscaling on Triton's queue time and the generator's waiting streams, disruption
budget, network policy, and the load-test stage (overlays/loadtest: the Locust master Job and its workers).
Rendering, schemas and the Triton pod itself are in test_k8s.py."""

import json
import re

import kubernetes_validate
import yaml

from loadtest.campaign import command as loadtest_cli
from tests.k8s_manifests import (
    ADAPTER_VALUES,
    GPU,
    K8S,
    adapter_rule,
    container,
    dotenv,
    one,
    pod_spec,
    pod_templates,
    quantity,
    render,
    selects,
)
from tritonkit_cli import build_parser

# --- autoscaling and disruption ---------------------------------------------------------------------
GENERATOR_WAITING = "tritonkit_generator_streams_waiting"  # test_monitoring.py checks model.py exports it
GENERATOR_TEST = K8S / "monitoring" / "tests" / "generator_waiting_test.yml"


def generator_rule() -> dict:
    rules = yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["custom"]
    (rule,) = [r for r in rules if r["seriesQuery"].startswith(GENERATOR_WAITING + "{")]
    return rule


def test_hpa_scales_triton_on_queue_time_and_on_the_generators_waiting_streams(overlay):
    hpa = one(overlay, "HorizontalPodAutoscaler", "triton")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "triton"}
    one(overlay, "Deployment", "triton")
    queue, waiting = hpa["spec"]["metrics"]
    for metric in (queue, waiting):
        assert metric["type"] == "Pods"
        assert metric["pods"]["target"]["type"] == "AverageValue"
    assert queue["pods"]["metric"]["name"] == adapter_rule()["name"]["as"]
    assert 0.005 <= quantity(queue["pods"]["target"]["averageValue"]) <= 0.1  # seconds of queueing
    assert waiting["pods"]["metric"]["name"] == generator_rule()["name"]["as"]
    assert 1 <= quantity(waiting["pods"]["target"]["averageValue"]) <= 8  # streams waiting per pod
    if overlay == "gpu-single-node":  # no more replicas than the node has GPUs (test_the_rollout_...)
        assert hpa["spec"]["minReplicas"] == hpa["spec"]["maxReplicas"] == 1
    else:
        assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 120


def test_adapter_rule_turns_the_generators_waiting_gauge_into_a_pods_metric():
    rule = generator_rule()
    assert rule["seriesQuery"] == GENERATOR_WAITING + '{namespace!="",pod!=""}'
    assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
    assert re.fullmatch(rule["name"]["matches"], GENERATOR_WAITING)
    query = " ".join(rule["metricsQuery"].split())
    # A gauge: averaged over the window (one scrape in a burst does not scale), summed over the pod's models.
    assert query == "sum by (<<.GroupBy>>) (avg_over_time(<<.Series>>{<<.LabelMatchers>>}[1m]))"
    # The promtool test (run by make check-deploy and test_k8s_stages.py) evaluates this very query.
    filled = (
        query.replace("<<.GroupBy>>", "pod")
        .replace("<<.Series>>", GENERATOR_WAITING)
        .replace("<<.LabelMatchers>>", 'namespace!="",pod!=""')
    )
    tested = yaml.safe_load(GENERATOR_TEST.read_text())["tests"][0]["promql_expr_test"][0]["expr"]
    assert tested == filled


def test_adapter_rule_turns_triton_counters_into_a_pods_metric():
    rule = adapter_rule()
    assert rule["seriesQuery"] == 'nv_inference_queue_duration_us{namespace!="",pod!=""}'
    assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
    assert rule["name"]["as"] == "triton_queue_time_per_request_seconds"
    assert re.search(rule["name"]["matches"], "nv_inference_queue_duration_us")
    query = " ".join(rule["metricsQuery"].split())
    # Per (pod, model) first, then the worst model of the pod: never a sum over the pod's models, in which
    # a busy light model hides a saturated heavy one (monitoring/tests/autoscaling_test.yml shows both).
    assert query.startswith("max by (<<.GroupBy>>) (") and query.endswith(") / 1e6")
    assert "sum by (<<.GroupBy>>, model) (rate(<<.Series>>{<<.LabelMatchers>>}[1m]))" in query
    assert (
        "clamp_min(sum by (<<.GroupBy>>, model) (rate(nv_inference_request_success{<<.LabelMatchers>>}[1m])), 1e-9)"
    ) in query
    assert query.count("(") == query.count(")")
    values = yaml.safe_load(ADAPTER_VALUES.read_text())
    assert values["rules"]["default"] is False


def test_pdb_selects_exactly_the_triton_pods(overlay):
    pdb = one(overlay, "PodDisruptionBudget", "triton")
    assert ("maxUnavailable" in pdb["spec"]) != ("minAvailable" in pdb["spec"])
    for doc in pod_templates(overlay):
        labels = doc["spec"]["template"]["metadata"]["labels"]
        name = doc["metadata"]["name"]
        assert selects(pdb["spec"]["selector"], labels) == (name == "triton"), name


def _rollout_finishes(replicas: int, gpus: int, max_surge: int, max_unavailable: int) -> bool:
    """The Deployment controller's rolling update, step by step, on a node with ``gpus`` GPUs and one GPU per pod:
    new pods up to replicas + maxSurge, each running once a GPU is free; old pods down while at least
    replicas - maxUnavailable pods run. True when every pod is new and running."""
    old, running, pending = replicas, 0, 0
    while True:
        before = (old, running, pending)
        pending += max(0, min(replicas - running - pending, replicas + max_surge - (old + running + pending)))
        starts = min(pending, gpus - old - running)
        running, pending = running + starts, pending - starts
        old -= max(0, min(old, old + running - (replicas - max_unavailable)))
        if old == 0 and running == replicas:
            return True
        if (old, running, pending) == before:
            return False


def test_a_rollout_on_the_single_node_overlay_finishes_with_every_gpu_in_use(overlay):
    """`kubectl rollout restart` after a re-export: on one node the old pod must free its GPU first."""
    strategy = one(overlay, "Deployment", "triton")["spec"]["strategy"]
    rolling = strategy["rollingUpdate"]
    assert all(isinstance(v, int) for v in rolling.values()), "percentages: this check reads numbers"
    hpa = one(overlay, "HorizontalPodAutoscaler", "triton")["spec"]
    for replicas in range(hpa["minReplicas"], hpa["maxReplicas"] + 1):
        finishes = _rollout_finishes(replicas, replicas, rolling["maxSurge"], rolling["maxUnavailable"])
        # gpu and cpu keep capacity (a spare GPU or CPU node is needed); one GPU node cannot have a spare.
        assert finishes == (overlay == "gpu-single-node"), (overlay, replicas, rolling)
    if overlay == "gpu-single-node":
        assert (rolling["maxSurge"], rolling["maxUnavailable"]) == (0, 1), "more would stop several pods at once"
        assert _rollout_finishes(2, 3, 1, 0), "the model is wrong: with a spare GPU the default rollout finishes"


def test_the_pdb_lets_a_drain_evict_the_only_replica(overlay):
    """A minAvailable equal to the replicas (1 on one GPU) would block every eviction-based drain."""
    pdb = one(overlay, "PodDisruptionBudget", "triton")["spec"]
    replicas = one(overlay, "HorizontalPodAutoscaler", "triton")["spec"]["minReplicas"]
    allowed = pdb["maxUnavailable"] if "maxUnavailable" in pdb else replicas - pdb["minAvailable"]
    assert allowed >= 1
    strategy = one(overlay, "Deployment", "triton")["spec"]["strategy"]["rollingUpdate"]
    assert allowed >= strategy["maxUnavailable"], "the PDB should allow what a rollout does anyway"


def test_network_policy_opens_ports_triton_has(overlay):
    policy = one(overlay, "NetworkPolicy", "triton")
    triton = one(overlay, "Deployment", "triton")
    assert selects(policy["spec"]["podSelector"], triton["spec"]["template"]["metadata"]["labels"])
    named = {p["name"] for p in container(triton, "triton")["ports"]}
    opened = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert opened == named


# --- the load-test stage (overlays/loadtest) ------------------------------------------------------------
LOAD_STAGE = K8S / "overlays" / "loadtest"


def load_stage() -> dict:
    return {(d["kind"], d["metadata"]["name"]): d for d in render(LOAD_STAGE)}


def cli_args(argv: list[str]):
    """``argv`` (after ``tritonkit``) as the real command line parses it."""
    return build_parser().parse_args(argv)


def test_the_load_stage_renders_a_master_job_its_service_and_the_workers():
    objects = load_stage()
    assert set(objects) == {
        ("Namespace", "tritonkit"),
        ("Job", "loadtest"),
        ("Service", "locust-master"),
        ("Deployment", "locust-worker"),
    }
    version = kubernetes_validate.latest_version()
    for doc in objects.values():
        kubernetes_validate.validate(doc, version, strict=True)
    job = objects[("Job", "loadtest")]
    assert job["spec"]["backoffLimit"] == 0 and pod_spec(job)["restartPolicy"] == "Never"
    for doc in (job, objects[("Deployment", "locust-worker")]):
        spec = pod_spec(doc)
        assert GPU not in json.dumps(doc), "a load generator never holds a GPU"
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["automountServiceAccountToken"] is False
        (c,) = spec["containers"]
        assert c["image"] == f"tritonkit/loadtest:{dotenv().get('TRITONKIT_VERSION', '0.1.0')}"
        assert c["securityContext"]["readOnlyRootFilesystem"] is True and c["resources"]["requests"]


def test_the_load_stage_runs_tritonkit_loadtest_master_and_workers_with_the_real_flags(overlay):
    objects = load_stage()
    job, workers = objects[("Job", "loadtest")], objects[("Deployment", "locust-worker")]
    service = objects[("Service", "locust-master")]
    (master_c,) = pod_spec(job)["containers"]
    shell, flag, script, name, *argv = master_c["command"]
    assert (shell, flag, name) == ("sh", "-c", "loadtest") and script.startswith('tritonkit loadtest "$@";')
    master = cli_args(["loadtest", *argv])
    assert master.master and not master.worker
    loadtest_cli.master_of(master)  # the checks a real run makes first: none refuses these flags
    loadtest_cli.model_campaign(master)
    (worker_c,) = pod_spec(workers)["containers"]
    assert worker_c["command"][:2] == ["tritonkit", "loadtest"]
    worker = cli_args(worker_c["command"][1:])
    assert worker.worker and not worker.master and worker.processes == 1
    # Each worker pod is one Locust process: the master waits for as many as the Deployment runs.
    assert master.expect_workers == workers["spec"]["replicas"] * worker.processes
    # The workers reach the master through its Service; the master reaches the serving overlay's Triton Service.
    assert worker.master_host == service["metadata"]["name"]
    ports = {p["port"]: p["targetPort"] for p in service["spec"]["ports"]}
    container_ports = {p["name"]: p["containerPort"] for p in master_c["ports"]}
    assert container_ports[ports[worker.master_port]] == master.master_bind_port
    pods = job["spec"]["template"]["metadata"]["labels"]
    selector = {"matchLabels": service["spec"]["selector"]}
    assert selects(selector, pods) and not selects(selector, workers["spec"]["template"]["metadata"]["labels"])
    triton = one(overlay, "Service", "triton")
    triton_ports = {p["name"]: p["port"] for p in triton["spec"]["ports"]}
    assert master.http_url == f"triton:{triton_ports['http']}" and master.grpc_url == f"triton:{triton_ports['grpc']}"
    assert master.metrics_url == f"http://triton:{triton_ports['metrics']}/metrics"
    # The report folder is the Job's volume, which the shell prints the summary of.
    mounts = {m["mountPath"] for m in master_c["volumeMounts"]}
    assert str(master.out) in mounts and f"cat {master.out}/*/summary.md" in script
    monitor = one(overlay, "PodMonitor", "triton")
    assert not selects(monitor["spec"]["selector"], pods), "the PodMonitor would scrape the load generator"


def test_make_check_deploy_validates_every_stage_the_load_stage_too():
    (loop,) = re.findall(r"for overlay in ([^;]+);", (K8S.parents[1] / "Makefile").read_text())
    stages = {str(p.parent.relative_to(K8S / "overlays")) for p in (K8S / "overlays").rglob("kustomization.yaml")}
    assert set(loop.split()) == stages and "loadtest" in stages
