"""Measurements that are not load: the exported file called in-process (the ceiling) and the first request
after the server reports ready."""
