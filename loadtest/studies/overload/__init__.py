"""``tritonkit overload``: does the queue policy keep accepted requests inside the p99 budget past saturation?"""
