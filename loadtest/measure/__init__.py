"""What a run measured and what it means: results, Triton's metrics, the SLO verdict, the campaign report,
one run measured on both sides (``run``), the saturation and knee searches the studies share, the
in-process ceiling and the first-request latency. Imports ``loadtest.drive`` and the campaign model, never
``loadtest.tune`` or ``loadtest.studies``."""
