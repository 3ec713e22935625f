"""A study's searches built once from the spec and the options (`plan.StudyPlan`): each plan carries what its driver
reads (seeds, mode, target, bracket), so no driver reads an option. Literal seeds: the tiny preset's base seed 0,
the evaluation seeds offset by 1000, replicate r's base seed moved by 10000 (`oracle_search.seeds`)."""
from __future__ import annotations

import dataclasses

from oracle_search.options import CompareOptions, FitOptions, OracleOptions
from oracle_search.plan import StudyPlan, oracle_search
from oracle_search.seeds import EVAL_SEED_OFFSET, SEED_STRIDE, replicate_spec
from trainables.presets import PRESETS

TINY = PRESETS["tiny"].spec


def test_every_search_of_a_study_runs_on_its_tuning_seeds_and_every_final_run_on_its_evaluation_seeds():
    assert (TINY.seed, EVAL_SEED_OFFSET, SEED_STRIDE) == (0, 1000, 10000)
    plan = StudyPlan.of(TINY, CompareOptions(fit=FitOptions(seeds=2)))
    assert plan.oracle.seeds == plan.delta.seeds == plan.tuning.seeds == (0, 1, 2)
    assert plan.fit.seeds == (0, 1)
    assert plan.evaluate == plan.delta.final_seeds == (1000, 1001, 1002)
    assert plan.oracle.grid == plan.delta.grid == plan.tuning.grid == tuple(TINY.grid)
    assert plan.delta.epsilon == min(TINY.grid)  # until the Oracle's dense best is known (`for_epsilon`)
    second = StudyPlan.of(replicate_spec(TINY, 2), CompareOptions())
    assert second.oracle.seeds == (10000, 10001, 10002) and second.evaluate == (11000, 11001, 11002)


def test_the_oracle_mode_is_every_search_s_mode_and_says_whether_the_verdict_needs_completions():
    racing = StudyPlan.of(TINY, CompareOptions())
    assert (racing.oracle.mode, racing.delta.mode, racing.tuning.mode) == ("racing",) * 3
    assert racing.oracle.completes
    exhaustive = StudyPlan.of(TINY, CompareOptions(oracle=OracleOptions(mode="exhaustive", refine=1,
                                                                          bracket=False)))
    assert (exhaustive.oracle.mode, exhaustive.delta.mode, exhaustive.tuning.mode) == ("exhaustive",) * 3
    assert not exhaustive.oracle.completes
    assert (exhaustive.oracle.refine, exhaustive.oracle.bracket) == (1, False)
    assert exhaustive.oracle == oracle_search(TINY, OracleOptions(mode="exhaustive", refine=1, bracket=False))


def test_the_fit_s_target_cycle_is_silo_paper_s_too_and_no_fit_plan_without_silo_fit():
    assert TINY.cycles >= 2
    default = StudyPlan.of(TINY, CompareOptions())
    assert default.delta.target == default.fit.target == TINY.cycles
    earlier = StudyPlan.of(TINY, CompareOptions(fit=FitOptions(target_cycle=1, trials=5)))
    assert earlier.delta.target == earlier.fit.target == 1 and earlier.fit.trials == 5
    without = StudyPlan.of(TINY, CompareOptions(fit=FitOptions(trials=0), silo_fit=False))
    assert without.fit is None
    stored = StudyPlan.of(TINY, CompareOptions(fit=FitOptions(storage="sqlite:///x.db")))
    assert stored.fit.storage == "sqlite:///x.db" and stored.fit.space is None
    assert dataclasses.replace(stored.fit, storage=None) == default.fit
