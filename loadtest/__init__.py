"""Load campaigns through tritonclient (Locust), Triton's own metrics, reports and SLO gates.

Not built yet: this package is filled by the load-test issue. Until then `tritonkit demo` prints the
server-side figures of one short run (deploy/demo.py).
"""
