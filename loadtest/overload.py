"""Overload: does the queue policy keep accepted requests inside the p99 budget at twice the saturating load?

``python -m loadtest.overload [--model digits] [--budget-ms 10] [--duration 20]`` (``make overload``):

1. **Saturation.** With the queue policy removed, closed-loop users double (4, 8, 16, ...) until throughput
   stops growing by 5%; the best throughput is the saturating rate (``--saturation-rps`` skips the search).
2. **Load.** Open-loop Poisson arrivals at 1x, 1.5x and 2x of it, once with the model's queue policy (from
   its served config, i.e. ``export/models.toml``; ``--max-queue-size``/``--timeout-us`` override it) and
   once with none, each applied through model control (the served config is restored afterwards).
3. **Table.** Per config and load factor: offered and accepted rate, refusal rate (refused / offered),
   client drops, other errors, p99 of accepted requests against the budget, the statuses refusals came
   with. Triton 2.51 answers a full queue ("Exceeds maximum queue size") and a request that waited past
   ``default_timeout_microseconds`` with REJECT ("Request timeout expired") with HTTP 503 / gRPC
   UNAVAILABLE: retryable statuses, counted as refusals (``loadtest.results.RETRYABLE_STATUSES``). An
   arrival that finds every client slot busy is a *drop* (the client saturated, the server never saw it),
   reported apart; ``--max-inflight`` sets the slots.

Writes ``reports/overload/<model>/``: ``results.json`` (rows, saturation search, every run), ``summary.md``,
``overload.png`` and the Locust logs under ``runs/``. Exit status: 0 when every run with the queue policy kept
p99 within the budget and failed only with retryable refusals; 1 when not; 2 bad arguments; 3 the server or
Locust failed. ``--report results.json`` re-renders the summary and plot without running anything.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import sys
import time
import tomllib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from loadtest.campaign import Scenario, Variant
from loadtest.errors import RunError
from loadtest.results import DROPPED, RunResult, from_dict, is_refusal

OUT = Path("reports/overload")
CAMPAIGNS = Path(__file__).with_name("campaigns")
FACTORS = (1.0, 1.5, 2.0)
WITH_POLICY, WITHOUT_POLICY = "queue-policy", "no-queue-policy"
OFFER_SHORTFALL = 0.9
"""A run whose client offered under this share of the target rate could not generate the load (client-bound)."""


# --- configs -------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class QueuePolicy:
    max_queue_size: int
    default_timeout_us: int
    timeout_action: str = "REJECT"

    @property
    def is_set(self) -> bool:
        return bool(self.max_queue_size or self.default_timeout_us)

    def text(self) -> str:
        if not self.is_set:
            return "none"
        return (f"max_queue_size={self.max_queue_size}, default_timeout_us={self.default_timeout_us}, "
                f"timeout_action={self.timeout_action}")


def policy_of(config: dict[str, Any]) -> QueuePolicy:
    """The ``default_queue_policy`` of a served config (Triton's JSON form)."""
    policy = (config.get("dynamic_batching") or {}).get("default_queue_policy") or {}
    return QueuePolicy(int(policy.get("max_queue_size", 0)), int(policy.get("default_timeout_microseconds", 0)),
                       str(policy.get("timeout_action", "REJECT")))


def with_overrides(policy: QueuePolicy, overrides: dict[str, int | None] | None) -> QueuePolicy:
    """``policy`` with each field of ``overrides`` that is not None in its place (a flag not given keeps the
    served value: ``--timeout-us 0`` alone removes only the timeout)."""
    return dataclasses.replace(policy, **{k: v for k, v in (overrides or {}).items() if v is not None})


def variants(model: str, policy: QueuePolicy, fmt: str = "torchscript") -> tuple[Variant, Variant]:
    """The config with ``policy`` and the same config with no queue policy (both otherwise as served)."""
    return (Variant(WITH_POLICY, (model,), fmt, max_queue_size=policy.max_queue_size,
                    default_timeout_us=policy.default_timeout_us, timeout_action=policy.timeout_action),
            Variant(WITHOUT_POLICY, (model,), fmt, max_queue_size=0, default_timeout_us=0))


def default_budget_ms(model: str) -> float | None:
    """The p99 budget of ``loadtest/campaigns/<model>.toml``, when there is one."""
    path = CAMPAIGNS / f"{model}.toml"
    if not path.is_file():
        return None
    return float(tomllib.loads(path.read_text())["slo"]["p99_ms"])


# --- saturation ----------------------------------------------------------------------------------

@dataclasses.dataclass
class Saturation:
    rps: float
    """Best successful throughput of the closed-loop search: the saturating rate."""
    users: int
    steps: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Each step: users, throughput_rps, p99_ms, failures."""


def find_saturation(model: str, served: str, protocol: str, endpoints, work: Path, *, duration_s: float = 10.0,
                    warmup_s: float = 2.0, start_users: int = 4, max_users: int = 256, min_gain: float = 0.05,
                    log=print) -> Saturation:
    """Closed-loop users doubling from ``start_users`` until throughput grows by less than ``min_gain``
    (or ``max_users``): the best successful throughput seen, on the config as served. The overload
    comparison searches with the queue policy removed (``saturation_without_policy``), so both of its
    configs share one reference rate."""
    from loadtest.runner import measure_run

    work.mkdir(parents=True, exist_ok=True)
    best: dict[str, Any] | None = None
    steps = []
    users = start_users
    while users <= max_users:
        scenario = Scenario(f"saturation-{users}u", model, protocol, {"kind": "users", "users": users},
                            duration_s, warmup_s)
        client, _ = measure_run(scenario, served, endpoints, work, scenario.name, log=lambda *_: None)
        step = {"users": users, "throughput_rps": round(client.throughput_rps, 1),
                "p99_ms": round(client.latency_ms.get("p99", math.nan), 3), "failures": client.failures}
        steps.append(step)
        log(f"  saturation search: {users:4d} users  {client.throughput_rps:8.1f} req/s  "
            f"p99 {step['p99_ms']:.3f} ms  failures {client.failures}")
        if best is not None and step["throughput_rps"] < best["throughput_rps"] * (1 + min_gain):
            if step["throughput_rps"] > best["throughput_rps"]:
                best = step
            break
        best = step
        users *= 2
    if best is None or best["throughput_rps"] <= 0:
        raise ValueError(f"saturation search for {served} found no throughput: {steps}")
    return Saturation(best["throughput_rps"], best["users"], steps)


def saturation_without_policy(model: str, served: str, protocol: str, endpoints, work: Path, original: dict,
                              fmt: str = "torchscript", log=print, **search) -> Saturation:
    """``find_saturation`` with the queue policy removed, then ``original`` served again."""
    from loadtest import apply

    _, without = variants(model, policy_of(original), fmt)
    apply.apply(endpoints.http, without, model, original)
    try:
        return find_saturation(model, served, protocol, endpoints, work, log=log, **search)
    finally:
        apply.restore(endpoints.http, {served: original})


def settle(endpoints, served: str, timeout_s: float = 60.0) -> None:
    """Wait until the server holds no request of ``served`` (a run without a queue policy leaves a backlog)."""
    from deploy.client import metrics, model_metric

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if model_metric(metrics(endpoints.metrics), "nv_inference_pending_request_count", served) == 0:
                return
        except OSError:
            return
        time.sleep(0.5)


# --- one load run -> one table row ---------------------------------------------------------------

def open_scenario(model: str, protocol: str, rate: float, duration_s: float, warmup_s: float, max_inflight: int,
                  processes: int = 1, name: str = "") -> Scenario:
    return Scenario(name or f"{model}-open-{rate:g}", model, protocol,
                    {"kind": "open", "rate": rate, "max_inflight": max_inflight}, duration_s, warmup_s, processes)


def unfinished_row(config: str, factor: float, target_rps: float, budget_ms: float, why: str) -> dict[str, Any]:
    """A run whose requests were still queued when Locust had to stop: no figures, over the budget."""
    nan = float("nan")
    return {"config": config, "factor": factor, "target_rps": round(target_rps, 1), "offered_rps": nan,
            "offered": 0, "accepted": 0, "accepted_rps": nan, "refused": 0, "refusal_rate": 0.0, "dropped": 0,
            "drop_rate": 0.0, "other_errors": 0, "p50_ms": None, "p99_ms": None, "budget_ms": budget_ms,
            "meets_budget": False, "refusal_statuses": {}, "other_statuses": {}, "refusal_latency_ms": {},
            "client_kept_up": True, "server_avg_batch": None, "server_queue_ms": None, "unfinished": why}


def row(run: RunResult, config: str, factor: float, target_rps: float, budget_ms: float,
        warmup_s: float = 0.0) -> dict[str, Any]:
    """The table's figures for one run. Rates are per second of the measured window; ``refusal_rate`` is
    refused / offered, where offered counts every arrival (sent or dropped)."""
    c = run.client
    duration = c.duration_s if c.duration_s > 0 else float("nan")
    statuses = dict(c.failure_statuses)
    refusal_statuses = {s: n for s, n in statuses.items() if is_refusal(s)}
    other_statuses = {s: n for s, n in statuses.items() if not is_refusal(s) and s != DROPPED}
    p99 = c.latency_ms.get("p99", math.nan)
    p99 = None if p99 is None or (isinstance(p99, float) and math.isnan(p99)) else float(p99)
    offered, accepted, refused, dropped, other = _window_counts(run, warmup_s)
    offered_rps = offered / duration
    return {
        "config": config,
        "factor": factor,
        "target_rps": round(target_rps, 1),
        "offered_rps": round(offered_rps, 1),
        "offered": offered,
        "accepted": accepted,
        "accepted_rps": round(accepted / duration, 1),
        "refused": refused,
        "refusal_rate": refused / offered if offered else 0.0,
        "dropped": dropped,
        "drop_rate": dropped / offered if offered else 0.0,
        "other_errors": other,
        "p50_ms": c.latency_ms.get("p50"),
        "p99_ms": p99,
        "budget_ms": budget_ms,
        "meets_budget": p99 is not None and p99 <= budget_ms,
        "refusal_statuses": refusal_statuses,
        "other_statuses": other_statuses,
        "refusal_latency_ms": dict(c.refusal_latency_ms),
        "client_kept_up": offered_rps >= OFFER_SHORTFALL * target_rps,
        "server_avg_batch": round(run.server.avg_batch, 2) if run.server else None,
        "server_queue_ms": run.server.breakdown_ms.get("queue") if run.server else None,
    }


def _window_counts(run: RunResult, warmup_s: float) -> tuple[int, int, int, int, int]:
    """Offered, accepted, refused, dropped and other failures of the measured window. Failures are recorded in
    the warm-up seconds too while successes there are not, so the counts come from the per-second timeline
    from ``warmup_s`` on (the whole run's counts when the timeline is missing)."""
    c = run.client
    points = [p for p in c.timeline if p.t >= warmup_s]
    other = c.other_failures
    if not points:
        return c.requests, c.accepted, c.refused, c.dropped, other
    offered = sum(p.requests for p in points)
    failures = sum(p.failures for p in points)
    refused = sum(p.refused for p in points)
    other = min(other, failures - refused)
    return offered, offered - failures, refused, max(0, failures - refused - other), other


def verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether the queue policy did its job: within budget at every load, failures only retryable refusals."""
    policy = [r for r in rows if r["config"] == WITH_POLICY]
    problems = []
    for r in policy:
        where = f"{r['factor']:g}x"
        if not r["meets_budget"]:
            problems.append(f"{where}: p99 {_ms(r['p99_ms'])} ms is over the {r['budget_ms']:g} ms budget")
        if r["other_errors"]:
            problems.append(f"{where}: {r['other_errors']} failures that are not retryable refusals "
                            f"({r['other_statuses']})")
        if r["dropped"]:
            problems.append(f"{where}: the client dropped {r['dropped']} arrivals (raise --max-inflight)")
        if not r["client_kept_up"]:
            problems.append(f"{where}: the client offered {r['offered_rps']:g} of {r['target_rps']:g} req/s "
                            f"(client-bound: the figures understate the load)")
    baseline = {r["factor"]: r for r in rows if r["config"] == WITHOUT_POLICY}
    return {"passed": bool(policy) and not problems, "problems": problems,
            "baseline_over_budget": sorted(f for f, r in baseline.items() if not r["meets_budget"])}


# --- output --------------------------------------------------------------------------------------

def _ms(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{float(value):.3f}"


def _statuses(counts: dict[str, int]) -> str:
    return ", ".join(f"{s} x{n}" for s, n in sorted(counts.items(), key=lambda kv: -kv[1])) or "-"


TABLE_HEADERS = ["config", "load", "offered req/s", "accepted req/s", "refusal rate", "dropped (client)",
                 "other errors", "p99 accepted ms", f"p99 <= budget", "refusal statuses"]


def table(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [[r["config"], f"{r['factor']:g}x", f"{r['offered_rps']:.1f}" + ("" if r["client_kept_up"] else " (!)"),
             f"{r['accepted_rps']:.1f}", f"{r['refusal_rate']:.2%}", f"{r['dropped']} ({r['drop_rate']:.2%})",
             str(r["other_errors"]), _ms(r["p99_ms"]), "yes" if r["meets_budget"] else "NO",
             _statuses(r["refusal_statuses"])] for r in rows]


def text_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in rows]
    return "\n".join(out)


def summary_md(data: dict[str, Any]) -> str:
    rows, sat, v = data["rows"], data["saturation"], data["verdict"]
    lines = [f"# Overload: `{data['served_model']}` over {data['protocol']}", "",
             f"Started {data['started']}. p99 budget {data['budget_ms']:g} ms. Queue policy under test: "
             f"{data['policy']}. Open-loop Poisson load, {data['duration_s']:g} s per run "
             f"({data['warmup_s']:g} s warm-up left out), client slots (max_inflight) {data['max_inflight']}.", "",
             f"Saturating throughput: **{sat['rps']:.1f} req/s** (closed loop, {sat['users']} users, "
             f"no queue policy)." if not sat.get("given") else
             f"Saturating throughput: **{sat['rps']:.1f} req/s** (given with --saturation-rps).", ""]
    if sat.get("steps"):
        lines += [md_table(["users", "req/s", "p99 ms", "failures"],
                           [[str(s["users"]), f"{s['throughput_rps']:.1f}", _ms(s["p99_ms"]), str(s["failures"])]
                            for s in sat["steps"]]), ""]
    lines += ["## Results", "", md_table(TABLE_HEADERS, table(rows)), "",
              "Refusal rate = refused / offered (every arrival). Refused = failures with a retryable status (HTTP 503 "
              "/ gRPC UNAVAILABLE: Triton's \"Exceeds maximum queue size\" and \"Request timeout expired\"). "
              "Dropped = arrivals the client never sent because all its slots were busy. p99 counts accepted "
              "(successful) requests only, from the moment each was due. (!) = the client offered under "
              f"{OFFER_SHORTFALL:.0%} of the target rate.", ""]
    refusal_lat = [(r["config"], r["factor"], r["refusal_latency_ms"]) for r in rows if r["refusal_latency_ms"]]
    if refusal_lat:
        lines += ["Refusals arrived after (ms): " + "; ".join(
            f"{c} {f:g}x p50 {_ms(l.get('p50'))} / p99 {_ms(l.get('p99'))}" for c, f, l in refusal_lat), ""]
    lines += ["## Verdict", "",
              ("**PASS**: with the queue policy, p99 of accepted requests stayed within the budget at every load "
               "and the excess was refused with retryable statuses." if v["passed"] else "**FAIL**:")]
    lines += [f"- {p}" for p in v["problems"]]
    if v["baseline_over_budget"]:
        lines += ["", "Without a queue policy p99 was over the budget at "
                  + ", ".join(f"{f:g}x" for f in v["baseline_over_budget"]) + "."]
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
    right.set(xlabel="load (x saturation)", ylabel="% of offered", title="refused by the server / dropped by the client")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_outputs(data: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    png = plot(data["rows"], data["budget_ms"], out_dir / "overload.png")
    data["plot"] = png.name if png else None
    (out_dir / "results.json").write_text(json.dumps(data, indent=1, default=str))
    (out_dir / "summary.md").write_text(summary_md(data))
    return [out_dir / "results.json", out_dir / "summary.md", *([png] if png else [])]


def load_runs(data: dict[str, Any]) -> list[RunResult]:
    """The ``RunResult`` objects of a results.json written here."""
    return from_dict({"campaign": "overload", "started": data.get("started", ""), "slo": {},
                      "runs": data.get("runs", [])}).runs


# --- the whole measurement -----------------------------------------------------------------------

def measure(model: str, endpoints, out_dir: Path, *, protocol: str = "grpc", fmt: str = "torchscript",
            budget_ms: float, duration_s: float = 20.0, warmup_s: float = 3.0, factors=FACTORS,
            saturation_rps: float | None = None, max_inflight: int = 4096, processes: int = 1,
            policy: QueuePolicy | None = None, overrides: dict[str, int | None] | None = None,
            search: dict | None = None, log=print) -> dict[str, Any]:
    """Saturation, then open-loop load at each factor with and without the queue policy; the results dict.
    ``policy`` replaces the served policy; ``overrides`` changes single fields of it (None keeps a field)."""
    from loadtest import apply
    from loadtest.campaign import Slo
    from loadtest.runner import run_scenario

    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    served = Variant("x", (model,), fmt).served_model(model)
    work = out_dir / "runs"
    work.mkdir(parents=True, exist_ok=True)
    original = apply.served_config(endpoints.http, served)
    policy = with_overrides(policy or policy_of(original), overrides)
    if not policy.is_set:
        raise ValueError(f"{served} serves no queue policy: set one in export/models.toml (and re-export) or pass "
                         f"--max-queue-size / --timeout-us")
    with_policy, without_policy = variants(model, policy, fmt)
    log(f"overload {served} over {protocol}: queue policy {policy.text()}; p99 budget {budget_ms:g} ms")
    if saturation_rps:
        sat = Saturation(saturation_rps, 0)
        sat_dict = {**dataclasses.asdict(sat), "given": True}
    else:
        sat = saturation_without_policy(model, served, protocol, endpoints, work, original, fmt, log=log,
                                        **(search or {}))
        sat_dict = dataclasses.asdict(sat)
    log(f"  saturating throughput {sat.rps:.1f} req/s")
    budget = Slo(budget_ms, max_error_rate=0.999999)
    rows, runs = [], []
    try:
        for variant in (with_policy, without_policy):
            apply.apply(endpoints.http, variant, model, original)
            for factor in factors:
                rate = round(sat.rps * factor, 1)
                scenario = open_scenario(model, protocol, rate, duration_s, warmup_s, max_inflight, processes,
                                         name=f"{model}-{factor:g}x")
                settle(endpoints, served)
                try:
                    run = run_scenario(scenario, variant, served, endpoints, work, budget, log=lambda *_: None)
                except RunError as exc:
                    # Without a queue policy the queue can grow until requests outlive the run: that is a
                    # result (latency without bound), not a reason to lose the other rows.
                    rows.append(unfinished_row(variant.name, factor, rate, budget_ms, str(exc)))
                    log(f"  {variant.name:16s} {factor:4g}x {rate:8.1f} req/s offered: did not finish ({exc})")
                    continue
                r = row(run, variant.name, factor, rate, budget_ms, warmup_s)
                rows.append(r)
                runs.append(run)
                log(f"  {variant.name:16s} {factor:4g}x {rate:8.1f} req/s offered: accepted {r['accepted_rps']:8.1f}"
                    f"/s  refused {r['refusal_rate']:6.2%}  dropped {r['drop_rate']:6.2%}  other {r['other_errors']}"
                    f"  p99 {_ms(r['p99_ms'])} ms {'ok' if r['meets_budget'] else 'OVER'}")
    finally:
        settle(endpoints, served)
        apply.restore(endpoints.http, {served: original})
    return {
        "model": model, "served_model": served, "protocol": protocol, "budget_ms": budget_ms,
        "started": started, "policy": policy.text(),
        "policy_values": dataclasses.asdict(policy), "saturation": sat_dict, "factors": list(factors),
        "duration_s": duration_s, "warmup_s": warmup_s, "max_inflight": max_inflight, "processes": processes,
        "rows": rows, "verdict": verdict(rows), "runs": [dataclasses.asdict(r) for r in runs],
    }


# --- command line --------------------------------------------------------------------------------

def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    from deploy.server import DEFAULT_REPOSITORY

    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY, help="model repository")
    parser.add_argument("--http-url", help="use the server already running here (host:port, explicit model "
                                           "control) instead of starting one; needs --grpc-url and --metrics-url")
    parser.add_argument("--grpc-url")
    parser.add_argument("--metrics-url", help="e.g. http://127.0.0.1:8002/metrics")
    parser.add_argument("--server-cpus", type=parse_cpus, default=frozenset(),
                        help="pin the local server and its stubs to these CPUs (e.g. 1 or 2-7); with "
                             "--client-cpus, load and server do not share cores")
    parser.add_argument("--client-cpus", type=parse_cpus, default=frozenset(),
                        help="pin the load generator (this process and its Locust workers) to these CPUs (e.g. 0)")


def parse_cpus(text: str) -> frozenset[int]:
    """``"0"``, ``"0,2"``, ``"2-5"`` -> CPU numbers; the bad part is named."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            raise argparse.ArgumentTypeError(f"CPU list {text!r}: {part!r} is not N or N-M") from None
        if low < 0 or high < low:
            raise argparse.ArgumentTypeError(f"CPU list {text!r}: {part!r} is not a range of CPU numbers")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def start_server(args, models: tuple[str, ...]):
    """(endpoints, server or None): the server given by URL, or a local one serving only ``models``."""
    from deploy.server import LocalServer, ServerConfig, free_ports
    from loadtest.runner import Endpoints

    if args.http_url:
        if not (args.grpc_url and args.metrics_url):
            raise ValueError("--http-url needs --grpc-url and --metrics-url too")
        if args.server_cpus:
            raise ValueError("--server-cpus pins a local server: drop --http-url, or pin that server yourself")
        return Endpoints(args.http_url, args.grpc_url, args.metrics_url), None
    http, grpc, metrics = free_ports()
    print(f"starting tritonserver on {args.repository} with {', '.join(models)} ...", flush=True)
    server = LocalServer(ServerConfig(model_repository=args.repository, load_models=models, http_port=http,
                                      grpc_port=grpc, metrics_port=metrics, exit_timeout_s=10,
                                      cpus=args.server_cpus)).start()
    return Endpoints.of(server), server


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loadtest.overload", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="digits", help="public model name (default digits)")
    parser.add_argument("--format", default="torchscript", choices=("torchscript", "onnx"),
                        help="served variant (onnx: <model>_onnx)")
    parser.add_argument("--protocol", default="grpc", choices=("grpc", "http"))
    parser.add_argument("--budget-ms", type=float, help="p99 budget (default: the SLO of loadtest/campaigns/<model>.toml)")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per load run (default 20)")
    parser.add_argument("--warmup", type=float, default=3.0, help="leading seconds left out of each run (default 3)")
    parser.add_argument("--factors", default="1,1.5,2", help="load factors of the saturating rate (default 1,1.5,2)")
    parser.add_argument("--saturation-rps", type=float, help="skip the search: use this saturating rate")
    parser.add_argument("--search-duration", type=float, default=10.0, help="seconds per saturation step (default 10)")
    parser.add_argument("--max-inflight", type=int, default=4096,
                        help="client slots per Locust process; arrivals beyond are dropped (default 4096)")
    parser.add_argument("--processes", type=int, default=1, help="Locust processes (default 1)")
    parser.add_argument("--max-queue-size", type=int,
                        help="queue policy under test: max_queue_size (default: the served config's)")
    parser.add_argument("--timeout-us", type=int, help="queue policy under test: default_timeout_microseconds "
                                                       "(default: the served config's)")
    parser.add_argument("--out", type=Path, default=OUT, help="reports folder (default reports/overload; "
                                                              "files go to <out>/<model>/)")
    parser.add_argument("--report", type=Path, help="re-render summary.md and the plot from this results.json")
    add_server_arguments(parser)
    return parser.parse_args(argv)


def run_with_server(args, models: tuple[str, ...], work):
    """``work(endpoints, server)`` against the server given by URL or a local one serving ``models`` (stopped
    afterwards): ``(0, result)``, or ``(2, None)`` for a bad argument and ``(3, None)`` when the server or Locust
    failed, the error printed."""
    from deploy.errors import ServerError
    from loadtest.errors import CampaignError, LoadTestError

    server = None
    # SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so the local server is stopped, not orphaned.
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        endpoints, server = start_server(args, models)
        if args.client_cpus:
            os.sched_setaffinity(0, args.client_cpus)  # the Locust workers started from here inherit it
        return 0, work(endpoints, server)
    except (CampaignError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2, None
    except (LoadTestError, ServerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3, None
    finally:
        if server is not None:
            server.stop()
        signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum, _frame):
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report:
        data = json.loads(args.report.read_text())
        paths = write_outputs(data, args.report.parent)
        print(text_table(TABLE_HEADERS, table(data["rows"])))
        print("wrote " + ", ".join(map(str, paths)))
        return 0 if data["verdict"]["passed"] else 1
    try:
        factors = tuple(float(f) for f in args.factors.split(","))
        budget = args.budget_ms or default_budget_ms(args.model)
        if budget is None or budget <= 0:
            raise ValueError(f"no p99 budget for {args.model!r}: pass --budget-ms")
        if any(f <= 0 for f in factors) or args.duration <= args.warmup or args.max_inflight < 1:
            raise ValueError("factors must be > 0, --duration must exceed --warmup, --max-inflight >= 1")
        if any(v is not None and v < 0 for v in (args.max_queue_size, args.timeout_us)):
            raise ValueError("--max-queue-size and --timeout-us must be >= 0")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    served = Variant("x", (args.model,), args.format).served_model(args.model)
    # Each flag replaces one field of the served policy; a field without its flag keeps the served value.
    overrides = {"max_queue_size": args.max_queue_size, "default_timeout_us": args.timeout_us}
    code, data = run_with_server(args, (served,), lambda endpoints, _server: measure(
        args.model, endpoints, args.out / args.model, protocol=args.protocol, fmt=args.format, budget_ms=budget,
        duration_s=args.duration, warmup_s=args.warmup, factors=factors, saturation_rps=args.saturation_rps,
        max_inflight=args.max_inflight, processes=args.processes, overrides=overrides,
        search={"duration_s": args.search_duration}))
    if code:
        return code
    paths = write_outputs(data, args.out / args.model)
    print()
    print(text_table(TABLE_HEADERS, table(data["rows"])))
    print()
    v = data["verdict"]
    print("PASS: the queue policy kept p99 within budget and refused the excess with retryable statuses"
          if v["passed"] else "FAIL:\n  " + "\n  ".join(v["problems"]))
    print("wrote " + ", ".join(map(str, paths)))
    return 0 if v["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
