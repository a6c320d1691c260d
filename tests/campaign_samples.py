"""Campaign files the unit tests parse (test_campaign.py, test_overload.py)."""

MINIMAL = """
name = "c"
[slo]
p99_ms = 5
[[scenarios]]
name = "s"
model = "digits"
protocol = "grpc"
shape = { kind = "users", users = 4 }
"""
"""The smallest campaign ``loadtest.campaign.file.parse`` accepts: one scenario and a p99 budget."""
