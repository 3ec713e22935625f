"""The command options of the drivers, typed, and what a results folder records of them (OUT/options.json).

Like ExperimentSpec, each options dataclass validates itself on construction: the command line and the Python API
build them at their edge, and nothing inside checks them again. What needs the spec as well (the fit's target cycle
within the spec's cycles) is checked once where a command's spec and options meet (`check_with_spec`): on the
command line before anything loads, and at each driver of the Python API; inside, `FitOptions.target` is trusted.
Each field names its command-line flag (`trainables.fields.flag`; `add_flags` makes it), so an error about a field
names the option a user types, and an experiment file's [options.oracle], [options.fit] and [options.compare]
tables are keyed by field name.

A run records its options beside spec.json. `replay` and the report read them back, and a resume checks them: an
option that changes what the search does is refused with one line naming it. The options in MAY_CHANGE are those a
resume may change: they add work to the same search, say how its trials are packed or where its study is stored,
or only how the report reads the rows.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from oracle_search import flags
from oracle_search.config import ORACLE_MODES
from oracle_search.security import redact
from oracle_search.seeds import check_seed_room
from trainables.atomic import atomic_write_json
from trainables.fields import flag
from trainables.spec import ExperimentSpec, SpecError

OPTIONS_FILE = "options.json"
MARGIN_PER_CYCLE = 0.5  # `--margin`'s default, points per compared cycle: the paper's interval tolerance
MAY_CHANGE = {
    "oracle": {"refine", "fuse"},  # more refinement rounds refine the same chain; fuse packs the same trainings
    "fit": {"trials", "storage"},  # "rerun with a larger number to add trials"; the study's URL is where, not what
    # the report's reading; more replicates or silo_fit add studies; an auto run's N and wave (issue 61) are its budget
    "compare": {"margin", "replicates", "silo_fit", "max_replicates", "wave"},
}


option = flag  # a field that is a command-line option (trainables.fields.flag)


def at_least(option: str, value: int, least: int, why: str = "") -> None:
    """SpecError naming the command-line option when a count is below its floor (`why`: the floor's reason)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise SpecError(option, f"must be an integer >= {least}{f' ({why})' if why else ''}, got {value!r}")


def check_margin(value: Any) -> None:
    """The equivalence margin (`compare --margin`, `report --margin`): a number >= 0, in points per compared
    cycle."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < math.inf:
        raise SpecError("margin", f"must be a number >= 0 (points per compared cycle), got {value!r}")


AUTO = "auto"  # `--replicates auto` (oracle_search.sequential.AUTO)


def replicates_value(text: str) -> int | str:
    """--replicates: a whole number, or auto."""
    if text.strip() == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise SpecError("replicates", f"must be an integer >= 1 or {AUTO}, got {text!r}") from None


def positive_seconds(value: float | None) -> float | None:
    """--seconds-per-epoch: a positive finite number, or None."""
    if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise SpecError("seconds-per-epoch", f"must be a positive number, got {value!r}")
    return value


@dataclass(frozen=True)
class SearchSpace:
    """Ranges of the SILO fitter (`--epsilon-range` and its kin); the paper advises q in [0, 3] and beta in
    [3, 6]."""

    epsilon: tuple[float, float]
    delta: tuple[float, float]
    q: tuple[int, int] = (0, 3)
    beta: tuple[float, float] = (3.0, 6.0)

    @classmethod
    def default(cls, spec: ExperimentSpec) -> "SearchSpace":
        return cls(epsilon=(min(spec.grid), max(spec.grid)), delta=(0.0, max(spec.grid)))

    def validate(self) -> None:
        for name in ("epsilon", "delta", "q", "beta"):
            low, high = getattr(self, name)
            if not low <= high:
                raise SpecError(f"{name}-range", f"needs LO <= HI, got {low}:{high}")
        if self.epsilon[0] <= 0:
            raise SpecError("epsilon-range", "must be positive (it is searched on a log scale)")
        if self.delta[0] < 0 or self.q[0] < 0 or self.beta[0] <= 0:
            raise SpecError("delta-range", "delta and q must be >= 0 and beta > 0")

    def contains(self, params: dict[str, float]) -> bool:
        return all(lo <= params[name] <= hi for name, (lo, hi) in dataclasses.asdict(self).items())


@dataclass(frozen=True)
class OracleOptions:
    seeds: int = option(3, "tuning-seeds", "how many tuning seeds, each a chain: b and every max_lr not shown worse "
                        "are trained on each (default %(default)s: the 'not shown worse' and 'shown within 0.5' sets "
                        "need several; compare needs 2)", aliases=("seeds",))
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
        at_least("tuning-seeds", self.seeds, 1)
        at_least("refine", self.refine, 0)
        at_least("fuse", self.fuse, 0)

    @property
    def racing(self) -> bool:
        return self.mode == "racing"


@dataclass(frozen=True)
class FitOptions:
    trials: int = option(8, "trials", "Optuna trials the study should hold (default %(default)s); rerun with a "
                         "larger number to add trials; 0 (compare only) skips the SILO fit: the comparison then has no "
                         "silo_fit method")
    seeds: int = option(1, "fit-seeds", "how many tuning seeds each Optuna trial trains (default %(default)s; the objective "
                        "is their mean)")
    storage: str | None = option(None, "study-storage", "Optuna storage URL (PostgreSQL on clusters); default: a "
                                 "journal file under --out")
    target_cycle: int | None = option(None, "target-cycle", "cycle whose validation accuracy is the objective "
                                      "(default: the last)")
    # Default: around the Oracle's dense best when one ran. By hand: four flags (--epsilon-range first) make it.
    space: SearchSpace | None = option(None, "epsilon-range", "", by_hand=True)

    def __post_init__(self) -> None:
        at_least("trials", self.trials, 0)  # 0: compare without silo_fit
        at_least("fit-seeds", self.seeds, 1)
        if self.target_cycle is not None:
            at_least("target-cycle", self.target_cycle, 0)
        if self.space is not None:
            self.space.validate()

    def target(self, spec: ExperimentSpec) -> int:
        """The cycle whose validation accuracy silo_fit and silo_paper's δ are chosen on: the given one, else
        the last. Every driver gets it from here, trusted: `check_with_spec` refused one beyond the spec's cycles
        at the edge."""
        return spec.cycles if self.target_cycle is None else self.target_cycle

    def needs_a_trial(self) -> None:
        """A fit that runs (`fit-silo`, a compare with silo_fit) needs a trial; --trials 0 means no fit."""
        at_least("trials", self.trials, 1)


@dataclass(frozen=True)
class CompareOptions:
    oracle: OracleOptions = field(default_factory=OracleOptions)
    fit: FitOptions = field(default_factory=FitOptions)
    eval_seeds: int = option(3, "eval-seeds", "evaluation seeds of every tuned method's final runs, disjoint from "
                             "the tuning seeds (default %(default)s, at least 2)")
    # Also fit SILO with Optuna. By hand: not a flag of its own, --trials 0 says no.
    silo_fit: bool = option(True, "trials", "", by_hand=True)
    replicates: int | str = option(3, "replicates", "whole studies, each with its own tuning and evaluation seeds "
                                   "(replicate r's base seed: --base-seed + 10000 (r - 1)), run side by side on the "
                                   "same slots in OUT/replicate-1..R; the report gives the verdict over them (default "
                                   "%(default)s; 1: one study in OUT, whose labels are conditional on its own "
                                   "choices; auto: in waves of --wave until each comparison is decided or futile, at "
                                   "most --max-replicates, under a rule whose error rate holds across the looks)",
                                   type=replicates_value, metavar="R|auto")
    max_replicates: int | None = option(None, "max-replicates", "with --replicates auto: the most replicates it may "
                                        "run, N (at least --wave); a rerun with another N re-plans the looks left "
                                        "of a run that stopped before its N")
    wave: int | None = option(None, "wave", "with --replicates auto: replicates per wave, the first wave's too "
                              "(at least 2: an interval over replicates needs two; default: as many as the slots run "
                              "side by side, simulated, at least 3)")
    margin: float = option(MARGIN_PER_CYCLE, "margin", "equivalence margin in validation- (or test-) accuracy points "
                           "per compared cycle, summed over the cycles like the advantage: a comparison whose 95 %% "
                           "interval lies inside ±margin is `equivalent` (default %(default)s: the paper's interval "
                           "tolerance)")

    def __post_init__(self) -> None:
        at_least("eval-seeds", self.eval_seeds, 2)
        if self.silo_fit:
            self.fit.needs_a_trial()
        check_margin(self.margin)
        if self.replicates == AUTO:  # issue 61: waves until decided (oracle_search.sequential)
            if self.max_replicates is None:
                raise SpecError("max-replicates", "--replicates auto needs --max-replicates N, the most replicates "
                                "it may run")
            if self.wave is not None:
                at_least("wave", self.wave, 2, "an interval over replicates needs two")
            # Without --wave the first wave is at least 3 (`sequential.MIN_WAVE`): a spread over 2 has 1 df.
            at_least("max-replicates", self.max_replicates, self.wave or 3,
                     "the first wave, --wave" if self.wave else "the first wave (3 without --wave)")
            check_seed_room(self.oracle.seeds, self.eval_seeds, self.fit.seeds)
            return
        if isinstance(self.replicates, str):
            raise SpecError("replicates", f"must be an integer >= 1 or {AUTO}, got {self.replicates!r}")
        at_least("replicates", self.replicates, 1)
        if self.max_replicates is not None:
            raise SpecError("max-replicates", "only with --replicates auto (a fixed R runs R replicates)")
        if self.replicates > 1:
            check_seed_room(self.oracle.seeds, self.eval_seeds, self.fit.seeds)

    @property
    def auto(self) -> bool:
        """`--replicates auto`: replicates in waves (`pipeline.compare`, `oracle_search.sequential`)."""
        return self.replicates == AUTO

    def sections(self) -> dict[str, Any]:
        """What a compare records (options.json): the Oracle's, the fitter's and its own options."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("oracle", "fit")}
        return {"oracle": self.oracle, "fit": self.fit, "compare": own}


SECTIONS: dict[str, type] = {"oracle": OracleOptions, "fit": FitOptions, "compare": CompareOptions}


# --- where a command's spec and options meet -----------------------------------------------------------------------

COMPARE_LEAST_TUNING_SEEDS = 2  # compare's intervals over tuning seeds (the Oracle's sets) need two


def check_with_spec(command: str, spec: ExperimentSpec, options: Any) -> None:
    """What a command's options must satisfy beyond their own construction, checked once where they meet the
    spec (the command line, before anything loads; each driver of the Python API): SpecError naming the option.
    `options`: FitOptions for `fit-silo`, CompareOptions for `baselines` and `compare`, OracleOptions for
    `oracle`."""
    fit = options if command == "fit-silo" else getattr(options, "fit", None)
    if command == "fit-silo":
        fit.needs_a_trial()
    if command == "compare":
        at_least("tuning-seeds", options.oracle.seeds, COMPARE_LEAST_TUNING_SEEDS,
                 "the Oracle's intervals over the tuning seeds need 2")
    if fit is not None and fit.target_cycle is not None and fit.target_cycle > spec.cycles:
        raise SpecError("target-cycle", f"must lie in [0, cycles={spec.cycles}], got {fit.target_cycle}")


# --- the command line: flags made from the fields ------------------------------------------------------------------

def dest(section: str, name: str) -> str:
    """Where a field's flag stores its value on the parsed arguments, and its key in an experiment file's
    [options.SECTION] table: `oracle.seeds`."""
    return f"{section}.{name}"


def add_flags(group: Any, section: str, *, only: Iterable[str] | None = None,
              defaults: dict[str, Any] | None = None, helps: dict[str, str] | None = None) -> None:
    """Add the flags of SECTIONS[section]'s fields to `group`, a parser or argument group (all but the by_hand
    ones, or the `only` ones), each storing the field's own value: --no-bracket stores bracket = False.
    `defaults`, `helps`: a command's own."""
    defaults = defaults or {}
    flags.add_flags(group, flags.flagged(SECTIONS[section], nested=False), only=only, helps=helps,
                    dest=lambda f: dest(section, f.name), default=lambda f: defaults.get(f.name, f.field.default))


def from_args(args: argparse.Namespace, section: str, **given: Any) -> Any:
    """SECTIONS[section] from the parsed arguments' flags (add_flags), with `given` for the others."""
    cls = SECTIONS[section]
    found = {f.name: getattr(args, dest(section, f.name)) for f in dataclasses.fields(cls)
             if hasattr(args, dest(section, f.name))}
    return cls(**(found | given))


# --- what a results folder records --------------------------------------------------------------------------------

def _plain(value: Any) -> Any:
    """`value` as it reads back from JSON (dataclasses as dicts, tuples as lists), a storage URL redacted."""
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
