"""The overload report: each load level's figures over its trials with their intervals and the three-way verdict
against the budget, the tables (console and Markdown), summary.md and the plot of ``loadtest.studies.overload.command``,
and the names of the two configs it compares.

Per config and load factor, over the trials: the p99 of accepted requests, the refusal share, the goodput (share
of offered requests answered within the budget, and per second) and the accepted rate, each with its 95%
interval (``evidence.interval``). The verdict of a level is ``slo.verdict`` on its trials: the p99 of accepted
requests against the budget, the share of failures that are not retryable refusals against 0. pass when the
p99 interval's upper end is within the budget, fail when its lower end is over it, inconclusive when it
straddles. A trial in which the client dropped arrivals, fell behind the rate or whose requests outlived the
run, or any failure that is not a retryable refusal, fails its level whatever the intervals say.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from loadtest.core import evidence, slo
from loadtest.core.evidence import Interval, Verdict
from loadtest.core.spec import Slo
from loadtest.reports.writer import ms_text, save_report

WITH_POLICY, WITHOUT_POLICY = "queue-policy", "no-queue-policy"
LEVEL_FIGURES = ("p99_ms", "refusal_rate", "goodput_share", "goodput_rps", "accepted_rps", "drop_rate")
"""A level's figures, each with its interval over the trials."""


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def _problems(r: dict[str, Any]) -> list[str]:
    """What makes one trial unfit to judge its config: requests outliving the run, failures that are not
    retryable refusals, arrivals the client dropped, a client that fell behind the rate."""
    where = f"{r['factor']:g}x" + (f" trial {r['trial']}" if "trial" in r else "")
    if r.get("unfinished"):
        return [f"{where}: did not finish ({r['unfinished']})"]
    out = []
    if r["other_errors"]:
        out.append(f"{where}: {r['other_errors']} failures that are not retryable refusals ({r['other_statuses']})")
    if r["dropped"]:
        out.append(f"{where}: the client dropped {r['dropped']} arrivals (raise --max-inflight)")
    if not r["client_kept_up"]:
        out.append(
            f"{where}: the client offered {r['offered_rps']:g} of {r['target_rps']:g} req/s "
            f"(client-bound: the figures understate the load)"
        )
    return out


def level(rows: list[dict[str, Any]], config: str, factor: float, budget_ms: float) -> dict[str, Any]:
    """One config at one load factor over its trials: the figures' intervals, the three-way verdict and why."""
    mine = [r for r in rows if r["config"] == config and r["factor"] == factor]
    done = [r for r in mine if not r.get("unfinished")]
    samples = {
        "p99_ms": [_number(r["p99_ms"]) for r in done],
        "error_rate": [r["other_errors"] / r["offered"] if r["offered"] else 0.0 for r in done],
        "goodput_share": [_number(r.get("goodput_share")) for r in done],
    }
    judged = slo.verdict(samples, Slo(budget_ms, max_error_rate=0.0))
    unfit = [p for r in mine for p in _problems(r)]
    p99, where, notes = evidence.interval(samples["p99_ms"], lower_bound=0.0), f"{factor:g}x", []
    if math.isnan(p99.estimate):
        unfit.insert(0, f"{where}: no p99 of accepted requests (no trial finished with a success)")
    elif p99.high > budget_ms:
        over = "is over" if p99.low > budget_ms else "straddles"
        notes.append(f"{where}: p99 {p99.text('{:.1f}', ' ms')} {over} the {budget_ms:g} ms budget")
        notes += [f"{where}: {judged.settle}"] if judged.settle else []
    return {
        "config": config,
        "factor": factor,
        "trials": len(mine),
        "finished": len(done),
        "intervals": {
            k: evidence.interval([_number(r.get(k)) for r in done], lower_bound=0.0).to_dict() for k in LEVEL_FIGURES
        },
        "verdict": (Verdict.FAIL if unfit else judged.verdict).value,
        "over_budget": len(done) < len(mine) or (not math.isnan(p99.estimate) and p99.low > budget_ms),
        "slo": judged.to_dict(),
        "problems": notes + unfit,
    }


def verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether the queue policy did its job, level by level: pass when every level with the policy passes,
    fail when one fails, else inconclusive; the levels of both configs, and the factors at which the
    config without a policy failed the budget."""
    factors = list(dict.fromkeys(r["factor"] for r in rows))
    budget = rows[0]["budget_ms"] if rows else math.inf
    levels = [level(rows, c, f, budget) for f in factors for c in (WITH_POLICY, WITHOUT_POLICY) if _has(rows, c, f)]
    policy = [lv for lv in levels if lv["config"] == WITH_POLICY]
    outcomes = {lv["verdict"] for lv in policy}
    overall = (
        Verdict.FAIL
        if not policy or Verdict.FAIL.value in outcomes
        else Verdict.INCONCLUSIVE
        if Verdict.INCONCLUSIVE.value in outcomes
        else Verdict.PASS
    )
    return {
        "verdict": overall.value,
        "passed": overall is Verdict.PASS,
        "problems": [p for lv in policy for p in lv["problems"]],
        "levels": levels,
        "baseline_over_budget": [lv["factor"] for lv in levels if lv["config"] == WITHOUT_POLICY and lv["over_budget"]],
    }


def _has(rows: list[dict[str, Any]], config: str, factor: float) -> bool:
    return any(r["config"] == config and r["factor"] == factor for r in rows)


def interval_text(iv: dict[str, Any] | Interval, fmt: str = "{:.1f}") -> str:
    """An estimate with its interval in brackets (``340.2 (301.0-379.4)``); one trial: the estimate alone."""
    iv = Interval.from_dict(iv) if isinstance(iv, dict) else iv
    if math.isnan(iv.estimate):
        return "-"
    value = fmt.format(iv.estimate)
    return f"{value} ({fmt.format(iv.low)}-{fmt.format(iv.high)})" if iv.has_interval else value


def _statuses(counts: dict[str, int]) -> str:
    return ", ".join(f"{s} x{n}" for s, n in sorted(counts.items(), key=lambda kv: -kv[1])) or "-"


TABLE_HEADERS = [
    "config",
    "load",
    "trial",
    "offered req/s",
    "accepted req/s",
    "refusal rate",
    "dropped (client)",
    "other errors",
    "p99 accepted ms",
    "p99 <= budget",
    "refusal statuses",
]


def table(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            r["config"],
            f"{r['factor']:g}x",
            str(r.get("trial", 1)),
            f"{r['offered_rps']:.1f}" + ("" if r["client_kept_up"] else " (!)"),
            f"{r['accepted_rps']:.1f}",
            f"{r['refusal_rate']:.2%}",
            f"{r['dropped']} ({r['drop_rate']:.2%})",
            str(r["other_errors"]),
            ms_text(r["p99_ms"]),
            "yes" if r["meets_budget"] else "NO",
            _statuses(r["refusal_statuses"]),
        ]
        for r in rows
    ]


LEVEL_HEADERS = [
    "config",
    "load",
    "trials",
    "accepted req/s",
    "refused %",
    "goodput %",
    "goodput req/s",
    "p99 accepted ms",
    "verdict",
]


def level_table(levels: list[dict[str, Any]]) -> list[list[str]]:
    """One line per config and load: each figure's mean over the trials with its 95% interval in brackets."""

    def pct(iv: dict[str, Any]) -> str:
        return interval_text({**iv, **{k: 100 * iv[k] for k in ("estimate", "low", "high")}})

    out = []
    for lv in levels:
        iv = lv["intervals"]
        trials = f"{lv['trials']}" + (
            f" ({lv['trials'] - lv['finished']} unfinished)" if lv["finished"] < lv["trials"] else ""
        )
        out.append(
            [
                lv["config"],
                f"{lv['factor']:g}x",
                trials,
                interval_text(iv["accepted_rps"]),
                pct(iv["refusal_rate"]),
                pct(iv["goodput_share"]),
                interval_text(iv["goodput_rps"]),
                interval_text(iv["p99_ms"]),
                lv["verdict"] + ("" if lv["trials"] > 1 else " (1 trial, no interval)"),
            ]
        )
    return out


def text_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in rows]
    return "\n".join(out)


def summary_md(data: dict[str, Any]) -> str:
    rows, sat, v = data["rows"], data["saturation"], data["verdict"]
    if "levels" not in v:  # recorded before the study ran trials
        v = verdict(rows)
    trials = data.get("trials", 1)
    lines = [
        f"# Overload: `{data['served_model']}` over {data['protocol']}",
        "",
        f"Started {data['started']}. p99 budget {data['budget_ms']:g} ms. Queue policy under test: "
        f"{data['policy']}. Open-loop Poisson load, {data['duration_s']:g} s per run "
        f"({data['warmup_s']:g} s warm-up left out), client slots (max_inflight) {data['max_inflight']}. "
        + (
            f"{trials} trials per config and load, the two configs interleaved at each load (A B, B A, ...)."
            if trials > 1
            else "1 trial per config and load, no interval."
        ),
        "",
        f"Saturating throughput: **{sat['rps']:.1f} req/s** (closed loop, {sat['users']} users, no queue policy)."
        if not sat.get("given")
        else f"Saturating throughput: **{sat['rps']:.1f} req/s** (given with --saturation-rps).",
        "",
    ]
    if sat.get("steps"):
        lines += [
            md_table(
                ["users", "req/s", "p99 ms", "failures"],
                [
                    [str(s["users"]), f"{s['throughput_rps']:.1f}", ms_text(s["p99_ms"]), str(s["failures"])]
                    for s in sat["steps"]
                ],
            ),
            "",
        ]
    lines += [
        "## Per load",
        "",
        md_table(LEVEL_HEADERS, level_table(v["levels"])),
        "",
        "Each figure is the mean over the trials with its 95% interval in brackets (Student's t over the "
        "trials; one trial has none). Goodput = accepted requests answered within the budget, over every "
        "arrival offered (%), and per second. Verdict: the p99 interval against the budget (pass: all of it "
        "within, fail: all of it over, inconclusive: it straddles the budget); a trial that did not finish, "
        "dropped arrivals, fell behind the rate or failed requests with a status that is not retryable fails "
        "its load.",
        "",
        "## Trials",
        "",
        md_table(TABLE_HEADERS, table(rows)),
        "",
        "Refusal rate = refused / offered (every arrival). Refused = failures with a retryable status (HTTP 503 "
        '/ gRPC UNAVAILABLE: Triton\'s "Exceeds maximum queue size" and "Request timeout expired"). '
        "Dropped = arrivals the client never sent because all its slots were busy. p99 counts accepted "
        "(successful) requests only, from the moment each was due. (!) = the client did not keep up with the "
        "target rate (offered under 95% of it, beyond a Poisson count's chance: saturation.keeps_up).",
        "",
    ]
    refusal_lat = [(r["config"], r["factor"], r["refusal_latency_ms"]) for r in rows if r["refusal_latency_ms"]]
    if refusal_lat:
        lines += [
            "Refusals arrived after (ms): "
            + "; ".join(
                f"{c} {f:g}x p50 {ms_text(lat.get('p50'))} / p99 {ms_text(lat.get('p99'))}" for c, f, lat in refusal_lat
            ),
            "",
        ]
    lines += [
        "## Verdict",
        "",
        {
            "pass": "**PASS**: with the queue policy, the p99 interval of accepted requests was within the budget "
            "at every load and the excess was refused with retryable statuses.",
            "fail": "**FAIL**:",
            "inconclusive": "**INCONCLUSIVE**: at some load the p99 interval straddles the budget:",
        }[v.get("verdict", "pass" if v["passed"] else "fail")],
        "",
        "With the queue policy: "
        + ", ".join(f"{lv['factor']:g}x {lv['verdict']}" for lv in v["levels"] if lv["config"] == WITH_POLICY)
        + ".",
    ]
    lines += [f"- {p}" for p in v["problems"]]
    if v["baseline_over_budget"]:
        lines += [
            "",
            "Without a queue policy p99 was over the budget at "
            + ", ".join(f"{f:g}x" for f in v["baseline_over_budget"])
            + ".",
        ]
    if data.get("plot"):
        lines += ["", f"![overload]({data['plot']})"]
    return "\n".join(lines) + "\n"


def plot(levels: list[dict[str, Any]], budget_ms: float, path: Path) -> Path | None:
    """p99 of accepted requests and the refused and dropped shares per load, each with its interval."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for config, style in ((WITH_POLICY, "o-"), (WITHOUT_POLICY, "s--")):
        mine = [lv for lv in levels if lv["config"] == config]
        if not mine:
            continue
        factors = [lv["factor"] for lv in mine]
        for axis, key, scale, label in (
            (left, "p99_ms", 1, config),
            (right, "refusal_rate", 100, f"{config}: refused"),
            (right, "drop_rate", 100, f"{config}: dropped (client)"),
        ):
            ivs = [lv["intervals"][key] for lv in mine]
            est = [scale * _number(iv["estimate"]) for iv in ivs]
            err = [
                [max(0.0, e - scale * _number(iv["low"])) for e, iv in zip(est, ivs, strict=True)],
                [max(0.0, scale * _number(iv["high"]) - e) for e, iv in zip(est, ivs, strict=True)],
            ]
            faint = key == "drop_rate"
            axis.errorbar(factors, est, yerr=err, fmt=style, capsize=3, alpha=0.4 if faint else 1.0, label=label)
    left.axhline(budget_ms, color="red", linewidth=1, label=f"budget {budget_ms:g} ms")
    left.set_yscale("log")
    left.set(xlabel="load (x saturation)", ylabel="p99 of accepted requests, ms", title="p99 of accepted (95% CI)")
    right.set(
        xlabel="load (x saturation)", ylabel="% of offered", title="refused by the server / dropped by the client"
    )
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_outputs(data: dict[str, Any], out_dir: Path) -> list[Path]:
    """results.json (``data``, naming the plot), summary.md and overload.png (none without matplotlib)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    levels = data["verdict"]["levels"] if "levels" in data["verdict"] else verdict(data["rows"])["levels"]
    png = plot(levels, data["budget_ms"], out_dir / "overload.png")
    data["plot"] = png.name if png else None
    return save_report(data, out_dir, summary_md, plots=[png])
