"""Triton Model Analyzer beside the tuner: its profile under a p99 budget and its pick (``profile``), and
``tritonkit analyzer`` (``command``)."""
