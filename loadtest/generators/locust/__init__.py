"""Locust as a load generator: the user class, the locustfile, its launcher (gRPC made gevent-friendly first),
the subprocess runner and one run measured on both sides (``run``)."""
