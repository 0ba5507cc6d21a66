"""Every leaf config composes, and the schemas reject bad keys and types."""

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from bench import registry
from bench.cli import GROUPS, group_options
from tests.conftest import CONF_DIR, compose_config


def leaf_configs():
    for group in GROUPS:
        for option in group_options(group):
            yield group, option


@pytest.mark.parametrize("group,option", list(leaf_configs()))
def test_every_leaf_config_composes(group, option):
    key = f"+{group}" if group == "sweep" else group
    cfg = compose_config([f"{key}={option}"])
    OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    if group in ("backend", "workload"):
        assert cfg[group].name == option  # one name: file, registry and config


def test_every_registered_plugin_has_a_yaml_and_back():
    for kind in registry.KINDS:
        assert set(registry.names(kind)) == set(group_options(kind))


def test_top_level_keys_and_defaults():
    cfg = compose_config()
    assert cfg.batch_size > 0 and cfg.seed == 0 and cfg.reports_dir == "reports"
    assert "threads" in cfg
    assert (cfg.workload.name, cfg.backend.name, cfg.device.type) == ("synthetic", "fp32", "cpu")


def test_mistyped_key_is_rejected_by_the_schema():
    with pytest.raises(ConfigCompositionException):
        compose_config(["workload.cardinalites=[3]"])


def test_wrong_type_is_rejected_by_the_schema():
    with pytest.raises(ConfigCompositionException):
        compose_config(["timing.trials=many"])


def test_conf_dir_exists():
    assert (CONF_DIR / "config.yaml").is_file()
