"""Progress bars for long steps; silent when stderr is not a terminal (CI logs, pipes)."""

from __future__ import annotations

import sys

from tqdm import tqdm


def progress(total: int | None, desc: str, enabled: bool = True, unit: str = "batch") -> tqdm:
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        disable=not (enabled and sys.stderr.isatty()),
        leave=False,
        dynamic_ncols=True,
    )
