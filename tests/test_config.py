"""Every leaf config composes, and the schemas reject bad keys and types."""

import dataclasses
import subprocess
import sys

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from bench import registry
from bench.config import config_groups, group_key, group_options
from bench.config.compose import compose_dictconfig, to_config
from bench.config import Config
from bench.sweep import count_jobs
from tests.conftest import CONF_DIR, compose_config


def leaf_configs():
    for group in config_groups():
        for option in group_options(group):
            yield group, option


@pytest.mark.slow
@pytest.mark.parametrize("group,option", list(leaf_configs()))
def test_every_leaf_config_composes(group, option):
    key = group_key(group)
    raw = compose_dictconfig([f"{key}={option}"])
    OmegaConf.to_container(raw, resolve=True, throw_on_missing=True)
    cfg = to_config(raw)  # the typed object the runner and plug-ins receive
    assert isinstance(cfg, Config)
    if group in ("backend", "workload"):
        part = getattr(cfg, group)
        assert part.name == option  # one name: file, registry and config
        assert type(part) is registry.get(group, option).config  # the plug-in's own schema, not a DictConfig


def test_every_registered_plugin_has_a_yaml_and_back():
    for kind in registry.KINDS:
        assert set(registry.names(kind)) == set(group_options(kind))


def test_top_level_keys_and_defaults():
    cfg = compose_config()
    assert cfg.batch_size > 0 and cfg.seed == 0 and cfg.reports_dir == "reports"
    assert cfg.threads is None
    assert (cfg.workload.name, cfg.backend.name, cfg.device.type) == ("synthetic", "fp32", "cpu")


def test_mistyped_key_is_rejected_by_the_schema():
    with pytest.raises(ConfigCompositionException):
        compose_config(["workload.cardinalites=[3]"])


def test_wrong_type_is_rejected_by_the_schema():
    with pytest.raises(ConfigCompositionException):
        compose_config(["timing.trials=many"])


def test_conf_dir_exists():
    assert (CONF_DIR / "config.yaml").is_file()


def test_typed_config_resolves_like_hydra():
    """The dataclasses carry exactly what Hydra composed: record config and hash are unchanged."""
    raw = compose_dictconfig(["backend=uint4", "+backend.per_table={t_cat_3: int8}"])
    assert dataclasses.asdict(to_config(raw)) == OmegaConf.to_container(raw, resolve=True)


@pytest.mark.slow
@pytest.mark.parametrize("sweep", ["quant", "nightly"])
def test_sweep_backends_come_from_the_registry(sweep):
    """A new backend joins the default sweeps without editing YAML; fp32 (the reference) runs first."""
    cfg = compose_dictconfig([f"+sweep={sweep}"])
    hydra = compose_dictconfig([f"+sweep={sweep}"], with_hydra=True)
    listed = hydra.hydra.sweeper.params.backend.split(",")
    assert listed == registry.sweep_backends() and listed[0] == "fp32"
    assert set(listed) == {n for n, e in registry.entries("backend").items() if e.in_sweeps}
    devices = len(str(hydra.hydra.sweeper.params.device).split(","))
    sizes = len(str(hydra.hydra.sweeper.params.batch_size).split(","))
    assert count_jobs(hydra) == len(listed) * devices * sizes
    assert cfg.sweep_name == sweep


def test_importing_the_config_loads_neither_gate_nor_report():
    code = "import bench.config, sys; assert 'pandas' not in sys.modules and not any(m.startswith(('bench.gate', 'bench.report')) for m in sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_command_line_loads_no_torch_before_its_checks():
    """Bad input is refused in about a second: the CLI imports torch only after the pre-flight checks."""
    code = "import bench.cli, sys; assert not any(m in sys.modules for m in ('torch', 'torchrec', 'pandas')), 'imported too early'"
    subprocess.run([sys.executable, "-c", code], check=True)
