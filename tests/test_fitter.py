"""The SILO fitter on real Ray and real Optuna storage (a journal file under --out)."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import optuna
import pandas as pd
import pytest

from oracle_search import fitter
from oracle_search.cli import main
from oracle_search.fitter import SearchSpace, default_storage, open_study, recommended_start, study_name
from oracle_search.lock import holding
from trainables.presets import PRESETS
from trainables.spec import Resources

ARGS = ["fit-silo", "--preset", "digits-mlp", "--cycles", "2", "--epochs", "8", "--epsilon-range", "0.0005:0.5",
        "--delta-range", "0:0.3"]


def load(out: Path) -> optuna.Study:
    (name,) = optuna.get_all_study_names(storage=default_storage(out))
    return optuna.load_study(study_name=name, storage=default_storage(out))


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fit")
    assert main(ARGS + ["--trials", "6", "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_study_reloads_with_six_finished_trials_inside_the_ranges(fitted):
    study = load(fitted)
    finished = [t for t in study.trials if t.state.is_finished()]
    assert len(finished) == 6
    best = study.best_trial.params
    assert 0.0005 <= best["epsilon"] <= 0.5 and 0 <= best["delta"] <= 0.3
    assert 0 <= best["q"] <= 3 and 3 <= best["beta"] <= 6


@pytest.mark.slow
def test_first_trial_is_the_papers_recommendation(fitted):
    first = load(fitted).trials[0].params
    assert first["q"] == 1 and first["beta"] == 5.0
    assert first["epsilon"] == pytest.approx(PRESETS["digits-mlp"].spec.schedule.silo.epsilon)


@pytest.mark.slow
def test_rows_carry_method_schedule_and_parameters(fitted):
    rows = pd.read_parquet(fitted / "results.parquet")
    assert set(rows["method"]) == {"silo_fit"} and set(rows["stage"]) == {"fit"}
    study = load(fitted)
    for number, trial_rows in rows.groupby("study_trial"):
        params = study.trials[int(number)].params
        assert trial_rows["epsilon"].unique().tolist() == [pytest.approx(params["epsilon"])]
        assert trial_rows["q"].unique().tolist() == [params["q"]]


@pytest.mark.slow
def test_a_pruned_trial_is_marked_and_cost_fewer_epochs(fitted):
    study, rows = load(fitted), pd.read_parquet(fitted / "results.parquet")
    pruned = [t.number for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
    complete = [t.number for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert pruned, "the pruner stopped no trial"
    epochs = rows.groupby("study_trial")["epochs"].sum()
    for number in pruned:
        assert rows[rows["study_trial"] == number]["stopped_early"].all()
        assert epochs[number] < min(epochs[c] for c in complete)
    assert not rows[rows["study_trial"].isin(complete)]["stopped_early"].any()


@pytest.mark.slow
def test_a_rerun_adds_trials_instead_of_starting_over(fitted):
    before = {t.number: (t.params, t.value) for t in load(fitted).trials}
    ledger_before = {p.name: json.loads(p.read_text())["trial_id"] for p in (fitted / "ledger").glob("*.json")}
    assert main(ARGS + ["--trials", "8", "--out", str(fitted)]) == 0
    after = load(fitted).trials
    assert sum(t.state.is_finished() for t in after) == 8
    assert {t.number: (t.params, t.value) for t in after[:6]} == before
    for name, trial_id in ledger_before.items():  # no finished cycle trained again
        assert json.loads((fitted / "ledger" / name).read_text())["trial_id"] == trial_id


def test_the_fitter_samples_the_papers_ranges_and_starts_at_its_advice(tmp_path):
    """What the fitter actually draws on mnist1d-mlp (grid 0.01 .. 1.28): epsilon log-uniform over the grid's span,
    delta uniform in [0, 1.28], q an integer in the paper's [0, 3], beta in its [3, 6]. 400 random draws reach
    each end: a log-uniform draw falls below 0.02 with probability log 2 / log 128 = 1/7, a uniform one in the
    outer tenth of a range with 1/10, so missing an end has probability below (6/7)^400, about 1e-27."""
    spec = PRESETS["mnist1d-mlp"].spec
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    drawn = [dataclasses.asdict(fitter.suggest(study.ask(), SearchSpace.default(spec))) for _ in range(400)]
    values = {name: [d[name] for d in drawn] for name in drawn[0]}
    assert 0.01 <= min(values["epsilon"]) < 0.02 and 0.64 < max(values["epsilon"]) <= 1.28
    assert 0.0 <= min(values["delta"]) < 0.128 and 1.152 < max(values["delta"]) <= 1.28
    assert sorted(set(values["q"])) == [0, 1, 2, 3]
    assert 3.0 <= min(values["beta"]) < 3.3 and 5.7 < max(values["beta"]) <= 6.0
    # The paper's advice: q = 1, beta = 5, epsilon = the Oracle's dense best (else the preset's 0.1), delta the
    # preset's 0.4.
    assert recommended_start(spec, 0.16) == {"epsilon": 0.16, "delta": 0.4, "q": 1, "beta": 5.0}
    assert recommended_start(spec, None) == {"epsilon": 0.1, "delta": 0.4, "q": 1, "beta": 5.0}


@pytest.mark.parametrize("option, value", [("--epsilon-range", "0:1"), ("--beta-range", "6:3"),
                                           ("--q-range", "a:b"), ("--trials", "0")])
def test_bad_fitter_ranges_exit_2_and_write_nothing(tmp_path, capsys, option, value):
    out = tmp_path / "out"
    assert main(["fit-silo", "--preset", "tiny", option, value, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and option.lstrip("-").split("-")[0] in err
    assert not out.exists()


# --- study identity, sampler, failure paths ----------------------------------------------------------------------

DIGITS = PRESETS["digits-mlp"].spec


def test_study_name_follows_what_changes_results_and_ignores_resources():
    base = study_name(DIGITS, [0], 3)
    assert base.startswith("silo-digits-mlp-")
    changed = [dataclasses.replace(DIGITS, epochs=9), dataclasses.replace(DIGITS, rate=0.3),
               dataclasses.replace(DIGITS, seed=1), DIGITS.with_schedule(drops=(0.5,))]
    names = {study_name(s, [0], 3) for s in changed} | {study_name(DIGITS, [0, 1], 3), study_name(DIGITS, [0], 2)}
    assert base not in names and len(names) == 6
    same = dataclasses.replace(DIGITS, device="cpu", resources=Resources(cpus_per_trial=2, max_concurrent=3,
                                                                         storage_path="/shared/tune"))
    assert study_name(same, [0], 3) == base


def test_tpe_keeps_trials_in_flight_apart_with_constant_liar(tmp_path, monkeypatch):
    made = []

    class Recording(optuna.samplers.TPESampler):  # the real sampler; records what the fitter asked for
        def __init__(self, **kwargs):
            made.append(kwargs)
            super().__init__(**kwargs)

    monkeypatch.setattr(optuna.samplers, "TPESampler", Recording)
    space = SearchSpace.default(DIGITS)

    def second_suggestion(out: Path, tell_first: bool) -> dict:
        out.mkdir()
        study = open_study(out, DIGITS, None, [0], 3)
        for _ in range(4):  # the start-up trials, told
            t = study.ask()
            fitter.suggest(t, space)
            study.tell(t, 90.0 + t.params["delta"])
        first = study.ask()
        fitter.suggest(first, space)
        if tell_first:
            study.tell(first, state=optuna.trial.TrialState.FAIL)
        second = study.ask()
        return dataclasses.asdict(fitter.suggest(second, space))

    # The same seed and history: a trial still running changes the next suggestion only with constant_liar.
    assert second_suggestion(tmp_path / "a", False) != second_suggestion(tmp_path / "b", True)
    assert made and made[0]["constant_liar"] is True  # also on Optuna 4, whose default is False


def test_a_second_driver_on_the_same_out_stops_with_exit_2(ray_local, tmp_path, capsys):
    """The folder lock (oracle_search.lock, tests/test_lock.py) covers fit-silo as every driver."""
    out = tmp_path / "out"
    with holding(out, "oracle-search compare"):
        assert main(["fit-silo", "--preset", "tiny", "--trials", "1", "--out", str(out)]) == 2
        assert sorted(p.name for p in out.iterdir()) == ["driver.lock"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"oracle-search: error: out: {out} is in use by another driver "
                                               f"(oracle-search compare, pid {os.getpid()} on host ")


TINY_FAST = ["--preset", "tiny", "--cycles", "1", "--epochs", "2"]


@pytest.mark.ray
@pytest.mark.slow
def test_ranges_that_exclude_the_papers_start_skip_it_and_all_diverged_fails_with_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["fit-silo", *TINY_FAST, "--trials", "2", "--epsilon-range", "500:1000", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 1
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "no completed trial (2 diverged" in err[0], captured.err
    assert "outside the asked ranges: skipped" in captured.out
    study = load(out)
    assert [t.params["epsilon"] >= 500 for t in study.trials] == [True, True]  # never the preset's 0.05
    rows = pd.read_parquet(out / "results.parquet")
    assert len(rows) == 2 and rows["diverged"].all() and rows["stopped_early"].all()
    assert main(["report", str(out)]) == 0  # the report renders from what exists


@pytest.mark.ray
@pytest.mark.slow
def test_compare_whose_fit_all_diverged_exits_1_after_writing_the_report(tmp_path, capsys):
    out = tmp_path / "cmp"
    code = main(["compare", *TINY_FAST, "--grid", "0.1,0.2", "--refine", "0", "--trials", "1", "--replicates", "1",
                 "--epsilon-range", "500:1000", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 1
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("oracle-search: failed: ") and "no completed trial" in err[0]
    assert "## Oracle max_lr and interval" in (out / "report.md").read_text()
    # the rest of the comparison still ran: silo_paper and the baselines, without a silo_fit final chain
    rows = pd.read_parquet(out / "results.parquet")
    assert {"oracle", "silo_fit", "silo_paper", "warmup"} <= set(rows["method"])
    assert rows[rows["method"] == "silo_fit"]["stage"].eq("fit").all()


@pytest.mark.ray
@pytest.mark.slow
def test_a_killed_drivers_running_trial_in_the_journal_is_resumed_with_its_parameters(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    # The precision is explicit: the study's name holds the resolved precision, as the command's run resolves it.
    spec = dataclasses.replace(PRESETS["tiny"].spec, cycles=1, epochs=2, precision="fp32")
    study = open_study(out, spec, None, [0], 1)
    orphan = study.ask()  # a driver asked, then was killed: RUNNING in the journal, nobody trains it
    fitter.suggest(orphan, SearchSpace.default(spec))
    assert main(["fit-silo", *TINY_FAST, "--precision", "fp32", "--trials", "2", "--out", str(out)]) == 0
    trials = load(out).trials
    assert trials[orphan.number].state == optuna.trial.TrialState.FAIL
    (resumed,) = [t for t in trials if t.user_attrs.get("resumes") == orphan.number]
    assert resumed.params == trials[orphan.number].params and resumed.state.is_finished()
    keys = {p.stem for p in (out / "ledger").glob("*.json")}
    assert any(f"-t{orphan.number:04d}-c01-" in k for k in keys)  # its rows continue the orphan's ledger number


def test_best_params_of_a_study_without_a_completed_trial_raises_fit_failed(tmp_path):
    from oracle_search.engine import RunFailed

    spec = PRESETS["tiny"].spec
    study = open_study(tmp_path, spec, None, [0])
    trial = study.ask()
    fitter.suggest(trial, SearchSpace.default(spec))
    trial.set_user_attr("stopped", "diverged")
    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    with pytest.raises(fitter.FitFailed, match=r"no completed trial \(1 diverged, 0 stopped early\)") as err:
        fitter.best_params(study)
    assert isinstance(err.value, RunFailed) and isinstance(err.value, ValueError)
