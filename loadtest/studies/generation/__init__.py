"""``tritonkit bench-generation``: served in-flight batching against the batched step in-process."""
