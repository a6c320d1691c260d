"""The tuner's report folder (``reports/tune/<model>/``): ``results.json`` (every trial with its
measurements), ``summary.md`` (the table of every candidate tried, the pick, what was written) and
``tune.png`` (throughput against p99 of every candidate, the SLO line, the pick, and each leader's 95%
intervals over its confirmation trials as error bars).

``results.json`` reads back with :func:`load_trials`, so a recorded search replays without a server (the
unit tests do that with a recorded grid).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loadtest.core.evidence import Interval
from loadtest.core.measurement import Measurement
from loadtest.core.spec import Slo
from loadtest.reports.writer import SUMMARY, save_report
from loadtest.tune.decide import Decision
from loadtest.tune.search import Trial
from loadtest.tune.space import Point
from loadtest.tune.tuner import Outcome

HEADERS = (
    "#",
    "format",
    "batcher",
    "preferred",
    "inst",
    "mbs",
    "infer/s",
    "p50 ms",
    "p99 ms",
    "errors",
    "gen CPU",
    "queue ms",
    "compute ms",
    "batch",
    "verdict",
)


def trial_dict(trial: Trial, slo: Slo) -> dict[str, Any]:
    return {
        "order": trial.order,
        "point": trial.point.to_dict(),
        "label": trial.point.label(),
        "measurements": [m.to_dict() for m in trial.measurements],
        "confirmed": [m.to_dict() for m in trial.confirmed],
        "intervals": {k: v.to_dict() for k, v in trial.intervals().items()},
        "verdict": trial.verdict(slo).to_dict(),
        "seconds": round(trial.seconds, 2),
        "throughput": round(trial.throughput, 2),
        "p99_ms": _round(trial.p99_ms),
        "error_rate": trial.error_rate,
        "usable": trial.usable,
        "meets_slo": trial.meets(slo),
        "violations": trial.violations(slo),
    }


def load_trials(raw: dict[str, Any]) -> list[Trial]:
    """The trials of a ``results.json`` (its ``trials`` list)."""
    return [
        Trial(
            Point.from_dict(t["point"]),
            [Measurement.from_dict(m) for m in t["measurements"]],
            seconds=t.get("seconds", 0.0),
            order=t["order"],
            confirmed=[Measurement.from_dict(m) for m in t.get("confirmed", [])],
        )
        for t in raw["trials"]
    ]


def results(outcome: Outcome, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    o, r = outcome.options, outcome.result
    return {
        "model": o.model,
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "slo": {"p99_ms": o.slo.p99_ms, "max_error_rate": o.slo.max_error_rate},
        "load": {"users": o.load.users, "rate": o.load.rate, "protocol": o.protocol},
        "strategy": r.strategy,
        "budget_s": o.budget_s,
        "generator": outcome.generator,
        "max_batch_size_limit": outcome.limit,
        "space": outcome.space.to_dict(),
        "grid_size": r.grid_size,
        "measurements": r.measurements,
        "stopped": r.stopped,
        "trials": [trial_dict(t, o.slo) for t in r.trials],
        "start": r.start.order,
        "best": r.best.order if r.best is not None else None,
        "best_point": r.best.point.to_dict() if r.best is not None else None,
        "compared": [{"name": name, **trial_dict(t, o.slo)} for name, t in outcome.compared],
        **(extra or {}),
    }


def _round(value: float, digits: int = 3) -> float | None:
    return None if value is None or math.isnan(value) else round(value, digits)


def _num(value: float | None, fmt: str = "{:.3f}") -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else fmt.format(value)


def table_rows(
    trials: list[Trial], slo: Slo, best: Trial | None, names: dict[int, str] | None = None
) -> list[list[str]]:
    rows = []
    for t in trials:
        m = t.evidence[-1]
        p = t.point
        verdict = "meets SLO" if t.meets(slo) else "; ".join(t.violations(slo))
        if t.confirmed:
            verdict += f" ({len(t.confirmed)} trials, infer/s {t.intervals()['throughput'].text('{:.0f}')})"
        if best is not None and t is best:
            verdict = "**pick** " + verdict
        if names and t.order in names:
            verdict = f"({names[t.order]}) " + verdict
        rows.append(
            [
                str(t.order),
                p.format,
                "off" if p.batcher is None else f"{p.batcher} us",
                ",".join(map(str, p.preferred)) or "-",
                str(p.instances),
                str(p.max_batch_size),
                _num(t.throughput, "{:.1f}"),
                _num(m.p50_ms),
                _num(t.p99_ms),
                f"{t.error_rate:.2%}",
                _num(m.generator_cpu, "{:.0%}"),
                _num(m.server.get("queue_ms")),
                _num(m.server.get("compute_ms")),
                _num(m.server.get("avg_batch"), "{:.2f}"),
                verdict,
            ]
        )
    return rows


def markdown_table(rows: list[list[str]], headers=HEADERS) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def text_table(rows: list[list[str]], headers=HEADERS) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    out += ["  ".join(c.replace("**", "").ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(out)


def all_trials(outcome: Outcome) -> tuple[list[Trial], dict[int, str]]:
    trials = list(outcome.result.trials)
    names = {}
    for name, trial in outcome.compared:
        if trial not in trials:
            trials.append(trial)
        names[trial.order] = name
    return trials, names


def summary(outcome: Outcome, sections: list[str] | None = None) -> str:
    o, r = outcome.options, outcome.result
    trials, names = all_trials(outcome)
    pick = r.best
    lines = [
        f"# Tuning {o.model}",
        "",
        f"**{headline(outcome)}**",
        "",
        f"- SLO: p99 <= {o.slo.p99_ms:g} ms and error rate <= {o.slo.max_error_rate:.2%} at "
        f"{o.load.text()} over {o.protocol}",
        f"- generator: {outcome.generator} (a run whose generator saturated is marked and not ranked)",
        f"- search: {r.strategy}, {r.measurements} measurements of {len(r.trials)} configs; the full grid has "
        f"{r.grid_size}; stopped: {r.stopped}; budget {o.budget_s:g} s",
        f"- max_batch_size at most {outcome.limit} (what the export was checked for)",
        f"- start (as served): #{r.start.order}, {_brief(r.start)}",
        "- pick: " + (f"#{pick.order} {pick.point.label()}: {_brief(pick)}" if pick else "none meets the SLO"),
        "- the figures of a leader come from its interleaved trials alone (mean, 95% CI in the verdict column)",
        "",
        markdown_table(table_rows(trials, o.slo, pick, names)),
        "",
        "![candidates](tune.png)",
        "",
    ]
    for section in sections or []:
        lines += [section, ""]
    return "\n".join(lines)


def headline(outcome: Outcome) -> str:
    """The summary's first line: the pick (or none) and what decided it."""
    pick, decision = outcome.best, outcome.decision
    which = f"pick #{pick.order} {pick.point.label()} ({_brief(pick)})" if pick else "no pick"
    if decision is not None:
        return f"{decision.status.name}: {which}: {decision.reason}"
    return f"{which}: the fastest screened config within the SLO (no leaders were confirmed)" if pick else which


def decision_markdown(decision: Decision) -> str:
    """The leaders' verdicts and comparisons, and why the pick is what it is."""
    lines = ["## Decision", "", decision.reason, ""]
    if decision.meets_at:
        lines += [decision.meets_at, ""]
    lines += [f"- #{t.order} `{t.point.label()}`: {decision.verdicts[t.order].text()}" for t in decision.leaders]
    lines += [
        f"- #{order} against the served #{decision.served.order}: {c.text()}"
        for order, c in decision.comparisons.items()
    ]
    return "\n".join(lines)


def _brief(trial: Trial) -> str:
    return f"{trial.throughput:.1f} infer/s, p99 {_num(trial.p99_ms)} ms"


def confirmed_intervals(trial: Trial) -> tuple[Interval, Interval] | None:
    """(p99, throughput) intervals over a leader's confirmation trials, for its error bars; None when either is
    missing or not finite, and for a point without two confirmation trials (its screening probe has none)."""
    if len(trial.confirmed) < 2:
        return None
    ivs = trial.intervals()
    p99, throughput = ivs.get("p99_ms"), ivs.get("throughput")
    if p99 is None or throughput is None:
        return None
    values = (p99.low, p99.estimate, p99.high, throughput.low, throughput.estimate, throughput.high)
    return (p99, throughput) if all(math.isfinite(v) for v in values) else None


def plot(outcome: Outcome, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    o = outcome.options
    trials, names = all_trials(outcome)
    fig, ax = plt.subplots(figsize=(8, 5))
    groups = {
        "meets the SLO": ([], "tab:green", "o"),
        "misses the SLO": ([], "tab:orange", "o"),
        "generator saturated / failed": ([], "tab:gray", "x"),
    }
    for t in trials:
        key = (
            "generator saturated / failed" if not t.usable else "meets the SLO" if t.meets(o.slo) else "misses the SLO"
        )
        if not math.isnan(t.p99_ms):
            groups[key][0].append(t)
    for label, (members, colour, marker) in groups.items():
        if members:
            ax.scatter(
                [t.p99_ms for t in members], [t.throughput for t in members], c=colour, marker=marker, label=label, s=36
            )
            for t in members:
                ax.annotate(
                    str(t.order), (t.p99_ms, t.throughput), fontsize=7, xytext=(3, 3), textcoords="offset points"
                )
    bars = [ivs for t in trials if (ivs := confirmed_intervals(t)) is not None]
    for i, (p99, throughput) in enumerate(bars):
        ax.errorbar(
            [p99.estimate],
            [throughput.estimate],
            xerr=[[p99.estimate - p99.low], [p99.high - p99.estimate]],
            yerr=[[throughput.estimate - throughput.low], [throughput.high - throughput.estimate]],
            fmt="none",
            ecolor="black",
            elinewidth=1,
            capsize=3,
            label="95% CI of the confirmation trials" if i == 0 else None,
        )
    best = outcome.result.best
    if best is not None:
        ax.scatter(
            [best.p99_ms],
            [best.throughput],
            s=220,
            facecolors="none",
            edgecolors="black",
            linewidths=1.5,
            label=f"pick #{best.order}",
        )
    for name, t in outcome.compared:
        if not math.isnan(t.p99_ms):
            ax.annotate(name, (t.p99_ms, t.throughput), fontsize=8, xytext=(5, -10), textcoords="offset points")
    ax.axvline(o.slo.p99_ms, color="tab:red", linestyle="--", linewidth=1, label=f"p99 budget {o.slo.p99_ms:g} ms")
    ax.set_xlabel("p99 latency (ms)")
    ax.set_ylabel("throughput (infer/s)")
    ax.set_title(f"{o.model}: {len(trials)} configs at {o.load.text()} ({outcome.generator})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(
    outcome: Outcome, out_dir: Path, *, extra: dict[str, Any] | None = None, sections: list[str] | None = None
) -> Path:
    """results.json, summary.md and tune.png into ``out_dir``; returns the summary's path."""
    out_dir = Path(out_dir)
    # The plot is drawn once results.json is written: a search's data outlives a plot that fails.
    save_report(
        results(outcome, extra),
        out_dir,
        lambda _: summary(outcome, sections),
        plots=lambda: [plot(outcome, out_dir / "tune.png")],
    )
    return out_dir / SUMMARY
