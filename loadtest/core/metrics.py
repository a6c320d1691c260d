"""How reports, console lines and CSV columns name and format each figure of a run: its label, format and unit.
A figure's name (``p99_ms``, ``ttft_p99_ms``, ...) is the key of ``evidence.METRICS`` / ``results.STREAM_METRICS``."""

FIGURES = {
    "throughput": ("req/s", "{:.1f}", ""),
    "p50_ms": ("p50", "{:.3f}", " ms"),
    "p99_ms": ("p99", "{:.3f}", " ms"),
    "error_rate": ("error rate", "{:.2%}", ""),
    "goodput_share": ("goodput", "{:.2%}", ""),
    "goodput_rps": ("goodput/s", "{:.1f}", ""),
}
"""``evidence.METRICS`` as reports name and format them."""

STREAM_FIGURES = {
    "ttft_p99_ms": ("p99 TTFT", "{:.3f}", " ms"),
    "itl_p99_ms": ("p99 ITL", "{:.3f}", " ms"),
    "output_token_throughput": ("tokens/s", "{:.1f}", ""),
}
"""``results.STREAM_METRICS`` as reports name and format them (the trials' table, the console's intervals)."""
