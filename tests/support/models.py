"""A small fp32 model trained once per session or module, and configs that start from a copy of it."""

import shutil
from pathlib import Path

from bench.config.compose import compose
from bench.runner import Session
from bench.config.quick import TINY_OVERRIDES as TINY

# TINY, smaller again: four small tables, so a job (training included) takes about a second.
FAST = [
    *TINY,
    "workload.cardinalities=[100,50,30,20]",
    "workload.train_samples=4096",
    "workload.eval_samples=2048",
    "workload.calibration_samples=1024",
    "model.train.samples=4096",
    "model.train.batch_size=1024",
    "eval_batch_size=1024",
    "batch_size=256",
]


def train_once(root: Path, overrides: list[str]) -> Path:
    """Train the fp32 model of `overrides` into `root`'s cache; the cache's `models` folder."""
    cfg = compose([*overrides, f"cache_dir={root}", f"reports_dir={root / 'reports'}"])
    work = Session().work
    work.model(cfg, work.workload(cfg))
    return root / "models"


def trained_place(root: Path, overrides: list[str]) -> Path:
    """`root` with the fp32 model of `overrides` trained once into `root/cache/models`, for commands run with
    `cache_dir=root/cache`."""
    shutil.copytree(train_once(root / "trained", overrides), root / "cache" / "models")
    return root


def config_maker(tmp_path: Path, models: Path, overrides: list[str]):
    """`make(*more)`: configs of `overrides` whose cache (holding a copy of `models`) and reports live in `tmp_path`."""
    shutil.copytree(models, tmp_path / "cache" / "models")

    def make(*more):
        return compose([*overrides, f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}", *more])

    return make
