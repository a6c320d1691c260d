"""`tritonkit compare`: an A/B regression gate between two served configs, versions or models of one model,
measured interleaved (A B, B A, ...), and the A/A noise floor of the machine. docs/compare.md explains it.

``spec``: the arms (``--a``/``--b`` specs) and how they are served side by side; ``gate``: the verdicts per
metric, the exit status and the report; ``command``: the command line.
"""
