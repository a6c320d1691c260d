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
    # What the requests carry (loadtest/drive/payloads.py; default: the catalog model's samples function, else
    # random values from the served config); the flags of `tritonkit loadtest --model`, spelled as keys:
    payload = { shape = ["input_ids:32", "attention_mask:32"], int_range = "0:1000" }
    # payload = { input_data = "requests.json" }   # perf_analyzer's input-data format
    # payload = { samples = "my_data.py:load" }    # a function returning [{name: numpy array (batch 1)}, ...]
    shape = { kind = "users", users = 32 }
    # shape = { kind = "open", rate = 800, max_inflight = 256 }
    # open-loop arrivals (loadtest/drive/arrivals.py; default "poisson"):
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
import math
import tomllib
from pathlib import Path
from typing import Any

from export.changes import ServingChanges
from export.errors import SpecError
from export.spec import QUEUE_POLICY_FIELDS
from export.variants import Variant as ExportVariant
from loadtest.errors import CampaignError

PROTOCOLS = ("http", "grpc")
SHAPE_KEYS = {
    "users": {"users"},
    "open": {"rate"},
    "step": {"start", "step", "every_s", "max"},
    "spike": {"base", "peak", "at_s", "hold_s"},
}
ARRIVAL_KEYS = {
    "poisson": (set(), set()),
    "gamma": ({"burstiness"}, set()),
    "ramp": ({"rate_end"}, set()),
    "replay": ({"schedule"}, {"speed"}),
}
"""An open shape's ``arrival`` -> (its required keys, its optional keys); see loadtest/drive/arrivals.py."""
_ARRIVAL_SHAPE_KEYS = {"arrival"}.union(*(need | extra for need, extra in ARRIVAL_KEYS.values()))
OPTIONAL_SHAPE_KEYS = {"open": {"max_inflight"} | _ARRIVAL_SHAPE_KEYS}
TEXT_SHAPE_KEYS = {"arrival", "schedule"}
RETRY_KEYS = {"attempts", "backoff_ms"}
GATES = ("every-run", "best-variant")


@dataclasses.dataclass(frozen=True)
class Slo:
    p99_ms: float
    """Client-side p99 budget, ms."""
    max_error_rate: float = 0.0
    """Largest acceptable failures / requests."""
    gate: str = "every-run"
    """``every-run`` or ``best-variant`` (tuning campaigns, where some variants are expected to miss)."""
    min_goodput: float | None = None
    """Smallest share of requests answered without error within ``p99_ms`` (0.99: 99%); None: not a limit."""
    ttft_ms: float | None = None
    """Streams: budget of the p99 time to first token, ms, and of each request's for goodput; None: none."""
    itl_ms: float | None = None
    """Streams: budget of the p99 inter-token latency, ms, and of each request's for goodput; None: none."""

    def __post_init__(self) -> None:
        if self.p99_ms <= 0:
            raise CampaignError(f"slo.p99_ms={self.p99_ms} must be > 0")
        if not 0 <= self.max_error_rate < 1:
            raise CampaignError(f"slo.max_error_rate={self.max_error_rate} must be in [0, 1)")
        if self.gate not in GATES:
            raise CampaignError(f"slo.gate={self.gate!r} is not one of {GATES}")
        if self.min_goodput is not None and not 0 < self.min_goodput <= 1:
            raise CampaignError(f"slo.min_goodput={self.min_goodput} must be a share in (0, 1]")
        for key in ("ttft_ms", "itl_ms"):
            value = getattr(self, key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf
            ):
                raise CampaignError(f"slo.{key}={value!r} must be a number of ms > 0")


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    model: str
    """Public model or pipeline name."""
    protocol: str
    """``http`` | ``grpc`` (``fastapi`` is the benchmark's baseline, not a campaign protocol)."""
    shape: dict[str, Any]
    """``{"kind": ...}`` plus the kind's keys (see the module docstring)."""
    duration_s: float = 20.0
    warmup_s: float = 2.0
    processes: int = 1
    retry: dict[str, Any] | None = None
    """``{"attempts": N, "backoff_ms": B}``: clients retry a refused request (retryable status) up to N attempts
    in all, B ms apart; None: no retry. Passed to the load generator as ``settings["retry"]``."""
    payload: dict[str, Any] | None = None
    """The payload options (``shape``, ``int_range``, ``input_data``, ``samples``, ``seed``, ``count``), read by
    ``loadtest.drive.payloads.PayloadOptions.from_table`` and checked against the served config before any
    load; None: the defaults."""
    trials: int = 1
    """Runs of this scenario under each variant, interleaved across the variants, each with its own warm-up
    window left out; 2 or more give every figure an interval (``loadtest.measure.evidence``)."""

    def __post_init__(self) -> None:
        where = f"scenario {self.name!r}"
        if self.payload is not None and not isinstance(self.payload, dict):
            raise CampaignError(f"{where}: payload={self.payload!r} must be a table {{ shape = [...], ... }}")
        if self.retry is not None:
            self._check_retry(where)
        if self.protocol not in (*PROTOCOLS, "fastapi"):
            raise CampaignError(f"{where}: protocol {self.protocol!r} is not one of {PROTOCOLS}")
        kind = self.shape.get("kind")
        if kind not in SHAPE_KEYS:
            raise CampaignError(f"{where}: shape kind {kind!r} is not one of {sorted(SHAPE_KEYS)}")
        keys = set(self.shape) - {"kind"}
        # A replay brings its own rate (its recorded one); a rate given scales it.
        missing = SHAPE_KEYS[kind] - keys - ({"rate"} if self.shape.get("arrival") == "replay" else set())
        unknown = keys - SHAPE_KEYS[kind] - OPTIONAL_SHAPE_KEYS.get(kind, set())
        if missing or unknown:
            raise CampaignError(
                f"{where}: shape {kind!r} needs {sorted(SHAPE_KEYS[kind])}"
                + (f", missing {sorted(missing)}" if missing else "")
                + (f", unknown {sorted(unknown)}" if unknown else "")
            )
        for key in keys - TEXT_SHAPE_KEYS:
            value = self.shape[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise CampaignError(f"{where}: shape.{key}={value!r} must be a number > 0")
        if kind == "open":
            self._check_arrival(where)
        if self.duration_s <= self.warmup_s or self.warmup_s < 0:
            raise CampaignError(f"{where}: duration_s={self.duration_s} must exceed warmup_s={self.warmup_s} >= 0")
        if self.processes < 1:
            raise CampaignError(f"{where}: processes={self.processes} must be >= 1")
        check_trials(self.trials, f"{where}: trials")

    def _check_arrival(self, where: str) -> None:
        arrival = self.shape.get("arrival", "poisson")
        if arrival not in ARRIVAL_KEYS:
            raise CampaignError(f"{where}: shape.arrival={arrival!r} is not one of {sorted(ARRIVAL_KEYS)}")
        needed, extra = ARRIVAL_KEYS[arrival]
        present = set(self.shape) & (_ARRIVAL_SHAPE_KEYS - {"arrival"})
        if needed - present:
            raise CampaignError(f"{where}: shape.arrival={arrival!r} needs shape.{sorted(needed - present)[0]}")
        for key in sorted(present - needed - extra):
            owner = next(name for name, (n, e) in ARRIVAL_KEYS.items() if key in n | e)
            raise CampaignError(f"{where}: shape.{key} is for arrival = {owner!r}, not {arrival!r}")
        if arrival == "replay":
            schedule = self.shape["schedule"]
            if not isinstance(schedule, str) or not Path(schedule).is_file():
                raise CampaignError(f"{where}: shape.schedule={schedule!r}: no such file")
            if "rate" in self.shape and "speed" in self.shape:
                raise CampaignError(f"{where}: shape.rate and shape.speed both scale a replay: give one")

    def _check_retry(self, where: str) -> None:
        retry = self.retry
        if not isinstance(retry, dict):
            raise CampaignError(f"{where}: retry={retry!r} must be a table {{ attempts = N, backoff_ms = B }}")
        missing, unknown = RETRY_KEYS - set(retry), set(retry) - RETRY_KEYS
        if missing or unknown:
            raise CampaignError(
                f"{where}: retry needs {sorted(RETRY_KEYS)}"
                + (f", missing {sorted(missing)}" if missing else "")
                + (f", unknown {sorted(unknown)}" if unknown else "")
            )
        attempts, backoff = retry["attempts"], retry["backoff_ms"]
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise CampaignError(
                f"{where}: retry.attempts={attempts!r} must be an integer >= 1 (attempts in all, the first included)"
            )
        if isinstance(backoff, bool) or not isinstance(backoff, (int, float)) or not 0 <= backoff < 60_000:
            raise CampaignError(f"{where}: retry.backoff_ms={backoff!r} must be a number of ms in [0, 60000)")
        object.__setattr__(self, "retry", {"attempts": attempts, "backoff_ms": backoff})

    def expected_requests(self) -> float:
        """About how many requests the run sends: the open loop's rate over its duration; a closed loop's users at
        ``CLOSED_LOOP_RPS_PER_USER`` each, a fast model's pace (inf: no rate to go by, a replay)."""
        if self.shape["kind"] == "open":
            return float(self.shape.get("rate", math.inf)) * self.duration_s
        return self.peak_users * CLOSED_LOOP_RPS_PER_USER * self.duration_s

    @property
    def peak_users(self) -> int:
        kind = self.shape["kind"]
        return int(
            {
                "users": self.shape.get("users"),
                "step": self.shape.get("max"),
                "spike": self.shape.get("peak"),
                "open": self.processes,
            }[kind]
        )


CLOSED_LOOP_RPS_PER_USER = 300.0
"""A closed-loop user of a fast model sends about this many requests a second (digits here: about 300)."""


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A config to serve and measure: which exported variant of a model serves it (format and precision,
    ``export.variants.Variant``) and the serving changes made to that variant's config through model control
    (``export.changes.ServingChanges``; unset fields keep the deployed value). A campaign's ``[[variants]]``
    tables, the tuner's points and Model Analyzer's pick are all candidates."""

    name: str
    models: tuple[str, ...] = ()
    """Public models it applies to; empty = every scenario's model."""
    variant: ExportVariant = ExportVariant("torchscript")
    """Format and precision pick the served model (``digits_onnx``); it must be in the repository."""
    changes: ServingChanges = ServingChanges()

    def __post_init__(self) -> None:
        object.__setattr__(self, "models", tuple(self.models))
        if not isinstance(self.variant, ExportVariant) or not isinstance(self.changes, ServingChanges):
            raise CampaignError(
                f"candidate {self.name!r}: variant must be an export.variants.Variant and changes "
                f"an export.changes.ServingChanges"
            )

    @classmethod
    def of(
        cls,
        name: str,
        models: tuple[str, ...] = (),
        format: str = "torchscript",
        precision: str = "fp32",
        **changes: Any,
    ) -> Candidate:
        """From a campaign's ``[[variants]]`` table: ``format``/``precision`` and ``ServingChanges``' fields
        (``max_queue_delay_us``, ``preferred_batch_sizes``, ``instances``, ``max_batch_size``, ``warmup``,
        ``dynamic_batching``, ``max_queue_size``, ``default_timeout_us``, ``timeout_action``, ...)."""
        where = f"variant {name!r}"
        try:
            variant = ExportVariant(format, precision)
            if variant.format == "torch-tensorrt" and variant.precision != "fp16":
                raise SpecError(f"format/precision {format}/{precision}: torch-tensorrt is exported as fp16 only")
            serving = ServingChanges.from_dict(changes)
        except SpecError as exc:
            raise CampaignError(f"{where}: {exc}") from None
        return cls(name, tuple(models), variant, serving)

    def applies_to(self, model: str) -> bool:
        return not self.models or model in self.models

    def served_model(self, model: str) -> str:
        return self.variant.model_name(model) if self.applies_to(model) else model

    @property
    def has_queue_policy_change(self) -> bool:
        return any(getattr(self.changes, f) is not None for f in QUEUE_POLICY_FIELDS)

    @property
    def changes_config(self) -> bool:
        return bool(self.changes)


AS_DEPLOYED = Candidate("as-deployed")


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


def check_trials(trials: Any, what: str = "trials") -> int:
    """A trial count: an integer >= 1 (CampaignError naming ``what`` otherwise)."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise CampaignError(f"{what}={trials!r} must be an integer >= 1")
    return trials


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
    for model in tune_models:  # the search runs at the model's first scenario's load (loadtest/tune/tuning.py)
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
