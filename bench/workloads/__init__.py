"""Workloads: one module per workload, each registering itself with `bench.registry.register`."""
