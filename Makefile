# Two commands on a fresh machine: `make demo` (the main job) and `make test` (the test suite).
# Every target sets itself up first; a second `make setup` returns at once. Side tools (perf_analyzer, Model
# Analyzer, GenAI-Perf, AIPerf, the deploy validators) install on the first command that needs them (deploy/setup.sh).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: help setup export serve demo test lock loadtest bench bench-export bench-generation genai-perf aiperf check-deploy overload soak

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

setup: ## .venv with the pinned dependencies, SmolLM2's weights, libpython3.11: what the demo runs (idempotent)
	@bash deploy/setup.sh

export: setup ## export the built-in models into model_repository/ (skips what is up to date)
	$(PY) -m export

serve: export ## run the local tritonserver on HTTP 8000, gRPC 8001, metrics 8002 until Ctrl-C
	$(VENV)/bin/tritonkit serve

demo: setup ## export, serve, send real requests, print the answers and server metrics, stop
	$(VENV)/bin/tritonkit demo

# The built-in models are exported first, as `make serve` does (the session's fixture then finds them up to date
# and still checks each one); the functional tests run one at a time (they load the machine and judge what they
# measure); the unit tests then run on every core. The suite uses every side tool: every layer of the set-up first.
test: ## ruff (lint, then format check), the export, the functional tests against a real tritonserver, the unit tests
	@bash deploy/setup.sh all
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m export
	$(PY) -m pytest tests/functional
	$(PY) -m pytest tests/unit -n auto --dist loadfile

CAMPAIGN ?= loadtest/campaigns/smoke.toml
loadtest: export ## a load campaign with its report and SLO gate: make loadtest CAMPAIGN=loadtest/campaigns/digits.toml
	$(VENV)/bin/tritonkit loadtest $(CAMPAIGN)

# MODEL: any TorchScript or ONNX model of the repository (a user's own too). overload defaults to minilm
# (minilm, efficientnet_lite0 and resnet50 have queue policies), soak to digits, bench to digits and minilm.
overload: MODEL ?= minilm
soak: MODEL ?= digits
# Extra flags, e.g. the payload flags of `tritonkit loadtest --model` (ARGS="--shape input_ids:32 --shape
# attention_mask:32", ARGS="--input-data requests.json", ARGS="--samples my_data.py:load"), or
# ARGS="--server-cpus 1 --client-cpus 0" (server and load on their own cores; bench and soak split the CPUs so
# by default), or, for the soak, ARGS="--generator perf_analyzer".
ARGS ?=
overload: export ## queue policy under 1x/1.5x/2x saturation vs no policy: make overload MODEL=minilm (reports/overload/)
	$(VENV)/bin/tritonkit overload --model $(MODEL) $(ARGS)

soak: export ## 10 min at 70% of saturation: errors, p99 drift, server+stub memory: make soak MODEL=digits (reports/soak/)
	$(VENV)/bin/tritonkit soak --model $(MODEL) $(ARGS)

bench: export ## the side-by-side benchmark: in-process, Triton plain/tuned, FastAPI, FastAPI+batcher; perf_analyzer: make bench MODEL=digits
	$(VENV)/bin/tritonkit bench $(if $(MODEL),--models $(MODEL)) $(ARGS)

bench-export: export ## latency of eager vs TorchScript vs ONNX Runtime vs FP16, batch 1/8/32, one run
	$(VENV)/bin/tritonkit bench-export $(ARGS)

bench-generation: export ## text_generator: served vs in-process step rate at 1/8/32 streams; first TTFT, warmup on/off
	$(VENV)/bin/tritonkit bench-generation $(ARGS)

genai-perf: export ## NVIDIA GenAI-Perf against text_generator: time to first token, inter-token latency, tokens/s
	$(VENV)/bin/tritonkit genai-perf $(ARGS)

aiperf: export ## NVIDIA AIPerf over HTTP against text_generator (MODEL=text_embedder: infer): TTFT, ITL, goodput
	$(VENV)/bin/tritonkit aiperf $(if $(MODEL),--model $(MODEL)) $(ARGS)

check-deploy: setup ## validate docker-compose.yml, deploy/prometheus and deploy/k8s offline (no engine, no cluster)
	@SETUP_WHY="first use of make check-deploy" bash deploy/setup.sh deploy-tools
	GRAFANA_ADMIN_PASSWORD=placeholder-for-validation TRITON_ADMIN_KEY=placeholder-for-validation docker-compose config -q
	GRAFANA_ADMIN_PASSWORD=placeholder-for-validation TRITON_ADMIN_KEY=placeholder-for-validation \
	  docker-compose --profile cpu config -q
	promtool check config deploy/prometheus/prometheus.yml
	promtool check rules deploy/prometheus/rules/*.yml
	promtool test rules deploy/prometheus/tests/*.yml
	promtool test rules deploy/k8s/monitoring/tests/*_test.yml
	amtool check-config deploy/alertmanager/alertmanager.yml
	for overlay in gpu/export gpu gpu-single-node/export gpu-single-node cpu/export cpu loadtest; do \
	  $(VENV)/bin/kubectl kustomize deploy/k8s/overlays/$$overlay | $(VENV)/bin/kubernetes-validate --strict --quiet - || exit 1; \
	done
	@echo "check-deploy: compose, Prometheus config and rules, the autoscaling query, and both stages of both k8s overlays are valid"

lock: ## rewrite requirements.lock from a fresh venv built from pyproject.toml's pins
	rm -rf /tmp/tritonkit-lock && python3.11 -m venv /tmp/tritonkit-lock
	/tmp/tritonkit-lock/bin/pip install -q -e . 2>/dev/null
	{ echo "# Full pin set, generated by 'make lock' from the direct pins in pyproject.toml; used as pip constraints."; \
	  /tmp/tritonkit-lock/bin/pip freeze --exclude-editable | sed 's/+cpu$$//'; } > requirements.lock
