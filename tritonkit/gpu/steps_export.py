"""The export side of the GPU check: the models on the device, their exports with parity, their configs.

Steps ``export`` and ``configs`` of the GPU check (:mod:`tritonkit.gpu.run`); each takes the running ``Check`` and
returns ``(status, detail)``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

from tritonkit.gpu import results as res
from tritonkit.gpu.state import Check

SERVED_VARIANTS = ("torchscript/fp32", "torchscript/fp16")
OPTIONAL_VARIANTS = ("torch-tensorrt/fp16", "onnx/fp32", "onnx/fp16")
OPTIONAL_EXPORT_BUDGET_S = 240
"""Torch-TensorRT and ONNX Runtime TensorRT build engines per shape; none starts after this many seconds."""


def on_device(model, device: str):
    """The zoo model with its eager module and every input it makes on ``device``.

    Parity then compares the export with eager FP32 run on the same device (the GPU), and the
    converters trace on that device. ``export.formats.tensorrt`` moves the module back to the CPU
    after compiling, so :func:`export` moves it again before each variant.
    """
    if device == "cpu":
        return model
    base_random = model.random_inputs

    def random_inputs(batch, seq_len, generator):
        return tuple(x.to(device) for x in base_random(batch, seq_len, generator))

    return dataclasses.replace(
        model,
        module=model.module.to(device).eval(),
        random_inputs=random_inputs,
        example_inputs=tuple(x.to(device) for x in model.example_inputs),
        reference_inputs=tuple(x.to(device) for x in model.reference_inputs),
    )


@contextlib.contextmanager
def pinned(module, active: bool = True):
    """Keep ``module`` where it is while a converter runs.

    ``export.formats.tensorrt.convert`` ends with ``zoo.module.to("cpu")``; the parity check that
    follows it would then run the eager reference on the CPU with CUDA inputs. Inside this block
    ``module.to`` returns the module unmoved.
    """
    if not active:
        yield module
        return
    module.to = lambda *args, **kwargs: module
    try:
        yield module
    finally:
        del module.to


@contextlib.contextmanager
def eager_on_cpu(active: bool = True):
    """Bring the eager reference's outputs to the CPU inside ``export.parity`` while an export on the GPU is checked.

    ``export.parity._real_data`` compares the eager outputs, left on the model's device, with the
    export's, moved to the CPU: on CUDA that raises "Expected all tensors to be on the same device"
    and every export of a model with real data fails (first GPU run, 2026-12-04). Every other
    comparison there moves both sides to the CPU, so moving the eager outputs changes no figure. A
    workaround for the check only: the fix belongs in ``export/parity.py`` (``.cpu()`` on
    ``expected`` in ``_real_data``), where ``tritonkit export --target gpu`` needs it too.
    """
    if not active:
        yield
        return
    from export import parity

    original = parity._eager

    def eager(zoo, inputs):
        return tuple(t.cpu() for t in original(zoo, inputs))

    parity._eager = eager
    try:
        yield
    finally:
        parity._eager = original


@contextlib.contextmanager
def exact_fp32(active: bool = True):
    """FP32 on the GPU as FP32: no TF32 in cuDNN convolutions or CUDA matmuls while this block runs.

    PyTorch runs cuDNN convolutions in TF32 by default (``torch.backends.cudnn.allow_tf32``). The
    parity check compares an export with eager FP32; in TF32 both sides round to a 10-bit mantissa,
    differently once the export is frozen (batch norm folded into the convolutions), and on the first
    GPU run (2026-12-04) ``efficientnet_lite0``'s FP32 TorchScript differed from eager by 1.8e-2,
    beyond its FP32 tolerance (1e-3). The check therefore proves parity, and takes the eager
    reference of the served answers, in exact FP32; the throughput figures keep PyTorch's defaults,
    as the served runtime (``backends/pytorch``) does.
    """
    if not active:
        yield
        return
    import torch

    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def optional_toolchains() -> dict[str, str]:
    """Per optional variant: ``ok`` or why it is skipped (``skipped: not installed ...``)."""
    import importlib.util

    found = {}
    if importlib.util.find_spec("torch_tensorrt") is None:
        found["torch-tensorrt/fp16"] = f"{res.NOT_INSTALLED} (torch_tensorrt)"
    else:
        found["torch-tensorrt/fp16"] = "ok"
    try:
        import onnxruntime

        providers = onnxruntime.get_available_providers()
    except ImportError:
        providers = None
    if providers is None:
        found["onnx/fp32"] = found["onnx/fp16"] = f"{res.NOT_INSTALLED} (onnxruntime)"
    else:
        found["onnx/fp32"] = (
            "ok"
            if "CUDAExecutionProvider" in providers
            else f"{res.NOT_INSTALLED} (onnxruntime has no CUDAExecutionProvider: install onnxruntime-gpu)"
        )
        found["onnx/fp16"] = (
            "ok"
            if "TensorrtExecutionProvider" in providers
            else f"{res.NOT_INSTALLED} (onnxruntime has no TensorrtExecutionProvider)"
        )
    return found


def export(check: Check):
    from export import catalog, zoo
    from export.pipeline import export_entry
    from export.variants import Variant

    failures = []
    for name in check.models:
        entry = catalog.entry(name)
        check.entries[name] = entry
        model = on_device(zoo.build(entry.builder), check.device)
        check.zoo[name] = model
        wanted = list(SERVED_VARIANTS) + list(OPTIONAL_VARIANTS)
        for text in wanted:
            variant = Variant.parse(text)
            served_as = variant.model_name(name)
            record = {"model": name, "variant": text, "served_as": served_as}
            if text in OPTIONAL_VARIANTS:
                reason = res.DRY_RUN if check.dry_run else check.toolchains.get(text, "ok")
                if reason == "ok" and time.time() - check.started > OPTIONAL_EXPORT_BUDGET_S:
                    reason = (
                        f"skipped: time budget (optional exports start only in the first "
                        f"{OPTIONAL_EXPORT_BUDGET_S} s, so the check ends within 10 minutes)"
                    )
                if reason != "ok":
                    check.results["exports"].append({**record, "status": reason})
                    continue
            if variant.precision not in model.tolerances:
                check.results["exports"].append(
                    {**record, "status": f"skipped: {name} has no {variant.precision} tolerance"}
                )
                continue
            if check.device != "cpu":
                model.module.to(check.device)
            with (
                pinned(model.module, active=variant.format == "torch-tensorrt"),
                eager_on_cpu(check.device != "cpu"),
                exact_fp32(check.device != "cpu"),
            ):
                done = export_entry(
                    entry,
                    check.repository,
                    check.target,
                    [variant],
                    force=True,
                    model=model,
                    **config_overrides(check, entry),
                )[0]
            r = done.result
            check.results["exports"].append(
                {
                    **record,
                    "status": r.status if r.status != "skipped" else f"skipped: {r.message}",
                    "max_abs_error": r.max_abs_error,
                    "max_rel_error": r.max_rel_error,
                    "atol": r.atol,
                    "real_data": r.real_data,
                    "message": r.message if r.status != "skipped" else "",
                    "seconds": r.seconds,
                    "device": check.device,
                }
            )
            print(f"   {served_as:<28} {text:<20} {r.status:<9} {r.details()}", flush=True)
            if text in SERVED_VARIANTS:
                if r.ok:
                    check.served.setdefault(name, {})[text] = served_as
                else:
                    failures.append(f"{served_as} {r.status}")
            elif r.status in ("failed", "mismatch"):
                failures.append(f"{served_as} {r.status}")
    if failures:  # the variants that passed are still served and measured
        return (
            f"failed: {'; '.join(failures)}",
            f"served: {sorted(n for v in check.served.values() for n in v.values())}",
        )
    kept = sum(len(v) for v in check.served.values())
    return "ok", f"{kept} served variants passed parity on {check.device}"


def config_overrides(check: Check, entry) -> dict:
    if check.dry_run:  # one instance each: the dry run shares 2 cores with everything else
        return {"instance_groups": [{"count": 1, "kind": "KIND_CPU"}]}
    # Let Triton hand GPU-resident inputs to the runtime as they are (DLPack), not via host memory.
    params = dict(entry.settings.get("parameters") or {})
    params["FORCE_CPU_ONLY_INPUT_TENSORS"] = "no"
    return {"parameters": params}


def configs(check: Check):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    from export import config as config_io
    from export.variants import Variant

    checked, problems = [], []
    out = check.out_dir / "gpu-configs"
    for name in check.models:
        entry, model = check.entries[name], check.zoo[name]
        for text in SERVED_VARIANTS:
            variant = Variant.parse(text)
            overrides = {} if check.dry_run else config_overrides(check, entry)
            spec = entry.spec(model, variant, "gpu", **overrides)
            rendered = config_io.render(spec)
            parsed = text_format.Parse(rendered, mc.ModelConfig())
            if text_format.MessageToString(parsed) != text_format.MessageToString(config_io.to_model_config(spec)):
                problems.append(f"{spec.name}: round trip changed the config")
            kinds = {mc.ModelInstanceGroup.Kind.Name(g.kind) for g in parsed.instance_group}
            if kinds != {"KIND_GPU"}:
                problems.append(f"{spec.name}: instance kinds {sorted(kinds)}")
            config_io.write(spec, out)
            if not check.dry_run and text not in check.served.get(name, {}):
                checked.append(f"{spec.name} (generated only: its export did not pass parity, so it is not served)")
                continue
            if not check.dry_run:  # the served file is the one the export wrote
                served = config_io.parse(check.repository / spec.name / "config.pbtxt")
                if {mc.ModelInstanceGroup.Kind.Name(g.kind) for g in served.instance_group} != {"KIND_GPU"}:
                    problems.append(f"{spec.name}: served config is not KIND_GPU")
            checked.append(spec.name)
    if problems:
        return f"failed: {'; '.join(problems)}", ""
    return "ok", f"KIND_GPU and round trip ok: {', '.join(checked)} (written under {out})"
