"""The ONNX check judges the provider the session really runs on, not the providers onnxruntime was built with:
a session whose CUDA or TensorRT libraries do not load falls back with a warning only."""

from __future__ import annotations

import pytest

from export.errors import FormatUnavailable
from export.formats import onnx as onnx_format

TRT = [("TensorrtExecutionProvider", {"trt_fp16_enable": True}), "CUDAExecutionProvider"]


def test_a_session_on_the_provider_asked_first_passes():
    cuda = onnx_format.check_session(["CUDAExecutionProvider"], ["CUDAExecutionProvider", "CPUExecutionProvider"])
    got = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    assert cuda == "CUDAExecutionProvider" and onnx_format.check_session(TRT, got) == "TensorrtExecutionProvider"


def test_a_session_that_fell_back_to_the_cpu_is_reported_as_such():
    with pytest.raises(FormatUnavailable, match="fell back to the CPU: CUDAExecutionProvider did not load"):
        onnx_format.check_session(["CUDAExecutionProvider"], ["CPUExecutionProvider"])


def test_tensorrt_asked_but_cuda_got_is_not_a_tensorrt_variant():
    with pytest.raises(FormatUnavailable, match="runs on \\['CUDAExecutionProvider'\\]: TensorrtExecutionProvider"):
        onnx_format.check_session(TRT, ["CUDAExecutionProvider", "CPUExecutionProvider"])
