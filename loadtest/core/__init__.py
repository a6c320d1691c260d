"""The shared vocabulary and statistics every command uses: the run spec, SLO and candidate (``spec``), one
measurement (``measurement``), results, evidence (intervals and verdicts), trials, the SLO rule (``slo``), the client's
figures (``client_stats``, ``latency``, ``streams``). No command line here; imports only ``loadtest.errors``."""
