"""export/formats/tensorrt.py and the GPU target's configs, checked where no GPU is: what Torch-TensorRT is
handed, and what ONNX Runtime's TensorRT accelerator is told. The builds themselves run only on a GPU host
(tritonkit/gpu/check.sh; docs/production.md says what only a GPU host can check)."""

import functools

import pytest
import torch
import yaml

from deploy.server import PROJECT_ROOT
from export import catalog, zoo
from export import config as config_io
from export.formats import tensorrt
from export.spec import MAX_DYNAMIC_DIM
from export.variants import Variant


@functools.cache
def built(name: str):
    return zoo.build(name)


class TorchTensorRTFrontEnd:
    """``torch_tensorrt``'s entry point up to the TensorRT build, as its ``_compile.py`` has it: with
    ``ir="ts"`` a ScriptModule is taken as it is and a plain ``nn.Module`` goes through
    ``torch.jit.script``, which is where a Hugging Face BERT fails. The engine build needs CUDA."""

    def __init__(self):
        self.compiled = []

    class Input:
        def __init__(self, min_shape, opt_shape, max_shape, dtype):
            self.shapes, self.dtype = (min_shape, opt_shape, max_shape), dtype

    def compile(self, module, ir, inputs, enabled_precisions, **settings):
        assert ir == "ts"
        scripted = (
            module
            if isinstance(module, (torch.jit.ScriptModule, torch.jit.ScriptFunction))
            else torch.jit.script(module)
        )
        self.compiled.append((scripted, inputs, enabled_precisions, settings))
        return scripted


@pytest.mark.parametrize("name", ["minilm", "efficientnet_lite0"])
def test_torch_tensorrt_gets_the_module_traced_on_its_device(name, tmp_path, monkeypatch):
    front_end = TorchTensorRTFrontEnd()
    monkeypatch.setattr(tensorrt, "_toolchain", lambda: front_end)
    model = built(name)
    max_batch = catalog.entry(name).settings["max_batch_size"]
    target = tmp_path / "model.pt"
    # device="cpu" here; the pipeline passes "cuda" for --target gpu, the same code path.
    tensorrt.convert(model, Variant("torch-tensorrt", "fp16"), target, device="cpu", max_batch_size=max_batch)
    ((module, inputs, precisions, settings),) = front_end.compiled
    assert isinstance(module, torch.jit.ScriptModule)
    assert precisions == {torch.float32, torch.half} and settings == {"truncate_long_and_double": True}
    assert [i.shapes for i in inputs] == tensorrt.input_ranges(model, max_batch)
    saved = torch.jit.load(str(target))
    with torch.no_grad():
        expected = model.module(*model.reference_inputs)
        got = saved(*model.reference_inputs)
    first = lambda out: out[0] if isinstance(out, (tuple, list)) else out  # noqa: E731
    torch.testing.assert_close(first(got), first(expected), atol=1e-4, rtol=1e-4)
    assert next(model.module.parameters()).device.type == "cpu"  # the zoo model is handed back on the CPU


def onnx_tensorrt_configs():
    """The GPU target's ONNX configs that ask for the TensorRT accelerator, as the export writes them."""
    out = []
    for entry in catalog.load().values():
        for variant in entry.variants["gpu"]:
            if variant.format == "onnx" and variant.precision != "fp32":
                spec = entry.spec(built(entry.builder), variant, "gpu")
                out.append((spec, config_io.parse_text(config_io.render(spec))))
    assert out, "the catalog has no GPU ONNX variant through TensorRT"
    return out


def test_onnx_tensorrt_accelerator_caches_engines_with_one_profile_for_the_served_shapes():
    for spec, config in onnx_tensorrt_configs():
        (accelerator,) = config.optimization.execution_accelerators.gpu_execution_accelerator
        params = dict(accelerator.parameters)
        assert accelerator.name == "tensorrt" and params["precision_mode"] == spec.precision.upper()
        assert params["trt_engine_cache_enable"] == "1" and params["trt_timing_cache_enable"] == "1"
        assert params["trt_engine_cache_path"] == params["trt_timing_cache_path"] == config_io.TRT_CACHE_DIR
        profiles = {
            which: dict(item.split(":") for item in params[f"trt_profile_{which}_shapes"].split(","))
            for which in ("min", "opt", "max")
        }
        for tensor in spec.inputs:
            low, opt, high = ([int(d) for d in profiles[w][tensor.name].split("x")] for w in ("min", "opt", "max"))
            assert low[0] == 1 and high[0] == spec.max_batch_size and low[0] <= opt[0] <= high[0], spec.name
            for d, lo, o, hi in zip(tensor.dims, low[1:], opt[1:], high[1:], strict=True):
                assert (lo, hi) == ((1, MAX_DYNAMIC_DIM) if d == -1 else (d, d)), (spec.name, tensor.name)
                assert lo <= o <= hi
        assert set(profiles["min"]) == {t.name for t in spec.inputs}


def test_the_engine_cache_is_a_folder_the_served_container_can_write():
    from tests.k8s_manifests import container, one, pod_spec

    path = config_io.TRT_CACHE_DIR
    for overlay in ("gpu", "cpu"):
        triton = one(overlay, "Deployment", "triton")
        mounts = {
            m["mountPath"]: m["name"] for m in container(triton, "triton")["volumeMounts"] if not m.get("readOnly")
        }
        volumes = {v["name"]: v for v in pod_spec(triton)["volumes"]}
        writable = [m for m in mounts if path == m or path.startswith(m.rstrip("/") + "/")]
        assert writable and "emptyDir" in volumes[mounts[writable[0]]], f"{overlay}: {path} is not an emptyDir"
    services = yaml.safe_load((PROJECT_ROOT / "docker-compose.yml").read_text())["services"]
    for name in ("triton", "triton-cpu"):
        service = services[name]
        assert not service.get("read_only") or path in service.get("tmpfs", []), (
            f"compose {name}: a read-only root needs a tmpfs at {path}"
        )
