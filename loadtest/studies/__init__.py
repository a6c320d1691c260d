"""Studies, each a folder with the command that answers one question with a report: ``bench`` (in-process,
Triton and FastAPI side by side; ``bench/baselines/`` is its FastAPI server), ``overload``, ``soak``, ``floor``,
``generation``, ``genai_perf``, ``aiperf``, ``first_request`` and ``compare``. No study imports another; what they share
lives in the folders below (``loadtest.core``, ``loadtest.generators``, ``loadtest.reports``, ``loadtest.cli``)."""
