"""Campaign files: which scenarios to run under which config variants, against which SLO (TOML).

A campaign runs every scenario under every variant (a variant lists the models it applies to; a scenario
whose model it does not name runs as deployed). Example, with every key::

    name = "digits-tuning"
    [slo]
    p99_ms = 5.0              # client-side p99 budget
    max_error_rate = 0.001    # failures / requests
    gate = "best-variant"     # "every-run": each run must meet the SLO; "best-variant": each scenario needs one

    [[scenarios]]
    name = "digits-grpc"
    model = "digits"          # public name; the variant may serve another format (digits_onnx)
    protocol = "grpc"         # http | grpc
    duration_s = 20
    warmup_s = 2              # leading seconds left out of the figures (new connections)
    processes = 1             # Locust processes (--processes)
    shape = { kind = "users", users = 32 }
    # shape = { kind = "open", rate = 800, max_inflight = 256 }
    # shape = { kind = "step", start = 4, step = 4, every_s = 5, max = 32 }
    # shape = { kind = "spike", base = 4, peak = 48, at_s = 8, hold_s = 4 }

    [[variants]]
    name = "batch-2ms-x2"
    models = ["digits"]
    max_queue_delay_us = 2000
    preferred_batch_sizes = [16, 32]
    instances = 2
    # dynamic_batching = false; max_batch_size = 32; warmup = false; format = "onnx"; precision = "fp16"

    [tune]
    models = ["digits"]       # write the best variant meeting the SLO into these models' configs
    analyzer = false          # also run Triton Model Analyzer and compare its pick under the same load
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

from loadtest.errors import CampaignError

PROTOCOLS = ("http", "grpc")
SHAPE_KEYS = {
    "users": {"users"},
    "open": {"rate"},
    "step": {"start", "step", "every_s", "max"},
    "spike": {"base", "peak", "at_s", "hold_s"},
}
OPTIONAL_SHAPE_KEYS = {"open": {"max_inflight"}}
GATES = ("every-run", "best-variant")
FORMAT_SUFFIX = {("torchscript", "fp32"): "", ("torchscript", "fp16"): "_fp16", ("onnx", "fp32"): "_onnx",
                 ("torch-tensorrt", "fp16"): "_trt_fp16", ("onnx", "fp16"): "_onnx_fp16"}


@dataclasses.dataclass(frozen=True)
class Slo:
    p99_ms: float
    """Client-side p99 budget, ms."""
    max_error_rate: float = 0.0
    """Largest acceptable failures / requests."""
    gate: str = "every-run"
    """``every-run`` or ``best-variant`` (tuning campaigns, where some variants are expected to miss)."""

    def __post_init__(self) -> None:
        if self.p99_ms <= 0:
            raise CampaignError(f"slo.p99_ms={self.p99_ms} must be > 0")
        if not 0 <= self.max_error_rate < 1:
            raise CampaignError(f"slo.max_error_rate={self.max_error_rate} must be in [0, 1)")
        if self.gate not in GATES:
            raise CampaignError(f"slo.gate={self.gate!r} is not one of {GATES}")


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

    def __post_init__(self) -> None:
        where = f"scenario {self.name!r}"
        if self.protocol not in (*PROTOCOLS, "fastapi"):
            raise CampaignError(f"{where}: protocol {self.protocol!r} is not one of {PROTOCOLS}")
        kind = self.shape.get("kind")
        if kind not in SHAPE_KEYS:
            raise CampaignError(f"{where}: shape kind {kind!r} is not one of {sorted(SHAPE_KEYS)}")
        keys = set(self.shape) - {"kind"}
        missing = SHAPE_KEYS[kind] - keys
        unknown = keys - SHAPE_KEYS[kind] - OPTIONAL_SHAPE_KEYS.get(kind, set())
        if missing or unknown:
            raise CampaignError(f"{where}: shape {kind!r} needs {sorted(SHAPE_KEYS[kind])}"
                                + (f", missing {sorted(missing)}" if missing else "")
                                + (f", unknown {sorted(unknown)}" if unknown else ""))
        for key in keys:
            value = self.shape[key]
            if not isinstance(value, (int, float)) or value <= 0:
                raise CampaignError(f"{where}: shape.{key}={value!r} must be a number > 0")
        if self.duration_s <= self.warmup_s or self.warmup_s < 0:
            raise CampaignError(f"{where}: duration_s={self.duration_s} must exceed warmup_s={self.warmup_s} >= 0")
        if self.processes < 1:
            raise CampaignError(f"{where}: processes={self.processes} must be >= 1")

    @property
    def peak_users(self) -> int:
        kind = self.shape["kind"]
        return int({"users": self.shape.get("users"), "step": self.shape.get("max"),
                    "spike": self.shape.get("peak"), "open": self.processes}[kind])


@dataclasses.dataclass(frozen=True)
class Variant:
    """Config changes applied through model control; unset fields keep the deployed value."""

    name: str
    models: tuple[str, ...] = ()
    """Public models it applies to; empty = every scenario's model."""
    format: str = "torchscript"
    precision: str = "fp32"
    """Format and precision pick the served variant (``digits_onnx``); it must be in the repository."""
    dynamic_batching: bool | None = None
    """False removes the dynamic batcher; True keeps or adds it."""
    max_queue_delay_us: int | None = None
    preferred_batch_sizes: tuple[int, ...] | None = None
    instances: int | None = None
    max_batch_size: int | None = None
    warmup: bool | None = None
    """False drops ``model_warmup``."""

    def __post_init__(self) -> None:
        where = f"variant {self.name!r}"
        if (self.format, self.precision) not in FORMAT_SUFFIX:
            raise CampaignError(f"{where}: format/precision {self.format}/{self.precision} is not one of "
                                f"{['/'.join(k) for k in FORMAT_SUFFIX]}")
        for field in ("max_queue_delay_us", "instances", "max_batch_size"):
            value = getattr(self, field)
            if value is not None and (not isinstance(value, int) or value < (0 if field == "max_queue_delay_us" else 1)):
                raise CampaignError(f"{where}: {field}={value!r} is out of range")
        if self.preferred_batch_sizes is not None:
            object.__setattr__(self, "preferred_batch_sizes", tuple(int(s) for s in self.preferred_batch_sizes))
            if any(s < 1 for s in self.preferred_batch_sizes):
                raise CampaignError(f"{where}: preferred_batch_sizes {list(self.preferred_batch_sizes)} must be >= 1")
        object.__setattr__(self, "models", tuple(self.models))

    def applies_to(self, model: str) -> bool:
        return not self.models or model in self.models

    def served_model(self, model: str) -> str:
        return model + FORMAT_SUFFIX[(self.format, self.precision)] if self.applies_to(model) else model

    @property
    def changes_config(self) -> bool:
        return any(getattr(self, f) is not None for f in ("dynamic_batching", "max_queue_delay_us",
                                                          "preferred_batch_sizes", "instances", "max_batch_size",
                                                          "warmup"))


AS_DEPLOYED = Variant("as-deployed")


@dataclasses.dataclass(frozen=True)
class Campaign:
    name: str
    slo: Slo
    scenarios: tuple[Scenario, ...]
    variants: tuple[Variant, ...] = (AS_DEPLOYED,)
    tune_models: tuple[str, ...] = ()
    analyzer: bool = False
    path: Path | None = None


def _build(cls, where: str, table: dict[str, Any]):
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = set(table) - fields
    if unknown:
        raise CampaignError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(fields)}")
    try:
        return cls(**table)
    except TypeError as exc:
        raise CampaignError(f"{where}: {exc}") from None


def parse(text: str, path: Path | None = None) -> Campaign:
    where = str(path) if path else "campaign"
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CampaignError(f"{where}: not valid TOML: {exc}") from None
    unknown = set(raw) - {"name", "slo", "scenarios", "variants", "tune"}
    if unknown:
        raise CampaignError(f"{where}: unknown top-level keys {sorted(unknown)}")
    if "slo" not in raw or not raw.get("scenarios"):
        raise CampaignError(f"{where}: needs an [slo] table and at least one [[scenarios]]")
    slo = _build(Slo, f"{where}: [slo]", raw["slo"])
    scenarios = tuple(_build(Scenario, f"{where}: scenario {i}", s) for i, s in enumerate(raw["scenarios"]))
    variants = tuple(_build(Variant, f"{where}: variant {i}", v) for i, v in enumerate(raw.get("variants", []))) \
        or (AS_DEPLOYED,)
    for kind, items in (("scenario", scenarios), ("variant", variants)):
        names = [x.name for x in items]
        if len(set(names)) != len(names):
            raise CampaignError(f"{where}: {kind} names repeat: {names}")
    tune = raw.get("tune", {})
    unknown = set(tune) - {"models", "analyzer"}
    if unknown:
        raise CampaignError(f"{where}: [tune]: unknown keys {sorted(unknown)}")
    tune_models = tuple(tune.get("models", ()))
    scenario_models = {s.model for s in scenarios}
    if set(tune_models) - scenario_models:
        raise CampaignError(f"{where}: [tune] models {sorted(set(tune_models) - scenario_models)} have no scenario")
    return Campaign(raw.get("name") or (path.stem if path else "campaign"), slo, scenarios, variants, tune_models,
                    bool(tune.get("analyzer", False)), path)


def load(path: Path) -> Campaign:
    path = Path(path)
    if not path.is_file():
        raise CampaignError(f"campaign file {str(path)!r} does not exist")
    return parse(path.read_text(), path)
