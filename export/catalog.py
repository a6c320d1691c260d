"""export/models.toml -> ``ModelSpec`` objects, with command-line overrides applied and validated."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from export.changes import ServingChanges
from export.errors import SpecError, UnknownModelError
from export.spec import DynamicBatching, InstanceGroup, ModelSpec
from export.variants import TARGETS, Variant, base_model

if TYPE_CHECKING:  # torch: only the annotations name it
    from export.zoo.base import ZooModel

CATALOG = Path(__file__).with_name("models.toml")
TUNED = Path(__file__).with_name("tuned.toml")
"""Serving settings chosen by ``tritonkit loadtest`` campaigns ([tune]); they override models.toml's."""
TORCHSCRIPT_PARAMETERS = {
    "DISABLE_OPTIMIZED_EXECUTION",
    "INFERENCE_MODE",
    "TORCH_OPS_MODULES",
    "INTRA_OP_THREAD_COUNT",
    "INTER_OP_THREAD_COUNT",
}
"""libtorch backend parameters, left out of the configs of formats another backend serves."""
TUNABLE_KEYS = ("max_batch_size", "dynamic_batching", "instance_groups", "warmup")
_ENTRY_KEYS = {"builder", "variants", "samples"}
_SPEC_KEYS = {f.name for f in dataclasses.fields(ModelSpec)} - {
    "name",
    "inputs",
    "outputs",
    "platform",
    "precision",
    "tensorrt_accelerator",
    "labels",
    "labels_file",
    "decoupled",
}


@dataclasses.dataclass(frozen=True)
class CatalogEntry:
    name: str
    builder: str
    """Zoo builder that makes the eager model (export/zoo)."""
    variants: dict[str, tuple[Variant, ...]]
    """Per target (``cpu``, ``gpu``): the variants ``make export`` writes; the first is the public name."""
    settings: dict[str, Any]
    """ModelSpec fields as written in the file."""
    samples: str | None = None
    """``FILE.py:FUNC`` giving the model's real load-test requests (relative to the project root), used for
    every variant when a load test names no data of its own (``loadtest.generators.payloads.default_options``)."""

    def served_names(self) -> set[str]:
        """Every model name its variants are served under, on every target (``digits``, ``digits_onnx`` ...)."""
        return {variant.model_name(self.name) for listed in self.variants.values() for variant in listed}

    def spec(
        self,
        zoo: ZooModel,
        variant: Variant = Variant("torchscript"),
        target: str = "cpu",
        changes: ServingChanges | None = None,
        **overrides: Any,
    ) -> ModelSpec:
        """The served config of one variant: catalog settings, then ``overrides`` (ModelSpec fields, in
        models.toml's terms or as objects), then the variant's, then ``changes``; ``target="gpu"`` puts every
        instance group on the GPU."""
        values = {**self.settings, **overrides}
        unknown = set(values) - _SPEC_KEYS
        if unknown:
            raise SpecError(f"model {self.name!r}: unknown settings {sorted(unknown)}; known: {sorted(_SPEC_KEYS)}")
        values["platform"] = variant.platform
        values["precision"] = variant.precision
        # ONNX below FP32 means the TensorRT accelerator inside Triton's onnxruntime backend (its format says so).
        fmt = variant.fmt
        accelerated = fmt.accelerator == "tensorrt" and variant.precision in fmt.accelerated_precisions
        values["tensorrt_accelerator"] = accelerated
        try:
            if isinstance(values.get("dynamic_batching"), dict):
                values["dynamic_batching"] = DynamicBatching.from_settings(values["dynamic_batching"])
            if "instance_groups" in values:
                values["instance_groups"] = tuple(
                    g if isinstance(g, InstanceGroup) else InstanceGroup(**g) for g in values["instance_groups"]
                )
            if isinstance(values.get("parameters"), dict):
                values["parameters"] = tuple(
                    (k, v)
                    for k, v in values["parameters"].items()
                    if fmt.backend == "pytorch" or k not in TORCHSCRIPT_PARAMETERS
                )
            values.setdefault("description", zoo.description)
            values.setdefault("labels", zoo.labels if len(zoo.labels) > 1 and zoo.real_data_check == "top1" else ())
            spec = ModelSpec(name=variant.model_name(self.name), inputs=zoo.inputs, outputs=zoo.outputs, **values)
        except (TypeError, SpecError) as exc:
            message = str(exc)
            raise SpecError(message if message.startswith("model ") else f"model {self.name!r}: {message}") from None
        if changes is not None:
            spec = changes.apply(spec)
        if target == "gpu":
            groups = spec.instance_groups or (InstanceGroup(),)
            spec = spec.replace(instance_groups=tuple(dataclasses.replace(g, kind="KIND_GPU") for g in groups))
        return spec


def load(path: Path = CATALOG, tuned: Path | None = TUNED) -> dict[str, CatalogEntry]:
    with open(path, "rb") as handle:
        raw = tomllib.load(handle)
    overlay = {}
    if tuned is not None and Path(tuned).is_file():
        with open(tuned, "rb") as handle:
            overlay = tomllib.load(handle)
    for name, settings in overlay.items():
        # note: why it was chosen, for people; serves: the format the tune picked, for clients (served_pick)
        settings = {k: v for k, v in settings.items() if k not in ("note", "serves")}
        unknown = set(settings) - set(TUNABLE_KEYS)
        if name not in raw or unknown:
            raise SpecError(
                f"{tuned}: [{name}] "
                + (
                    f"keys {sorted(unknown)} are not tunable; tunable: {TUNABLE_KEYS}"
                    if unknown
                    else f"is not a model of {path}"
                )
            )
        raw[name] = {**raw[name], **settings}
        if settings.get("dynamic_batching") is False:  # the tuner may turn the batcher off
            del raw[name]["dynamic_batching"]
    entries = {}
    for name, table in raw.items():
        variants = table.get("variants", {"cpu": ["torchscript/fp32"]})
        unknown = set(variants) - set(TARGETS)
        if unknown:
            raise SpecError(f"{path}: model {name!r}: variant targets {sorted(unknown)} are not among {TARGETS}")
        try:
            parsed = {t: tuple(Variant.parse(v) for v in variants.get(t, ())) for t in TARGETS}
            for target, listed in parsed.items():
                for variant in listed:
                    variant.check_target(target)
        except SpecError as exc:
            raise SpecError(f"{path}: model {name!r}: {exc}") from None
        settings = {k: v for k, v in table.items() if k not in _ENTRY_KEYS}
        samples = table.get("samples")
        if samples is not None and (not isinstance(samples, str) or ".py:" not in samples):
            raise SpecError(f'{path}: model {name!r}: samples = {samples!r} is not "FILE.py:FUNC"')
        entries[name] = CatalogEntry(name, table.get("builder", name), parsed, settings, samples)
    return entries


def entry(name: str, path: Path = CATALOG, tuned: Path | None = TUNED) -> CatalogEntry:
    entries = load(path, tuned)
    if name not in entries:
        raise UnknownModelError(f"model {name!r} is not in {path}; listed: {sorted(entries)}")
    return entries[name]


def served_pick(name: str, tuned: Path | None = TUNED) -> str:
    """The model clients call for ``name``: the format its tune picked (``serves`` in ``export/tuned.toml``,
    ``minilm_onnx``), else ``name`` itself."""
    if tuned is None or not Path(tuned).is_file():
        return name
    with open(tuned, "rb") as handle:
        serves = tomllib.load(handle).get(name, {}).get("serves", name)
    if not isinstance(serves, str) or base_model(serves) != name:
        raise SpecError(f"{tuned}: [{name}] serves = {serves!r} is not a served name of {name!r}")
    return serves


PIPELINE_SAMPLES = {
    name: f"export/zoo/pipelines.py:{name}_samples" for name in ("image_classifier", "text_embedder", "text_generator")
}
"""The committed pipelines' real requests (they are not exported from a builder, so not in models.toml)."""


def default_samples(model: str, path: Path = CATALOG) -> str | None:
    """The samples function of the catalog entry serving ``model`` under any of its variants' names, or of a
    committed pipeline of the repository (``PIPELINE_SAMPLES``); None for any other model."""
    found = next((e.samples for e in load(path, None).values() if model in e.served_names()), None)
    return found or (PIPELINE_SAMPLES.get(model) if path == CATALOG else None)
