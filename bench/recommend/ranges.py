"""The recommend's own values, checked before torch is imported: a range error prints in about a second.

`python -m bench recommend` checks its command line in two passes (bench.preflight). The first composes the config
before the plug-ins (torch, torchrec) load; `check_ranges` runs there on that composed config, and again on the typed
one before the funnel starts (bench.recommend.command). It reads only the config: the objectives, the candidate
lists, the backends' names (the option files of `conf/backend/`), whether the tune map is there, and the sizes the
eval split can hold (known before torch loads only where the command line or a preset sets `workload.eval_samples`;
otherwise the check runs again once the workload's schema is loaded). This module
imports nothing that imports torch; tests/test_recommend_command.py checks that a range error loads no torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.config import check_objectives, check_recommend_config, group_options
from bench.errors import UserError

QUERY_ROWS = 256  # about one query's rows (MLPerf DLRM-v2's query sizes average 270 pairs): the smallest batch the batcher forms


def timed_sizes(batch_sizes: list[int]) -> list[int]:
    """The offline batch sizes a backend is timed at: a query's rows, and each batcher size."""
    return sorted({QUERY_ROWS, *batch_sizes})


def check_ranges(cfg: Any) -> None:
    """One line (UserError) for the first value the funnel cannot run with: a bound, budget or limit out of range,
    an empty or non-positive candidate list, an unknown backend, a missing tune map, a batcher size the eval split
    cannot fill.
    `cfg` is the typed Config or the composed DictConfig of the first pre-flight pass (the same keys)."""
    check_objectives(cfg.slo, cfg.accuracy, cfg.memory)
    check_recommend_config(cfg.recommend)
    known = group_options("backend")
    for name in cfg.recommend.backends or ():
        if name not in known:
            raise UserError(f"unknown backend {name!r} in recommend.backends: choose among {', '.join(known)} "
                            "(recommend.backends=[fp32,int8_tbe])")
    tune_map = cfg.recommend.tune_map
    if tune_map and not Path(str(tune_map)).is_file():  # its contents are read with the TBE backend's reader (torch)
        raise UserError(f"recommend.tune_map={str(tune_map)!r}: no such file; give the per_table.yaml that `+sweep=tune` wrote")
    largest = max(timed_sizes(list(cfg.recommend.batch_sizes)))
    eval_samples = getattr(cfg.workload, "eval_samples", None)
    if isinstance(eval_samples, int) and largest > eval_samples:
        raise UserError(f"recommend.batch_sizes reaches {largest} rows, more than the eval split's {eval_samples} samples: "
                        "lower recommend.batch_sizes or raise workload.eval_samples")
