"""``tritonkit soak``: a long open-loop run at a fraction of the saturating load."""
