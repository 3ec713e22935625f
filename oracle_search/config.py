"""Experiment files: `--config FILE` holds any spec field and any command option; flags override it.

TOML, because Python reads it with its standard library (`tomllib`, 3.11+; `tomli` on 3.10) and its types are
unambiguous: YAML 1.1 readers (PyYAML) read `1e-3` as a string and `no` as false. The layout is the spec's own
(`spec.json` of a run loads as a config too), command options go in an `[options]` table. The options
dataclasses' fields (oracle_search.options) go in its sub-tables, keyed by field name; any option may also be
given flat by its flag's name (`no_bracket = true` is `[options.oracle] bracket = false`):

    preset = "tiny"                                # the base; fields below override it
    model = "examples.custom_cnn.model:small_cnn"
    epochs = 4
    grid = [0.03, 0.1, 0.3]
    [schedule]
    name = "warmup"
    [resources]
    cpus_per_trial = 1.0
    [options]
    out = "runs/custom"
    [options.oracle]
    seeds = 1
    bracket = false

TOML has no null: a field left out keeps the preset's value. `--print-config` writes the resolved experiment
in this format; loading it gives the same spec, field for field.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import typing
from pathlib import Path
from typing import Any, Sequence

import tomli_w

from oracle_search.security import redact
from trainables.presets import PRESETS
from trainables.spec import ExperimentSpec, Resources, SpecError, upgrade_amp

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

OPTIONS_TABLE = "options"
SPEC_KEY = "config_spec"  # where the file's spec fields wait on the parsed arguments for spec_from_args
NOT_OPTIONS = {"help", "command", "run", "config", "print_config", SPEC_KEY, "renamed_flags"}  # flags.RENAMED
ORACLE_MODES = ("racing", "exhaustive")  # `--oracle`: how the Oracle searches a cycle (racing.OracleSearch)


@dataclasses.dataclass(frozen=True)
class Experiment:
    """An experiment file: spec fields (nested like ExperimentSpec.to_dict(), any subset) and command options."""

    spec: dict[str, Any]
    options: dict[str, Any]


def load(path: str | Path) -> Experiment:
    """Read and check an experiment file (.toml, or a run's spec.json); SpecError names a bad key or value."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise SpecError("config", f"cannot read {path} ({err.strerror or err})") from None
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            raise SpecError("config", f"{path}: expected a .toml file (or a run's spec.json)")
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as err:
        raise SpecError("config", f"{path}: {err}") from None
    if not isinstance(data, dict):
        raise SpecError("config", f"{path}: expected a table of fields")
    options = data.pop(OPTIONS_TABLE, {})
    if not isinstance(options, dict):
        raise SpecError(OPTIONS_TABLE, f"must be a table in {path}")
    return Experiment(_checked(upgrade_amp(data), ExperimentSpec, "", path), options)


def _checked(data: dict, cls: type, prefix: str, path: Path) -> dict:
    """`data` with every key a field of dataclass `cls` and every value of its type (ints widened to floats)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for key, value in data.items():
        name = prefix + key
        if key not in hints:
            raise SpecError(name, f"unknown key in {path}; allowed: {', '.join(hints)}")
        out[key] = _typed(value, hints[key], name, path)
    return out


def _typed(value: Any, hint: Any, name: str, path: Path) -> Any:
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise SpecError(name, f"must be a table in {path}")
        return _checked(value, hint, f"{name}.", path)
    args = typing.get_args(hint)
    if type(None) in args:  # X | None: null comes only from JSON
        return None if value is None else _typed(value, next(a for a in args if a is not type(None)), name, path)
    if typing.get_origin(hint) is tuple:
        if not isinstance(value, list | tuple):
            raise SpecError(name, f"must be a list in {path}, got {value!r}")
        return [_typed(v, args[0], name, path) for v in value]
    ok = {bool: isinstance(value, bool),
          int: isinstance(value, int) and not isinstance(value, bool),
          float: isinstance(value, int | float) and not isinstance(value, bool),
          str: isinstance(value, str)}.get(hint, True)
    if not ok:
        raise SpecError(name, f"expected {hint.__name__} in {path}, got {value!r}")
    return float(value) if hint is float else value


# --- the spec a command runs -------------------------------------------------------------------------------------

def _deep_update(base: dict, changes: dict) -> dict:
    return base | {k: _deep_update(base[k], v) if isinstance(v, dict) else v for k, v in changes.items()}


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def base_spec(preset: str, fields: dict[str, Any] | None) -> ExperimentSpec:
    """The preset with an experiment file's spec fields applied. A name that is no preset is allowed when the
    file gives the whole spec (a run's spec.json made through the Python API names its own experiment)."""
    fields = fields or {}
    if preset in PRESETS:
        base = PRESETS[preset].spec
    elif fields.get("preset") == preset and _fields(ExperimentSpec) <= set(fields) | _optional_fields():
        base = ExperimentSpec()
    else:
        raise SpecError("preset", f"unknown {preset!r}; allowed: {', '.join(sorted(PRESETS))}")
    return ExperimentSpec.from_dict(_deep_update(base.to_dict(), fields | {"preset": preset}))


def _optional_fields() -> set[str]:
    return {name for name, hint in typing.get_type_hints(ExperimentSpec).items()
            if type(None) in typing.get_args(hint)}


# --- the command line --------------------------------------------------------------------------------------------

def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="experiment file (TOML, or a run's spec.json): any spec "
                        "field, and command options in [options]; flags given here override it")
    parser.add_argument("--print-config", action="store_true", help="print the resolved experiment as TOML "
                        "and exit (load it again with --config)")


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    # argparse has no public way to list a parser's options; `_actions` has been stable since Python 2.7.
    return list(parser._actions)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next((a.choices for a in _actions(parser) if isinstance(a.choices, dict)), {})  # name -> subparser


def _spec_names() -> set[str]:
    return _fields(ExperimentSpec) | _fields(Resources)


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse `argv`; with `--config FILE` the file's options become the subcommand's defaults (so flags given on
    the command line override them) and its spec fields go to spec_from_args as the base under the flags."""
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(add_help=False)
    add_options(pre)
    known, _ = pre.parse_known_args(argv)
    commands = _subparsers(parser)
    command = next((a for a in argv if a in commands), None)
    if command is None:
        return parser.parse_args(argv)
    sub = commands[command]
    if known.print_config:  # printing runs nothing, so nothing is required
        for action in _actions(sub):
            action.required = False
    if known.config is None:
        return parser.parse_args(argv)
    experiment = load(known.config)
    allowed = {key for p in commands.values() for key in _keys(p)}
    mine = _keys(sub)
    defaults: dict[str, Any] = {SPEC_KEY: experiment.spec}
    for key, value in _flat(experiment.options):
        name = f"{OPTIONS_TABLE}.{key}"
        action = mine.get(key)
        if key not in allowed or key in NOT_OPTIONS or (action and action.dest in _spec_names() | NOT_OPTIONS):
            raise SpecError(name, f"unknown command option in {known.config}")
        if action is None:
            continue  # an option of another command: one file serves oracle, fit-silo and compare alike
        if action.nargs == 0:  # a switch such as --json or --no-bracket
            if not isinstance(value, bool):
                raise SpecError(name, f"must be true or false in {known.config}, got {value!r}")
            # a field's name (the dest: bracket) gives its value; a flag's name (no_bracket) says it is given
            defaults[action.dest] = value if key == action.dest else (action.const if value else action.default)
            continue
        action.required = False  # the file gives it
        if isinstance(value, list):  # a repeatable option (append): argparse converts no list default itself
            defaults[action.dest] = [_converted(action, str(v), name, known.config) for v in value]
            continue
        # A string default goes through the option's own type, so a bad value fails as it would on the line.
        defaults[action.dest] = str(value)
    if "preset" in experiment.spec:
        defaults["preset"] = experiment.spec["preset"]
    sub.set_defaults(**defaults)
    return parser.parse_args(argv)


def _keys(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The experiment-file keys of `parser`'s options: each one's dest, which for the options dataclasses' fields
    is `section.field` (the key `field` of the table [options.section]: oracle.seeds), and each long flag's name
    with underscores (seeds, no_bracket, fit_seeds), as the flat [options] table of earlier files has them."""
    keys: dict[str, argparse.Action] = {}
    for action in _actions(parser):
        keys[action.dest] = action
        for flag in action.option_strings:
            if flag.startswith("--"):
                keys.setdefault(flag[2:].replace("-", "_"), action)
    return keys


def _flat(options: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """[options] with its sub-tables' keys dotted: {"oracle": {"seeds": 2}} -> [("oracle.seeds", 2)]."""
    return [pair for key, value in options.items()
            for pair in (_flat(value, f"{prefix}{key}.") if isinstance(value, dict) else [(prefix + key, value)])]


def _converted(action: argparse.Action, text: str, name: str, path: str) -> Any:
    try:
        return action.type(text) if action.type else text
    except (TypeError, ValueError, argparse.ArgumentTypeError) as err:
        raise SpecError(name, f"{err} (in {path})") from None


def options(args: argparse.Namespace) -> dict[str, Any]:
    """The command options in `args` (not the spec's fields), without unset ones; an options dataclass's fields
    (dest `section.field`) nested as the [options.section] table has them."""
    nested: dict[str, Any] = {}
    for key, value in sorted(vars(args).items()):
        if key in NOT_OPTIONS or key in _spec_names() or value is None or callable(value):
            continue
        *sections, name = key.split(".")
        table = nested
        for section in sections:
            table = table.setdefault(section, {})
        table[name] = value
    return nested


# --- writing -----------------------------------------------------------------------------------------------------

def dump(spec: ExperimentSpec, opts: dict[str, Any] | None = None) -> str:
    """The experiment as TOML: the whole spec (None fields left out) and the command options. Storage URLs are
    redacted, as in spec.json: a password never reaches the output (give it again, or put it in ~/.pgpass)."""
    d = spec.to_dict()
    if d["resources"]["storage_path"]:
        d["resources"]["storage_path"] = redact(d["resources"]["storage_path"])
    opts = dict(opts or {})
    if isinstance(opts.get("fit", {}).get("storage"), str):
        opts["fit"] = opts["fit"] | {"storage": redact(opts["fit"]["storage"])}
    data = _without_none(d) | ({OPTIONS_TABLE: _without_none(opts)} if opts else {})
    return tomli_w.dumps(data)


def _without_none(d: dict[str, Any]) -> dict[str, Any]:
    """TOML has no null: an unset field (None) is left out, and reads back as its default."""
    return {k: _without_none(v) if isinstance(v, dict) else v for k, v in d.items() if v is not None}
