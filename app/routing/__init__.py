"""Choosing an engine per request: workload classification and the routing policy."""
