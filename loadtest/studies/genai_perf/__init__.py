"""``tritonkit genai-perf``: NVIDIA's GenAI-Perf against the served token generator."""
