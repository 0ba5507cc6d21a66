"""Data flows one way: the import-linter contracts in pyproject.toml hold, and they do catch an
upward import (a copy of the package with one added to its lowest layer fails them)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed (pip install -e '.[dev]')")


def lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}  # this copy of `bench`, not the installed one
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_the_layers_hold_and_nothing_goes_round_in_circles():
    result = lint(REPO)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "Contracts: 5 kept, 0 broken." in result.stdout


def lint_with(tmp_path: Path, module: str, line: str) -> subprocess.CompletedProcess:
    """lint-imports over a copy of `bench` with `line` appended to `module` (a path under bench/)."""
    shutil.copytree(REPO / "bench", tmp_path / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    with open(tmp_path / "bench" / module, "a") as f:
        f.write(f"\n{line}\n")
    return lint(tmp_path)


def test_the_results_import_neither_the_report_nor_the_gate(tmp_path):
    result = lint_with(tmp_path, "results/key.py", "import bench.report.fmt  # the results importing their renderer")
    assert result.returncode == 1
    assert "bench.results is not allowed to import bench.report" in result.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    result = lint_with(tmp_path, "config/schema.py", "import bench.gate  # the config importing the gate: upward")
    assert result.returncode == 1
    assert "bench.config is not allowed to import bench.gate" in result.stdout


def test_a_device_builds_on_the_interface_alone_and_sits_below_measure(tmp_path):
    """A device module importing another (so adding one would touch one beside it), the interface importing a
    device, or a device importing the measuring code above it: each breaks a contract."""
    another = lint_with(tmp_path / "another", "devices/cuda.py", "import bench.devices.cpu  # one device leaning on another")
    assert another.returncode == 1 and "bench.devices.cuda is not allowed to import bench.devices.cpu" in another.stdout
    interface = lint_with(tmp_path / "interface", "devices/device.py", "import bench.devices.cuda  # the interface naming a device")
    assert interface.returncode == 1 and "bench.devices.device is not allowed to import bench.devices.cuda" in interface.stdout
    upward = lint_with(tmp_path / "upward", "devices/cpu.py", "import bench.measure.timing  # a device importing the timing loop")
    assert upward.returncode == 1 and "bench.devices is not allowed to import bench.measure" in upward.stdout
