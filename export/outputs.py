"""A model's result as it comes (tensor, tuple/list, dict, ``transformers`` ``ModelOutput``, nested) -> named tensors.

Naming rule:

* A result that is a mapping (a dict, or a ``ModelOutput``, which is an ``OrderedDict``) is **named**: each tensor
  is named by its key, and an entry nested inside is named by the keys and positions on its way, joined with
  ``_``: ``{"logits": t}`` -> ``logits``; ``{"hidden": (t0, t1)}`` -> ``hidden_0``, ``hidden_1``;
  ``{"enc": {"last": t}}`` -> ``enc_last``. ``--output`` picks outputs by these names and orders them; without
  ``--output`` every tensor is an output, in the model's order.
* Any other result (a tensor, a tuple or list, nested ones) is **unnamed**: its tensors, taken depth first, are
  named by ``--output`` in order (``((a, b), c)`` has three: a, b, c); tensors beyond the names given are left
  out. Without ``--output`` they are ``output_0``, ``output_1``, ...

Entries that are not tensors (None, a cache object, a number) are never outputs, nor are tensors that were not
asked for; ``Selection.left_out`` names them so the export can say so.

Only ``collections.abc.Mapping``, tuples and lists are looked into, so ``transformers`` need not be imported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from export.errors import SpecError, UserModelError

LISTED = 8
"""At most this many left-out names are listed; the rest are counted."""


@dataclasses.dataclass(frozen=True, eq=False)  # values are tensors: compare leaves by identity
class Leaf:
    """One entry of a result that is not a container."""

    path: tuple
    """Keys and positions from the result down to the entry, for ``pick``."""
    label: str
    """Its name under the naming rule (named results), or where it sits (``result[1][0]``, unnamed ones)."""
    value: Any


@dataclasses.dataclass(frozen=True)
class Selection:
    """The outputs of a result: (name, path) in output order, and what was left out, as ``label (why)``."""

    outputs: tuple[tuple[str, tuple], ...]
    left_out: tuple[str, ...]

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.outputs]

    def left_out_line(self) -> str:
        """``a (None), b (not asked for)``, at most ``LISTED`` of them, or ``""``."""
        shown = ", ".join(self.left_out[:LISTED])
        more = len(self.left_out) - LISTED
        return shown + (f" and {more} more" if more > 0 else "")


def is_named(result: Any) -> bool:
    return isinstance(result, Mapping)


def leaves(result: Any) -> list[Leaf]:
    """Every non-container entry of ``result``, depth first, in the model's order."""
    found: list[Leaf] = []
    named = is_named(result)

    def walk(value: Any, path: tuple) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(item, (*path, key))
        elif isinstance(value, (tuple, list)):
            for index, item in enumerate(value):
                walk(item, (*path, index))
        elif named:
            found.append(Leaf(path, "_".join(str(part) for part in path), value))
        else:
            found.append(Leaf(path, "result" + "".join(f"[{part}]" for part in path), value))

    walk(result, ())
    return found


def pick(result: Any, path: tuple) -> Any:
    for part in path:
        result = result[part]
    return result


def describe(result: Any) -> str:
    """What a result holds, by type: ``str``, ``dict {a: NoneType, b: str}``, ``an empty tuple``."""
    found = leaves(result)
    if not isinstance(result, (Mapping, tuple, list)):
        return type(result).__name__
    if not found:
        return f"an empty {type(result).__name__}"
    inside = ", ".join(f"{leaf.label}: {type(leaf.value).__name__}" for leaf in found[:LISTED])
    return f"{type(result).__name__} {{{inside}{', ...' if len(found) > LISTED else ''}}}"


def select(result: Any, wanted: list[str], where: str) -> Selection:
    """The outputs ``wanted`` (``--output``, maybe empty) of ``result``, named and ordered by the naming rule.

    Raises ``UserModelError`` when the result holds no tensor and ``SpecError`` when ``wanted`` names an output
    there is not, each naming the outputs there are."""
    found = leaves(result)
    tensors = [leaf for leaf in found if isinstance(leaf.value, torch.Tensor)]
    if not tensors:
        raise UserModelError(f"{where}: forward returned no tensor: {describe(result)}")
    not_tensors = [
        f"{leaf.label} ({type(leaf.value).__name__})" for leaf in found if not isinstance(leaf.value, torch.Tensor)
    ]
    repeated = sorted({name for name in wanted if wanted.count(name) > 1})
    if repeated:
        raise SpecError(f"{where}: --output {', '.join(map(repr, repeated))} given more than once")
    if is_named(result):
        by_name = {}
        for leaf in tensors:
            if leaf.label in by_name:
                raise SpecError(f"{where}: two outputs would both be named {leaf.label!r} (keys joined with '_')")
            by_name[leaf.label] = leaf
        unknown = [name for name in wanted if name not in by_name]
        if unknown:
            raise SpecError(
                f"{where}: --output {', '.join(map(repr, unknown))} names no output; "
                f"forward returns {', '.join(by_name)}"
            )
        chosen = wanted or list(by_name)
        outputs = tuple((name, by_name[name].path) for name in chosen)
        not_asked = [f"{name} (not asked for)" for name in by_name if name not in chosen]
        return Selection(outputs, tuple(not_tensors + not_asked))
    if len(wanted) > len(tensors):
        raise SpecError(
            f"{where}: --output names {len(wanted)} outputs, forward returns {len(tensors)} unnamed "
            f"tensor(s) ({', '.join(leaf.label for leaf in tensors)}), named by --output in order"
        )
    names = wanted or [f"output_{i}" for i in range(len(tensors))]
    outputs = tuple((name, leaf.path) for name, leaf in zip(names, tensors, strict=False))
    not_named = [f"{leaf.label} (not named by --output)" for leaf in tensors[len(names) :]]
    return Selection(outputs, tuple(not_tensors + not_named))
