"""``tritonkit capacity``: the highest open-loop rate under a p99 budget with its interval (``search``,
``result``, ``knee``), the replica plan and autoscaler targets (``replica_plan``), its report and its command."""
