"""Shared plumbing of the pytest-benchmark suites: options, parameter grids, timing, machine info.

The suites are not part of the unit-test run (`testpaths = ["tests"]`); run them explicitly:

    pytest benchmarks/suites/                                   # full grids (a few minutes on 2 cores)
    pytest benchmarks/suites/ --benchmark-json=out/bench.json   # then: python -m bench.report out/bench.json
    BENCH_SUITES_QUICK=1 pytest benchmarks/suites/ --benchmark-disable   # tiny grids, each case run once

Options (each has an environment variable, for CI jobs that cannot change the command line):
    --suites-quick      BENCH_SUITES_QUICK=1    tiny parameter grids and gate config (seconds)
    --suites-device     BENCH_SUITES_DEVICE     cpu (default) or cuda[:i]; absent devices skip
    --suites-threads    BENCH_SUITES_THREADS    torch intra-op threads (default: torch's)
    --suites-overrides  BENCH_SUITES_OVERRIDES  Hydra overrides for the model suite (model=dlrm_kaggle ...)
    --gate-backends     BENCH_GATE_BACKENDS     comma list for the accuracy gate (default: all)
    --gate-overrides    BENCH_GATE_OVERRIDES    Hydra overrides for the gate's runs, space-separated

A test module declares its grids in `GRID = {arg: (full_values, quick_values, id_prefix)}`; `pytest_generate_tests`
below parametrizes every test that takes `arg`, from the quick or the full list. The last argument of
a module's GRID varies fastest, so modules list the cheap-to-change argument last and cache the
expensive setup of the others.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import pytest
import torch

from bench.config.compose import compose
from bench.config import Config
from bench.hardware import pin_malloc, set_threads
from bench.measure.environment import environment

# Fields of bench.measure.environment.environment() copied to pytest-benchmark's machine_info. git state is
# left out: pytest-benchmark keeps it in commit_info, and machine_info is what --benchmark-compare
# checks, which should only differ when the machine or the stack does.
MACHINE_KEYS = ("torch", "torchrec", "fbgemm_gpu", "bench", "python", "cpu", "cpu_count", "threads", "gpu", "fingerprint")
# Of those, the fields that make two runs incomparable (STYLE 6: refuse, never compare silently).
MUST_MATCH = ("torch", "torchrec", "fbgemm_gpu", "fingerprint")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("bench suites", "bench: pytest-benchmark suites and the accuracy gate")
    g.addoption("--suites-quick", action="store_true", default=_env_flag("BENCH_SUITES_QUICK"),
                help="tiny parameter grids and gate config: a self-check in seconds (env BENCH_SUITES_QUICK=1)")
    g.addoption("--suites-device", default=os.environ.get("BENCH_SUITES_DEVICE", "cpu"),
                help="device of the kernel and model suites: cpu or cuda[:i] (env BENCH_SUITES_DEVICE)")
    g.addoption("--suites-threads", type=int, default=int(os.environ.get("BENCH_SUITES_THREADS") or 0) or None,
                help="torch intra-op threads (env BENCH_SUITES_THREADS; default: torch's)")
    g.addoption("--suites-overrides", default=os.environ.get("BENCH_SUITES_OVERRIDES", ""),
                help="Hydra overrides for the model suite's model and workload, space-separated, e.g. 'model=dlrm_kaggle' "
                     "(env BENCH_SUITES_OVERRIDES)")  # fmt: skip
    g.addoption("--gate-backends", default=os.environ.get("BENCH_GATE_BACKENDS", ""),
                help="comma list of backends the accuracy gate runs (env BENCH_GATE_BACKENDS; default: all registered)")
    g.addoption("--gate-overrides", default=os.environ.get("BENCH_GATE_OVERRIDES", ""),
                help="Hydra overrides for the gate's runs, space-separated, e.g. 'batch_size=2048 gate.rules.uint4.max_auc_drop=0.0005' "
                     "(env BENCH_GATE_OVERRIDES)")  # fmt: skip


def quick(config: pytest.Config) -> bool:
    return bool(config.getoption("--suites-quick"))


def pytest_configure(config: pytest.Config) -> None:
    text = config.getoption("--suites-device")
    try:
        dev = torch.device(text)
    except RuntimeError:
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise pytest.UsageError(f"--suites-device {text!r} is not cpu or cuda[:i]")
    set_threads(config.getoption("--suites-threads"))
    pin_malloc()  # as the runner does before measuring (bench.hardware.pin_malloc says why)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    grid: dict[str, tuple[Sequence[Any], Sequence[Any], str]] = getattr(metafunc.module, "GRID", {})
    small = quick(metafunc.config)
    for arg, (full, tiny, prefix) in grid.items():
        if arg in metafunc.fixturenames:
            values = list(tiny if small else full)
            metafunc.parametrize(arg, values, ids=[f"{prefix}{v}" for v in values])


# ------------------------------------------------------------------------------ machine info


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    env = environment(_device(config))
    machine_info["bench"] = {k: env.get(k) for k in MACHINE_KEYS}
    for key in ("torch", "torchrec", "fbgemm_gpu"):
        machine_info[key] = env.get(key)


def pytest_benchmark_compare_machine_info(config, benchmarksession, machine_info, compared_benchmark) -> None:
    """Refuse to compare against a run from another stack or machine (pytest-benchmark itself only warns)."""
    saved = (compared_benchmark.get("machine_info") or {}).get("bench") or {}
    current = machine_info.get("bench") or {}
    if not saved:
        return  # a run saved without the suites' conftest: pytest-benchmark's own warning applies
    differ = {k: (saved.get(k), current.get(k)) for k in MUST_MATCH if saved.get(k) != current.get(k)}
    if differ:
        detail = ", ".join(f"{k}: saved {a!r} vs now {b!r}" for k, (a, b) in differ.items())
        raise pytest.UsageError(f"refusing to compare benchmarks from another stack or machine ({detail})")


# ------------------------------------------------------------------------------ fixtures


def _device(config: pytest.Config) -> torch.device:
    return torch.device(config.getoption("--suites-device"))


@pytest.fixture(scope="session")
def device(pytestconfig: pytest.Config) -> torch.device:
    dev = _device(pytestconfig)
    if dev.type == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine (--suites-device)")
    return dev


@pytest.fixture(scope="session")
def is_quick(pytestconfig: pytest.Config) -> bool:
    return quick(pytestconfig)


@pytest.fixture(scope="session")
def compose_config() -> Callable[[Sequence[str]], Config]:
    """Compose the harness's config tree (conf/) with overrides, as `python -m bench` does."""
    return compose


@pytest.fixture
def timed(benchmark, device: torch.device) -> Callable[..., tuple[Any, float | None]]:
    """`out, median_s = timed(fn, *args, warmup=3)`: warm up, then let pytest-benchmark time `fn(*args)`.

    The timed call holds only `fn` (inputs are built and on the device beforehand), under
    `torch.inference_mode()`; on CUDA each call ends with a synchronisation so the time is the
    kernel's, not the launch's. `median_s` is None when benchmarking is disabled.
    """

    def run(fn: Callable, *args: Any, warmup: int = 3) -> tuple[Any, float | None]:
        if device.type == "cuda":

            def call():
                out = fn(*args)
                torch.cuda.synchronize(device)
                return out
        else:

            def call():
                return fn(*args)

        with torch.inference_mode():
            for _ in range(warmup):
                call()
            out = benchmark(call)
        stats = getattr(benchmark, "stats", None)
        median = float(stats.stats.median) if stats else None
        return out, median

    return run
