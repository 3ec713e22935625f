"""The Oracle driver on a real local Ray Tune: chaining, selection, divergence, refinement, and resuming a
driver killed by SIGKILL without retraining a finished trial."""
from __future__ import annotations

import io
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from ray import cloudpickle
from scipy import stats

from conftest import ray_env
from oracle_search import cli
from oracle_search.engine import Progress
from oracle_search.racing import OracleSearch
from oracle_search.engine import own_runner
from oracle_search.oracle import run_oracle
from oracle_search.schema import read_results
from analysis.replay import replay
from oracle_search.selection import lr_key
from trainables.presets import PRESETS
from trainables.tune_adapter import cycle_trainable

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import this test module

CLI = Path(sys.executable).with_name("oracle-search")
DIGITS = ["oracle", "--preset", "digits-mlp", "--grid", "0.02,0.05,0.1", "--tuning-seeds", "2", "--epochs", "10",
          "--refine", "0", "--no-bracket"]
SCIENCE = ["method", "stage", "seed", "cycle", "density", "max_lr", "val_acc", "test_acc", "best_epoch", "epochs",
           "diverged", "selected"]
TINY = PRESETS["tiny"].spec


def science(table: pd.DataFrame) -> pd.DataFrame:
    return table[SCIENCE].sort_values(SCIENCE[:6]).reset_index(drop=True)


def seed_means(group: pd.DataFrame) -> dict[float, tuple[float, bool, dict[int, float]]]:
    """max_lr -> (seed-mean validation accuracy, whether some seed diverged, accuracy per seed), over the values
    every seed trained: docs/design.md's definitions, computed here without the selection module."""
    seeds = set(group["seed"])
    means = {}
    for lr, g in group.groupby(group["max_lr"].map(lr_key)):
        if set(g["seed"]) == seeds:
            per_seed = g.groupby("seed")["val_acc"].mean().to_dict()
            means[lr] = (sum(per_seed.values()) / len(per_seed), bool(g["diverged"].any()), per_seed)
    return means


def best_by_hand(group: pd.DataFrame) -> float:
    """b: the best seed-mean validation accuracy among values no seed diverged on, ties to the smaller max_lr."""
    alive = {lr: mean for lr, (mean, diverged, _) in seed_means(group).items() if not diverged}
    top = max(alive.values())
    return min(lr for lr, mean in alive.items() if mean >= top - 1e-9)


def open_edges(group: pd.DataFrame, grid: list[float]) -> list[float]:
    """The edges of the paper's and the noise-aware interval that are not resolved: some grid value lies beyond
    and no trained one does, or the trained value beyond lies more than 5 % away (docs/design.md)."""
    means, b = seed_means(group), best_by_hand(group)
    values, base = sorted(means), means[b][2]

    def shown_worse(v: float) -> bool:  # mean(d) - t(0.95, n-1) sd(d) / sqrt(n) > 0.5, d_s = acc_s(b) - acc_s(v)
        d = [base[s] - means[v][2][s] for s in base]
        if len(d) == 1:
            return d[0] > 0.5
        return statistics.mean(d) - stats.t.ppf(0.95, len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d)) > 0.5

    paper = [v for v in values if not means[v][1] and means[v][0] >= means[b][0] - 0.5]
    noise = [v for v in values if not means[v][1] and (v == b or not shown_worse(v))]
    unresolved = []
    for members in (paper, noise):
        for edge, beyond_trained, beyond_grid in (
                (min(members), [v for v in values if v < min(members)], [g for g in grid if g < min(members)]),
                (max(members), [v for v in values if v > max(members)], [g for g in grid if g > max(members)])):
            if not beyond_trained:
                if beyond_grid:
                    unresolved.append(edge)
            else:
                neighbour = max(beyond_trained) if edge == min(members) else min(beyond_trained)
                if abs(neighbour / edge - 1) > 0.05:
                    unresolved.append(edge)
    return unresolved


def check_selection_and_chain(table: pd.DataFrame) -> None:
    """Every seed trained the same values at each cycle; one selected row per (seed, cycle), all at the cycle's
    seed-mean best b (worked out by `best_by_hand`); every cycle-m trial started from its seed's selected
    cycle-(m-1) checkpoint."""
    for cycle, group in table.groupby("cycle"):
        values = {seed: sorted(g["max_lr"].map(lr_key)) for seed, g in group.groupby("seed")}
        assert len({tuple(v) for v in values.values()}) == 1, (cycle, values)
        best = best_by_hand(group)
        chosen = group[group["selected"]]
        assert sorted(chosen["seed"]) == sorted(values) and set(chosen["max_lr"].map(lr_key)) == {best}, cycle
        for seed, g in group.groupby("seed"):
            starts = set(g["start_hash"].fillna(""))
            if cycle == 0:
                assert starts == {""}
            else:
                prev = table[(table["seed"] == seed) & (table["cycle"] == cycle - 1) & table["selected"]]
                assert starts == {prev["checkpoint_hash"].item()}, (seed, cycle)


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
def test_driver_killed_after_cycle_1_resumes_to_the_same_table_without_retraining(ray_local, digits_run, tmp_path,
                                                                                   capsys):
    out = tmp_path / "run"
    args = [*DIGITS, "--out", str(out)]
    with open(tmp_path / "stderr-killed.txt", "w") as err:  # a driver joining the tests' local Ray
        proc = subprocess.Popen([str(CLI), *args], stdout=subprocess.PIPE, stderr=err, text=True,
                                start_new_session=True, env=ray_env(ray_local))
        try:
            for line in proc.stdout:
                # Killed right after cycle 1's summary: cycles 2 and 3 are not trained yet.
                if re.match(r"\s+cycle 1 density", line):
                    os.killpg(proc.pid, signal.SIGKILL)
                    break
            else:
                pytest.fail(f"the driver ended before cycle 1's summary: {(tmp_path / 'stderr-killed.txt').read_text()}")
            assert proc.wait(timeout=60) == -signal.SIGKILL
        finally:
            kill_session(proc.pid)
    before = {p.stem: json.loads(p.read_text()) for p in (out / "ledger").glob("*.json")}
    assert 12 <= len(before) < 24 and {r["cycle"] for r in before.values()} >= {0, 1}

    capsys.readouterr()
    code = cli.main(args)  # the rerun, in this process
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
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


@pytest.mark.slow
def test_divergent_grid_value_is_never_selected(ray_local, tmp_path):
    progress = Progress(io.StringIO())
    with own_runner(out=tmp_path, spec=TINY, experiment="tiny", progress=progress) as runner:
        outcomes = run_oracle(runner, OracleSearch((0.1, 50.0), (0, 1), 0, False, "exhaustive"))
    assert [o.cycle for o in outcomes] == [0, 1, 2]
    assert all(o.choice.best == 0.1 and o.choice.noise_hi == 0.1 for o in outcomes)
    table = read_results(tmp_path)
    assert len(table) == 3 * 2 * 2
    assert table[table["max_lr"] == 50.0]["diverged"].all() and not table[table["max_lr"] == 0.1]["diverged"].any()
    assert not table[table["diverged"]]["selected"].any()
    check_selection_and_chain(table)


@pytest.mark.slow
def test_all_divergent_grid_ends_cleanly_with_a_message(ray_local, tmp_path, capfd):
    out = tmp_path / "run"
    assert cli.main(["oracle", "--preset", "tiny", "--grid", "50,100", "--tuning-seeds", "1", "--out", str(out)]) == 0
    assert "every max_lr diverged on some seed; the Oracle stops here" in capfd.readouterr().out
    table = read_results(out)
    assert sorted(table["max_lr"]) == [50.0, 100.0]
    assert table["diverged"].all() and not table["selected"].any()


@pytest.mark.slow
def test_refinement_and_brackets_train_the_same_values_on_every_seed(ray_local, tmp_path):
    out = tmp_path / "run"
    assert cli.main(["oracle", "--oracle", "exhaustive", "--preset", "tiny", "--tuning-seeds", "2", "--refine", "2",
                     "--out", str(out)]) == 0
    table = read_results(out)
    grid = list(TINY.grid)
    check_selection_and_chain(table)
    dense = best_by_hand(table[table["cycle"] == 0])
    previous = None
    for cycle, group in table.groupby("cycle"):
        coarse = sorted(set(group[group["stage"] == "grid"]["max_lr"].map(lr_key)))
        # cycle 0: the whole grid; later: the grid values within a factor 4 of the previous choice, that choice
        # and the dense best
        expected = grid if cycle == 0 else {g for g in grid if previous / 4 <= g <= previous * 4} | {previous, dense}
        assert coarse == pytest.approx(sorted(expected)), cycle
        refined = group[group["stage"] == "refine"]["max_lr"].nunique()
        # stopped because the edges are resolved, or because the two refinement rounds (one value or more
        # each) were spent
        assert open_edges(group, grid) == [] or refined >= 2, cycle
        previous = best_by_hand(group)
    assert set(table["cycle"]) == {0, 1, 2}
    # replay runs the driver's own plan (racing.OracleSearch) on the table: it asks for exactly these trainings
    assert replay(out, tmp_path / "replay").planned == 3


@pytest.mark.slow
def test_a_rerun_with_other_options_never_reuses_trials_of_another_chain(ray_local, tmp_path):
    out = str(tmp_path / "rechain")
    base = ["oracle", "--preset", "tiny", "--cycles", "1", "--grid", "0.02,0.3", "--tuning-seeds", "1", "--refine", "0",
            "--out", out]
    assert cli.main(base) == 0
    first = read_results(Path(out))
    assert cli.main(base[:-4] + ["--refine", "3", "--out", out]) == 0  # may select another cycle-0 trial
    table = read_results(Path(out))
    assert (table.groupby(["seed", "cycle"])["selected"].sum() == 1).all()
    chosen0 = table[(table["cycle"] == 0) & table["selected"]]["checkpoint_hash"].item()
    cycle1 = table[table["cycle"] == 1]
    current = cycle1[cycle1["start_hash"] == chosen0]
    assert len(current) >= 2 and current["selected"].sum() == 1
    # every earlier row is still in the table; rows trained from an abandoned chain are never selected
    assert set(first["key"]) <= set(table["key"])
    assert not cycle1[cycle1["start_hash"] != chosen0]["selected"].any()


@pytest.mark.slow
def test_fused_oracle_trains_each_cycles_values_as_one_trial_and_chooses_as_separate_runs(ray_local, tmp_path):
    # float32: under bf16 one batched matmul and K separate ones round differently (tests/test_fused.py)
    args = ["oracle", "--preset", "tiny", "--grid", "0.01,0.03,0.1", "--tuning-seeds", "2", "--refine", "0",
            "--no-bracket", "--no-amp"]
    assert cli.main([*args, "--fuse", "3", "--out", str(tmp_path / "fused")]) == 0
    assert cli.main([*args, "--fuse", "1", "--out", str(tmp_path / "separate")]) == 0
    fused, separate = read_results(tmp_path / "fused"), read_results(tmp_path / "separate")
    assert (fused["fused"] == 3).all() and (separate["fused"] == 1).all()
    # one Tune trial per (seed, cycle), its candidates chained from their own checkpoint subfolders
    assert fused.groupby(["seed", "cycle"])["trial_id"].nunique().eq(1).all()
    check_selection_and_chain(fused)
    chosen = {name: t[t["selected"]].groupby("cycle")["max_lr"].first().tolist()
              for name, t in (("fused", fused), ("separate", separate))}
    assert chosen["fused"] == chosen["separate"]
    merged = science(fused).merge(science(separate), on=["seed", "cycle", "max_lr"], suffixes=("_f", "_s"))
    assert len(merged) == len(fused) == len(separate)
    # Each candidate is run_cycle at its max_lr (docs/design.md): the same best epoch and the same accuracies, to
    # the rounding of the percentages themselves (one validation sample is worth far more than 1e-6 of them).
    assert (merged["best_epoch_f"] == merged["best_epoch_s"]).all()
    for split in ("val_acc", "test_acc"):
        assert merged[f"{split}_f"].tolist() == pytest.approx(merged[f"{split}_s"].tolist(), rel=1e-6), split
