"""Every command in the README's fenced blocks runs as written, or is named here as one that takes
minutes (and is run elsewhere: by CI, by the end-to-end tests, or by a user). The quick ones run in a
folder where a tiny nightly has left a reports folder, as a user's would be after their first night."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.conftest import REPO, run_bench

README = REPO / "README.md"
# Commands that take minutes as written, and where they run instead.
LONG = {
    "make run": "the default sweep, minutes; tests/test_nightly_command.py runs the sweep machinery end to end",
    "make test": "the whole suite: CI",
    "make test-fast": "the fast subset of the suite",
    "make lint": "CI runs lint-imports and the docs build; tests/test_layering.py and tests/test_docs.py here",
    "python -m bench backend=int8_tbe batch_size=4096": "the default model's job, minutes; the same route as +preset=tiny",
    "python -m bench +sweep=quant": "the default sweep, minutes",
    "python -m bench +sweep=nightly": "the default nightly, minutes; tests/test_nightly_command.py runs it tiny",
    "python -m bench +sweep=quant model=custom model.factory=examples.two_tower:build workload=parquet "
    "workload.path=examples/data/clicks.parquet": "a sweep of the example model, minutes; tests/test_custom_model.py runs it tiny",
}


def readme_commands() -> list[str]:
    """The command lines of the README's ```sh blocks: comments dropped, continuation lines joined."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", README.read_text(), re.S):
        text = re.sub(r"\\\n\s*", " ", block)
        for line in text.splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command and not command.startswith("#"):
                out.append(" ".join(command.split()))
    return out


def test_every_command_is_run_here_or_named_as_long():
    commands = readme_commands()
    assert "python -m bench --help" in commands and "make test" in commands
    quick = [c for c in commands if c not in LONG]
    assert all(c.startswith("python -m ") or c.startswith(". ") for c in quick), quick
    assert set(LONG) <= set(commands), set(LONG) - set(commands)  # no stale entries


@pytest.mark.slow
def test_the_quick_commands_run_as_written(tmp_path):
    first = run_bench("+sweep=nightly", "backend=fp32,int8_tbe", "+preset=tiny", cwd=tmp_path, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    # every sweep moves `latest`, which the README's commands read, whatever its overrides
    [variant] = (tmp_path / "reports" / "nightly").glob("latest-*")
    assert os.readlink(variant) == os.readlink(tmp_path / "reports" / "nightly" / "latest")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for command in readme_commands():
        if command in LONG or not command.startswith("python -m "):
            continue
        args = [sys.executable, *shlex.split(command)[1:]]
        result = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"{command}: exit {result.returncode}\n{result.stderr[-3000:]}"
