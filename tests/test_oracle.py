"""The Oracle driver on a real local Ray Tune: chaining, selection, divergence, refinement, and resuming a
driver killed by SIGKILL without retraining a finished trial."""
from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from ray import cloudpickle

from oracle_search import cli
from oracle_search.engine import Progress, Runner
from oracle_search.oracle import best_row, interval, refine_values, run_oracle
from oracle_search.results import read_results
from trainables.presets import PRESETS
from trainables.tune_adapter import cycle_trainable

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import this test module

CLI = Path(sys.executable).with_name("oracle-search")
DIGITS = ["oracle", "--preset", "digits-mlp", "--grid", "0.02,0.05,0.1", "--seeds", "2", "--epochs", "10"]
SCIENCE = ["method", "stage", "seed", "cycle", "density", "max_lr", "val_acc", "test_acc", "best_epoch", "epochs",
           "diverged", "selected"]
TINY = PRESETS["tiny"].spec


def row(lr: float, val: float, diverged: bool = False) -> dict:
    return {"max_lr": lr, "val_acc": val, "diverged": diverged}


def science(table: pd.DataFrame) -> pd.DataFrame:
    return table[SCIENCE].sort_values(SCIENCE[:6]).reset_index(drop=True)


def check_selection_and_chain(table: pd.DataFrame) -> None:
    """One selected row per (seed, cycle), the best by validation accuracy among all its candidates, and every
    cycle-m trial started from the checkpoint of that seed's selected cycle-(m-1) trial."""
    for (seed, cycle), group in table.groupby(["seed", "cycle"]):
        assert group["selected"].sum() == 1, (seed, cycle)
        best = best_row(group.to_dict("records"))
        assert group[group["selected"]]["key"].item() == best["key"]
        starts = set(group["start_hash"].fillna(""))
        if cycle == 0:
            assert starts == {""}
        else:
            prev = table[(table["seed"] == seed) & (table["cycle"] == cycle - 1) & table["selected"]]
            assert starts == {prev["checkpoint_hash"].item()}, (seed, cycle)


# --- pure functions ----------------------------------------------------------------------------------------------

def test_best_row_prefers_validation_then_smaller_lr_and_skips_diverged():
    assert best_row([row(0.1, 90), row(0.2, 92), row(0.4, 99, diverged=True)])["max_lr"] == 0.2
    assert best_row([row(0.4, 92), row(0.1, 92), row(0.2, 91)])["max_lr"] == 0.1
    assert best_row([row(0.1, 50, diverged=True), row(0.2, 60, diverged=True)]) is None
    assert best_row([]) is None


def test_interval_spans_values_within_half_a_point_of_the_best():
    rows = [row(0.01, 80.0), row(0.02, 89.6), row(0.04, 90.0), row(0.08, 89.4), row(0.16, 95.0, diverged=True)]
    assert interval(rows) == (0.02, 0.04)
    assert interval(rows, tolerance=1.0) == (0.02, 0.08)
    assert interval([row(0.3, 70.0)]) == (0.3, 0.3)


def test_refine_values_lie_linearly_between_the_coarse_neighbours():
    grid = [0.3, 0.03, 0.1]  # order does not matter
    assert refine_values(grid, 0.1, 2) == pytest.approx([0.12, 0.21])
    assert refine_values(grid, 0.1, 3) == pytest.approx([0.0975, 0.165, 0.2325])
    # At the ends of the grid the missing neighbour is best/2 or best*2.
    assert refine_values(grid, 0.03, 1) == pytest.approx([(0.015 + 0.1) / 2])
    assert refine_values(grid, 0.3, 1) == pytest.approx([(0.1 + 0.6) / 2])
    # A value that coincides with a grid value is not trained twice.
    assert refine_values([0.01, 0.02, 0.04], 0.02, 2) == pytest.approx([0.03])
    assert refine_values(grid, 0.1, 0) == []


# --- on Ray ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def digits_run(ray_local, tmp_path_factory) -> Path:
    """An uninterrupted digits-mlp Oracle: 4 cycles (0..3) x 3 max_lr x 2 seeds, through the CLI, in process."""
    out = tmp_path_factory.mktemp("digits") / "run"
    assert cli.main([*DIGITS, "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_oracle_chains_the_selected_checkpoint_through_every_cycle(digits_run):
    table = read_results(digits_run)
    assert len(table) == 4 * 3 * 2
    assert set(table["method"]) == {"oracle"} and set(table["stage"]) == {"grid"}
    assert sorted(set(zip(table["seed"], table["cycle"], table["max_lr"]))) == sorted(
        (s, c, lr) for s in (0, 1) for c in range(4) for lr in (0.02, 0.05, 0.1))
    for cycle, density in enumerate([100.0, 80.0, 64.0, 51.2]):
        assert table[table["cycle"] == cycle]["density"].tolist() == pytest.approx([density] * 6, abs=0.01)
    assert table["checkpoint_hash"].str.len().eq(64).all()
    assert table["trial_id"].nunique() == len(table)
    check_selection_and_chain(table)
    # The ledger holds the same rows, the selected ones marked.
    ledger = [json.loads(p.read_text()) for p in (digits_run / "ledger").glob("*.json")]
    assert sorted(r["key"] for r in ledger if r.get("selected")) == sorted(table[table["selected"]]["key"])


def kill_session(sid: int) -> None:
    """SIGKILL whatever is left of a session this test started (the driver's local Ray)."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and os.getsid(int(proc.name)) == sid:
                os.kill(int(proc.name), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def finished_trial_dirs(out: Path) -> list[str]:
    """Names of Tune trial directories, over every experiment in the run, that hold a reported checkpoint."""
    return [d.name for d in (out / "tune").glob("*/oracle-*") if any(d.glob("checkpoint_*"))]


@pytest.mark.slow
def test_driver_killed_after_cycle_1_resumes_to_the_same_table_without_retraining(digits_run, tmp_path):
    out = tmp_path / "run"
    cmd = [str(CLI), *DIGITS, "--out", str(out)]
    with open(tmp_path / "stderr-killed.txt", "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
        try:
            for line in proc.stdout:
                # Killed right after seed 0's cycle-1 summary: seed 1's cycle-1 selection is not yet marked.
                if re.match(r"\s+cycle 1 seed \d+ density", line):
                    os.killpg(proc.pid, signal.SIGKILL)
                    break
            else:
                pytest.fail(f"the driver ended before cycle 1's summary: {(tmp_path / 'stderr-killed.txt').read_text()}")
            assert proc.wait(timeout=60) == -signal.SIGKILL
        finally:
            kill_session(proc.pid)
    before = {p.stem: json.loads(p.read_text()) for p in (out / "ledger").glob("*.json")}
    assert 12 <= len(before) < 24 and {r["cycle"] for r in before.values()} >= {0, 1}

    with open(tmp_path / "stderr-rerun.txt", "w") as err:
        rerun = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
        try:
            stdout, _ = rerun.communicate(timeout=300)
        finally:
            kill_session(rerun.pid)
    assert rerun.returncode == 0, (tmp_path / "stderr-rerun.txt").read_text()
    trained = re.findall(r"oracle/grid cycle (\d) ", stdout)
    assert len(trained) == 24 - len(before) and set(trained) <= {"2", "3"}  # only the missing trials trained

    table = read_results(out)
    pd.testing.assert_frame_equal(science(table), science(read_results(digits_run)))
    check_selection_and_chain(table)
    after = {p.stem: json.loads(p.read_text()) for p in (out / "ledger").glob("*.json")}
    for key, old in before.items():
        assert {k: after[key][k] for k in ("trial_id", "checkpoint", "checkpoint_hash")} == \
            {k: old[k] for k in ("trial_id", "checkpoint", "checkpoint_hash")}, key
    dirs = finished_trial_dirs(out)
    assert len(dirs) == len(set(dirs)) == 24
    assert len(list((out / "tune").glob("*/experiment_state-*.json"))) == 2  # the rerun was a new experiment


def diverge_seed_1(config: dict) -> None:
    """Seed 1 trains every candidate at an absurd max_lr, so all of them diverge; seed 0 trains as asked."""
    cycle_trainable(config | {"max_lr": 1e4} if config["seed"] == 1 else config)


@pytest.mark.slow
def test_divergent_grid_value_is_never_selected_and_a_seed_without_survivors_stops(ray_local, tmp_path):
    progress = Progress(io.StringIO())
    with Runner(out=tmp_path, spec=TINY, experiment="tiny", trainable=diverge_seed_1, progress=progress) as runner:
        chosen = run_oracle(runner, seeds=[0, 1], grid=[0.1, 50.0])
    log = progress.stream.getvalue()
    assert "seed 1: every max_lr diverged at cycle 0; this seed stops here" in log
    assert [c.cycle for c in chosen[0]] == [0, 1, 2] and chosen[1] == []
    assert all(c.row["max_lr"] == 0.1 for c in chosen[0])

    table = read_results(tmp_path)
    seed0, seed1 = table[table["seed"] == 0], table[table["seed"] == 1]
    assert len(seed0) == 3 * 2 and len(seed1) == 2  # seed 1 ran cycle 0 only
    assert seed0[seed0["max_lr"] == 50.0]["diverged"].all()
    assert not seed0[seed0["max_lr"] == 0.1]["diverged"].any()
    assert seed1["diverged"].all() and not table[table["diverged"]]["selected"].any()
    check_selection_and_chain(seed0)


@pytest.mark.slow
def test_all_divergent_grid_ends_cleanly_with_a_message(ray_local, tmp_path, capfd):
    out = tmp_path / "run"
    assert cli.main(["oracle", "--preset", "tiny", "--grid", "50,100", "--out", str(out)]) == 0
    assert "seed 0: every max_lr diverged at cycle 0; this seed stops here" in capfd.readouterr().out
    table = read_results(out)
    assert sorted(table["max_lr"]) == [50.0, 100.0]
    assert table["diverged"].all() and not table["selected"].any()


@pytest.mark.slow
def test_refine_adds_linear_values_around_each_coarse_best(ray_local, tmp_path):
    out = tmp_path / "run"
    assert cli.main(["oracle", "--preset", "tiny", "--refine", "2", "--out", str(out)]) == 0
    table = read_results(out)
    grid = list(TINY.grid)
    for cycle, group in table.groupby("cycle"):
        coarse, fine = group[group["stage"] == "grid"], group[group["stage"] == "refine"]
        assert sorted(coarse["max_lr"]) == grid
        expected = refine_values(grid, best_row(coarse.to_dict("records"))["max_lr"], 2)
        assert len(expected) == 2 and sorted(fine["max_lr"]) == pytest.approx(expected)
        assert set(fine["start_hash"].fillna("")) == set(coarse["start_hash"].fillna(""))
    assert set(table["cycle"]) == {0, 1, 2}
    check_selection_and_chain(table)  # the selection is over the coarse and the refined values together


@pytest.mark.slow
def test_a_rerun_with_other_options_never_reuses_trials_of_another_chain(ray_local, tmp_path):
    out = str(tmp_path / "rechain")
    base = ["oracle", "--preset", "tiny", "--cycles", "1", "--grid", "0.02,0.3", "--out", out]
    assert cli.main(base) == 0
    first = read_results(Path(out))
    assert cli.main(base + ["--refine", "3"]) == 0  # may select another cycle-0 trial
    table = read_results(Path(out))
    assert (table.groupby(["seed", "cycle"])["selected"].sum() == 1).all()
    chosen0 = table[(table["cycle"] == 0) & table["selected"]]["checkpoint_hash"].item()
    cycle1 = table[table["cycle"] == 1]
    current = cycle1[cycle1["start_hash"] == chosen0]
    assert len(current) >= 2 and current["selected"].sum() == 1
    # rows trained from the earlier chain (the refine stage chose another cycle-0 trial) stay in the table but
    # are never the selected ones
    assert (cycle1["start_hash"] != chosen0).any()
    assert not cycle1[cycle1["start_hash"] != chosen0]["selected"].any()
    assert len(table) >= len(first)
