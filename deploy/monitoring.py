"""The monitoring files as data: Prometheus rules, Grafana panel queries, a config for one target.

The committed files under ``deploy/prometheus`` and ``deploy/grafana`` are the source of truth; this
module only reads them, so the unit tests, the functional test against a real Prometheus and any
other tool see the same rule names and the same panel queries.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parent
PROMETHEUS_DIR = DEPLOY / "prometheus"
PROMETHEUS_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
RULE_FILES = (PROMETHEUS_DIR / "rules" / "recording.yml", PROMETHEUS_DIR / "rules" / "alerts.yml")
RULE_TESTS_DIR = PROMETHEUS_DIR / "tests"
GRAFANA_DIR = DEPLOY / "grafana"
DASHBOARD = GRAFANA_DIR / "dashboards" / "tritonkit.json"
DATASOURCE_UID = "prometheus"
GPU_ONLY_PREFIX = "GPU only:"

# Metric names the local tritonserver 2.51 exposes with summary_latencies=true (seen on its
# /metrics after inferences), without the _sum/_count series of the summaries.
TRITON_METRICS = frozenset(
    {
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
        "nv_inference_pending_request_count",
        "nv_inference_request_summary_us",
        "nv_inference_queue_summary_us",
        "nv_inference_compute_input_summary_us",
        "nv_inference_compute_infer_summary_us",
        "nv_inference_compute_output_summary_us",
        "nv_cpu_utilization",
        "nv_cpu_memory_total_bytes",
        "nv_cpu_memory_used_bytes",
        "nv_pinned_memory_pool_total_bytes",
        "nv_pinned_memory_pool_used_bytes",
    }
)
# GPU metrics from Triton's documentation; they exist only where Triton sees a GPU.
TRITON_GPU_METRICS = frozenset(
    {
        "nv_gpu_utilization",
        "nv_gpu_memory_total_bytes",
        "nv_gpu_memory_used_bytes",
        "nv_gpu_power_usage",
        "nv_gpu_power_limit",
        "nv_energy_consumption",
    }
)
PROMETHEUS_METRICS = frozenset({"up"})

# Words of PromQL that look like metric names to the tokenizer below.
_PROMQL_WORDS = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "inf",
        "nan",
    }
)


@dataclasses.dataclass(frozen=True)
class PanelQuery:
    panel: str
    ref_id: str
    expr: str
    """The query with Grafana variables substituted, ready for Prometheus."""
    gpu_only: bool


def load_rule_groups(path: Path) -> list[dict]:
    return yaml.safe_load(Path(path).read_text())["groups"]


def _rules(key: str) -> list[dict]:
    return [rule for path in RULE_FILES for group in load_rule_groups(path) for rule in group["rules"] if key in rule]


def recording_rules() -> dict[str, str]:
    """{recorded name: expression}, in file order."""
    return {rule["record"]: rule["expr"].strip() for rule in _rules("record")}


def alert_names() -> list[str]:
    return [rule["alert"] for rule in _rules("alert")]


def load_dashboard(path: Path = DASHBOARD) -> dict:
    return json.loads(Path(path).read_text())


def iter_panels(dashboard: dict):
    """Every panel, including those nested in collapsed rows."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def substitute(expr: str, window: str = "1m", model: str = ".+") -> str:
    """Grafana's variables as Grafana would fill them: ``$model`` (All) -> ``.+``, intervals -> ``window``."""
    for name in ("__rate_interval", "__interval", "__range"):
        expr = expr.replace(f"${{{name}}}", window).replace(f"${name}", window)
    return expr.replace("${model}", model).replace("$model", model)


def dashboard_queries(window: str = "1m", dashboard: dict | None = None) -> list[PanelQuery]:
    dashboard = dashboard or load_dashboard()
    return [
        PanelQuery(
            panel["title"],
            target["refId"],
            substitute(target["expr"], window),
            panel.get("description", "").startswith(GPU_ONLY_PREFIX),
        )
        for panel in iter_panels(dashboard)
        if panel.get("type") != "row"
        for target in panel.get("targets", [])
    ]


def metric_names(expr: str) -> set[str]:
    """Metric and recording-rule names a PromQL expression reads (a tokenizer, not a parser)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range and subquery windows
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        following = expr[match.end() :].lstrip()[:1]
        word = match.group()
        if following == "(" or word.lower() in _PROMQL_WORDS:
            continue  # a function or aggregation, or a keyword
        if re.fullmatch(r"[0-9.e+-]+", word) or (match.start() > 0 and expr[match.start() - 1].isdigit()):
            continue  # part of a number such as 1e6
        names.add(word)
    return names


def render_prometheus_config(
    triton_target: str, self_target: str, interval: str = "15s", rule_files: tuple[Path, ...] = RULE_FILES
) -> str:
    """The committed prometheus.yml with the `triton` job pointed at ``host:port`` instead of DNS.

    Everything else (job name, metrics path, the self-scrape job) stays as committed, so a test
    of this config exercises the production rules and labels.
    """
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    config["global"]["scrape_interval"] = interval
    config["global"]["evaluation_interval"] = interval
    config["rule_files"] = [str(Path(path).resolve()) for path in rule_files]
    for job in config["scrape_configs"]:
        if job["job_name"] == "triton":
            job.pop("dns_sd_configs")
            job["static_configs"] = [{"targets": [triton_target]}]
        elif job["job_name"] == "prometheus":
            job["static_configs"] = [{"targets": [self_target]}]
    return yaml.safe_dump(config, sort_keys=False)


# -- Kubernetes: the same rules for the Prometheus Operator, and the HPA's adapter query as a rule -------

K8S_MONITORING = DEPLOY / "k8s" / "monitoring"
PROMETHEUS_RULE = K8S_MONITORING / "triton-prometheusrule.yaml"
ADAPTER_VALUES = K8S_MONITORING / "prometheus-adapter-values.yaml"
ADAPTER_RULES = K8S_MONITORING / "tests" / "adapter-rules.yml"
# How prometheus-adapter fills its query template for a pods metric (its naming/metrics_query.go): the
# series name, matchers for the namespace and the pods asked about, and the pod label to group by.
ADAPTER_TEMPLATE = {
    "<<.Series>>": "nv_inference_queue_duration_us",
    "<<.LabelMatchers>>": 'namespace!="",pod!=""',
    "<<.GroupBy>>": "pod",
}
_GENERATED = "# Generated by `python -m deploy.monitoring` from {sources}: edit the source, then run it again.\n"


class _Block(str):
    """A string written as a YAML literal block (``|``), as the rule files write multi-line expressions."""


yaml.SafeDumper.add_representer(
    _Block, lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|")
)


def _blocks(value):
    if isinstance(value, dict):
        return {k: _blocks(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_blocks(v) for v in value]
    return _Block(value) if isinstance(value, str) and "\n" in value else value


def prometheus_rule() -> dict:
    """deploy/prometheus/rules as one PrometheusRule for the Prometheus Operator: the same groups, so the same
    promtool tests cover them. Their ``job="triton"`` matches what the PodMonitor (deploy/k8s/base) produces:
    its jobLabel takes the job from the pods' app.kubernetes.io/name, ``triton``, as compose's job is named."""
    groups = [group for path in RULE_FILES for group in load_rule_groups(path)]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "triton", "labels": {"app.kubernetes.io/name": "triton"}},
        "spec": {"groups": groups},
    }


def adapter_rule(values: Path = ADAPTER_VALUES) -> dict:
    """The prometheus-adapter rule that serves the HPA's metric."""
    rules = yaml.safe_load(Path(values).read_text())["rules"]["custom"]
    (rule,) = [r for r in rules if "nv_inference_queue_duration_us" in r["seriesQuery"]]
    return rule


def adapter_query(values: Path = ADAPTER_VALUES) -> str:
    """The adapter rule's metricsQuery filled in as the adapter fills it, ready for Prometheus."""
    query = " ".join(adapter_rule(values)["metricsQuery"].split())
    for placeholder, value in ADAPTER_TEMPLATE.items():
        query = query.replace(placeholder, value)
    return query


# The signal the adapter served before: every model of a pod summed. Kept beside the real query in the
# promtool test so that the test shows what each reads on the same series.
ALL_MODELS_QUERY = (
    'sum(rate(nv_inference_queue_duration_us{namespace!="",pod!=""}[1m])) by (pod) / '
    'clamp_min(sum(rate(nv_inference_request_success{namespace!="",pod!=""}[1m])) by (pod), 1e-9) / 1e6'
)


def adapter_rules() -> dict:
    """Rules for ``promtool test rules``: the adapter's query, and the all-models sum it replaced."""
    name = adapter_rule()["name"]["as"]
    return {
        "groups": [
            {
                "name": "tritonkit-autoscaling",
                "rules": [
                    {"record": f"adapter:{name}", "expr": adapter_query()},
                    {"record": f"adapter:{name}:all_models_summed", "expr": ALL_MODELS_QUERY},
                ],
            }
        ]
    }


def render_generated() -> dict[Path, str]:
    """The generated files of deploy/k8s/monitoring, path -> text."""
    rule_sources = ", ".join(str(p.relative_to(DEPLOY.parent)) for p in RULE_FILES)
    return {
        PROMETHEUS_RULE: _GENERATED.format(sources=rule_sources)
        + yaml.safe_dump(_blocks(prometheus_rule()), sort_keys=False, width=120),
        ADAPTER_RULES: _GENERATED.format(sources=str(ADAPTER_VALUES.relative_to(DEPLOY.parent)))
        + yaml.safe_dump(adapter_rules(), sort_keys=False, width=1000),
    }


if __name__ == "__main__":
    for path, text in render_generated().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(DEPLOY.parent)}")
