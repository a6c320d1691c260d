"""``tritonkit aiperf``: NVIDIA AIPerf over HTTP against the served generator (streamed) or a text-in model."""
