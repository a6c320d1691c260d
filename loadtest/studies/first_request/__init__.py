"""``tritonkit first-request``: what warmup buys on the first request after the server reports ready."""
