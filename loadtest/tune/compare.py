"""``tritonkit tune --analyzer``: Triton Model Analyzer on the same model, budget and load, then both picks
measured by the same generator under the same load, interleaved in one run, and shown side by side.

Model Analyzer (local launch mode, its own tritonserver) searches max_batch_size (at most what the export
was checked for), instance counts and a batching delay at the tuner's concurrency (or request rate); its
pick is applied to the served config through ``export.config`` like any other point. Each pick's SLO
verdict is ``loadtest.core.slo.verdict`` over its trials, and ours is compared with theirs on throughput
(``evidence.compare``) like the tuner compares its candidates.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadtest.core import evidence
from loadtest.core.evidence import Comparison, EvidenceError
from loadtest.core.spec import Slo
from loadtest.target.endpoints import Endpoints
from loadtest.tune.analyzer import profile as analyzer
from loadtest.tune.search import Trial
from loadtest.tune.space import Point
from loadtest.tune.tuner import Outcome, measure_side_by_side

OURS, THEIRS = "tritonkit tune", "Model Analyzer"


@dataclasses.dataclass
class SideBySide:
    ours: Trial | None
    theirs: Trial | None
    pick: dict[str, Any] | None
    """Model Analyzer's pick as it reported it (its own measurement)."""
    error: str = ""
    slo: Slo | None = None
    min_effect: float = 0.05

    def comparison(self) -> Comparison | None:
        """Our pick's throughput against Model Analyzer's over the rounds where both gave a usable trial (the two
        ran next to each other: a trial left out on one side leaves its round out on both, so later rounds still
        pair); None without two such rounds."""
        if self.ours is None or self.theirs is None:
            return None
        rounds = [
            (theirs, ours)
            for theirs, ours in zip(self.theirs.evidence, self.ours.evidence, strict=False)
            if theirs.usable and ours.usable
        ]
        try:
            return evidence.compare(
                "throughput", [t.throughput for t, _ in rounds], [o.throughput for _, o in rounds], self.min_effect
            )
        except EvidenceError:
            return None

    def ratio(self) -> float:
        if self.ours is None or self.theirs is None or not self.theirs.throughput:
            return math.nan
        return self.ours.throughput / self.theirs.throughput

    def rows(self) -> list[list[str]]:
        out = []
        for name, trial in ((OURS, self.ours), (THEIRS, self.theirs)):
            if trial is None:
                out.append([name, "-", "-", "-", "-", "-"])
                continue
            figures = [m.throughput for m in trial.evidence]
            verdict = ("; ".join(trial.violations(self.slo)) or "pass") if self.slo is not None else "-"
            out.append(
                [
                    name,
                    trial.point.label(),
                    f"{trial.throughput:.1f}",
                    " / ".join(f"{f:.0f}" for f in figures),
                    f"{trial.p99_ms:.3f}",
                    verdict,
                ]
            )
        return out

    HEADERS = ("pick", "config", "infer/s (mean)", "each trial", "p99 ms (mean)", "SLO verdict")

    def text(self) -> str:
        if self.error:
            return f"Model Analyzer gave no pick: {self.error}"
        widths = [max(len(h), *(len(r[i]) for r in self.rows())) for i, h in enumerate(self.HEADERS)]
        lines = [
            "",
            "side by side, same load, same generator, interleaved:",
            "  ".join(h.ljust(w) for h, w in zip(self.HEADERS, widths, strict=True)),
        ]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in self.rows()]
        if self.pick:
            lines.append(
                f"(Model Analyzer's own figure for its pick: {self.pick['throughput_infer_s']:.1f} infer/s, "
                f"p99 {self.pick['p99_ms']:.2f} ms at concurrency {self.pick['concurrency']})"
            )
        if not math.isnan(self.ratio()):
            lines.append(f"tritonkit tune / Model Analyzer throughput: {self.ratio():.2f}x")
        if self.comparison() is not None:
            lines.append(f"tritonkit tune's pick against Model Analyzer's: {self.comparison().text()}")
        return "\n".join(lines)

    def markdown(self) -> str:
        if self.error:
            return f"## Model Analyzer\n\nNo pick: {self.error}"
        lines = [
            "## Model Analyzer, side by side",
            "",
            "Both picks measured by the same generator at the same load, interleaved in one run.",
            "",
            "| " + " | ".join(self.HEADERS) + " |",
            "|" + "---|" * len(self.HEADERS),
        ]
        lines += ["| " + " | ".join(r) + " |" for r in self.rows()]
        if not math.isnan(self.ratio()):
            lines += ["", f"Throughput ratio (ours / Model Analyzer's): {self.ratio():.2f}x"]
        if self.comparison() is not None:
            lines += ["", f"Ours against Model Analyzer's: {self.comparison().text()}"]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        def trial(t: Trial | None):
            return (
                None
                if t is None
                else {
                    "point": t.point.to_dict(),
                    "label": t.point.label(),
                    "throughput": t.throughput,
                    "p99_ms": t.p99_ms,
                    "measurements": [m.to_dict() for m in t.evidence],
                    "verdict": t.verdict(self.slo).to_dict() if self.slo is not None else None,
                }
            )

        return {
            "ours": trial(self.ours),
            "theirs": trial(self.theirs),
            "pick": self.pick,
            "error": self.error,
            "ratio": None if math.isnan(self.ratio()) else round(self.ratio(), 3),
            "comparison": None if self.comparison() is None else self.comparison().to_dict(),
        }


def point_of(pick: analyzer.AnalyzerPick) -> Point:
    batching = pick.dynamic_batching
    return Point(
        "torchscript/fp32",
        None if batching is None else int(batching["max_queue_delay_us"]),
        () if batching is None else tuple(sorted(batching["preferred_batch_sizes"])),
        pick.instance_count,
        pick.max_batch_size,
    )


def with_analyzer(
    outcome: Outcome,
    endpoints: Endpoints,
    out_dir: Path,
    *,
    budget_s: float | None = None,
    rounds: int | None = None,
    log: Callable[[str], None] = print,
) -> SideBySide:
    o = outcome.options
    log(
        f"tune {o.model}: running Triton Model Analyzer (local launch, budget p99 <= {o.slo.p99_ms:g} ms, "
        f"{o.load.text()}, at most {budget_s or o.budget_s:g} s)"
    )
    sizes = tuple(s for s in analyzer.MAX_BATCH_SIZES if s <= outcome.limit) or (outcome.limit,)
    load = {"concurrency": (o.load.users,)} if o.load.users else {"request_rate": (o.load.rate,)}
    try:
        pick = analyzer.profile(
            o.model,
            o.repository,
            o.slo.p99_ms,
            out_dir,
            max_instances=o.max_instances,
            max_batch_sizes=sizes,
            timeout_s=budget_s or o.budget_s,
            **load,
        )
    except analyzer.AnalyzerError as exc:
        message = str(exc).splitlines()[0]
        log(f"tune {o.model}: Model Analyzer gave no pick: {message}")
        return SideBySide(None, None, None, error=message, slo=o.slo, min_effect=o.min_effect)
    ours = outcome.best.point if outcome.best is not None else outcome.result.start.point
    trials = measure_side_by_side(
        o, endpoints, {OURS: ours, THEIRS: point_of(pick)}, rounds=rounds or o.trials, log=log
    )
    return SideBySide(trials[OURS], trials[THEIRS], dataclasses.asdict(pick), slo=o.slo, min_effect=o.min_effect)
