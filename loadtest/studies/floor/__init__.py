"""``tritonkit floor``: the load generators' own time, measured against one served model."""
