"""Refuse bad input before any work: one line, exit code 2, nothing trained, no record written.

The command line is composed with Hydra's compose API, the way `hydra.main` will compose it, and
checked twice:

1. Before torch is imported (about a second): the plug-in schemas live in modules that import
   torch, so backends and workloads are composed with open stand-ins; everything else has its
   real schema. Refused here: a key that does not exist (`foo=1`, `timing.trails=3`), a `+key`
   outside a map that takes new entries (`+foo=1`), a value of the wrong type, and the files a job
   would read: `workload.path` must exist and must not be an empty file, `model.checkpoint` must be
   a non-empty file.
2. Once the plug-ins are loaded: the same key checks with the backend and workload schemas
   (`backend=int8_tbe backend.bits=4`, `+backend.foo=1`).

`+key=value` stays allowed where the schema has a free-form map: `+backend.per_table={t_cat_3: int8}`,
`+gate.rules.NAME.min_speedup=1.5`. A sweep is checked value by value: each value of each swept
key (the command line's and the sweep config's) is composed once, the others at their first value.
Failures of a job that did start still become records (`bench.pipeline`).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import glob
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra._internal.utils import get_args_parser
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import ConfigCompositionException, HydraException
from hydra.plugins.sweeper import Sweeper
from omegaconf import MISSING, DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from bench import registry
from bench.config import CONF_DIR, HSTU_ARCH, Config, register_configs
from bench.errors import UserError
from bench.models.checkpoint_file import checkpoint_problem
from bench.config.validation import validate_config

PLUGIN_GROUPS = registry.KINDS  # their schemas come with the plug-in modules (torch)
SHOW_ONLY_FLAGS = ("cfg", "info", "shell_completion", "hydra_help")  # print, run nothing: no input files read


@dataclass
class _OpenPluginsConfig(Config):
    """The main schema with the plug-in groups left open, for the check that runs before torch loads."""

    workload: Any = MISSING
    backend: Any = MISSING


def check(argv: list[str], early: Callable[[DictConfig], None] | None = None, command: str | None = None) -> bool:
    """Raise UserError for the first bad input in `argv` (the arguments of `python -m bench`). `early(cfg)` is a
    command's own check of each composed config that needs no plug-in (recommend's ranges): it runs in the first
    pass, before torch is imported; `command` names a command that runs no Hydra sweep (recommend). False when
    another config tree is given (`--config-path` and the like), which Hydra composes and checks alone; True when
    every swept value was composed here."""
    args, lines = command_line(argv)
    if args.config_path or args.config_name or args.config_dir or args.experimental_rerun:
        return False  # another config tree: Hydra composes and reports it
    overrides = parse(lines)
    for o in overrides:
        if o.key_or_group == "sweep" and not o.is_add():
            raise UserError(f"{o.input_line}: a sweep is added to the config, not chosen: write +{o.input_line.lstrip('~')}")
    modes = [f"--{flag}" for flag in ("run", "multirun", "cfg", "info", "shell_completion") if getattr(args, flag, None)]
    if len(modes) > 1:  # Hydra's own answer is a traceback
        raise UserError(f"{' and '.join(modes)}: give one of them (--cfg and --info show a config, --multirun runs a sweep)")
    read_inputs = not any(getattr(args, flag, None) for flag in SHOW_ONLY_FLAGS)
    _composed.clear()
    with _open_plugin_schemas(), _one_loader():
        _check_sweeps_run_as_jobs(overrides, bool(args.multirun), not read_inputs, command)
        if _backend_key_lines(overrides):  # before the first compose, which takes the sweep's first backend
            check_swept_backend_keys(overrides, lines)
        # every swept axis but the backend's, whose choices only the plug-in schemas tell apart
        for variant in variants(overrides, expand=lambda key: key.split(".")[0] != "backend"):
            cfg = _checked_compose(variant)
            validate(cfg, ("model", "serve"))
            if early is not None:
                early(cfg)
            if read_inputs:
                check_inputs(cfg)
    register_configs()  # loads the plug-ins (torch, torchrec) and their schemas replace the stand-ins
    _composed.clear()
    multirun = bool(args.multirun)
    with _one_loader():  # a new loader: the first pass's reads of the stand-in schemas are not reused
        for variant in variants(overrides):
            cfg = _checked_compose(variant)
            validate(cfg, PLUGIN_GROUPS)
            if read_inputs:
                validate_config(typed(cfg), run_dirs(cfg, multirun))
        from bench.models.contract import check_model_and_data  # torch, loaded with the plug-ins above

        for variant in variants(overrides, expand=lambda key: key.split(".")[0] in ("model", "workload")) if read_inputs else ():
            check_model_and_data(_checked_compose(variant))  # the workload opens its data; a model=custom runs one tiny batch
    _composed.clear()
    return True


def _check_sweeps_run_as_jobs(overrides: list[Override], multirun: bool, shows_only: bool, command: str | None) -> None:
    """A swept value (`batch_size=1,2`) needs a run of many jobs: `-m`, or a sweep config (its hydra.mode);
    Hydra's own answer otherwise is a paragraph and exit 1."""
    swept = next((o for o in overrides if o.is_sweep_override()), None)
    if swept is None or (multirun and not shows_only and command is None):
        return  # nothing to refuse: no compose
    try:  # the run without the swept key: its mode, and what the key holds
        cfg = _compose([o.input_line for o in overrides if not o.is_sweep_override()])
    except Exception:  # noqa: BLE001 - a composing error is reported, with its own message, by the checks that follow
        return
    key, values = swept.get_key_element(), _values(swept)
    node = None if _is_group(swept) else OmegaConf.select(cfg, key.lstrip("+~"), default=None)
    if OmegaConf.is_list(node) and values:
        other = f"write {key}=[{','.join(values)}] for a list"
    elif isinstance(node, str):
        other = f"quote it for one value: {key}='\"{swept.get_value_element_as_str()}\"'"
    else:
        other = ""
    if command is not None:
        raise UserError(f"{swept.input_line}: {command} takes one value a key, not a sweep{': ' + other if other else ''}")
    if shows_only:
        raise UserError(f"{swept.input_line}: --cfg and --info show one job's config: give {key} one value{' (or ' + other + ')' if other else ''}")
    if not multirun and str(OmegaConf.select(cfg, "hydra.mode")) != "RunMode.MULTIRUN":
        raise UserError(f"{swept.input_line} sweeps over values in a run of one job: add -m (--multirun) for a job per value"
                        f"{', or ' + other if other else ''}")


def command_line(argv: list[str]) -> tuple[Any, list[str]]:
    """Hydra's flags and the override lines of `argv`, read by Hydra's own argument parser (a flag's value, as
    `job` in `--cfg job`, is no override)."""
    args, extra = get_args_parser().parse_known_args(argv)
    return args, [*args.overrides, *(a for a in extra if not a.startswith("-"))]


def parse(lines: list[str]) -> list[Override]:
    """The command line's overrides; a syntax error is one line that shows how to quote the value."""
    parser = OverridesParser.create()
    for line in lines:
        try:
            parser.parse_override(line)
        except HydraException:
            key, eq, value = line.partition("=")
            hint = f"; quote the value for Hydra and the shell: '{key}=\"{value}\"'" if eq else ""
            raise UserError(f"cannot parse the override {line!r}{hint} (Hydra's override grammar: "
                            "https://hydra.cc/docs/advanced/override_grammar/basic/)") from None
    return parser.parse_overrides(lines)


def typed(cfg: DictConfig) -> Config:
    """The typed Config of a composed config (without its `hydra` node)."""
    cfg = copy.copy(cfg)
    with open_dict(cfg):
        cfg.pop("hydra", None)
    try:
        return OmegaConf.to_object(cfg)
    except OmegaConfBaseException as exc:
        raise UserError(_first_line(exc)) from None


def run_dirs(cfg: DictConfig, multirun: bool) -> list[tuple[str, str]]:
    """The run's own output folder: Hydra's run folder, or its sweep folder for a sweep."""
    multirun = multirun or str(OmegaConf.select(cfg, "hydra.mode")) == "RunMode.MULTIRUN"
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        return [(key, str(OmegaConf.select(cfg, key)))]
    except OmegaConfBaseException as exc:
        raise UserError(f"{key}: {_first_line(exc)}") from None


# ------------------------------------------------------------------------------------ composing


@contextmanager
def _open_plugin_schemas() -> Iterator[None]:
    """Hydra's ConfigStore with open stand-ins for the plug-in schemas; the entries it replaced are
    put back afterwards (and those it added removed)."""
    cs = ConfigStore.instance()
    entries: list[tuple[str | None, str, Any]] = [(None, "base_config", _OpenPluginsConfig)]
    for group in PLUGIN_GROUPS:
        for path in (CONF_DIR / group).glob("*.yaml"):
            stand_in = OmegaConf.create({})
            OmegaConf.set_struct(stand_in, False)  # any key: the real schema checks them in pass 2
            entries.append((group, f"base_{path.stem}", stand_in))
    saved = {(g, n): (cs.repo.get(g, {}) if g else cs.repo).get(f"{n}.yaml") for g, n, _ in entries}
    try:
        register_configs(plugins=False)
        for group, name, node in entries:
            cs.store(group=group, name=name, node=node)
        yield
    finally:
        for (group, name), before in saved.items():
            folder = cs.repo.get(group, {}) if group else cs.repo
            if before is None:
                folder.pop(f"{name}.yaml", None)
            else:
                folder[f"{name}.yaml"] = before


_composed: dict[tuple[str, ...], DictConfig] = {}  # within one pass: the sweep axes and the first variant share a compose


@contextmanager
def _one_loader() -> Iterator[None]:
    """One Hydra config loader for the composes of a pass: the option files are read once, not at every compose
    (a quarter of a compose's cost)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


def _compose(overrides: list[str]) -> DictConfig:
    key = tuple(overrides)
    if key not in _composed:
        if GlobalHydra.instance().is_initialized():  # inside a pass's `_one_loader`
            _composed[key] = compose(config_name="config", overrides=overrides, return_hydra_config=True)
        else:
            with _one_loader():
                _composed[key] = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    return _composed[key]


@contextmanager
def sweep_checked() -> Iterator[None]:
    """Hydra's sweeper left without its own check of the batch: before launching, it composes every job's
    config once to see that it composes, then the launcher composes each again to run it (42 composes of the default
    sweep before job 0: 15-20 s of a slow machine's start-up). `check` has composed each swept value already, with
    better messages; a combination of values that still fails to compose stops the sweep at its job, the jobs before
    it keeping their records."""
    # on the base class: Hydra's plug-in scan loads the basic sweeper's module anew, so its class is not importable
    validate = Sweeper.validate_batch_is_legal
    Sweeper.validate_batch_is_legal = lambda self, batch: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        Sweeper.validate_batch_is_legal = validate  # type: ignore[method-assign]


def _checked_compose(overrides: list[str]) -> DictConfig:
    """The composed config, after checking every override's key against the schema."""
    try:
        cfg = _compose(overrides)
    except ConfigCompositionException as exc:
        raise UserError(_composition_error(exc, overrides)) from None
    except (HydraException, OmegaConfBaseException) as exc:
        raise UserError(_first_line(exc)) from None
    except AssertionError:  # OmegaConf's own assertion when a key is set under a null section
        message = _null_section_error(overrides)
        if message is None:
            raise
        raise UserError(message) from None
    for line in overrides:
        override = OverridesParser.create().parse_override(line)
        if override.is_add() and not _is_group(override):
            _check_declared(cfg, override)
    return cfg


def variants(overrides: list[Override], expand: Callable[[str], bool] = lambda key: True) -> Iterator[list[str]]:
    """Override lists without sweeps: each value of each swept key for which `expand(key)` holds
    once, every other swept key at its first value."""
    plain = [o.input_line for o in overrides if not o.is_sweep_override()]
    swept = {o.get_key_element(): _values(o) for o in overrides if o.is_sweep_override()}
    try:  # the sweep config's own axes, unless the command line sets the key
        first = [*plain, *(f"{k}={v[0]}" for k, v in swept.items())]
        params = _compose(first).hydra.sweeper.get("params") or {}
    except Exception:  # noqa: BLE001 - composing errors are reported with the variant below
        params = {}
    for o in OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()]):
        if o.get_key_element().lstrip("+") not in {k.lstrip("+") for k in (*swept, *(p.split("=")[0] for p in plain))}:
            swept[o.get_key_element()] = _values(o) if o.is_sweep_override() else [o.get_value_element_as_str()]
    swept = {k: v for k, v in swept.items() if v}
    base = {k: v[0] for k, v in swept.items()}
    yield [*plain, *(f"{k}={v}" for k, v in base.items())]
    for key, values in swept.items():
        for value in values[1:] if expand(key.lstrip("+~")) else ():
            yield [*plain, *(f"{k}={value if k == key else v}" for k, v in base.items())]


def _values(override: Override) -> list[str]:
    try:
        return list(override.sweep_string_iterator())
    except Exception:  # noqa: BLE001 - a glob sweep: Hydra expands it against the config groups
        return []


def _is_group(override: Override) -> bool:
    key = override.key_or_group.split("@")[0]
    return "/" in key or (CONF_DIR / key).is_dir()


# ---------------------------------------------------------------------------------------- keys


def _check_declared(cfg: DictConfig, override: Override) -> None:
    """A `+key` must name an option of the schema, or an entry of a map that takes new entries."""
    key = override.key_or_group
    if key.split(".")[0] == "hydra":
        return
    node: Any = cfg
    parts = key.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(node, DictConfig):
            raise UserError(f"unknown key {key!r} in {override.input_line}: {'.'.join(parts[:depth])} is a value, not a group of options")
        declared = _declared_fields(node)  # None: a map (backend.per_table, gate.rules), whose entries are checked as they go
        if declared is not None and part not in declared:
            raise UserError(_unknown_key_message(key, override.input_line, node, declared, added=True))
        node = node._get_node(part)


def _declared_fields(node: DictConfig) -> list[str] | None:
    """The option names of a schema node, less those for testing only; None for a map that takes any key."""
    kind = OmegaConf.get_type(node)
    if kind is not None and dataclasses.is_dataclass(kind):
        return [f.name for f in dataclasses.fields(kind) if not f.metadata.get("testing_only")]
    return None


def _unknown_key_message(key: str, line: str, parent: Any, options: list[str] | None, added: bool = False) -> str:
    head, _, leaf = key.rpartition(".")
    if options is None:  # a map: entries are added with +
        return f"{line}: {head} takes new entries with a +: +{line.lstrip('+')}"
    where = "the config"
    if head:
        where = head
        if isinstance(parent, DictConfig) and head in PLUGIN_GROUPS and "name" in parent:
            where = f"{head} {parent.name}"
    shown = [o for o in options if o != "name"]
    close = difflib.get_close_matches(leaf, shown, n=1, cutoff=0.6)
    if close:
        hint = f"; did you mean {head + '.' if head else ''}{close[0]}?"
    elif shown:
        hint = f"; its options: {', '.join(shown[:12])}{' ...' if len(shown) > 12 else ''}"
    else:
        hint = "; it has no options"
    note = " (+ adds entries only to maps such as backend.per_table)" if added else ""
    return f"unknown key {key!r} in {line}: {where} has no option {leaf!r}{hint}{note}; python -m bench --help lists the options"


_COULD_NOT_OVERRIDE = re.compile(r"Could not override '([^']+)'")


def _composition_error(exc: ConfigCompositionException, overrides: list[str]) -> str:
    text = str(exc)
    m = _COULD_NOT_OVERRIDE.search(text)
    if m:
        key = m.group(1)
        line = next((o for o in overrides if _key(o) == key), key)
        parent, options = _parent_options(key, [o for o in overrides if o != line])
        return _unknown_key_message(key, line, parent, options)
    cause = exc.__cause__
    if cause is not None and text.startswith("Error merging override"):
        return f"{text.removeprefix('Error merging override').strip()}: {_first_line(cause)}"
    return _first_line(exc)


def _parent_options(key: str, others: list[str]) -> tuple[Any, list[str] | None]:
    """The node that would hold `key` and its options (None: a map), from the config composed without it."""
    head = key.rpartition(".")[0]
    try:
        cfg = _compose(others)
        node = OmegaConf.select(cfg, head) if head else cfg
    except Exception:  # noqa: BLE001 - only a hint
        return None, []
    if not isinstance(node, DictConfig):
        return node, []
    return node, _declared_fields(node)


def _null_section_error(overrides: list[str]) -> str | None:
    """The message for an override that sets a key under a section this run leaves null (`serve.bound_ms=80`
    without +sweep=serve, `model.hstu.num_layers=3` on another model), which OmegaConf answers with a bare
    assertion; None when no override does that."""
    dotted = [line for line in overrides if "." in _key(line) and not _is_group(OverridesParser.create().parse_override(line))]
    try:
        cfg = _compose([line for line in overrides if line not in dotted])
    except Exception:  # noqa: BLE001 - another problem: the caller reports the original error
        return None
    for line in dotted:
        parts = _key(line).split(".")
        for depth in range(1, len(parts)):
            section = ".".join(parts[:depth])
            if OmegaConf.select(cfg, section, default=MISSING) is None:
                setters = " or ".join(_what_sets(section)) or "nothing in conf/"
                return f"{line}: {section} is null in this run, so it has no options to set: {setters} sets it"
    return None


def _key(line: str) -> str:
    return line.split("=", 1)[0].lstrip("+~")


def _what_sets(section: str) -> list[str]:
    """The options that set `section` (a dotted path of the composed config): `+sweep=serve`, `model=hstu`,
    read from the option files under conf/ (a file's keys sit under its group unless it says `@package _global_`)."""
    chosen_by_default = {next(iter(d)) for d in OmegaConf.load(CONF_DIR / "config.yaml").defaults if isinstance(d, DictConfig)}
    found = []
    for path in sorted(CONF_DIR.glob("*/*.yaml")):
        group, name = path.parent.name, path.stem
        text = path.read_text()
        if "@package _global_" in text.split("\n", 1)[0]:
            key = section
        elif section.startswith(f"{group}."):
            key = section.removeprefix(f"{group}.")
        else:
            continue  # a group's file sets keys under its group only
        if OmegaConf.select(OmegaConf.create(text), key, default=None) is None:
            continue
        if (group, name) == ("sweep", "recommend"):  # a command, not a sweep (bench.cli)
            found.append("python -m bench recommend")
        else:
            found.append(f"{'' if group in chosen_by_default else '+'}{group}={name}")
    return found


def _first_line(exc: BaseException) -> str:
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


# ------------------------------------------------------------------------------------- choices


def validate(cfg: DictConfig, groups: tuple[str, ...]) -> None:
    """Each group's own check of its choices (a `validate()` on its schema), nothing built."""
    for group in groups:
        if cfg.get(group) is None:  # an optional node left unset (serve outside +sweep=serve)
            continue
        try:
            schema = OmegaConf.to_object(cfg[group])
        except OmegaConfBaseException as exc:
            raise UserError(f"{group}: {_first_line(exc)}") from None
        if hasattr(schema, "validate"):
            schema.validate()


# -------------------------------------------------------------------------------------- inputs


def check_inputs(cfg: DictConfig) -> None:
    """The files a job reads must be there (and not be empty) before any work starts."""
    path = _value(cfg.workload, "path")
    if path is not None:
        data = Path(str(path)).expanduser()
        if not data.exists() and not glob.glob(str(data)):
            workload = cfg.hydra.runtime.choices.get("workload")
            raise UserError(f"workload.path={path}: no such file or folder (workload {workload} reads it; give workload.path=PATH)")
        if data.is_file() and data.stat().st_size == 0:
            raise UserError(f"workload.path={path} is an empty file: give a file with data rows")
    checkpoint = _value(cfg.model, "checkpoint")
    if checkpoint:
        problem = checkpoint_problem(str(checkpoint))  # missing, empty, or not a torch file at all
        if problem is not None:
            raise UserError(problem)


def _value(node: DictConfig, key: str) -> Any:
    """A set, resolvable value of `node.key`, or None."""
    if key not in node or OmegaConf.is_missing(node, key):
        return None
    try:
        return node[key]
    except OmegaConfBaseException:
        return None  # an interpolation that does not resolve: the job reports it


# ------------------------------------------------------------------------ keys of a swept backend


def swept_backends(overrides: list[Override]) -> list[str]:
    """The backends a sweep runs (the command line's `backend=a,b` or the sweep config's); [] when the
    backend group is not swept."""
    if not any(o.key_or_group == "backend" and o.is_sweep_override() for o in overrides) and not any(
            o.key_or_group == "sweep" for o in overrides):
        return []
    names: list[str] = []
    for variant in variants(overrides):
        for line in variant:
            key, _, value = line.partition("=")
            if key.lstrip("+~") == "backend" and value not in names:
                names.append(value)
    return names if len(names) > 1 else []


def _backend_key_lines(overrides: list[Override]) -> list[Override]:
    """The command line's `backend.KEY=VALUE` (or `+backend.KEY=...`) settings that are not sweeps themselves."""
    return [o for o in overrides if o.key_or_group.startswith("backend.") and not o.is_sweep_override() and not o.is_delete()]


def check_swept_backend_keys(overrides: list[Override], lines: list[str]) -> None:
    """A `backend.KEY=VALUE` beside a swept backend group names an option every swept backend must have:
    refused in one line, naming the backends that have it and the command that sweeps them, where some lack it."""
    backends = swept_backends(overrides)
    if not backends:
        return
    schemas = registry.entries("backend")
    for o in _backend_key_lines(overrides):
        option = o.key_or_group.split(".")[1]
        having = [b for b in backends if b in schemas and option in {f.name for f in dataclasses.fields(schemas[b].config)}]
        lacking = [b for b in backends if b not in having]
        if not lacking:
            continue
        if not having:
            options = sorted({f.name for b in backends if b in schemas for f in dataclasses.fields(schemas[b].config)} - {"name"})
            close = difflib.get_close_matches(option, options, n=1, cutoff=0.6)
            hint = f"did you mean backend.{close[0]}? " if close else ""
            raise UserError(f"{o.input_line}: no backend of this sweep has the option {option!r} "
                            f"({_names(backends)}); {hint}python -m bench --help lists each backend's options")
        swept = [f"backend={','.join(having)}" if _key(ln) == "backend" else ln for ln in lines]
        if not any(_key(ln) == "backend" for ln in lines):
            swept.append(f"backend={','.join(having)}")
        others = f"nor {_names(lacking[1:])}; " if len(lacking) > 1 else ""
        raise UserError(f"{o.input_line}: backend {lacking[0]} has no option {option!r} ({others}{_names(having)} "
                        f"{'has' if len(having) == 1 else 'have'} it): sweep those that have it alone, python -m bench -m {' '.join(swept)}, "
                        "and the others in a run without it")


def _names(backends: list[str]) -> str:
    return ", ".join(backends[:6]) + (f" and {len(backends) - 6} more" if len(backends) > 6 else "")


# +sweep=scale on a sequential model (arch hstu): its own axes (conf/sweep/sequential/scale.yaml; a subfolder, so
# --help lists the one +sweep=scale)
SEQUENTIAL_SWEEPS = {"scale": "+sweep/sequential=scale"}


def sequential_sweep(argv: list[str]) -> list[str]:
    """`argv` with `+sweep=scale` read as `+sweep/sequential=scale` where the model it composes is a sequential ranker
    (`+sweep=scale model=hstu +preset=dlrmv3`): the DLRM axes (26 tables, access patterns, batch sizes) name
    keys synthetic_seq does not have, and a Hydra sweep config cannot pick its axes by the model it is given."""
    sweeps = {i: a.lstrip("+").split("=", 1)[1] for i, a in enumerate(argv) if a.lstrip("+").startswith("sweep=")}
    at = next((i for i, name in sweeps.items() if name in SEQUENTIAL_SWEEPS), None)
    if at is None:
        return argv
    _, lines = command_line([a for i, a in enumerate(argv) if i != at])
    lines = [a for a in lines if "," not in a.partition("=")[2]]
    try:
        with _open_plugin_schemas():
            arch = _compose(lines).model.arch
    except Exception:  # noqa: BLE001 - whatever does not compose, `check` reports as it is
        return argv
    finally:
        _composed.clear()
    if arch != HSTU_ARCH:
        return argv
    return [SEQUENTIAL_SWEEPS[sweeps[at]] if i == at else a for i, a in enumerate(argv)]


def sweep_ready(argv: list[str]) -> list[str]:
    """`argv` as Hydra runs it: beside a swept backend group, each `backend.KEY=VALUE` becomes the one-value
    sweep `backend.KEY=choice(VALUE)`. Hydra composes a sweep's primary config with its sweeps left out, so
    with the default backend (fp32), where the key may not exist; as a sweep the key is applied in each job's
    own config, with its own backend. `check` has already made sure every swept backend has the key."""
    _, lines = command_line(argv)
    try:
        overrides = parse(lines)
        if not swept_backends(overrides):
            return argv
    except Exception:  # noqa: BLE001 - whatever `check` let through, Hydra reports as it is
        return argv
    rewrite = {o.input_line: f"{o.input_line.split('=', 1)[0]}=choice({o.get_value_element_as_str()})" for o in _backend_key_lines(overrides)}
    return [rewrite.get(a, a) for a in argv]
