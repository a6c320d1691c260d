"""The two arms of a comparison and how they are served side by side.

An arm spec is ``key=value`` pairs joined by commas; empty (or ``served``) is the model as its repository
serves it::

    model=digits_onnx                      another served model (a format of the same model, or any model)
    version=2                              that version folder of the model
    max_queue_delay_us=5000,instances=2    serving changes (export.changes.ServingChanges' fields)
    preferred_batch_sizes=8+16             a list: values joined by '+' ('none' clears it)

On a local server (the default) each arm is served under its own model name, so a trial only picks the name
its generator sends to and nothing reloads between trials: the first arm that is its model as served keeps
the model's name, any other arm is a folder ``<model>__a``/``<model>__b`` in a temporary repository beside
links to every model of ``--repository`` (its files linked, its config.pbtxt renamed and, for ``version=``,
only that version kept). Serving changes are then loaded through model control (``loadtest.target.apply``),
the path campaign variants and the tuner take. Against a running server (``--http-url``) no folder can be
added: arms that share a model name and differ in changes are loaded at each switch instead.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from google.protobuf import text_format

from export import config as config_io
from export import model_kind
from export.changes import ServingChanges
from export.errors import ExportError
from loadtest.errors import LoadTestError

ARMS = ("A", "B")
SPEC_KEYS = ("model", "version", *(f.name for f in dataclasses.fields(ServingChanges)))


class CompareError(LoadTestError, ValueError):
    """A bad arm spec or combination of arms: a usage error (exit status 2)."""


@dataclasses.dataclass(frozen=True)
class ArmSpec:
    """What one arm serves: which model (default: the compared one), which version, which serving changes,
    from which repository (default: ``--repository``)."""

    model: str | None = None
    version: int | None = None
    changes: ServingChanges = ServingChanges()
    repository: Path | None = None
    text: str = ""

    def source(self, model: str) -> str:
        """The model folder this arm serves."""
        return self.model or model

    def describe(self) -> str:
        where = f" from {self.repository}" if self.repository else ""
        return (self.text or "as served") + where

    def same_as(self, other: ArmSpec) -> bool:
        """Both arms serve the same thing (an A/A comparison)."""
        return dataclasses.replace(self, text="") == dataclasses.replace(other, text="")


def parse_spec(text: str | None) -> ArmSpec:
    """``"max_queue_delay_us=5000,instances=2"`` -> ArmSpec; a bad key or value raises CompareError naming it."""
    text = (text or "").strip()
    if text in ("", "served"):
        return ArmSpec(text="")
    values: dict[str, object] = {}
    for part in text.split(","):
        key, sep, raw = (s.strip() for s in part.partition("="))
        if not sep or not key or not raw:
            raise CompareError(f"spec {text!r}: {part!r} is not key=value")
        if key not in SPEC_KEYS:
            raise CompareError(f"spec {text!r}: unknown key {key!r}; known: {', '.join(SPEC_KEYS)}")
        if key in values:
            raise CompareError(f"spec {text!r}: {key} given twice")
        values[key] = _value(text, key, raw)
    model, version = values.pop("model", None), values.pop("version", None)
    if version is not None and (not isinstance(version, int) or version < 1):
        raise CompareError(f"spec {text!r}: version={version!r} must be an integer >= 1")
    try:
        changes = ServingChanges.from_dict(values)
    except ExportError as exc:
        raise CompareError(f"spec {text!r}: {exc}") from None
    return ArmSpec(model, version, changes, text=text)


def _value(text: str, key: str, raw: str) -> object:
    if key == "model":
        return raw
    if key == "preferred_batch_sizes":
        return () if raw == "none" else tuple(_int(text, key, v) for v in raw.split("+"))
    if key in ("dynamic_batching", "warmup", "allow_timeout_override"):
        if raw.lower() not in ("true", "false"):
            raise CompareError(f"spec {text!r}: {key}={raw!r} is not true or false")
        return raw.lower() == "true"
    if key in ("timeout_action", "instance_kind"):
        return raw
    return _int(text, key, raw)


def _int(text: str, key: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise CompareError(f"spec {text!r}: {key}={raw!r} is not an integer") from None


@dataclasses.dataclass(frozen=True)
class ServedArm:
    """An arm as the server serves it: the name its generator sends to, and whether it is a copy folder."""

    name: str
    spec: ArmSpec
    source: str
    served: str
    copy: bool

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "spec": self.spec.describe(),
            "source": self.source,
            "served": self.served,
            "copy": self.copy,
        }


def plan(model: str, specs: dict[str, ArmSpec], repository: Path, *, remote: bool) -> list[ServedArm]:
    """The served name of each arm (``specs``: A and B): a plain arm keeps its model's name unless an earlier
    arm took it, any other is a copy ``<model>__<arm>``. ``remote``: a running server, where no copy can be
    made."""
    arms: list[ServedArm] = []
    for name, spec in specs.items():
        source = spec.source(model)
        own_repository = spec.repository is not None and Path(spec.repository).resolve() != repository.resolve()
        if remote and (spec.version is not None or own_repository):
            raise CompareError(
                f"arm {name}: version= and --{name.lower()}-repository need a local server (a copy of the "
                f"model folder); drop --http-url"
            )
        plain = spec.version is None and not own_repository
        taken = {arm.served for arm in arms}
        copy = not remote and not (plain and source not in taken)
        served = f"{source}__{name.lower()}" if copy else source
        arms.append(ServedArm(name, spec, source, served, copy))
    return arms


def stage(arms: list[ServedArm], repository: Path, folder: Path) -> Path:
    """A repository in ``folder`` serving every arm side by side: links to each model of ``repository``, and
    each copy arm's folder with its files linked and its own config.pbtxt (renamed; for ``version=``, that
    version alone and no version policy)."""
    repository = Path(repository).resolve()
    for entry in sorted(repository.iterdir()):
        if (entry / "config.pbtxt").is_file():
            os.symlink(entry, folder / entry.name)
    for arm in arms:
        if arm.copy:
            _copy(arm, Path(arm.spec.repository or repository).resolve() / arm.source, folder / arm.served)
        elif not (folder / arm.source / "config.pbtxt").is_file():
            raise CompareError(f"arm {arm.name}: no model {arm.source!r} in {repository} (no config.pbtxt)")
    return folder


def _copy(arm: ServedArm, source: Path, target: Path) -> None:
    if not (source / "config.pbtxt").is_file():
        raise CompareError(f"arm {arm.name}: no model {arm.source!r} in {source.parent} (no config.pbtxt)")
    version = arm.spec.version
    if version is not None and not (source / str(version)).is_dir():
        raise CompareError(
            f"arm {arm.name}: {arm.source!r} has no version {version} (no folder {source / str(version)})"
        )
    target.mkdir()
    for entry in source.iterdir():
        versioned = entry.is_dir() and entry.name.isdigit()
        if entry.name == "config.pbtxt" or (version is not None and versioned and entry.name != str(version)):
            continue
        os.symlink(entry.resolve(), target / entry.name)
    try:
        config = config_io.parse(source / "config.pbtxt")
    except ExportError as exc:
        raise CompareError(f"arm {arm.name}: {exc}") from None
    config.name = arm.served
    if version is not None:
        config.ClearField("version_policy")  # Triton's default (the newest) is the one version left
    (target / "config.pbtxt").write_text(text_format.MessageToString(config))


def needs_pipeline(repository: Path, arms: list[ServedArm]) -> bool:
    """An arm is an ensemble or a Python model, which may call any model: the server then loads them all."""
    for arm in arms:
        config = Path(arm.spec.repository or repository) / arm.source / "config.pbtxt"
        if not config.is_file():
            continue
        try:
            if model_kind.kind(config_io.parse(config)).calls_others:
                return True
        except ExportError as exc:
            raise CompareError(f"arm {arm.name}: {exc}") from None
    return False
