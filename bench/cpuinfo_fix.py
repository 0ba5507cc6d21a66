"""FBGEMM's fast kernels on torch builds that carry two copies of cpuinfo.

torch 2.14.0/2.14.1 wheels export cpuinfo (the CPU feature library) from both `libc10.so` and
`libtorch.so`. torch initialises one copy; fbgemm-gpu-cpu's `fbgemm.so` can bind its `cpuinfo_isa`
to the other, which stays all zeros. FBGEMM then sees no AVX2 or AVX-512 (`fbgemmInstructionSet()`
returns `anyarch`) and hands out its scalar reference kernels: a table lookup 10-15x slower, with
nothing said (docs/install.md has the figures).

The fix: after `import torch` and before `fbgemm.so` is loaded, make the library that holds torch's
initialised copy global (`RTLD_GLOBAL | RTLD_NOLOAD`), so the dynamic linker binds FBGEMM's cpuinfo
symbols to it. It is applied only where it is needed, detected, not assumed from a version: the
copies are told apart by the address each loaded torch library resolves `cpuinfo_isa` to, and the
initialised one by its contents. On a build with one copy nothing happens.

`install()` (called by `bench/__init__.py`) puts an import hook in front of `sys.meta_path` that
applies the fix just before `fbgemm_gpu` or `torchrec` is first imported: every process that imports
`bench` first (the CLI, each job, calibration children, torchrun ranks, submitit jobs, the suites,
the scripts, a user's own script) gets it without loading torch at `import bench`. A process that
imported FBGEMM before `bench` cannot be fixed from inside: `install()` says so in one line.
`BENCH_CPUINFO_FIX=0` turns the fix off (to time the bare stack on purpose).

This module imports nothing heavy at import time: `import bench.cli` must not load torch.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import logging
import os
import sys
from pathlib import Path
from typing import Any, Optional

log = logging.getLogger("bench")

HOOKED = ("fbgemm_gpu", "torchrec")  # top-level packages whose import loads fbgemm.so
DISABLE = "BENCH_CPUINFO_FIX"  # =0: leave the binding as the dynamic linker makes it
ISA_SIZE = 64  # bytes of cpuinfo's `struct cpuinfo_x86_isa` read to tell an initialised copy (all bools)

# FBGEMM's `enum class inst_set_t` (include/fbgemm/Utils.h), by value
ISA_NAMES = ("anyarch", "avx2", "avx512", "avx512_ymm", "avx512_vnni", "avx512_vnni_ymm")
# What each name reaches, for comparing a detected ISA with the best the CPU allows (ymm: the same
# instructions on 256-bit registers, which FBGEMM picks on its own on Xeon-D)
ISA_LEVEL = {"anyarch": 0, "avx2": 1, "avx512": 2, "avx512_ymm": 2, "avx512_vnni": 3, "avx512_vnni_ymm": 3}
INSTRUCTION_SET = "_ZN6fbgemm20fbgemmInstructionSetEv"  # fbgemm::fbgemmInstructionSet()

# What this process did: filled once, by `apply()`
_state: dict[str, Any] = {}


def state() -> dict[str, Any]:
    """What the fix found and did in this process (empty before FBGEMM was first imported through it):
    `copies` (distinct cpuinfo copies among torch's loaded libraries), `action` (`not needed`,
    `applied`, `disabled`, `too late`, `undetermined`) and `libraries`/`promoted` where they apply."""
    return dict(_state)


def _torch_lib() -> Path:
    import torch

    return Path(torch.__file__).resolve().parent / "lib"


def _loaded(path: Path, mode: int = 0) -> Optional[ctypes.CDLL]:
    """The handle of a library this process has already loaded (None if it has not)."""
    try:
        return ctypes.CDLL(str(path), mode=mode | os.RTLD_NOLOAD)
    except OSError:
        return None


def cpuinfo_copies() -> dict[int, list[str]]:
    """Address of `cpuinfo_isa` -> the loaded torch libraries that resolve it there. More than one key:
    torch's libraries hold more than one copy of cpuinfo. (A handle's lookup finds the library's own
    definition first, else its dependencies': one copy gives one address.)"""
    copies: dict[int, list[str]] = {}
    for path in sorted(_torch_lib().glob("*.so*")):
        lib = _loaded(path)
        if lib is None:
            continue
        try:
            address = ctypes.addressof(ctypes.c_char.in_dll(lib, "cpuinfo_isa"))
        except ValueError:  # the library neither defines nor depends on cpuinfo
            continue
        copies.setdefault(address, []).append(path.name)
    return copies


def _initialised(address: int) -> bool:
    return any(ctypes.string_at(address, ISA_SIZE))


def apply() -> dict[str, Any]:
    """Detect two cpuinfo copies and bind FBGEMM to torch's initialised one; once per process.
    Must run after `import torch` (it imports torch) and before `fbgemm.so` is loaded."""
    if _state:
        return state()
    import torch

    if os.environ.get(DISABLE, "").strip().lower() in ("0", "false", "no", "off"):
        _state.update(action="disabled", why=f"{DISABLE}={os.environ[DISABLE]}")
        return state()
    torch.backends.cpu.get_cpu_capability()  # torch initialises its cpuinfo (ATen's CPU dispatch reads it)
    copies = cpuinfo_copies()
    _state["copies"] = len(copies)
    if len(copies) <= 1:
        _state["action"] = "not needed"
        return state()
    _state["libraries"] = sorted(_defining_library(address).name for address in copies)
    live = [names for address, names in copies.items() if _initialised(address)]
    if len(live) != 1:
        _state.update(action="undetermined", why=f"{len(live)} of the {len(copies)} cpuinfo copies are initialised")
        return state()
    owner = _defining_library(next(a for a, names in copies.items() if names is live[0]))
    _loaded(owner, os.RTLD_GLOBAL)
    _state.update(action="applied", promoted=owner.name)
    return state()


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p), ("dli_sname", ctypes.c_char_p),
                ("dli_saddr", ctypes.c_void_p)]


def _defining_library(address: int) -> Path:
    """The loaded library whose own data holds `address` (the dynamic linker's `dladdr`)."""
    try:
        dladdr = ctypes.CDLL(None).dladdr
    except AttributeError:  # glibc before 2.34 keeps it in libdl
        dladdr = ctypes.CDLL("libdl.so.2").dladdr
    info = _DlInfo()
    if not dladdr(ctypes.c_void_p(address), ctypes.byref(info)) or not info.dli_fname:
        raise OSError(f"dladdr found no library at {address:#x}")
    return Path(info.dli_fname.decode())


def summary() -> dict[str, Any]:
    """What a record's environment keeps: FBGEMM's detected instruction set, the best this CPU allows,
    and what the fix did in this process. It loads fbgemm_gpu (through the hook) where it is installed, so that
    the answer does not depend on whether the caller happened to import it yet (the fingerprint holds it)."""
    try:
        import fbgemm_gpu  # noqa: F401
    except ImportError:  # a stack without FBGEMM: nothing to read
        pass
    detected, best = fbgemm_isa(), best_isa()
    return {"fbgemm_isa": detected, "fbgemm_isa_best": best, "fbgemm_isa_shortfall": isa_shortfall(detected, best),
            "cpuinfo_fix": state().get("action")}


def fbgemm_isa() -> Optional[str]:
    """The instruction set fbgemm_gpu's FBGEMM detected (`fbgemm::fbgemmInstructionSet()` defined in a
    library of the fbgemm_gpu package), or None where it is not loaded. torch bundles an FBGEMM of its
    own, bound to torch's cpuinfo, whose answer says nothing of fbgemm_gpu's: a lookup that resolves
    there is not taken."""
    if "fbgemm_gpu" not in sys.modules:
        return None
    package = Path(sys.modules["fbgemm_gpu"].__file__).resolve().parent
    for path in sorted(package.glob("fbgemm*.so")):
        lib = _loaded(path)
        if lib is None:
            continue
        try:
            call = getattr(lib, INSTRUCTION_SET)
        except AttributeError:
            continue
        if _defining_library(ctypes.cast(call, ctypes.c_void_p).value).resolve().parent != package:
            continue
        call.restype = ctypes.c_int
        value = call()
        return ISA_NAMES[value] if 0 <= value < len(ISA_NAMES) else f"unknown ({value})"
    return None


def best_isa(flags: Optional[set[str]] = None) -> str:
    """The best instruction set FBGEMM could pick on this CPU, from the kernel's CPU flags (x86 only)."""
    flags = cpu_flags() if flags is None else flags
    avx512 = {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags
    if avx512 and "avx512_vnni" in flags:
        return "avx512_vnni"
    if avx512:
        return "avx512"
    if "avx2" in flags:
        return "avx2"
    return "anyarch"


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def isa_shortfall(detected: Optional[str], best: str) -> Optional[str]:
    """Why FBGEMM's detected ISA falls short of the CPU's best (None when it does not, or is unknown)."""
    if detected is None or ISA_LEVEL.get(detected, -1) >= ISA_LEVEL[best]:
        return None
    forced = os.environ.get("FBGEMM_ENABLE_INSTRUCTIONS")
    if forced:
        return f"FBGEMM_ENABLE_INSTRUCTIONS={forced} forces FBGEMM to {detected} where the CPU allows {best}"
    return f"FBGEMM detected {detected} where the CPU allows {best}"


def kernel_env() -> dict[str, str]:
    """The environment variables that decide which kernels run and how: FBGEMM's switches, OpenMP's,
    the BLAS's, ATen's CPU capability, torch's loading mode and this fix's."""
    prefixes = ("FBGEMM_", "OMP_", "KMP_", "MKL_", "OPENBLAS_", "DNNL_", "ONEDNN_", "ATEN_CPU_CAPABILITY", "TORCH_USE_RTLD_GLOBAL",
                DISABLE, "LD_PRELOAD")
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(prefixes)}


class _Hook(importlib.abc.MetaPathFinder):
    """Runs the fix once, just before the first import of a package that loads fbgemm.so; finds nothing itself."""

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001 - the import system's signature
        if name.partition(".")[0] in HOOKED:
            uninstall()
            try:
                apply()
            except Exception as exc:  # noqa: BLE001 - a failed fix must not fail the import: it is reported
                _state.update(action="failed", why=f"{type(exc).__name__}: {exc}")
        return None


_hook = _Hook()


def uninstall() -> None:
    if _hook in sys.meta_path:
        sys.meta_path.remove(_hook)


def install() -> None:
    """Apply the fix before FBGEMM is first imported; where it already was, say so once (the fix comes
    too late in this process) when this torch holds two copies."""
    if any(name in sys.modules for name in ("fbgemm_gpu", "torchrec")):
        if not _state:
            _too_late()
        return
    if _hook not in sys.meta_path:
        sys.meta_path.insert(0, _hook)


def _too_late() -> None:
    try:
        copies = cpuinfo_copies()
    except Exception:  # noqa: BLE001 - a warning is all this can give
        return
    _state.update(copies=len(copies), action="not needed" if len(copies) <= 1 else "too late")
    if len(copies) > 1 and isa_shortfall(fbgemm_isa(), best_isa()):
        log.warning("fbgemm_gpu was imported before bench (torchrec imports it), so FBGEMM reads an uninitialised copy "
                    "of cpuinfo (%s) and runs its slow reference kernels: import bench before torchrec or fbgemm_gpu",
                    isa_shortfall(fbgemm_isa(), best_isa()))
