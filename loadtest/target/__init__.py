"""The server a measurement runs against: its endpoints, model control (a candidate config applied and given back
by ``apply.ServedConfigs``), Triton's metrics and its per-request trace."""
