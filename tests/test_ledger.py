"""Results that cannot silently be wrong: a ledger row under a trial's key whose training identity is not the
trial's is refused and retrained; silo_fit's keys carry its parameters and start checkpoint; and after a rerun
with fewer refinement rounds, the analysis's b is the value the Oracle chained."""
from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import optuna
import pytest

from oracle_search import cli
from oracle_search.engine import Progress, own_runner
from oracle_search.runner import Runner
from oracle_search.ledger import Ledger
from oracle_search.fitter import trial_key
from oracle_search.trainings import cycle_training, training_id
from oracle_search.schema import read_results
from trainables.presets import PRESETS
from trainables.schedules import SiloParams

DIGITS = dataclasses.replace(PRESETS["digits-mlp"].spec, epochs=2, cycles=1)


def digits_training(lr: float = 0.05):
    return cycle_training(DIGITS, f"t-lr{lr}", 0, 0, lr, None, {"method": "oracle", "stage": "grid"})


def runner(out: Path, log: io.StringIO | None = None, **kw) -> Runner:
    return own_runner(out=out, spec=DIGITS, experiment="ledger", progress=Progress(log or io.StringIO()), **kw)


def test_a_row_of_the_same_training_is_reused_without_starting_ray(tmp_path):
    t = digits_training()
    Ledger(tmp_path).record({"key": t.key, "training": t.tags["training"], "val_acc": 90.0})
    with runner(tmp_path, address="ray://nowhere:1") as r:  # would fail if it tried to start Ray
        assert r.run([t])[t.key]["val_acc"] == 90.0
    assert not (tmp_path / "ledger" / "refused").exists()


@pytest.mark.slow
def test_a_ledger_row_of_another_training_identity_is_refused_kept_aside_and_retrained(ray_local, tmp_path):
    t = digits_training()
    with runner(tmp_path) as r:
        first = r.run([t])[t.key]
    assert first["training"] == training_id(DIGITS, 0, 0, 0.05, None)
    path = tmp_path / "ledger" / f"{t.key}.json"
    stored = json.loads(path.read_text())
    path.write_text(json.dumps(stored | {"training": "another-training"}))  # as if trained under other options

    log = io.StringIO()
    with runner(tmp_path, log) as r:
        second = r.run([t])[t.key]
    assert second["trial_id"] != first["trial_id"]  # trained again, not reused
    assert second["training"] == t.tags["training"] and not second.get("reused")
    assert json.loads(path.read_text())["trial_id"] == second["trial_id"]
    refused = json.loads((tmp_path / "ledger" / "refused" / f"{t.key}.json").read_text())
    assert refused["training"] == "another-training" and refused["trial_id"] == first["trial_id"]
    said = log.getvalue()
    assert f"ledger: {t.key} holds another training (another-training" in said and "refused" in said
    assert [row["key"] for row in Ledger(tmp_path).rows()] == [t.key]  # the refused row is not a row

    with runner(tmp_path, address="ray://nowhere:1") as r:  # the retrained row is now a hit
        assert r.run([t])[t.key]["trial_id"] == second["trial_id"]


def test_silo_fit_keys_carry_its_parameters_and_start_checkpoint():
    study = optuna.create_study(study_name="silo-digits-mlp-abcdef0123")
    spec = DIGITS.with_schedule(name="silo", silo=SiloParams(0.1, 0.4, 1, 5.0))
    other = DIGITS.with_schedule(name="silo", silo=SiloParams(0.1, 0.3, 1, 5.0))
    start = {"checkpoint_hash": "0123456789abcdef" * 4, "checkpoint": "/x"}
    key = trial_key(study, 3, spec, 1, 0, start)
    assert key == "silo-fit-abcdef0123-t0003-c01-s0-silo0.1_0.4_1_5-from0123456789"
    assert trial_key(study, 3, spec, 0, 0, None) == "silo-fit-abcdef0123-t0003-c00-s0-silo0.1_0.4_1_5"
    assert trial_key(study, 3, other, 1, 0, start) != key  # the same trial number with other parameters
    assert trial_key(study, 3, spec, 1, 0, start | {"checkpoint_hash": "f" * 64}) != key  # another start


ORACLE = ["oracle", "--preset", "digits-mlp", "--grid", "0.01,10", "--tuning-seeds", "2", "--epochs", "3", "--cycles", "1",
          "--no-bracket"]


@pytest.mark.slow
def test_after_a_rerun_with_fewer_refinement_rounds_the_analysis_b_is_the_chained_value(ray_local, tmp_path):
    """Grid {0.01, 10}: 10 diverges and 3 epochs at 0.01 barely train, so one refinement round's midpoint
    (0.316) wins cycle 0. A rerun with --refine 0 sees only the grid in its own trials; the refined rows are still
    on the chain's cycle 0 (same start), so the analysis counts them: the Oracle must too, or its b and the
    chained value part."""
    from analysis.intervals import oracle_intervals

    out = tmp_path / "run"
    assert cli.main([*ORACLE, "--refine", "1", "--out", str(out)]) == 0
    first = read_results(out)
    chained0 = first[(first["cycle"] == 0) & first["selected"]]["max_lr"].unique()
    assert len(chained0) == 1 and chained0[0] not in (0.01, 10.0), "refinement did not move b off the grid"

    assert cli.main([*ORACLE, "--refine", "0", "--out", str(out)]) == 0
    table = read_results(out)
    b = oracle_intervals(table).set_index("cycle")["best_max_lr"]
    oracle = table[(table["method"] == "oracle") & table["current"]]
    chained = oracle[oracle["selected"]].groupby("cycle")["max_lr"]
    assert (chained.nunique() == 1).all() and sorted(chained.first().index) == [0, 1]
    assert b.to_dict() == pytest.approx(chained.first().to_dict())
    # every row of the chain's cycle 1 started from the chained cycle-0 checkpoints
    for seed, rows in oracle[oracle["cycle"] == 1].groupby("seed"):
        picked = oracle[(oracle["cycle"] == 0) & (oracle["seed"] == seed) & oracle["selected"]]
        assert set(rows["start_hash"]) == {picked["checkpoint_hash"].item()}


@pytest.mark.slow
def test_a_rerun_with_the_same_options_trains_nothing(ray_local, tmp_path):
    """The refinement rounds replay from the ledger: with the earlier rows counted up front, a rerun used to
    start its rounds from the first run's final choice and train `--refine` more rounds per cycle."""
    out = tmp_path / "run"
    assert cli.main([*ORACLE, "--refine", "2", "--out", str(out)]) == 0
    before = read_results(out)
    trained = sorted((out / "ledger").glob("*.json"))
    assert cli.main([*ORACLE, "--refine", "2", "--out", str(out)]) == 0
    assert sorted((out / "ledger").glob("*.json")) == trained
    after = read_results(out)
    assert len(after) == len(before)
    assert after["selected"].tolist() == before["selected"].tolist()
