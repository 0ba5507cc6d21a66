"""The configuration: its typed schema, its composition and the one validation pass before any work.

    schema.py      the dataclass schema of every config group (Hydra structured configs)
    compose.py     overrides -> the typed Config (`compose`), as `python -m bench` composes them
    files.py       a config group read outside Hydra (the gate and report command lines)
    validation.py  values, combinations and output places, checked before any work
    quick.py       the tiny configuration of the tests and the suites' quick mode

`CONF_DIR` is the config tree (`conf/`); the group names and their options are read from it and from
the registry, never listed by hand.
"""

from pathlib import Path

from bench.config.schema import *  # noqa: F401,F403 - the schema is the package's face
from bench.config.schema import __all__ as _schema

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def group_options(group: str) -> list[str]:
    """The options of a config group: the YAML files of `conf/<group>/` (not the schemas, `base_*`)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml") if not p.stem.startswith("base_"))


def zoo_families() -> list[str]:
    """The model families of the zoo (`+zoo=NAME`, `+sweep=zoo`): one file each in conf/zoo/, so a new one joins with its file."""
    return group_options("zoo")


def config_groups() -> list[str]:
    """Every config group: the folders of `conf/`."""
    return sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir())


def default_choices() -> dict[str, str]:
    """The groups `conf/config.yaml` chooses an option of, with that option. The other groups (a
    sweep, a parameter-server case) are added on the command line: `+sweep=quant`."""
    from omegaconf import OmegaConf

    choices: dict[str, str] = {}
    for entry in OmegaConf.load(CONF_DIR / "config.yaml").get("defaults", []):
        if OmegaConf.is_dict(entry):
            choices.update({str(k): str(v) for k, v in entry.items()})
    return choices


def group_key(group: str) -> str:
    """How the command line names a group: `backend`, or `+sweep` for a group the config does not choose."""
    return group if group in default_choices() else f"+{group}"


__all__ = [*_schema, "CONF_DIR", "config_groups", "default_choices", "group_key", "group_options"]
