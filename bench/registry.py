"""One registry for every kind of plug-in (backends, workloads, devices).

A plug-in module registers itself with `@register(kind, name, config=SchemaDataclass)`. The same
name is used for the module file, `conf/<kind>/<name>.yaml` and here; `bench.config` stores each
schema in Hydra's ConfigStore as `<kind>/base_<name>` in one loop, so a new backend is one module
plus one YAML file and no list to edit: the default sweeps take their backend list from here
(`${registered_backends:}` in `conf/sweep/`), unless it registers with `in_sweeps=False`.

A device (bench.devices) registers the same way, `@register("device", name, config=DeviceConfig)` on its
class; `device.type=NAME` picks it. Devices share one schema (`conf/device/`), so they are not among the
KINDS whose schemas and options are stored and listed one by one.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable

from bench.errors import UserError

KINDS = ("backend", "workload")  # each option a schema of its own and a conf/<kind>/<name>.yaml
DEVICE = "device"


@dataclass(frozen=True)
class Entry:
    kind: str
    name: str
    factory: Callable[..., Any]  # called with the group's resolved config
    config: type  # dataclass schema of `conf/<kind>/<name>.yaml`
    in_sweeps: bool = True  # joins the default sweeps (`+sweep=quant`, `+sweep=nightly`)
    toolkit: str | None = None  # a field's quantization toolkit it runs (its pip extra): joins `+sweep=toolkits`


_entries: dict[str, dict[str, Entry]] = {kind: {} for kind in (*KINDS, DEVICE)}
PACKAGES = {"backend": "bench.backends", "workload": "bench.workloads", DEVICE: "bench.devices"}


def register(kind: str, name: str, config: type, in_sweeps: bool = True, toolkit: str | None = None) -> Callable[[Any], Any]:
    if kind not in _entries:
        raise ValueError(f"unknown plug-in kind {kind!r}; expected one of {tuple(_entries)}")

    def decorate(factory: Any) -> Any:
        if name in _entries[kind]:
            raise ValueError(f"{kind} {name!r} is registered twice")
        _entries[kind][name] = Entry(kind, name, factory, config, in_sweeps, toolkit)
        return factory

    return decorate


def load_plugins(kind: str | None = None) -> None:
    """Import every module of the plug-in packages (of `kind`'s alone, when given) so that their `register` calls run."""
    for package_name in (PACKAGES.values() if kind is None else [PACKAGES[kind]]):
        package = importlib.import_module(package_name)
        for info in pkgutil.walk_packages(package.__path__, package_name + "."):
            importlib.import_module(info.name)


def entries(kind: str) -> dict[str, Entry]:
    load_plugins(kind if kind == DEVICE else None)  # a device needs no backend imported
    return dict(_entries[kind])


def names(kind: str) -> list[str]:
    return sorted(entries(kind))


# The reference every relative figure is measured against; it runs first in a sweep.
BASELINE_BACKEND = "fp32"
# The rows that split a TBE speedup in two: fp32 tables on the table-batched kernels (the batching part,
# against the reference) and int8 tables on them (the quantization part, against the batched one). The
# reports order the reference and the batched reference first.
BATCHED_BACKEND = "fp32_tbe"
SPLIT_BACKEND = "int8_tbe"


def sweep_backends() -> list[str]:
    """The backends of the default sweeps: every registered one that joins them, the baseline first."""
    joined = sorted(name for name, entry in entries("backend").items() if entry.in_sweeps)
    return sorted(joined, key=lambda name: name != BASELINE_BACKEND)


def every_backend() -> list[str]:
    """Every registered backend, the baseline first (`+sweep=zoo`: the toolkits' too, whether installed or not)."""
    return sorted(names("backend"), key=lambda name: name != BASELINE_BACKEND)


# The harness's own backends beside the toolkits in `+sweep=toolkits`: the reference and its int8/int4 tables.
TOOLKIT_SWEEP_OWN = ("fp32", "int8_tbe", "uint4")


def toolkit_sweep_backends() -> list[str]:
    """The backends of `+sweep=toolkits`: the harness's own (TOOLKIT_SWEEP_OWN, fp32 first), then every
    registered toolkit backend by toolkit and name."""
    toolkits = sorted((entry.toolkit, name) for name, entry in entries("backend").items() if entry.toolkit)
    return [*TOOLKIT_SWEEP_OWN, *(name for _, name in toolkits)]


def get(kind: str, name: str) -> Entry:
    known = entries(kind)
    if name not in known:
        raise UserError(f"unknown {kind} {name!r}: choose one of {', '.join(sorted(known))} ({kind}=NAME)")
    return known[name]
