"""perf_analyzer (C++) as a load generator: one run as a function (``perf``), fixed-rate windows for a soak
(``windows``) and every request's times from its profile export (``profile_export``)."""
