import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.config.compose import compose
from bench.config.quick import TINY_OVERRIDES as TINY

REPO = Path(__file__).resolve().parents[1]
CONF_DIR = REPO / "conf"


def compose_config(overrides=()):
    return compose(overrides)


@pytest.fixture
def tiny_cfg(tmp_path):
    def make(*overrides):
        return compose_config([*TINY, f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}", *overrides])

    return make


def run_bench(*args, cwd=REPO, env=None, timeout=300):
    """`python -m bench ARGS` in a subprocess, as a user runs it."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)
