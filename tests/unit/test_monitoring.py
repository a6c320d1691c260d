"""The monitoring files, checked offline: promtool on the config and rules, promtool's rule unit tests,
the Grafana dashboard's structure and the names its queries use, the provisioning files, and compose's
Alertmanager config (amtool, the 0.25 release compose serves)."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from deploy import monitoring
from tests.deploy_tools import promtool

GRAFANA_FILES = sorted(p for p in monitoring.GRAFANA_DIR.rglob("*") if p.is_file())
RULE_TEST_FILES = sorted(monitoring.RULE_TESTS_DIR.glob("*.yml"))
GENERATOR_MODEL = monitoring.DEPLOY.parent / "model_repository" / "text_generator" / "1" / "model.py"
HPA = monitoring.DEPLOY / "k8s" / "base" / "triton-hpa.yaml"


def generator_metrics() -> dict[str, str]:
    """The token generator's metric names, {constant: name}, as its model.py declares them (read with ast:
    the module imports Triton's pb_utils, which exists only inside the server)."""
    tree = ast.parse(GENERATOR_MODEL.read_text())
    return {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and str(node.value.value).startswith("tritonkit_generator_")
    }


GENERATOR = generator_metrics()
# The series Prometheus scrapes from them: a histogram comes as _bucket, _sum and _count.
GENERATOR_SERIES = set(GENERATOR.values()) | {
    GENERATOR["TTFT_SECONDS"] + suffix for suffix in ("_bucket", "_sum", "_count")
}
KNOWN_METRICS = (
    monitoring.TRITON_METRICS | monitoring.TRITON_GPU_METRICS | monitoring.PROMETHEUS_METRICS | GENERATOR_SERIES
)


# -- Prometheus -----------------------------------------------------------------------------------
def test_prometheus_config_is_valid():
    out = promtool("check", "config", str(monitoring.PROMETHEUS_CONFIG)).stdout
    # check config also checks the rule files it finds: all of them, so the glob matches.
    for path in monitoring.RULE_FILES:
        assert str(path.relative_to(monitoring.PROMETHEUS_DIR)) in out, out


def test_prometheus_config_finds_triton_replicas_by_dns():
    config = yaml.safe_load(monitoring.PROMETHEUS_CONFIG.read_text())
    assert config["rule_files"] == ["rules/*.yml"]
    assert sorted(monitoring.PROMETHEUS_DIR.glob("rules/*.yml")) == sorted(monitoring.RULE_FILES)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"triton", "prometheus"}
    (dns,) = jobs["triton"]["dns_sd_configs"]
    assert (dns["names"], dns["type"], dns["port"]) == (["triton"], "A", 8002)


@pytest.mark.parametrize("path", monitoring.RULE_FILES, ids=lambda p: p.name)
def test_rule_file_is_valid(path):
    promtool("check", "rules", str(path))


def test_promtool_rule_unit_tests_pass():
    assert RULE_TEST_FILES, f"no rule tests in {monitoring.RULE_TESTS_DIR}"
    out = promtool("test", "rules", *map(str, RULE_TEST_FILES)).stdout
    assert out.count("SUCCESS") == len(RULE_TEST_FILES), out


def test_rendered_config_for_a_static_target_is_valid(tmp_path):
    path = tmp_path / "prometheus.yml"
    path.write_text(monitoring.render_prometheus_config("127.0.0.1:8002", "127.0.0.1:9090", interval="1s"))
    promtool("check", "config", str(path))
    jobs = {job["job_name"]: job for job in yaml.safe_load(path.read_text())["scrape_configs"]}
    assert jobs["triton"]["static_configs"] == [{"targets": ["127.0.0.1:8002"]}]
    assert "dns_sd_configs" not in jobs["triton"]


def test_recording_rules_are_named_and_read_only_known_series():
    rules = monitoring.recording_rules()
    assert len(rules) == len(set(rules))
    for name, expr in rules.items():
        assert name.startswith("tritonkit:"), name
        unknown = monitoring.metric_names(expr) - set(rules) - monitoring.TRITON_METRICS
        assert not unknown, f"{name} reads {unknown}, which neither a rule nor Triton 2.51 produces"


def test_alerts_have_severity_summary_description_and_known_series():
    rules = monitoring.recording_rules()
    alerts = [
        r
        for path in monitoring.RULE_FILES
        for g in monitoring.load_rule_groups(path)
        for r in g["rules"]
        if "alert" in r
    ]
    assert len(alerts) == len(monitoring.alert_names()) >= 6
    for alert in alerts:
        assert alert["labels"]["severity"] in ("warning", "critical"), alert["alert"]
        assert alert["annotations"]["summary"] and alert["annotations"]["description"], alert["alert"]
        assert alert.get("for"), f"{alert['alert']} fires on a single evaluation"
        unknown = monitoring.metric_names(alert["expr"]) - set(rules) - KNOWN_METRICS
        assert not unknown, f"{alert['alert']} reads {unknown}"


def rule_tests() -> tuple[set[str], set[str]]:
    """Names read by promql_expr_test expressions, and alerts some alert_rule_test expects to fire."""
    exprs, firing = set(), set()
    for path in RULE_TEST_FILES:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for test in case.get("promql_expr_test", []):
                exprs |= monitoring.metric_names(test["expr"])
            firing |= {t["alertname"] for t in case.get("alert_rule_test", []) if t.get("exp_alerts")}
    return exprs, firing


def test_every_recording_rule_and_alert_has_a_promtool_test():
    exprs, firing = rule_tests()
    untested = set(monitoring.recording_rules()) - exprs
    assert not untested, f"recording rules without a promql_expr_test: {sorted(untested)}"
    never_fired = set(monitoring.alert_names()) - firing
    assert not never_fired, f"alerts no test makes fire: {sorted(never_fired)}"


def test_replica_down_waits_longer_than_the_slowest_start_the_stack_allows():
    """Triton opens its metrics port only after every model loaded: a replica never seen up pages only once
    it has been there longer than compose's healthcheck and the Deployment's startup probe let a start take."""
    (rule,) = [
        r
        for g in monitoring.load_rule_groups(monitoring.RULE_FILES[1])
        for r in g["rules"]
        if r.get("alert") == "TritonReplicaDown"
    ]
    (start_window,) = re.findall(r'up\{job="triton"\} offset (\d+)m', rule["expr"])
    compose_file = yaml.safe_load((monitoring.DEPLOY.parent / "docker-compose.yml").read_text())
    compose_start = int(compose_file["x-triton"]["healthcheck"]["start_period"].removesuffix("s"))
    deployment = yaml.safe_load((monitoring.DEPLOY / "k8s" / "base" / "triton-deployment.yaml").read_text())
    (triton,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "triton"]
    probe = triton["startupProbe"]
    k8s_start = probe["periodSeconds"] * probe["failureThreshold"]
    assert int(start_window) * 60 > max(compose_start, k8s_start), "a slow but allowed start would page"
    # A replica that was up pages after a minute, not after the start window.
    assert rule["for"] == "1m" and 'max_over_time(up{job="triton"}[1h]) == 1' in rule["expr"]


# -- Grafana --------------------------------------------------------------------------------------
def test_dashboard_panels_query_prometheus_by_uid():
    dashboard = monitoring.load_dashboard()
    panels = [p for p in monitoring.iter_panels(dashboard) if p.get("type") != "row"]
    assert len({p["id"] for p in panels}) == len(panels), "panel ids repeat"
    for panel in panels:
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        assert panel["datasource"]["uid"] == monitoring.DATASOURCE_UID, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": monitoring.DATASOURCE_UID}, panel["title"]
            assert target["expr"].strip(), panel["title"]
    titles = {p["title"] for p in panels}
    assert {
        "Throughput",
        "Request latency p50 / p99",
        "Queue vs compute time per request",
        "Average batch size",
        "Failures by reason",
        "Pending requests",
        "GPU utilisation",
        "GPU memory",
        "CPU utilisation",
        "CPU memory",
    } <= titles


def test_the_generator_panels_and_the_hpa_read_the_metrics_the_generator_exports():
    """Renaming a metric in model.py without the dashboard, the adapter rule and the HPA breaks this test."""
    assert set(GENERATOR) == {"STREAMS_WAITING", "STREAMS_RUNNING", "TTFT_SECONDS", "TOKENS_TOTAL"}
    read = set()
    for query in monitoring.dashboard_queries():
        read |= monitoring.metric_names(query.expr) & GENERATOR_SERIES
    assert read >= {
        GENERATOR["STREAMS_WAITING"],
        GENERATOR["STREAMS_RUNNING"],
        GENERATOR["TOKENS_TOTAL"],
        GENERATOR["TTFT_SECONDS"] + "_bucket",
    }, f"the dashboard reads only {sorted(read)} of the generator's metrics"
    waiting = GENERATOR["STREAMS_WAITING"]
    rules = yaml.safe_load(monitoring.ADAPTER_VALUES.read_text())["rules"]["custom"]
    (rule,) = [r for r in rules if r["seriesQuery"].startswith(waiting + "{")]
    assert re.fullmatch(rule["name"]["matches"], waiting)
    hpa_metrics = [m["pods"]["metric"]["name"] for m in yaml.safe_load(HPA.read_text())["spec"]["metrics"]]
    assert rule["name"]["as"] in hpa_metrics


def test_dashboard_has_a_model_variable_used_by_the_model_panels():
    dashboard = monitoring.load_dashboard()
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "model"]
    assert variable["datasource"]["uid"] == monitoring.DATASOURCE_UID
    assert variable["includeAll"] and variable["allValue"] == ".+"
    for panel in monitoring.iter_panels(dashboard):
        for target in panel.get("targets", []):
            if "model" in target.get("legendFormat", ""):
                assert 'model=~"$model"' in target["expr"], panel["title"]


def test_dashboard_queries_use_rules_or_real_metrics():
    rules = set(monitoring.recording_rules())
    for query in monitoring.dashboard_queries():
        names = monitoring.metric_names(query.expr)
        assert names, query
        unknown = names - rules - KNOWN_METRICS
        assert not unknown, f"panel {query.panel!r} queries {unknown}, which nothing produces"
        # Per-model inference figures come from the recording rules, never recomputed in a panel.
        raw = {n for n in names if n.startswith("nv_inference_")}
        assert not raw, f"panel {query.panel!r} computes {raw} itself; query a tritonkit: rule"
        assert "$" not in query.expr, f"unsubstituted variable in {query.expr!r}"


def test_gpu_only_panels_are_marked_and_only_those():
    for query in monitoring.dashboard_queries():
        uses_gpu = bool(monitoring.metric_names(query.expr) & monitoring.TRITON_GPU_METRICS)
        assert uses_gpu == query.gpu_only, f"panel {query.panel!r}: GPU metrics {uses_gpu}, marked {query.gpu_only}"
    assert any(q.gpu_only for q in monitoring.dashboard_queries())


def test_grafana_provisioning_files():
    datasources = yaml.safe_load((monitoring.GRAFANA_DIR / "provisioning/datasources/prometheus.yml").read_text())
    (source,) = datasources["datasources"]
    assert (source["uid"], source["type"], source["url"]) == ("prometheus", "prometheus", "http://prometheus:9090")
    providers = yaml.safe_load((monitoring.GRAFANA_DIR / "provisioning/dashboards/tritonkit.yml").read_text())
    (provider,) = providers["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"


def test_no_password_under_grafana():
    assert GRAFANA_FILES
    for path in GRAFANA_FILES:
        text = path.read_text()
        assert not re.search(r"passw|secret|admin_user|GF_SECURITY", text, re.IGNORECASE), (
            f"{path} mentions a credential; the admin password comes from the environment in compose"
        )


# -- Alertmanager -----------------------------------------------------------------------------------
ALERTMANAGER_CONFIG = monitoring.DEPLOY / "alertmanager" / "alertmanager.yml"
INTEGRATIONS = ("_configs",)  # slack_configs, pagerduty_configs, webhook_configs, email_configs, ...


def amtool_check(path: Path) -> subprocess.CompletedProcess:
    binary = shutil.which("amtool")
    if binary is None:
        pytest.fail("amtool is not installed: run `make setup` (Debian's prometheus-alertmanager)", pytrace=False)
    return subprocess.run([binary, "check-config", str(path)], capture_output=True, text=True, timeout=60)


def examples() -> list[dict]:
    """The receivers the file's closing comment shows, uncommented."""
    text = ALERTMANAGER_CONFIG.read_text()
    block = text[text.index("# Examples") :].splitlines()[1:]
    lines = [line[2:] for line in block if line.startswith(("# - ", "#   "))]
    return yaml.safe_load("\n".join(lines))


def receivers_used(route: dict) -> set[str]:
    return {route["receiver"]} | {r for child in route.get("routes", []) for r in receivers_used(child)}


def test_alertmanager_config_is_valid():
    done = amtool_check(ALERTMANAGER_CONFIG)
    assert done.returncode == 0, done.stdout + done.stderr


def test_as_committed_alertmanager_routes_every_alert_to_a_receiver_that_sends_nothing():
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    receivers = {r["name"]: r for r in config["receivers"]}
    used = receivers_used(config["route"])
    assert used <= set(receivers)
    for name in used:
        assert not [key for key in receivers[name] if key.endswith(INTEGRATIONS)], f"{name} sends alerts somewhere"


def test_the_documented_alertmanager_receivers_are_valid_once_uncommented(tmp_path):
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    shown = examples()
    assert {"oncall", "team"} == {r["name"] for r in shown}
    kinds = {key for r in shown for key in r if key.endswith(INTEGRATIONS)}
    assert kinds == {"pagerduty_configs", "slack_configs", "webhook_configs"}
    config["receivers"] += shown
    config["route"]["receiver"] = "oncall"
    config["route"]["routes"][0]["receiver"] = "team"
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    done = amtool_check(path)
    assert done.returncode == 0, done.stdout + done.stderr
    # Secrets come from mounted files, never written into the committed file.
    text = ALERTMANAGER_CONFIG.read_text()
    assert "routing_key_file" in text and "api_url_file" in text
    assert "routing_key:" not in text and "api_url:" not in text and "hooks.slack.com" not in text


def test_prometheus_sends_alerts_to_the_compose_alertmanager():
    config = yaml.safe_load(monitoring.PROMETHEUS_CONFIG.read_text())
    ((target,),) = [c["targets"] for a in config["alerting"]["alertmanagers"] for c in a["static_configs"]]
    compose = yaml.safe_load((monitoring.DEPLOY.parent / "docker-compose.yml").read_text())["services"]
    host, port = target.split(":")
    service = compose[host]
    assert service["image"].startswith("prom/alertmanager:")
    assert any(p.endswith(f":{port}") for p in service["ports"]), "Alertmanager listens on its default 9093"
    assert "--config.file=/etc/alertmanager/alertmanager.yml" in service["command"]
    assert "./deploy/alertmanager:/etc/alertmanager:ro" in service["volumes"]
    assert "alertmanager" in compose["prometheus"]["depends_on"]


# -- the helpers ----------------------------------------------------------------------------------
def test_metric_names_skips_functions_labels_keywords_and_numbers():
    expr = (
        'sum by (model, version) (rate(nv_inference_count{job="triton",le="1e6"}[1m])) '
        "/ on (model) group_left tritonkit:model:requests:rate1m / 1e6 > bool 0.5"
    )
    assert monitoring.metric_names(expr) == {"nv_inference_count", "tritonkit:model:requests:rate1m"}


def test_substitute_fills_grafana_variables():
    expr = 'rate(x{model=~"$model"}[$__rate_interval]) + rate(y{model=~"${model}"}[$__interval])'
    assert monitoring.substitute(expr, "15s") == 'rate(x{model=~".+"}[15s]) + rate(y{model=~".+"}[15s])'
