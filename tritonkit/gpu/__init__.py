"""The GPU check: ``tritonkit/gpu/check.sh OUT_DIR [--dry-run]`` proves the GPU paths on one NVIDIA GPU.

``wheels`` says which wheels the host must bring (standard library only, so it runs before
anything is installed). ``state`` holds the run's state (``Check``, the sizes, the step names) and imports
no step; the steps, each a function of the ``Check``, live in ``steps_host`` (wheels, environment, stop,
targets), ``steps_export`` (export, parity, configs), ``steps_serve`` (server, answers, first request),
``measure`` (throughput, latency, GPU memory) and ``generation``; ``run`` calls them in order; ``cli`` is
the command line (``tritonkit gpu-check``; ``python -m tritonkit.gpu.check`` is its alias, which
``check.sh`` runs). ``results`` renders the figures and the targets; ``load`` is the concurrent gRPC load
that the served-throughput step starts in worker processes.
"""
