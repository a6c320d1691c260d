"""The vocabulary of a run, shared by every command: the SLO a run is judged against (``Slo``), what one run
sends (``Scenario``: the model, protocol, load shape, duration and payload) and the served config it runs under
(``Candidate``). Campaign files (``loadtest.campaign.file``) and the command lines build them; each checks its
own values and names the bad one."""

from __future__ import annotations

import dataclasses
import math
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
"""An open shape's ``arrival`` -> (its required keys, its optional keys); see loadtest/generators/arrivals.py."""
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
    ``loadtest.generators.payloads.PayloadOptions.from_table`` and checked against the served config before any
    load; None: the defaults."""
    trials: int = 1
    """Runs of this scenario under each variant, interleaved across the variants, each with its own warm-up
    window left out; 2 or more give every figure an interval (``loadtest.core.evidence``)."""

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


def check_trials(trials: Any, what: str = "trials") -> int:
    """A trial count: an integer >= 1 (CampaignError naming ``what`` otherwise)."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise CampaignError(f"{what}={trials!r} must be an integer >= 1")
    return trials
