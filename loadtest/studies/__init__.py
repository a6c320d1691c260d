"""Studies, each a command that answers one question with a report: ``bench`` (in-process, Triton and
FastAPI side by side; ``baselines/`` is its FastAPI server), ``overload`` (with ``overload_report``),
``soak`` and ``generation``. No study imports another; what they share lives in ``loadtest.measure``."""
