"""Put on PYTHONPATH by tests/test_kernel_path.py: in every Python process started under it (the CLI, a
calibration child, torchrun ranks, submitit jobs), note when fbgemm_gpu is first imported and whether
bench's cpuinfo fix had run by then (bench.cpuinfo_fix), one JSON line per process in the file that
BENCH_FBGEMM_AUDIT names. The fix's own hook sits in front of this one once `bench` is imported, so a
process that imported bench first shows the fix's state; one that did not shows none."""

import importlib.abc
import json
import os
import sys


class _Audit(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "fbgemm_gpu":
            sys.meta_path.remove(self)
            fix = sys.modules.get("bench.cpuinfo_fix")
            line = {"pid": os.getpid(), "argv": sys.argv[:3], "fix": fix.state() if fix else None}
            with open(os.environ["BENCH_FBGEMM_AUDIT"], "a") as f:
                f.write(json.dumps(line) + "\n")
        return None


if os.environ.get("BENCH_FBGEMM_AUDIT"):
    sys.meta_path.insert(0, _Audit())
