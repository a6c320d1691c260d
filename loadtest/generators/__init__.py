"""What sends load: the seam every command measures through (``seam.LoadGenerator``), one measurement by
either generator with the one fell-behind rule (``probe``, ``saturation``), request payloads, open-loop arrivals,
Locust (``locust/``) and perf_analyzer (``perf_analyzer/``)."""
