# tritonkit loadtest --master/--worker (docker-compose profile loadtest, deploy/k8s/overlays/loadtest): the project
# with the pins of requirements.lock, torch as the CPU wheel (the load generators never use a GPU).
FROM python:3.11-slim-bookworm
WORKDIR /app
COPY pyproject.toml requirements.lock tritonkit_cli.py tritonkit_errors.py ./
COPY backends backends
COPY deploy deploy
COPY export export
COPY loadtest loadtest
# tritonkit_cli.py builds every subcommand, the demo and the GPU check (tritonkit/) among them.
COPY tritonkit tritonkit
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu -c requirements.lock . \
 && useradd --uid 1000 --create-home locust
ENV PYTHONDONTWRITEBYTECODE=1
USER 1000:1000
EXPOSE 5557
CMD ["tritonkit", "loadtest", "--help"]
