"""What sends load and changes the server: request payloads, the Locust users and locustfile (with the
launcher that readies gRPC for gevent), the Locust subprocess runner, the client side of a run
(``client_stats``, ``latency``), perf_analyzer runners, config variants applied through model control, and
the server a measurement runs against, and the flag groups the commands share (``flags``). Imports only
the campaign model (``loadtest.campaign``, ``loadtest.errors``) from this package."""
