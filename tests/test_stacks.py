"""The tested stacks: `make setup STACK=...` picks a stack's requirement files, the README's table says
what each pins, and the torch wheel comes from PyTorch's CPU index as the +cpu build unless
TORCH_INDEX is emptied. Checked with `make -n` (what make would run), not by installing."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.conftest import REPO

STACKS = ("current", "previous")


def pins(stack: str) -> dict[str, str]:
    text = "".join((REPO / "requirements" / f"{stack}{part}.txt").read_text() for part in ("", "-torchrec"))
    return dict(re.findall(r"^([a-z0-9-]+)==([0-9.]+)$", text, flags=re.M))


def make(*args: str) -> subprocess.CompletedProcess:
    """`make -n ARGS` as a user types it: the Makefile's defaults, not what this process inherited
    (.ci/run exports TORCH_INDEX; `make test` passes its own flags down)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_INDEX", "STACK", "VENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(["make", "-n", *args], cwd=REPO, capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("stack", STACKS)
def test_each_stack_pins_torch_fbgemm_and_torchrec(stack):
    assert set(pins(stack)) == {"torch", "fbgemm-gpu-cpu", "torchrec"}


@pytest.mark.parametrize("stack", STACKS)
def test_the_readme_table_says_what_each_stack_pins(stack):
    p = pins(stack)
    row = f"| `{stack}`" + (" (default)" if stack == "current" else "") + f" | {p['torch']} | {p['fbgemm-gpu-cpu']} | {p['torchrec']} |"
    assert row in (REPO / "README.md").read_text()
    assert row in (REPO / "docs" / "install.md").read_text()


@pytest.mark.parametrize("stack", STACKS)
def test_setup_installs_the_stacks_files_with_the_cpu_build_of_torch(stack, tmp_path):
    out = make("setup", f"STACK={stack}", f"VENV={tmp_path / 'venv'}")
    assert out.returncode == 0, out.stderr
    assert f"requirements/{stack}.txt" in out.stdout and f"--no-deps -r requirements/{stack}-torchrec.txt" in out.stdout
    assert "--extra-index-url https://download.pytorch.org/whl/cpu --no-deps" in out.stdout and "+cpu" in out.stdout
    assert f".installed-{stack}" in out.stdout


def test_empty_torch_index_takes_the_version_from_pips_own_indexes(tmp_path):
    out = make("setup", "TORCH_INDEX=", f"VENV={tmp_path / 'venv'}")
    torch_line = next(line for line in out.stdout.splitlines() if "^torch==" in line)
    assert "--extra-index-url" not in torch_line and "+cpu" not in torch_line and "--no-deps" in torch_line


def test_an_unknown_stack_is_one_line_and_exit_2(tmp_path):
    out = make("setup", "STACK=bogus", f"VENV={tmp_path / 'venv'}")
    assert out.returncode == 2
    assert "STACK=bogus is not a tested stack: choose one of current previous" in out.stderr
