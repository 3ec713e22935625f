"""The SILO fitter on real Ray and real Optuna storage (a journal file under --out)."""
from __future__ import annotations

import json
from pathlib import Path

import optuna
import pandas as pd
import pytest

from oracle_search.cli import main
from oracle_search.fitter import SearchSpace, default_storage, recommended_start
from trainables.presets import PRESETS

pytestmark = pytest.mark.slow

ARGS = ["fit-silo", "--preset", "digits-mlp", "--cycles", "2", "--epochs", "8", "--epsilon-range", "0.0005:0.5",
        "--delta-range", "0:0.3"]


def load(out: Path) -> optuna.Study:
    return optuna.load_study(study_name="silo-digits-mlp", storage=default_storage(out))


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fit")
    assert main(ARGS + ["--trials", "6", "--out", str(out)]) == 0
    return out


def test_study_reloads_with_six_finished_trials_inside_the_ranges(fitted):
    study = load(fitted)
    finished = [t for t in study.trials if t.state.is_finished()]
    assert len(finished) == 6
    best = study.best_trial.params
    assert 0.0005 <= best["epsilon"] <= 0.5 and 0 <= best["delta"] <= 0.3
    assert 0 <= best["q"] <= 3 and 3 <= best["beta"] <= 6


def test_first_trial_is_the_papers_recommendation(fitted):
    first = load(fitted).trials[0].params
    assert first["q"] == 1 and first["beta"] == 5.0
    assert first["epsilon"] == pytest.approx(PRESETS["digits-mlp"].spec.schedule.silo.epsilon)


def test_rows_carry_method_schedule_and_parameters(fitted):
    rows = pd.read_parquet(fitted / "results.parquet")
    assert set(rows["method"]) == {"silo"} and set(rows["stage"]) == {"fit"}
    study = load(fitted)
    for number, trial_rows in rows.groupby("study_trial"):
        params = study.trials[int(number)].params
        assert trial_rows["epsilon"].unique().tolist() == [pytest.approx(params["epsilon"])]
        assert trial_rows["q"].unique().tolist() == [params["q"]]


def test_a_pruned_trial_is_marked_and_cost_fewer_epochs(fitted):
    study, rows = load(fitted), pd.read_parquet(fitted / "results.parquet")
    pruned = [t.number for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
    complete = [t.number for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert pruned, "the pruner stopped no trial"
    epochs = rows.groupby("study_trial")["epochs"].sum()
    for number in pruned:
        assert rows[rows["study_trial"] == number]["pruned"].all()
        assert epochs[number] < min(epochs[c] for c in complete)
    assert not rows[rows["study_trial"].isin(complete)]["pruned"].any()


def test_a_rerun_adds_trials_instead_of_starting_over(fitted):
    before = {t.number: (t.params, t.value) for t in load(fitted).trials}
    ledger_before = {p.name: json.loads(p.read_text())["trial_id"] for p in (fitted / "ledger").glob("*.json")}
    assert main(ARGS + ["--trials", "8", "--out", str(fitted)]) == 0
    after = load(fitted).trials
    assert sum(t.state.is_finished() for t in after) == 8
    assert {t.number: (t.params, t.value) for t in after[:6]} == before
    for name, trial_id in ledger_before.items():  # no finished cycle trained again
        assert json.loads((fitted / "ledger" / name).read_text())["trial_id"] == trial_id


def test_search_space_and_recommendation_defaults():
    spec = PRESETS["mnist1d-mlp"].spec
    space = SearchSpace.default(spec)
    assert space.epsilon == (min(spec.grid), max(spec.grid)) and space.q == (0, 3) and space.beta == (3.0, 6.0)
    assert recommended_start(spec, 0.16) == {"epsilon": 0.16, "delta": spec.schedule.silo.delta, "q": 1,
                                             "beta": 5.0}


@pytest.mark.parametrize("option, value", [("--epsilon-range", "0:1"), ("--beta-range", "6:3"),
                                           ("--q-range", "a:b"), ("--trials", "0")])
def test_bad_fitter_ranges_exit_2_and_write_nothing(tmp_path, capsys, option, value):
    out = tmp_path / "out"
    assert main(["fit-silo", "--preset", "tiny", option, value, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and option.lstrip("-").split("-")[0] in err
    assert not out.exists()
