"""Keep library noise off the console: it goes to the job's log file.

Hydra gives every job a console handler and a log file. On the console this keeps the harness's
own lines (`bench.*`) and, from libraries, only errors, each distinct one once per process; library
INFO lines and warnings (FBGEMM's per-TBE "Feature Gates" line, torchrec's 26-table
`per_table_weight_dtype` line, torch's "No CUDA runtime is found") go to the log file only. Python
warnings (torch's quantize deprecation, Adagrad's sparse-invariant check) are routed through logging,
so they follow the same rule and land in the log file too.
"""

from __future__ import annotations

import logging

OWN_LOGGERS = ("bench", "__main__")


class LibraryNoiseFilter(logging.Filter):
    """Console filter: the harness's lines, plus each distinct library error once (library warnings and
    Python warnings stay in the job's log file)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.split(".")[0] in OWN_LOGGERS:
            return True
        if record.levelno < logging.ERROR:
            return False
        key = (record.name, str(record.getMessage()).strip().splitlines()[0][:200] if record.getMessage().strip() else "")
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


_filter = LibraryNoiseFilter()  # one per process: "once" spans the jobs of a sweep


def quiet_library_noise() -> None:
    """Install the filter on the root logger's console handlers (idempotent; Hydra makes new ones per job)."""
    logging.captureWarnings(True)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler) and _filter not in handler.filters:
            handler.addFilter(_filter)
