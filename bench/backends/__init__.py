"""Backends: one module per backend, each registering itself with `bench.registry.register`."""
