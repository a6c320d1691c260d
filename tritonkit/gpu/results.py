"""The check's results: figures, the issue's targets computed from them, Markdown and JSON (pure logic).

A figure is one number the check measured, or the reason it has none (``skipped: ...``). A target
compares figures (a ratio against a threshold); a target whose figures are missing is skipped with
their reason, never met by default.
"""

from __future__ import annotations

import json
from pathlib import Path

DRY_RUN = "skipped: dry run (no CUDA)"
NOT_INSTALLED = "skipped: not installed"
MEASURED = "measured"

FP16_SPEEDUP_MODELS = ("efficientnet_lite0", "minilm")
FP16_SPEEDUP_MIN = 2.0
SERVED_FRACTION_MIN = 0.9
FIRST_REQUEST_MAX = 1.5


def figure(
    name: str, model: str, value: float | None, unit: str, status: str = MEASURED, variant: str = "", **extra
) -> dict:
    """One figure; ``value`` is None exactly when ``status`` is not ``measured``."""
    if status == MEASURED and value is None:
        raise ValueError(f"figure {name} of {model}: measured but no value")
    return {
        "name": name,
        "model": model,
        "variant": variant,
        "value": None if status != MEASURED else value,
        "unit": unit,
        "status": status,
        **extra,
    }


def find(figures: list[dict], name: str, model: str, variant: str = "") -> dict | None:
    for fig in figures:
        if fig["name"] == name and fig["model"] == model and (not variant or fig["variant"] == variant):
            return fig
    return None


NOT_MEASURED = "skipped: figure not measured"


def _ratio_target(
    name: str,
    model: str,
    top: dict | None,
    bottom: dict | None,
    threshold: float,
    at_least: bool,
    what: str,
    missing: str = NOT_MEASURED,
) -> dict:
    target = {
        "name": name,
        "model": model,
        "threshold": threshold,
        "comparison": ">=" if at_least else "<=",
        "what": what,
        "value": None,
        "met": None,
    }
    for fig in (top, bottom):
        if fig is None:
            return {**target, "status": missing}
        if fig["status"] != MEASURED:
            return {**target, "status": fig["status"]}
    if not bottom["value"]:
        return {**target, "status": "skipped: zero denominator"}
    value = top["value"] / bottom["value"]
    met = value >= threshold if at_least else value <= threshold
    return {**target, "value": value, "met": met, "status": "met" if met else "missed"}


def targets(figures: list[dict], models: tuple[str, ...], missing: str = NOT_MEASURED) -> list[dict]:
    """The issue's targets for ``models``, each met, missed or skipped with the reason.

    A target whose figure is absent says ``missing`` (a dry run passes its own reason).
    """
    result = []
    for model in models:
        if model in FP16_SPEEDUP_MODELS:
            result.append(
                _ratio_target(
                    "fp16_speedup_b32",
                    model,
                    find(figures, "throughput_b32", model, "torchscript/fp16"),
                    find(figures, "throughput_b32", model, "torchscript/fp32"),
                    FP16_SPEEDUP_MIN,
                    True,
                    "FP16 / FP32 in-process throughput at batch 32",
                    missing,
                )
            )
        result.append(
            _ratio_target(
                "served_vs_inprocess",
                model,
                find(figures, "served_throughput_c64", model),
                find(figures, "inprocess_limit", model),
                SERVED_FRACTION_MIN,
                True,
                "served throughput (dynamic batching, concurrency 64) / in-process limit",
                missing,
            )
        )
        result.append(
            _ratio_target(
                "first_request_warmup",
                model,
                find(figures, "first_request_warmup", model),
                find(figures, "steady_p50", model),
                FIRST_REQUEST_MAX,
                False,
                "first request after ready (with warmup) / steady p50",
                missing,
            )
        )
    return result


def _value(fig: dict) -> str:
    if fig["status"] != MEASURED:
        return fig["status"]
    value = fig["value"]
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def render_markdown(results: dict) -> str:
    """The Markdown report: steps, exports, figures, targets."""
    env = results.get("environment", {})
    lines = [f"# tritonkit GPU check ({results.get('mode', '?')})", ""]
    if env:
        lines += [", ".join(f"{k} {v}" for k, v in env.items() if v not in (None, "")), ""]
    lines += ["## Steps", "", "| step | status | seconds | detail |", "|---|---|---|---|"]
    for step in results.get("steps", []):
        detail = str(step.get("detail", "")).replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {step['name']} | {step['status']} | {step.get('seconds', 0):.1f} | {detail} |")
    if results.get("exports"):
        lines += [
            "",
            "## Exports (parity against eager FP32)",
            "",
            "| model | variant | served as | status | max abs error | atol | real data | note |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for e in results["exports"]:
            err = "" if e.get("max_abs_error") is None else f"{e['max_abs_error']:.2e}"
            atol = "" if e.get("atol") is None else f"{e['atol']:.0e}"
            real = e.get("real_data") or {}
            real_text = f"{real['check']} {real['value']:.4f}" if real else ""
            note = str(e.get("message", "")).replace("|", "\\|")
            lines.append(
                f"| {e['model']} | {e['variant']} | {e.get('served_as', '')} | {e['status']} | {err} | "
                f"{atol} | {real_text} | {note} |"
            )
    lines += ["", "## Figures", "", "| figure | model | variant | value | unit |", "|---|---|---|---|---|"]
    for fig in results.get("figures", []):
        lines.append(f"| {fig['name']} | {fig['model']} | {fig.get('variant', '')} | {_value(fig)} | {fig['unit']} |")
    lines += ["", "## Targets", "", "| target | model | value | threshold | status |", "|---|---|---|---|---|"]
    for t in results.get("targets", []):
        value = "" if t["value"] is None else f"{t['value']:.2f}"
        lines.append(f"| {t['what']} | {t['model']} | {value} | {t['comparison']} {t['threshold']} | {t['status']} |")
    return "\n".join(lines) + "\n"


def write(results: dict, out_dir: Path) -> tuple[Path, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "results.json", out_dir / "results.md"
    json_path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    md_path.write_text(render_markdown(results))
    return md_path, json_path
