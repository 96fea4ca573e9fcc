"""Workload generators that produce canonical traces."""
