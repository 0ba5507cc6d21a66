"""A sweep composes each job's config once: bench.preflight has composed every swept value before Hydra launches,
so Hydra's own composing of the whole batch before job 0 is left out (`preflight.sweep_checked`)."""

from __future__ import annotations

import sys

import hydra
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.global_hydra import GlobalHydra
from hydra.plugins.sweeper import Sweeper

from bench import preflight


def _multirun(conf_dir, monkeypatch, checked: bool) -> tuple[int, list[int]]:
    """(configs composed for the jobs, the jobs' x) of a three-job multirun of a one-key config."""
    composed = []
    real = ConfigLoaderImpl.load_sweep_config

    def counting(self, master_config, sweep_overrides):
        composed.append(list(sweep_overrides))
        return real(self, master_config, sweep_overrides)

    monkeypatch.setattr(ConfigLoaderImpl, "load_sweep_config", counting)
    monkeypatch.setattr(sys, "argv", ["app", "-m", "x=1,2,3", f"hydra.sweep.dir={conf_dir / 'multirun'}"])
    ran = []
    app = hydra.main(version_base="1.3", config_path=str(conf_dir), config_name="config")(lambda cfg: ran.append(cfg.x))
    GlobalHydra.instance().clear()
    if checked:
        with preflight.sweep_checked():
            app()
    else:
        app()
    return len(composed), ran


def test_each_job_is_composed_once_in_a_checked_sweep_and_twice_without(tmp_path, monkeypatch):
    (tmp_path / "config.yaml").write_text("x: 0\n")
    validate = Sweeper.validate_batch_is_legal
    assert _multirun(tmp_path, monkeypatch, checked=True) == (3, [1, 2, 3])
    assert Sweeper.validate_batch_is_legal is validate  # Hydra's check is back for whatever runs next
    assert _multirun(tmp_path, monkeypatch, checked=False) == (6, [1, 2, 3])
