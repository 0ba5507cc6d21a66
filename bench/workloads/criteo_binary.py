"""`criteo_binary`: Criteo data already in a binary layout made by another tool.

`workload.path` is one of (see `bench/workloads/criteo/binary.py`): a torchrec
`BinaryCriteoUtils` folder (`day_N_{dense,sparse,labels}.npy`), a facebookresearch/dlrm `.bin`
file or folder of them, or a dlrm `day_N_reordered.npz` file or folder.

Split: day files follow the 1TB convention (train on the days before the last, evaluate on the
first half of the last day, or the second with `eval_split: val`); dlrm's
`*_train.bin` / `*_test.bin` / `*_val.bin` are used as named; a single file without a day number
is split by row order like Kaggle. Table sizes come from `num_embeddings_per_feature` or, when
not given, from the largest id per table (one streaming pass, cached), capped by `max_ind_range`
(ids are taken modulo it, as torchrec's `hashes`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from bench.errors import UserError
from bench.hashing import config_hash
from bench.io import write_json_atomic
from bench.registry import register
from bench.workloads.criteo.binary import column_max, detect_binary
from bench.workloads.criteo.layout import capped
from bench.workloads.criteo.convert import source_identity
from bench.workloads.criteo.source import (
    NUM_SPARSE,
    Segment,
    Split,
    day_split,
    row_order_split,
)
from bench.workloads.criteo.common import CriteoConfig, CriteoWorkload


@dataclass
class CriteoBinaryConfig(CriteoConfig):
    name: str = "criteo_binary"
    num_embeddings_per_feature: Optional[list[int]] = None
    max_ind_range: int = 40_000_000  # 0: no cap


@register("workload", "criteo_binary", config=CriteoBinaryConfig)
class CriteoBinary(CriteoWorkload):
    def _open(self, path):
        layout_name, parts = detect_binary(path)
        sizes = self.cfg.num_embeddings_per_feature
        if sizes is not None:
            sizes = [int(s) for s in sizes]
            if len(sizes) != NUM_SPARSE:
                raise UserError(f"workload.num_embeddings_per_feature has {len(sizes)} entries; Criteo has {NUM_SPARSE} tables")
            modulo = sizes
        else:
            cap = self.cfg.max_ind_range
            largest = self._column_max(path, parts)
            sizes = [max(capped(m + 1, cap), 1) for m in largest]
            modulo = [cap] * NUM_SPARSE if cap > 0 else None
        for p in parts:
            p.modulo = modulo
        return parts, sizes, layout_name

    def _column_max(self, path, parts) -> list[int]:
        files = [path] if path.is_file() else sorted(f for f in path.iterdir() if f.is_file())
        key = config_hash([source_identity(f) for f in files])
        cache = self.cache_dir / "criteo" / f"column_max-{key}.json"
        if cache.exists():
            return json.loads(cache.read_text())
        largest = column_max(parts)
        write_json_atomic(cache, largest)  # parallel runs may read it while another writes it
        return largest

    def _split(self, parts):
        by_role = {role: [p for p in parts if role in p.name.lower()] for role in ("train", "test", "val")}
        if all(len(v) <= 1 for v in by_role.values()) and by_role["train"] and by_role[self.cfg.eval_split]:
            whole = lambda ps: Split([Segment(p, 0, p.rows) for p in ps])  # noqa: E731
            other = "val" if self.cfg.eval_split == "test" else "test"
            note = f"files as named: train {by_role['train'][0].name}, eval {by_role[self.cfg.eval_split][0].name}"
            return whole(by_role["train"]), whole(by_role[self.cfg.eval_split]), whole(by_role[other]), note
        if all(p.day is not None for p in parts):
            return day_split(parts, self.cfg.eval_split)
        if len(parts) == 1:
            return row_order_split(parts, self.cfg.eval_split)
        raise UserError(
            f"{self.cfg.path}: cannot tell the splits apart: name files day_N or *_train / *_test / *_val"
        )


