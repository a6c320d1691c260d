"""The overload report: the table (console and Markdown), summary.md and the plot of ``loadtest.studies.overload``,
and the names of the two configs it compares."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from loadtest.measure.saturation import OFFER_SHORTFALL
from loadtest.measure.study_report import ms_text, save_report

WITH_POLICY, WITHOUT_POLICY = "queue-policy", "no-queue-policy"


def _statuses(counts: dict[str, int]) -> str:
    return ", ".join(f"{s} x{n}" for s, n in sorted(counts.items(), key=lambda kv: -kv[1])) or "-"


TABLE_HEADERS = [
    "config",
    "load",
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
    lines = [
        f"# Overload: `{data['served_model']}` over {data['protocol']}",
        "",
        f"Started {data['started']}. p99 budget {data['budget_ms']:g} ms. Queue policy under test: "
        f"{data['policy']}. Open-loop Poisson load, {data['duration_s']:g} s per run "
        f"({data['warmup_s']:g} s warm-up left out), client slots (max_inflight) {data['max_inflight']}.",
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
        "## Results",
        "",
        md_table(TABLE_HEADERS, table(rows)),
        "",
        "Refusal rate = refused / offered (every arrival). Refused = failures with a retryable status (HTTP 503 "
        '/ gRPC UNAVAILABLE: Triton\'s "Exceeds maximum queue size" and "Request timeout expired"). '
        "Dropped = arrivals the client never sent because all its slots were busy. p99 counts accepted "
        "(successful) requests only, from the moment each was due. (!) = the client offered under "
        f"{OFFER_SHORTFALL:.0%} of the target rate.",
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
        (
            "**PASS**: with the queue policy, p99 of accepted requests stayed within the budget at every load "
            "and the excess was refused with retryable statuses."
            if v["passed"]
            else "**FAIL**:"
        ),
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


def plot(rows: list[dict[str, Any]], budget_ms: float, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for config, style in ((WITH_POLICY, "o-"), (WITHOUT_POLICY, "s--")):
        mine = [r for r in rows if r["config"] == config]
        if not mine:
            continue
        factors = [r["factor"] for r in mine]
        left.plot(factors, [r["p99_ms"] if r["p99_ms"] is not None else math.nan for r in mine], style, label=config)
        right.plot(factors, [100 * r["refusal_rate"] for r in mine], style, label=f"{config}: refused")
        right.plot(factors, [100 * r["drop_rate"] for r in mine], style, alpha=0.4, label=f"{config}: dropped (client)")
    left.axhline(budget_ms, color="red", linewidth=1, label=f"budget {budget_ms:g} ms")
    left.set_yscale("log")
    left.set(xlabel="load (x saturation)", ylabel="p99 of accepted requests, ms", title="p99 of accepted requests")
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
    out_dir.mkdir(parents=True, exist_ok=True)
    return save_report(data, out_dir, plot(data["rows"], data["budget_ms"], out_dir / "overload.png"), summary_md)
