"""Command-line flags made from typed fields, one way for all of them: the spec's (trainables.spec), the schedule's
and the optimizer's names, and the options dataclasses' (oracle_search.options). A field names its flag and help
(`trainables.fields.flag`); its type gives the flag's conversion and whether it is a switch. The command line writes
a flag by hand only where it is not one field, with a comment saying why."""
from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from typing import Any, Callable, Iterable

from trainables.errors import SpecError


@dataclasses.dataclass(frozen=True)
class Flagged:
    """A field with a flag, found under a dataclass: `path` from it (("resources", "cpus_per_trial")), its
    dataclass field and its type."""

    path: tuple[str, ...]
    field: dataclasses.Field
    hint: Any

    @property
    def name(self) -> str:
        """The value's name on the parsed arguments: the field's, or the one its flag gives (`dest`)."""
        return self.field.metadata["dest"] or self.field.name

    @property
    def flag(self) -> str:
        return self.field.metadata["flag"]


def flagged(cls: type, nested: bool = True) -> dict[str, Flagged]:
    """Every field of dataclass `cls` that names a flag (with `nested`, its dataclass fields' too: the spec's
    resources), by name (Flagged.name), in the fields' order."""
    found: dict[str, Flagged] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if "flag" in f.metadata:
            found[Flagged((f.name,), f, hint).name] = Flagged((f.name,), f, hint)
        elif nested and dataclasses.is_dataclass(hint):
            for name, inner in flagged(hint).items():
                found[name] = dataclasses.replace(inner, path=(f.name, *inner.path))
    return found


RENAMED = "renamed_flags"  # where the parsed arguments keep what each earlier flag name given was replaced by


class Renamed(argparse.Action):
    """An earlier name of a flag: it stores what the flag stores, and keeps a line saying what replaced it for
    `say_renamed` (so that a refusal stays one line: `renamed_note` adds it to the refusal instead)."""

    def __init__(self, option_strings: list[str], dest: str, now: str, **kwargs: Any):
        self.now = now
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        notes = getattr(namespace, RENAMED, None) or []
        setattr(namespace, RENAMED, [*notes, f"{option_string} is now {self.now}"])
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def say_renamed(args: argparse.Namespace) -> None:
    """Print, once, one line on stderr per earlier flag name given, saying what replaced it; called once the
    command's input is checked."""
    for note in getattr(args, RENAMED, None) or []:
        print(f"oracle-search: {note}; the old name still works", file=sys.stderr)
    setattr(args, RENAMED, [])


def renamed_note(args: argparse.Namespace | None) -> str:
    """What a refusal's one line adds when earlier flag names were given and not yet said: ' (--seeds is now
    --tuning-seeds)'."""
    notes = getattr(args, RENAMED, None) or []
    return f" ({'; '.join(notes)})" if notes else ""


def _converting(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """`convert` as argparse's type: a SpecError becomes argparse's error, which names the flag
    ("argument --grid: expected ...")."""
    def typed(text: str) -> Any:
        try:
            return convert(text)
        except SpecError as err:
            raise argparse.ArgumentTypeError(err.message) from None
    typed.__name__ = getattr(convert, "__name__", "value")
    return typed


def add_flags(group: Any, fields: dict[str, Flagged], *, dest: Callable[[Flagged], str],
              default: Callable[[Flagged], Any], only: Iterable[str] | None = None,
              helps: dict[str, str] | None = None, required: bool = False) -> None:
    """Add to `group` (a parser or argument group) the flag of each of `fields` (all but the by-hand ones, or those
    named in `only`, in that order), storing at `dest(field)` with `default(field)`; `helps`: a command's own help
    of a field. A bool field is a switch (giving it sets the other value); a bool | None field (unset: decided
    later) takes --flag and --no-flag."""
    names = [n for n, f in fields.items() if not f.field.metadata["by_hand"]] if only is None else list(only)
    for name in names:
        f = fields[name]
        meta, value = f.field.metadata, default(f)
        kwargs = dict(meta["argparse"])
        options = typing.get_args(f.hint)
        if f.hint is bool:  # a switch: giving the flag sets the other value than the field's own default
            kwargs |= {"action": "store_const", "const": not f.field.default}
        elif set(options) == {bool, type(None)}:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = _converting(kwargs.get("type") or next(t for t in (*options, f.hint)
                                                                    if t is not type(None)))
            if "choices" not in kwargs:
                kwargs.setdefault("metavar", meta["flag"].upper().replace("-", "_"))
        help_text = (helps or {}).get(name, meta["help"])
        group.add_argument(f"--{meta['flag']}", dest=dest(f), default=value, help=help_text, required=required,
                           **kwargs)
        for old in meta["aliases"]:  # kept working, out of --help, each saying what replaced it
            switch = kwargs.get("action") == "store_const"
            group.add_argument(f"--{old}", dest=dest(f), action=Renamed, now=f"--{meta['flag']}",
                               default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                               **({"nargs": 0, "const": kwargs["const"]} if switch else
                                  {k: v for k, v in kwargs.items() if k in ("type", "choices", "metavar")}))
