"""The command options of the drivers, typed, and what a results folder records of them (OUT/options.json).

Like ExperimentSpec, each options dataclass validates itself on construction: the command line and the Python API
build them at their edge, and nothing inside checks them again. Each field names its command-line flag
(`metadata["flag"]`, made by `add_flags`), so an error about a field names the option a user types, and an
experiment file's [options.oracle], [options.fit] and [options.compare] tables are keyed by field name.

A run records its options beside spec.json. `replay` and the report read them back, and a resume checks them: an
option that changes what the search does is refused with one line naming it. The options in MAY_CHANGE are those a
resume may change: they add work to the same search, say how its trials are packed or where its study is stored,
or only how the report reads the rows.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from oracle_search.config import ORACLE_MODES
from oracle_search.seeds import check_seed_room
from trainables.atomic import atomic_write_json
from trainables.spec import SpecError

OPTIONS_FILE = "options.json"
MARGIN_PER_CYCLE = 0.5  # `--margin`'s default, points per compared cycle: the paper's interval tolerance
MAY_CHANGE = {
    "oracle": {"refine", "fuse"},  # more refinement rounds refine the same chain; fuse packs the same trainings
    "fit": {"trials", "storage"},  # "rerun with a larger number to add trials"; the study's URL is where, not what
    "compare": {"margin", "replicates", "silo_fit"},  # the report's reading; more replicates or silo_fit add studies
}


def option(default: Any, flag: str, help: str, *, by_hand: bool = False, **argparse_kwargs: Any) -> Any:
    """A field that is a command-line option: `--flag` (add_flags makes it; `by_hand`: the CLI writes its flags
    itself) with `help` (argparse's %-format: %(default)s is the command's default)."""
    return field(default=default, metadata={"flag": flag, "help": help, "by_hand": by_hand,
                                            "argparse": argparse_kwargs})


def at_least(option: str, value: int, least: int) -> None:
    """SpecError naming the command-line option when a count is below its floor."""
    if not isinstance(value, int) or value < least:
        raise SpecError(option, f"must be an integer >= {least}, got {value!r}")


@dataclass(frozen=True)
class OracleOptions:
    seeds: int = option(3, "seeds", "tuning seeds, each a chain: b and every max_lr not shown worse are trained on "
                        "each (default %(default)s: the 'not shown worse' and 'shown within 0.5' sets need several)")
    refine: int = option(3, "refine", "most refinement rounds per cycle that resolve the intervals' edges (default "
                         "%(default)s; racing runs at most 1, on the paper interval's edges; 0: the grid or bracket "
                         "only)")
    bracket: bool = option(True, "no-bracket", "train the whole grid at every cycle, not a bracket around the "
                           "previous choice")
    fuse: int = option(0, "fuse", "max_lr candidates of one (seed, cycle) trained as one fused network per trial "
                       "(default 0: all of them with --gpus-per-trial, else 1)")
    mode: str = option("racing", "oracle", "racing (default): a value shown more than 0.5 points worse than the "
                       "leader gets no more seeds, and from cycle 1 the values walk out from the previous choice until "
                       "one is shown worse (oracle_search/racing.py; in compare also the baselines' peak-LR tuning "
                       "and silo_paper's delta search), and before the verdict the values next to each compared "
                       "schedule are completed; exhaustive: every value on every seed (more trainings, but fewer "
                       "rounds: sooner on many slots)", choices=ORACLE_MODES)

    def __post_init__(self) -> None:
        if self.mode not in ORACLE_MODES:
            raise SpecError("oracle", f"must be {' or '.join(ORACLE_MODES)}, got {self.mode!r}")
        at_least("seeds", self.seeds, 1)
        at_least("refine", self.refine, 0)
        at_least("fuse", self.fuse, 0)

    @property
    def racing(self) -> bool:
        return self.mode == "racing"


@dataclass(frozen=True)
class FitOptions:
    trials: int = option(8, "trials", "Optuna trials the study should hold (default %(default)s); rerun with a "
                         "larger number to add trials")
    seeds: int = option(1, "fit-seeds", "tuning seeds each Optuna trial trains (default %(default)s; the objective "
                        "is their mean)")
    storage: str | None = option(None, "study-storage", "Optuna storage URL (PostgreSQL on clusters); default: a "
                                 "journal file under --out")
    target_cycle: int | None = option(None, "target-cycle", "cycle whose validation accuracy is the objective "
                                      "(default: the last)")
    # fitter.SearchSpace; default: around the Oracle's dense best when one ran. Four flags, --epsilon-range first.
    space: object | None = option(None, "epsilon-range", "", by_hand=True)

    def __post_init__(self) -> None:
        at_least("trials", self.trials, 0)  # 0: compare without silo_fit
        at_least("fit-seeds", self.seeds, 1)
        if self.target_cycle is not None:
            at_least("target-cycle", self.target_cycle, 0)
        if self.space is not None:
            self.space.validate()

    def target(self, spec) -> int:
        """The cycle whose validation accuracy silo_fit and silo_paper's δ are chosen on: the given one, else
        the last. Every driver gets it from here; SpecError when it lies beyond the spec's cycles."""
        target = spec.cycles if self.target_cycle is None else self.target_cycle
        if target > spec.cycles:
            raise SpecError("target-cycle", f"must lie in [0, cycles={spec.cycles}], got {target}")
        return target


@dataclass(frozen=True)
class CompareOptions:
    oracle: OracleOptions = field(default_factory=OracleOptions)
    fit: FitOptions = field(default_factory=FitOptions)
    eval_seeds: int = option(3, "eval-seeds", "evaluation seeds of every tuned method's final runs, disjoint from "
                             "the tuning seeds (default %(default)s, at least 2)")
    silo_fit: bool = option(True, "trials", "", by_hand=True)  # also fit SILO with Optuna (--trials 0: not)
    replicates: int = option(3, "replicates", "whole studies, each with its own tuning and evaluation seeds "
                             "(replicate r's base seed: --seed + 10000 (r - 1)), run side by side on the same slots "
                             "in OUT/replicate-1..R; the report gives the verdict over them (default %(default)s; 1: "
                             "one study in OUT, whose labels are conditional on its own choices)")
    margin: float = option(MARGIN_PER_CYCLE, "margin", "equivalence margin in validation- (or test-) accuracy points "
                           "per compared cycle, summed over the cycles like the advantage: a comparison whose 95 %% "
                           "interval lies inside ±margin is `equivalent` (default %(default)s: the paper's interval "
                           "tolerance)")

    def __post_init__(self) -> None:
        at_least("eval-seeds", self.eval_seeds, 2)
        if self.silo_fit:
            at_least("trials", self.fit.trials, 1)
        at_least("replicates", self.replicates, 1)
        if not isinstance(self.margin, (int, float)) or not 0 <= self.margin < float("inf"):
            raise SpecError("margin", f"must be a number >= 0 (points per compared cycle), got {self.margin!r}")
        if self.replicates > 1:
            check_seed_room(self.oracle.seeds, self.eval_seeds, self.fit.seeds)

    def sections(self) -> dict[str, Any]:
        """What a compare records (options.json): the Oracle's, the fitter's and its own options."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("oracle", "fit")}
        return {"oracle": self.oracle, "fit": self.fit, "compare": own}


SECTIONS: dict[str, type] = {"oracle": OracleOptions, "fit": FitOptions, "compare": CompareOptions}


# --- the command line: flags made from the fields ------------------------------------------------------------------

def dest(section: str, name: str) -> str:
    """Where a field's flag stores its value on the parsed arguments, and its key in an experiment file's
    [options.SECTION] table: `oracle.seeds`."""
    return f"{section}.{name}"


def add_flags(group: Any, section: str, *, only: Iterable[str] | None = None,
              defaults: dict[str, Any] | None = None) -> None:
    """Add the flags of SECTIONS[section]'s fields to `group`, a parser or argument group (all but the by_hand
    ones, or the `only` ones), each storing the field's own value: --no-bracket stores bracket = False.
    `defaults`: a command's own defaults."""
    cls, defaults = SECTIONS[section], defaults or {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if "flag" not in meta or meta["by_hand"] or (only is not None and f.name not in only):
            continue
        kwargs = dict(meta["argparse"])
        if hints[f.name] is bool:  # a switch: giving the flag sets the other value
            kwargs["action"] = "store_false" if f.default else "store_true"
        else:
            kwargs["type"] = next(t for t in (*typing.get_args(hints[f.name]), hints[f.name]) if t is not type(None))
            if "choices" not in kwargs:
                kwargs["metavar"] = meta["flag"].upper().replace("-", "_")
        group.add_argument(f"--{meta['flag']}", dest=dest(section, f.name), default=defaults.get(f.name, f.default),
                           help=meta["help"], **kwargs)


def from_args(args: argparse.Namespace, section: str, **given: Any) -> Any:
    """SECTIONS[section] from the parsed arguments' flags (add_flags), with `given` for the others."""
    cls = SECTIONS[section]
    found = {f.name: getattr(args, dest(section, f.name)) for f in dataclasses.fields(cls)
             if hasattr(args, dest(section, f.name))}
    return cls(**(found | given))


# --- what a results folder records --------------------------------------------------------------------------------

def _plain(value: Any) -> Any:
    """`value` as it reads back from JSON (dataclasses as dicts, tuples as lists), a storage URL redacted."""
    from oracle_search.security import redact

    if dataclasses.is_dataclass(value):
        value = dataclasses.asdict(value)
    if isinstance(value, dict) and isinstance(value.get("storage"), str):
        value = value | {"storage": redact(value["storage"])}
    return json.loads(json.dumps(value))


def recorded(out: Path) -> dict[str, dict]:
    """The options a results folder recorded, by section ({} for a new folder or one made before they were)."""
    path = Path(out) / OPTIONS_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def check_resume(out: Path, sections: dict[str, Any]) -> None:
    """SpecError naming the option when a resume on `out` would change one its run recorded (outside MAY_CHANGE)."""
    found = recorded(out)
    for section, value in sections.items():
        had, now = found.get(section), _plain(value)
        if had is None:
            continue
        flags = {f.name: f.metadata.get("flag", f.name) for f in dataclasses.fields(SECTIONS[section])}
        for name in sorted(set(had) | set(now)):
            if name in MAY_CHANGE[section] or had.get(name) == now.get(name):
                continue
            raise SpecError(flags.get(name, name), f"{out} was run with {section}.{name} = {had.get(name)!r}, "
                            f"this command gives {now.get(name)!r}; a resume keeps the options that shape its "
                            "search (use a new --out for another)")


def record(out: Path, sections: dict[str, Any]) -> None:
    """Check a resume's options against what `out` recorded (check_resume), then record them in options.json."""
    check_resume(out, sections)
    Path(out).mkdir(parents=True, exist_ok=True)
    atomic_write_json(Path(out) / OPTIONS_FILE, recorded(out) | {k: _plain(v) for k, v in sections.items()})


def recorded_oracle(out: Path) -> OracleOptions | None:
    """The Oracle's options a run recorded, or None for a run made before they were recorded."""
    found = recorded(out).get("oracle")
    return None if found is None else OracleOptions(**found)
