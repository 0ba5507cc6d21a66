"""The environment a run was measured in: versions, hardware, threads, code revision."""

from __future__ import annotations

import functools
import hashlib
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path

import torch

from bench import cpuinfo_fix, hardware
from bench.devices import cpu
from bench.hashing import config_hash

REPO = Path(__file__).resolve().parents[2]


def environment(device: torch.device | None = None) -> dict:
    info = dict(_static())
    info["threads"] = torch.get_num_threads()
    info["gpu"] = hardware.gpu_name(device)
    info["malloc"] = hardware.malloc_settings()  # None: the C library's defaults
    # The instruction sets torch and FBGEMM use, and what bench.cpuinfo_fix did in this process
    info["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    info.update(cpuinfo_fix.summary())
    # Compare like with like: results from different hardware, thread counts or FBGEMM kernel paths (the
    # instruction set FBGEMM detected: a record measured on its reference kernels) are not joined.
    info["fingerprint"] = config_hash({"cpu": info["cpu"], "gpu": info["gpu"], "threads": info["threads"],
                                       **({"fbgemm_isa": info["fbgemm_isa"]} if info["fbgemm_isa"] else {})}, length=12)
    return info


def kernel_path() -> str:
    """Which kernels a timing ran on, in a few words: FBGEMM's instruction set, what the cpuinfo fix did,
    and a digest of the environment variables that steer the kernels (bench.cpuinfo_fix.kernel_env)."""
    env = environment()
    steer = cpuinfo_fix.kernel_env()
    return f"fbgemm {env['fbgemm_isa']}, cpuinfo fix {env['cpuinfo_fix']}" + (f", env {config_hash(steer, length=8)}" if steer else "")


def stack_key(version: int) -> str:
    """The machine and stack a per-machine cache holds for (the timing calibration, the kernel probe): this
    process's (bench.devices.cpu.stack_key)."""
    return cpu.stack_key(environment(), version)


@functools.cache
def _static() -> dict:
    sha, dirty = _git_state()
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchrec": _version("torchrec"),
        "fbgemm_gpu": _version("fbgemm-gpu-cpu") or _version("fbgemm-gpu"),
        "torchao": _version("torchao"),
        "bench": _version("dlrm-quant-bench"),  # the distribution of the `bench` package
        "cpu": hardware.cpu_model(),
        "cpu_count": hardware.cpu_count(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "git_sha": sha,
        "git_dirty": dirty,
    }


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def code_state() -> str:
    """Which harness code ran: a digest of the files of the code and the config tree (`bench/`, `conf/`)
    as they are on disk, so that a commit that touches neither (an edited README, the rest of a
    repository the harness lives in) is the same code, and an uncommitted edit is other code; the
    installed distribution's version outside a checkout."""
    try:
        listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                                 "--", "bench", "conf"], capture_output=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        listed = b""
    digest = hashlib.sha256()
    for name in sorted(set(filter(None, listed.split(b"\0")))):
        path = REPO / name.decode()
        if path.is_file():
            digest.update(name + b"\0" + path.read_bytes() + b"\0")
    if not listed:
        return f"dlrm-quant-bench {_version('dlrm-quant-bench')}"
    return "code " + digest.hexdigest()[:16]


def _git_state() -> tuple[str | None, bool | None]:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10, check=True).stdout

    try:
        sha = git("rev-parse", "HEAD").strip()
        dirty = bool(git("status", "--porcelain", "--untracked-files=no").strip())
        return sha, dirty
    except (OSError, subprocess.SubprocessError):
        return None, None
