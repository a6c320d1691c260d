"""The verdict of a comparison: B against A per metric (``evidence.compare``, paired by round), the exit
status it maps to, how many trials would likely settle an inconclusive metric, and the report's text.

Only rounds where both arms gave a usable trial are compared, so the trials still pair up (the round's A
and B ran next to each other). Goodput is compared only when a latency budget was given.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from loadtest.core import evidence, metrics, trials
from loadtest.core.evidence import Comparison, Difference
from loadtest.core.trials import ArmResult
from tritonkit_errors import ExitStatus

COMPARED = ("throughput", "p50_ms", "p99_ms", "goodput_rps")
"""The metrics the gate judges on the trials' values (goodput: successes within the budget per second); the error
rate is judged too, on counts (``error_comparison``)."""
LABELS = {name: metrics.word(name) for name in (*COMPARED, "error_rate")}
ERROR_MIN_EFFECT = 0.01
"""The error-rate change that matters: one percentage point, absolute (a relative change of a rate near 0 means
nothing). B with a few percent more errors than A is worse whatever its latency."""


@dataclasses.dataclass
class Verdict:
    comparisons: list[Comparison]
    skipped: dict[str, str]
    """Metric -> why it was not judged."""
    rounds: int
    """Rounds where both arms gave a usable trial."""
    settle: dict[str, int | None] = dataclasses.field(default_factory=dict)
    """Inconclusive metric -> trials in all that would likely settle it (None: unlikely to settle)."""
    broken: str = ""
    """Why nothing could be compared (too few usable rounds)."""
    aa: bool = False
    """A measured against itself: a difference found is noise or a bias of the set-up, not a finding."""

    @property
    def status(self) -> ExitStatus:
        return exit_status(self.comparisons, self.broken, self.aa)

    def aa_differences(self) -> list[Comparison]:
        """A/A: the metrics called better or worse (each does so about one time in twenty by chance)."""
        if not self.aa:
            return []
        return [c for c in self.comparisons if c.verdict in (Difference.BETTER, Difference.WORSE)]

    def settle_line(self) -> str:
        """For an inconclusive verdict: how many trials would likely settle it."""
        if not self.settle:
            return ""
        known = [n for n in self.settle.values() if n is not None]
        names = ", ".join(LABELS[m] for m in self.settle)
        if len(known) < len(self.settle):
            stuck = ", ".join(LABELS[m] for m, n in self.settle.items() if n is None)
            return (
                f"inconclusive in {names}: {stuck} sits at the edge of the minimum effect; more trials are "
                f"unlikely to settle it (a larger --min-effect or a quieter machine might)"
            )
        return f"inconclusive in {names}: about --trials {max(known)} would likely settle it"

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": int(self.status),
            "rounds": self.rounds,
            "comparisons": [c.to_dict() for c in self.comparisons],
            "skipped": self.skipped,
            "settle": self.settle,
            "settle_line": self.settle_line(),
            "broken": self.broken,
            "aa_differences": [c.metric for c in self.aa_differences()],
        }


def exit_status(comparisons: Sequence[Comparison], broken: str = "", aa: bool = False) -> ExitStatus:
    """BROKEN when nothing could be compared; FAILED when B is worse in any metric; INCONCLUSIVE when no
    metric is worse and some is inconclusive; OK otherwise (better or no difference everywhere).
    A/A: OK only when every metric is "no difference"; a difference found there sets no noise floor, so it is
    INCONCLUSIVE, never FAILED (B is A)."""
    if broken:
        return ExitStatus.BROKEN
    verdicts = {c.verdict for c in comparisons}
    if aa:
        return ExitStatus.OK if verdicts <= {Difference.SAME} else ExitStatus.INCONCLUSIVE
    if Difference.WORSE in verdicts:
        return ExitStatus.FAILED
    if Difference.INCONCLUSIVE in verdicts:
        return ExitStatus.INCONCLUSIVE
    return ExitStatus.OK


def paired(results: dict[str, ArmResult], a: str = "A", b: str = "B") -> tuple[list, list]:
    """The two arms' trials of the rounds where both were usable, in round order."""
    pairs = [(x, y) for x, y in zip(results[a].trials, results[b].trials, strict=False) if x.usable and y.usable]
    return [x for x, _ in pairs], [y for _, y in pairs]


def judge(
    results: dict[str, ArmResult],
    min_effect: float,
    budget_ms: float = math.inf,
    p99_min_effect: float | None = None,
    aa: bool = False,
) -> Verdict:
    """B against A in every compared metric over the paired rounds. ``p99_min_effect``: the change that matters
    for p99 (None: ``min_effect``); a tail percentile of a few thousand requests moves more from trial to
    trial than a mean rate or a median does. ``aa``: B is A (see ``exit_status``)."""
    a_trials, b_trials = paired(results)
    if len(a_trials) < 2:
        reasons = sorted({m.not_usable_reason for r in results.values() for m in r.trials if not m.usable})
        why = "; ".join(reasons) or "no trial ran"
        return Verdict(
            [], {}, len(a_trials), broken=f"{len(a_trials)} usable round(s) of both arms, 2 needed: {why}", aa=aa
        )
    a_samples, b_samples = trials.samples(a_trials), trials.samples(b_trials)
    comparisons, skipped, settle = [], {}, {}
    for metric in COMPARED:
        if metric == "goodput_rps" and not math.isfinite(budget_ms):
            skipped[metric] = "no --budget-ms: goodput is every success"
            continue
        a_values, b_values = a_samples[metric], b_samples[metric]
        if any(math.isnan(v) for v in (*a_values, *b_values)):
            skipped[metric] = "a trial has no value"
            continue
        effect = p99_min_effect if metric == "p99_ms" and p99_min_effect is not None else min_effect
        comparison = evidence.compare(metric, a_values, b_values, effect)
        comparisons.append(comparison)
        if comparison.verdict is Difference.INCONCLUSIVE:
            settle[metric] = trials_to_settle(comparison, a_values, b_values)
    errors = error_comparison(a_trials, b_trials)
    if isinstance(errors, str):
        skipped["error_rate"] = errors
    else:
        comparisons.append(errors)
        if errors.verdict is Difference.INCONCLUSIVE:
            settle["error_rate"] = None  # counts, not trials: more requests per trial settle it
    return Verdict(comparisons, skipped, len(a_trials), settle, aa=aa)


def error_comparison(a_trials, b_trials) -> Comparison | str:
    """B's error rate against A's over the paired rounds, on Triton's counts of every request
    (``evidence.compare_counts``); why not, where a trial has no counts."""
    a, b = trials.error_counts(a_trials), trials.error_counts(b_trials)
    if a is None or b is None:
        return "a trial has no counts of Triton's"
    if min(a[1], b[1]) <= 0:
        return "no request was counted"
    return evidence.compare_counts("error_rate", a, b, ERROR_MIN_EFFECT)


def trials_to_settle(comparison: Comparison, a_values: Sequence[float], b_values: Sequence[float]) -> int | None:
    """Trials in all that would likely settle an inconclusive comparison, if the rounds' differences keep
    their mean and spread: the sooner of the interval excluding no change (better/worse) and the interval
    fitting inside the minimum effect (no difference). The differences are those ``evidence.compare`` pairs:
    log ratios for a relative change, plain differences otherwise."""
    a, b = np.asarray(a_values, float), np.asarray(b_values, float)
    margin = comparison.min_effect
    if comparison.relative:
        diffs = np.log(b / a)
        bounds = (math.log1p(margin), math.log1p(-margin) if margin < 1 else -math.inf)
    else:
        diffs = b - a
        bounds = (margin, -margin)
    edge = bounds[0] if diffs.mean() >= 0 else bounds[1]
    found = [evidence.trials_to_settle(diffs, limit) for limit in (0.0, edge) if math.isfinite(limit)]
    found = [n for n in found if n is not None]
    return min(found) if found else None


def noise_floor(comparisons: Sequence[Comparison]) -> dict[str, float]:
    """A/A: per metric, the largest change its interval allows (the smallest effect this run could tell)."""
    return {c.metric: max(abs(c.change.low), abs(c.change.high)) for c in comparisons}


def lines(verdict: Verdict, aa: bool) -> list[str]:
    """The verdict as the command prints it."""
    if verdict.broken:
        return [f"compare: the measurement failed: {verdict.broken}"]
    out = [f"B against A over {verdict.rounds} paired rounds:"]
    out += [f"  {c.text()}" for c in verdict.comparisons]
    out += [f"  {metric}: not judged ({why})" for metric, why in verdict.skipped.items()]
    if aa:
        floor = ", ".join(f"{LABELS[c.metric]} {_span(c)}" for c in verdict.comparisons)
        out.append(f"A/A noise floor (the change each interval allows): {floor}")
        out.append("  an A/B change smaller than these is not a finding on this machine with this method")
        found = verdict.aa_differences()
        if found:
            names = ", ".join(LABELS[c.metric] for c in found)
            out.append(
                f"A/A found a difference in {names}: at 95% confidence each metric does so about one run in twenty "
                "by chance; if a rerun finds it again, the two arms are not served alike (CPU placement, instance "
                "count, load order) and an A/B run on this set-up carries that bias"
            )
    if verdict.settle:
        out.append(verdict.settle_line())
    return out


def _span(c: Comparison) -> str:
    if c.relative:
        return f"{c.change.low:+.1%} to {c.change.high:+.1%}"
    return f"{c.change.low:+.4g} to {c.change.high:+.4g}"


def markdown(data: dict[str, Any]) -> str:
    """summary.md from results.json's data."""
    verdict = data["verdict"]
    head = [
        f"# compare {data['model']}: {data['mode']}",
        "",
        f"- A: {data['arms'][0]['spec']} (served as `{data['arms'][0]['served']}`)",
        f"- B: {data['arms'][1]['spec']} (served as `{data['arms'][1]['served']}`)",
        f"- load: {data['load']}, {data['generator']}, {data['trials']} trials of {data['duration_s']:g} s "
        f"(+{data['warmup_rounds']} warm-up rounds), interleaved A B, B A, ...; minimum effect {data['min_effect']:.0%}"
        + (f" (p99 {data['p99_min_effect']:.0%})" if data.get("p99_min_effect") is not None else "")
        + (f"; goodput budget {data['budget_ms']:g} ms" if data.get("budget_ms") is not None else ""),
        f"- command: `{data['command']}`",
        f"- exit status {verdict['status']}",
        "",
    ]
    if verdict["broken"]:
        return "\n".join([*head, f"The measurement failed: {verdict['broken']}", ""])
    rows = ["| metric | A | B | change (95% CI) | verdict |", "|---|---|---|---|---|"]
    for c in verdict["comparisons"]:
        change = c["change"]
        fmt = "{:+.1%}" if c["relative"] else "{:+.4g}"
        span = f"{fmt.format(change['estimate'])} ({fmt.format(change['low'])} to {fmt.format(change['high'])})"
        rows.append(
            f"| {LABELS[c['metric']]} | {c['a']['estimate']:.4g} | {c['b']['estimate']:.4g} | {span} | {c['verdict']} |"
        )
    rows += [f"| {LABELS[m]} | - | - | - | not judged: {why} |" for m, why in verdict["skipped"].items()]
    trial_rows = [
        "",
        "| arm | round | throughput | p50 ms | p99 ms | goodput/s | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm, result in data["results"].items():
        for i, t in enumerate(result["trials"], 1):
            note = t["error"] or t["saturated"]
            trial_rows.append(
                f"| {arm} | {i} | {t['throughput']:.1f} | {t['p50_ms']:.3f} | {t['p99_ms']:.3f} | "
                f"{t['goodput_rps']:.1f} | {note} |"
            )
    tail = ["", verdict["settle_line"]] if verdict["settle_line"] else []
    return "\n".join([*head, *rows, *trial_rows, *tail, ""])
