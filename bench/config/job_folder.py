"""The folder a job's files go to beside its record (LoadGen's logs, bench.serve.scenario.job_dir): the one a caller
names for a job it measures itself (bench.cli.measure_again's `<job>/again-<n>/`), else Hydra's output folder of the
job Hydra launched, else none (the caller picks a fresh one)."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Iterator, Optional

_named: ContextVar[Optional[Path]] = ContextVar("job_folder", default=None)


@contextmanager
def job_folder(path: Path) -> Iterator[None]:
    """Jobs measured inside this block put their files under `path`; Hydra's own config is left as it is."""
    token = _named.set(Path(path))
    try:
        yield
    finally:
        _named.reset(token)


def current_job_folder() -> Optional[Path]:
    named = _named.get()
    if named is not None:
        return named
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir) if HydraConfig.initialized() else None
