"""Fields that name their command-line flag. The command line (oracle_search.flags) makes each flag from its
field: the name and help from here, the type and default from the field, so a field and its flag cannot disagree.
Kept in trainables because the spec's own fields carry them; nothing here imports argparse or torch."""
from __future__ import annotations

from dataclasses import field
from typing import Any


def flag(default: Any, name: str, help: str, *, aliases: tuple[str, ...] = (), dest: str | None = None,
         by_hand: bool = False, **argparse_kwargs: Any) -> Any:
    """A dataclass field set by `--name`, with `help` (argparse's %-format: %(default)s is the command's default).
    - `aliases`: earlier names of the flag; each still works and says on stderr what replaced it.
    - `dest`: where the value waits on the parsed arguments when it is not the field's own name (the optimizer's
      `name` field is the `--optimizer` flag, stored as `optimizer`).
    - `by_hand`: the command line writes this field's flags itself, because they are not one flag (the fit's
      search space is four).
    - `argparse_kwargs`: what the field's type cannot say (choices, a conversion of the flag's text)."""
    return field(default=default, metadata={"flag": name, "help": help, "aliases": aliases, "dest": dest,
                                            "by_hand": by_hand, "argparse": argparse_kwargs})
