"""`criteo_kaggle`: the Kaggle Display Advertising Challenge data (`train.txt` and its CSV variants).

`workload.path` is a raw text file (preprocessed once into the cache) or a folder written by
`python -m bench.preprocess`. Split as facebookresearch/dlrm does, by row order: the rows are 7
"days"; train on the first 6/7, evaluate on the first half of the last 1/7 (`eval_split: test`) or
its second half (`val`). Ids are numbered per column by first appearance, as facebookresearch/dlrm's
Kaggle preprocessing does (`categorical: first_seen`; `max_ind_range` is dlrm's `--max-ind-range`,
0 for its default of none), so a checkpoint dlrm trained on the same rows indexes the same rows.
`categorical: frequency` (sorted ids seen at least `frequency_threshold` times, a shared rare row)
and `hash` are the other choices.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.registry import register
from bench.workloads.criteo.binary import read_preprocessed
from bench.workloads.criteo.source import row_order_split
from bench.workloads.criteo.common import CriteoTextConfig, CriteoWorkload


@dataclass
class CriteoKaggleConfig(CriteoTextConfig):
    name: str = "criteo_kaggle"
    categorical: str = "first_seen"
    max_ind_range: int = 0
    frequency_threshold: int = 1


@register("workload", "criteo_kaggle", config=CriteoKaggleConfig)
class CriteoKaggle(CriteoWorkload):
    def _open(self, path):
        folder = path if path.is_dir() else self.preprocessed([path])
        parts, meta = read_preprocessed(folder)
        return parts, meta["num_embeddings"], "preprocessed" if path.is_dir() else f"text -> {folder}"

    def _text_sources(self, path):
        return [] if path.is_dir() else [path]

    def _split(self, parts):
        return row_order_split(parts, self.cfg.eval_split)
