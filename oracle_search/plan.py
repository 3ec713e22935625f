"""Where a command's spec and its options meet: one study's searches, each built once here from the options and
handed down to the drivers, which read no option.

- `racing.OracleSearch`: the Oracle's search (its mode, refinement, bracket, tuning seeds);
- `delta.DeltaPlan`: silo_paper's δ search (ε set once the Oracle's dense best is decided);
- `racing.TuningPlan`: the baselines' peak tuning;
- `fitter.FitPlan`: silo_fit's Optuna study (None: `--trials 0`);
- the evaluation seeds of every final run; the verdict's completions are the Oracle's search's to say
  (`OracleSearch.completes`: a racing search leaves far values with fewer seeds).

`compare` builds a `StudyPlan` per replicate, the dry run's simulated job the same, and `study.run_study` runs it.
The single commands build the one plan they run (`oracle_search`, `FitPlan.of`). What needs the spec as well as the
options (the fit's target cycle, compare's two tuning seeds) was checked where they met (`options.check_with_spec`),
and is trusted here."""
from __future__ import annotations

from dataclasses import dataclass

from oracle_search.delta import DeltaPlan
from oracle_search.fitter import FitPlan
from oracle_search.options import CompareOptions, OracleOptions
from oracle_search.racing import OracleSearch, TuningPlan
from oracle_search.seeds import evaluation_seeds, tuning_seeds
from trainables.spec import ExperimentSpec


@dataclass(frozen=True)
class StudyPlan:
    """One whole study's searches (`study.run_study`), built once from a replicate's spec and the options."""

    oracle: OracleSearch
    delta: DeltaPlan
    tuning: TuningPlan
    evaluate: tuple[int, ...]
    fit: FitPlan | None

    @classmethod
    def of(cls, spec: ExperimentSpec, options: CompareOptions) -> "StudyPlan":
        search = oracle_search(spec, options.oracle)
        evaluate = tuple(evaluation_seeds(spec, options.eval_seeds))
        return cls(oracle=search,
                   delta=DeltaPlan(min(spec.grid), search.grid, search.seeds, options.fit.target(spec),
                                   mode=search.mode, final_seeds=evaluate),
                   tuning=TuningPlan(search.grid, search.seeds, search.mode),
                   evaluate=evaluate,
                   fit=FitPlan.of(spec, options.fit) if options.silo_fit else None)


def oracle_search(spec: ExperimentSpec, options: OracleOptions) -> OracleSearch:
    """The Oracle's search as `options` say, over the spec's grid on its tuning seeds (`OracleSearch.for_slots`
    widens it for the slots where it runs)."""
    return OracleSearch(tuple(spec.grid), tuple(tuning_seeds(spec, options.seeds)), options.refine, options.bracket,
                        options.mode)
