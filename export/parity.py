"""Does an export compute what the eager FP32 model computes? Figures for the manifest, and a verdict.

Random inputs at batch sizes 1, 3, 8 and the maximum (and each of the model's sequence lengths for
text) bound the element-wise error: ``|export - eager| <= atol + rtol * |eager|``. The real data then
checks what a user sees: top-1 agreement for classifiers, cosine similarity for embeddings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from export.zoo.base import ZooModel

BATCH_SIZES = (1, 3, 8)


@dataclasses.dataclass
class ParityReport:
    ok: bool
    max_abs_error: float
    max_rel_error: float
    """Largest error relative to the largest eager magnitude of the same output."""
    cases: list[dict]
    real_data: dict | None
    tolerance: dict
    message: str = ""


def _as_tuple(result) -> tuple[torch.Tensor, ...]:
    return (result,) if isinstance(result, torch.Tensor) else tuple(result)


def _eager(zoo: ZooModel, inputs) -> tuple[torch.Tensor, ...]:
    with torch.no_grad():
        return _as_tuple(zoo.module(*inputs))


def batch_sizes(max_batch_size: int) -> list[int]:
    if max_batch_size <= 0:
        return [1]
    return sorted({b for b in BATCH_SIZES if b <= max_batch_size} | {max_batch_size})


def check(zoo: ZooModel, run: Callable, precision: str, max_batch_size: int, seed: int = 0) -> ParityReport:
    tolerance = zoo.tolerances[precision]
    generator = torch.Generator().manual_seed(seed)
    cases, worst_abs, worst_rel, ok = [], 0.0, 0.0, True
    for batch in batch_sizes(max_batch_size):
        for seq in zoo.seq_lengths or (None,):
            inputs = zoo.random_inputs(batch, seq, generator)
            expected, actual = _eager(zoo, inputs), _as_tuple(run(*inputs))
            case_abs = case_rel = 0.0
            case_ok = len(expected) == len(actual)  # an output missing or extra fails the case
            for e, a in zip(expected, actual, strict=False):
                e, a = e.float().cpu(), a.float().cpu()
                if e.shape != a.shape:
                    case_ok = False
                    continue
                diff = (a - e).abs()
                case_abs = max(case_abs, float(diff.max()))
                case_rel = max(case_rel, float(diff.max() / e.abs().max().clamp_min(1e-12)))
                case_ok &= bool((diff <= tolerance.atol + tolerance.rtol * e.abs()).all())
            cases.append(
                {"batch": batch, "seq_len": seq, "max_abs_error": case_abs, "max_rel_error": case_rel, "ok": case_ok}
            )
            worst_abs, worst_rel, ok = max(worst_abs, case_abs), max(worst_rel, case_rel), ok and case_ok
    real = _real_data(zoo, run, tolerance.min_agreement)
    if real is not None:
        ok = ok and real["ok"]
    failed = [c for c in cases if not c["ok"]]
    message = (
        ""
        if ok
        else "; ".join(
            [
                f"batch {c['batch']}"
                + (f" seq {c['seq_len']}" if c["seq_len"] else "")
                + f": max abs {c['max_abs_error']:.2e} > atol {tolerance.atol:.0e} + rtol {tolerance.rtol:.0e}"
                for c in failed
            ]
            + (
                [f"real data {real['check']} {real['value']:.4f} < {real['minimum']}"]
                if real and not real["ok"]
                else []
            )
        )
    )
    return ParityReport(ok, worst_abs, worst_rel, cases, real, dataclasses.asdict(tolerance), message)


def _real_data(zoo: ZooModel, run: Callable, minimum: float) -> dict | None:
    if zoo.real_data_check is None:
        return None
    expected = _eager(zoo, zoo.reference_inputs)[0].float().cpu()  # eager runs where the export runs (cuda)
    actual = _as_tuple(run(*zoo.reference_inputs))[0].float().cpu()
    if zoo.real_data_check == "top1":
        value = float((expected.argmax(-1) == actual.argmax(-1)).float().mean())
    elif zoo.real_data_check == "cosine":
        value = float(torch.nn.functional.cosine_similarity(expected, actual, dim=-1).min())
    else:
        raise ValueError(f"unknown real_data_check {zoo.real_data_check!r}")
    return {
        "check": zoo.real_data_check,
        "value": value,
        "minimum": minimum,
        "samples": len(expected),
        "ok": value >= minimum,
    }
