"""The GPU check: ``deploy/gpu/check.sh OUT_DIR [--dry-run]`` proves the GPU paths on one NVIDIA GPU.

``wheels`` says which wheels the host must bring (standard library only, so it runs before
anything is installed); ``check`` runs the steps in order, which live in ``steps_export`` (export,
parity, configs), ``steps_serve`` (server, answers, first request) and ``measure`` (throughput,
latency, GPU memory); ``results`` renders the figures and the targets;
``load`` is the concurrent gRPC load that the served-throughput step starts in worker processes.
"""
