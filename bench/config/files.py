"""Config groups read outside Hydra's composition, by the gate and report command lines.

`load_group("gate", GateConfig, "default", overrides)` reads `conf/gate/default.yaml` (or a YAML
path), applies dotlist overrides and returns the validated schema object; `to_schema` does the
same for a dataclass, a (Hydra) DictConfig or a plain dict. The YAML's Hydra `defaults` list may
name only the schema (`base_<group>`) and `_self_`. Problems are one-line `UserError`s.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, TypeVar

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from bench.config import CONF_DIR, CompareConfig
from bench.errors import UserError

T = TypeVar("T")


@contextmanager
def config_errors(what: str) -> Iterator[None]:
    """Problems reading or merging a config file, each as one UserError line. YAML is read by
    OmegaConf's safe loader: a tag that would run code (`!!python/...`) is refused, never built."""
    try:
        yield
    except OmegaConfBaseException as exc:
        raise UserError(f"{what}: {' '.join(str(exc).split())}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        tag = "; only plain YAML is read (no tags such as !!python)" if isinstance(exc, yaml.constructor.ConstructorError) else ""
        raise UserError(f"{what}: not valid YAML{where}: {exc.problem or exc.context}{tag}") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{what}: not valid YAML: {' '.join(str(exc).split())}") from None
    except UnicodeDecodeError:
        raise UserError(f"{what}: not a UTF-8 text file") from None
    except OSError as exc:
        raise UserError(f"{what}: cannot read it ({exc.strerror})") from None


def merged(schema: type[T], *layers: Any, validate: Optional[Callable[[T], None]] = None) -> T:
    """The schema with `layers` (dicts or OmegaConf nodes) merged over it, in order; validated."""
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), *layers))
    if validate is not None:
        validate(cfg)
    return cfg


def to_schema(schema: type[T], cfg: Any, what: str, validate: Optional[Callable[[T], None]] = None) -> T:
    """A `schema` object from one, from a (Hydra) DictConfig or from a plain dict; validated."""
    if isinstance(cfg, schema):
        if validate is not None:
            validate(cfg)
        return cfg
    with config_errors(f"bad {what} config"):
        return merged(schema, cfg if isinstance(cfg, DictConfig) else OmegaConf.create(cfg), validate=validate)


def group_file(group: str, source: str | Path) -> Path:
    """`conf/<group>/<source>.yaml`, or `source` itself when it names a YAML file."""
    path = Path(source)
    if path.suffix not in (".yaml", ".yml"):
        path = CONF_DIR / group / f"{source}.yaml"
    if not path.is_file():
        raise UserError(f"no {group} config {str(path)!r}: name one in {CONF_DIR / group} or give a YAML path")
    return path


def read_group_file(group: str, path: Path) -> DictConfig:
    """A group YAML without its `defaults: [base_<group>, _self_]` list."""
    with config_errors(f"bad {group} config {path}"):
        node = OmegaConf.load(path)
        extra = [d for d in node.pop("defaults", []) if d not in (f"base_{group}", "_self_")]
    if extra:
        raise UserError(f"{path}: defaults {extra} need Hydra composition; load it through `python -m bench`")
    return node


def load_group(group: str, schema: type[T], source: str | Path = "default", overrides: Iterable[str] = (),
               validate: Optional[Callable[[T], None]] = None) -> T:
    """Read a group's YAML and apply dotlist overrides (`key=value`; a leading `<group>.` is accepted,
    so the same text works here and on the `python -m bench` command line)."""
    node = read_group_file(group, group_file(group, source))
    prefix = f"{group}."
    dotlist = [o[len(prefix):] if o.startswith(prefix) else o for o in overrides]
    with config_errors(f"bad {group} config or override"):
        return merged(schema, node, OmegaConf.from_dotlist(dotlist), validate=validate)


# ------------------------------------------------------------------------------- compare


def validate_compare(cfg: CompareConfig) -> None:
    cfg.validate()


def load_compare_config(source: str | Path = "default", overrides: Iterable[str] = ()) -> CompareConfig:
    return load_group("compare", CompareConfig, source, overrides, validate_compare)


def as_compare_config(cfg: Any) -> CompareConfig:
    return to_schema(CompareConfig, cfg, "compare", validate_compare)
