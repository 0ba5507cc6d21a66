"""`criteo_terabyte`: the Criteo 1TB click logs (`day_0` .. `day_23`, plain or `.gz`).

`workload.path` is a folder of raw day files, one raw day file, or a folder written by
`python -m bench.preprocess`. Split as DLRM and torchrec do: train on days 0-22, evaluate on the
first half of day 23 (`eval_split: test`) or its second half (`val`). With fewer days, the last day
present is the held-out day and the earlier ones are train; a single file is the held-out day
(no train rows). Ids are hashed modulo `max_ind_range` (40M, the MLPerf cap).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from bench.errors import UserError
from bench.registry import register
from bench.workloads.criteo import layout
from bench.workloads.criteo.binary import read_preprocessed
from bench.workloads.criteo.source import day_split
from bench.workloads.criteo.common import CriteoTextConfig, CriteoWorkload

DAY_FILE = re.compile(r"day_(\d+)(\.(txt|tsv|csv))?(\.gz)?")


@dataclass
class CriteoTerabyteConfig(CriteoTextConfig):
    name: str = "criteo_terabyte"
    categorical: str = "hash"
    max_ind_range: int = 40_000_000


def day_files(folder):
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := DAY_FILE.fullmatch(p.name))]
    days = [d for d, _ in found]
    if len(set(days)) != len(days):
        raise UserError(f"{folder}: a day appears twice (plain and .gz?); keep one file per day")
    return [p for _, p in sorted(found)]


@register("workload", "criteo_terabyte", config=CriteoTerabyteConfig)
class CriteoTerabyte(CriteoWorkload):
    def _open(self, path):
        if path.is_dir() and layout.read_meta(path) is not None:
            parts, meta = read_preprocessed(path)
            return parts, meta["num_embeddings"], "preprocessed"
        sources = day_files(path) if path.is_dir() else [path]
        if not sources:
            raise UserError(f"{path}: no day_N or day_N.gz files")
        folder = self.preprocessed(sources)
        parts, meta = read_preprocessed(folder)
        return parts, meta["num_embeddings"], f"text -> {folder}"

    def _text_sources(self, path):
        if path.is_dir():
            return [] if layout.read_meta(path) is not None else day_files(path)
        return [path]

    def _split(self, parts):
        if len(parts) == 1 and parts[0].day is None:
            parts = [dataclasses.replace(parts[0], day=0)]
        missing = [p.name for p in parts if p.day is None]
        if missing:
            raise UserError(f"criteo_terabyte needs day_N file names; got {', '.join(missing)}")
        return day_split(parts, self.cfg.eval_split)
