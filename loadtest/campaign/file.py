"""Campaign files: which scenarios to run under which config variants, against which SLO (TOML).

A campaign runs every scenario under every variant (a variant lists the models it applies to; a scenario
whose model it does not name runs as deployed). Example, with every key::

    name = "digits-tuning"
    trials = 1                # runs of each scenario under each variant, interleaved (variants A B, B A, ...);
                              # 2 or more: every figure gets its 95% interval and the verdict may be inconclusive
    [slo]
    p99_ms = 5.0              # client-side p99 budget
    max_error_rate = 0.001    # failures / requests
    gate = "best-variant"     # "every-run": each run must meet the SLO; "best-variant": each scenario needs one
    min_goodput = 0.99        # share of requests answered without error within p99_ms (default: no floor)
    # ttft_ms = 500           # streams (decoupled models): p99 time-to-first-token budget, ms (default: none)
    # itl_ms = 50             # streams: p99 inter-token latency budget, ms; goodput counts only the streamed
                              # requests within both (docs/load-testing.md#streams-ttft-itl-tokenss)

    [[scenarios]]
    name = "digits-grpc"
    model = "digits"          # public name; the variant may serve another format (digits_onnx)
    protocol = "grpc"         # http | grpc
    duration_s = 20
    warmup_s = 2              # leading seconds left out of the figures (new connections)
    processes = 1             # Locust processes (--processes)
    trials = 3                # this scenario's trials (default: the top-level trials, else 1)
    retry = { attempts = 3, backoff_ms = 50 }   # clients retry refusals (503 / UNAVAILABLE); default: no retry
    # What the requests carry (loadtest/generators/payloads.py; default: the catalog model's samples function, else
    # random values from the served config); the flags of `tritonkit loadtest --model`, spelled as keys:
    payload = { shape = ["input_ids:32", "attention_mask:32"], int_range = "0:1000" }
    # payload = { input_data = "requests.json" }   # perf_analyzer's input-data format
    # payload = { samples = "my_data.py:load" }    # a function returning [{name: numpy array (batch 1)}, ...]
    shape = { kind = "users", users = 32 }
    # shape = { kind = "open", rate = 800, max_inflight = 256 }
    # open-loop arrivals (loadtest/generators/arrivals.py; default "poisson"):
    # shape = { kind = "open", rate = 800, arrival = "gamma", burstiness = 0.5 }   # < 1 burstier, > 1 more regular
    # shape = { kind = "open", rate = 200, arrival = "ramp", rate_end = 1600 }    # linear over duration_s
    # shape = { kind = "open", arrival = "replay", schedule = "trace.jsonl" }     # optional speed, or a rate
    # shape = { kind = "step", start = 4, step = 4, every_s = 5, max = 32 }
    # shape = { kind = "spike", base = 4, peak = 48, at_s = 8, hold_s = 4 }

    [[variants]]
    name = "batch-2ms-x2"
    models = ["digits"]
    max_queue_delay_us = 2000
    preferred_batch_sizes = [16, 32]
    instances = 2
    # dynamic_batching = false; max_batch_size = 32; warmup = false; format = "onnx"; precision = "fp16"
    max_queue_size = 64           # queue policy: refuse (503 / UNAVAILABLE) beyond 64 waiting; 0 = unbounded
    default_timeout_us = 5000     # queue policy: a request waiting longer gets timeout_action; 0 = never
    timeout_action = "REJECT"     # or "DELAY"

    [tune]
    models = ["digits"]       # write the best variant meeting the SLO into these models' configs
    analyzer = false          # also run Triton Model Analyzer and compare its pick under the same load
    budget_s = 120            # the tuner's search (tritonkit tune's) at the model's first scenario's load; the
                              # variants above are measured beside it as compared points
    leaders = 2               # candidates measured again beside the served config (tritonkit tune --leaders)
    trials = 3                # interleaved trials of each of them (tritonkit tune --trials, at least 2)
    measurement_ms = 2000     # perf_analyzer's window per measurement (tritonkit tune --measurement-ms)
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

from export.changes import ServingChanges
from loadtest.core.spec import AS_DEPLOYED, Candidate, Scenario, Slo, check_trials
from loadtest.errors import CampaignError


@dataclasses.dataclass(frozen=True)
class Campaign:
    name: str
    slo: Slo
    scenarios: tuple[Scenario, ...]
    variants: tuple[Candidate, ...] = (AS_DEPLOYED,)
    tune_models: tuple[str, ...] = ()
    analyzer: bool = False
    tune_budget_s: float = 120.0
    """[tune] budget_s: wall-clock budget of the tuner's search per model."""
    path: Path | None = None
    tune_leaders: int | None = None
    """[tune] leaders: candidates measured again beside the served config (None: the tuner's default)."""
    tune_trials: int | None = None
    """[tune] trials: interleaved trials of each leader (None: the tuner's default)."""
    tune_measurement_ms: int | None = None
    """[tune] measurement_ms: perf_analyzer's window per measurement (None: the tuner's default)."""


def _build(cls, where: str, table: dict[str, Any]):
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = set(table) - fields
    if unknown:
        raise CampaignError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(fields)}")
    try:
        return cls(**table)
    except TypeError as exc:
        raise CampaignError(f"{where}: {exc}") from None


def _variant(where: str, table: dict[str, Any]) -> Candidate:
    known = {"name", "models", "format", "precision"} | {f.name for f in dataclasses.fields(ServingChanges)}
    unknown = set(table) - known
    if unknown:
        raise CampaignError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(known)}")
    if "name" not in table:
        raise CampaignError(f"{where}: needs a name")
    try:
        return Candidate.of(**table)
    except TypeError as exc:
        raise CampaignError(f"{where}: {exc}") from None


def _with_trials(table: Any, trials: int) -> Any:
    """A scenario table with the campaign's trials unless it sets its own."""
    return {"trials": trials, **table} if isinstance(table, dict) else table


def _schedule_beside(table: dict[str, Any], folder: Path | None) -> dict[str, Any]:
    """A replay's schedule file is found beside the campaign first (then from the working directory)."""
    shape = table.get("shape") if isinstance(table, dict) else None
    schedule = shape.get("schedule") if isinstance(shape, dict) else None
    if folder is None or not isinstance(schedule, str) or Path(schedule).is_absolute():
        return table
    if not (folder / schedule).is_file():
        return table
    return {**table, "shape": {**shape, "schedule": str((folder / schedule).resolve())}}


def parse(text: str, path: Path | None = None) -> Campaign:
    where = str(path) if path else "campaign"
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CampaignError(f"{where}: not valid TOML: {exc}") from None
    unknown = set(raw) - {"name", "trials", "slo", "scenarios", "variants", "tune"}
    if unknown:
        raise CampaignError(f"{where}: unknown top-level keys {sorted(unknown)}")
    if "slo" not in raw or not raw.get("scenarios"):
        raise CampaignError(f"{where}: needs an [slo] table and at least one [[scenarios]]")
    slo = _build(Slo, f"{where}: [slo]", raw["slo"])
    folder = path.parent if path else None
    trials = check_trials(raw.get("trials", 1), f"{where}: trials")
    scenarios = tuple(
        _build(Scenario, f"{where}: scenario {i}", _with_trials(_schedule_beside(s, folder), trials))
        for i, s in enumerate(raw["scenarios"])
    )
    variants = tuple(_variant(f"{where}: variant {i}", v) for i, v in enumerate(raw.get("variants", []))) or (
        AS_DEPLOYED,
    )
    for kind, items in (("scenario", scenarios), ("variant", variants)):
        names = [x.name for x in items]
        if len(set(names)) != len(names):
            raise CampaignError(f"{where}: {kind} names repeat: {names}")
    tune = raw.get("tune", {})
    unknown = set(tune) - {"models", "analyzer", "budget_s", "leaders", "trials", "measurement_ms"}
    if unknown:
        raise CampaignError(f"{where}: [tune]: unknown keys {sorted(unknown)}")
    tune_models = tuple(tune.get("models", ()))
    scenario_models = {s.model for s in scenarios}
    if set(tune_models) - scenario_models:
        raise CampaignError(f"{where}: [tune] models {sorted(set(tune_models) - scenario_models)} have no scenario")
    for model in tune_models:  # the search runs at the model's first scenario's load (loadtest/campaign/tuning.py)
        first = next(s for s in scenarios if s.model == model)
        if first.shape["kind"] == "open" and "rate" not in first.shape:
            raise CampaignError(
                f"{where}: [tune] model {model!r}: its first scenario {first.name!r} replays a schedule without a "
                "rate; the search needs one (add rate = R to its shape)"
            )
    budget = tune.get("budget_s", 120.0)
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget <= 0:
        raise CampaignError(f"{where}: [tune] budget_s={budget!r} must be a number of seconds > 0")
    leaders, tune_trials, window = tune.get("leaders"), tune.get("trials"), tune.get("measurement_ms")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window <= 0):
        raise CampaignError(f"{where}: [tune] measurement_ms={window!r} must be a whole number of milliseconds > 0")
    if leaders is not None:
        check_trials(leaders, f"{where}: [tune] leaders")
    if tune_trials is not None and check_trials(tune_trials, f"{where}: [tune] trials") < 2:
        raise CampaignError(f"{where}: [tune] trials={tune_trials!r}: the leaders' intervals need at least 2")
    return Campaign(
        raw.get("name") or (path.stem if path else "campaign"),
        slo,
        scenarios,
        variants,
        tune_models,
        bool(tune.get("analyzer", False)),
        float(budget),
        path,
        leaders,
        tune_trials,
        window,
    )


def load(path: Path) -> Campaign:
    path = Path(path)
    if not path.is_file():
        raise CampaignError(f"campaign file {str(path)!r} does not exist")
    return parse(path.read_text(), path)
