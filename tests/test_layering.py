"""Data flows one way: config -> workload -> model -> backend -> measure -> record -> report -> gate.

Every module of `bench` belongs to one layer; no module imports a module of a layer to its right.
The entry points (the CLI, the sweep callback, `python -m` mains) sit at the end and may import
anything. This test reads the import statements (ast), so it also catches function-local imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bench"

# Most specific prefix wins. Layer 0 holds what every layer may use: pure helpers, configs, I/O.
LAYERS = {
    "bench.errors": 0, "bench.hashing": 0, "bench.io": 0, "bench.stats": 0, "bench.compare": 0,
    "bench.registry": 0, "bench.config": 0, "bench.validation": 0, "bench.compose": 0, "bench.hardware": 0, "bench.progress": 0,
    "bench.batch": 0, "bench.testing": 3,
    "bench.workloads": 1, "bench.adapters": 1, "bench.preprocess": 1,
    "bench.workloads.access": 1, "bench.workloads.synthetic_scale": 1, "bench.workloads.synthetic_ids": 1,
    "bench.models": 2, "bench.models.random_weights": 2,
    "bench.backends": 3, "bench.backends.direct": 3, "bench.backends.uint4_mixed": 3, "bench.paramserver": 3,
    "bench.measure": 4, "bench.measure.access": 4, "bench.measure.kernels": 4, "bench.measure.roofline": 4,
    "bench.record": 5, "bench.store": 5, "bench.pipeline": 5, "bench.serve": 5, "bench.pipeline.profile": 5, "bench.distributed": 5,
    "bench.report": 6, "bench.report.machine": 6, "bench.tune": 6, "bench.config_files": 0,
    "bench.gate": 7,
    # entry points: may import anything
    "bench.preflight": 9, "bench.help": 9, "bench.console": 0,
    "bench.sweep": 9, "bench.cli": 9, "bench.__main__": 9, "bench.distributed.worker": 9, "bench.report.__main__": 9, "bench.gate.__main__": 9,
}
NAMES = ["config", "workload", "model", "backend", "measure", "record/pipeline", "report/tune", "gate", "", "entry point"]


def layer(module: str) -> int | None:
    if module == "bench":
        return 0
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len, default=None)
    return None if best is None else LAYERS[best]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def bench_imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bench"):
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names if layer(f"{node.module}.{a.name}") is not None
                       and (PACKAGE.parent / f"{node.module}.{a.name}".replace(".", "/")).exists())
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("bench"))
    return out


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer():
    assert [module_name(p) for p in MODULES if layer(module_name(p)) is None] == []


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_no_import_to_the_right(path):
    me = layer(module_name(path))
    wrong = sorted(m for m in bench_imports(path) if (layer(m) or 0) > me)
    assert not wrong, f"{module_name(path)} ({NAMES[me]}) imports {wrong} from layers to its right"
