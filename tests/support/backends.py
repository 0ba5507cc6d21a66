"""A registered backend built from its schema's defaults and a few overrides, as the tests need one."""

from __future__ import annotations

from bench import registry


def make_backend(name: str, **overrides):
    entry = registry.get("backend", name)
    cfg = entry.config()
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return entry.factory(cfg)
