"""`oracle-search replay` (analysis/replay.py) on a hand-made exhaustive run: every number below is worked out by
hand from the racing rule's definition (oracle_search/racing.py)."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis.replay import REPLAY_COLUMNS, compare_sets, makespan, replay
from oracle_search.simulate import Clock
from oracle_rows import oracle_rows
from oracle_search.cli import main
from oracle_search.schema import results_frame, write_results

GRID = [0.1, 0.2, 0.4, 0.8]
# Per cycle: the value chained forward, {max_lr: val_acc of seeds 0, 1, 2}.
CYCLES = {0: (0.4, {0.1: [60, 61, 62], 0.2: [79, 80.5, 81], 0.4: [80, 81, 82], 0.8: [50, 50, 50]}),
          1: (0.4, {0.1: [70, 70, 70], 0.2: [80, 81, 82], 0.4: [81, 82, 83], 0.8: [40, 40, 40]})}


def silo(lrs: dict[int, float]) -> list[dict]:
    return [{"experiment": "t", "method": "silo_paper", "stage": "final", "seed": s, "cycle": c, "max_lr": lr,
             "density": 100 * 0.8**c, "val_acc": 70.0, "test_acc": 70.0, "selected": True, "seconds": 1.0}
            for s in (1000, 1001, 1002) for c, lr in lrs.items()]


@pytest.fixture
def run(tmp_path):
    """An exhaustive run: 4 values × 3 seeds at cycles 0 and 1, each training 1 s; SILO (paper) at 0.4 then 0.2."""
    rows = [r | {"seconds": 1.0, "key": f"oracle-c{r['cycle']}-s{r['seed']}-lr{r['max_lr']}"}
            for r in oracle_rows(CYCLES)]
    folder = tmp_path / "run"
    write_results(folder, results_frame(rows + silo({0: 0.4, 1: 0.2})).to_dict("records"))
    (folder / "spec.json").write_text(json.dumps({"grid": GRID, "preset": "hand"}))
    return folder


def test_replay_by_hand(run, tmp_path):
    """Cycle 0, no pool yet. Seed 0: all 4 trained, nothing can be shown. Seed 1: leader 0.4 (mean 80.5); paired
    differences 0.2 [1, 0.5], 0.1 [20, 20], 0.8 [30, 31]: pooled ss 0.625 on 3 df; α' = 0.05 / (3 looks · 3 other
    candidates) so t(1 − α', 3)·sd/√2 = 1.82: 0.1 (20 behind) and 0.8 (30.5) are dropped, 0.2 (0.75) is not.
    Seed 2: 0.4 and 0.2. 10 trainings of 12.
    Cycle 1 (the bracket of 0.4 is the whole grid) walks from 0.4: it starts on 0.2, 0.4, 0.8, with cycle 0's pool
    (0.2 [1, 0.5, 1]: ss 1/6 on 2 df, 0.1 0 on 1, 0.8 0.5 on 1). After seed 0, 0.8 (41 behind) is dropped, margin
    t(1 − α', 4)·0.41 = 1.9; 0.2 (1 behind) is not, so the walk steps out to 0.1, which seed 1's round trains on its
    seed 0: 11 behind, dropped; nothing lies beyond it. 8 trainings of 12. Racing used 18 of 24 (75 %); b = 0.4 at
    both cycles, as the run's.
    On 2 slots, 1 s each: exhaustive 12 + 12 trainings, 6 s + 6 s. Racing's rounds 4, 4, 2 | 3, 3, 2, two at a time;
    a slot freed before a cycle's first look idles (nothing is known to run ahead): cycle 0 2+2+1 s; cycle 1 2 s, then
    (0.4, s1), (0.2, s1) and (0.1, s0) with the leader's (0.4, s2) ahead in the free slot, 2 s, then (0.2, s2) 1 s:
    10 s, 18 trainings in 20 slot-seconds (90 %)."""
    out = tmp_path / "replay"
    got = replay(run, out, slots=2, racing_refine=0)
    expected = pd.DataFrame({"cycle": [0, 1], "exhaustive_b": [0.4, 0.4], "racing_b": [0.4, 0.4],
                             "trainings_exhaustive": [12, 12], "trainings_racing": [10, 8], "unanswered": [0, 0]})
    pd.testing.assert_frame_equal(got.cycles[REPLAY_COLUMNS], expected, check_dtype=False)
    assert got.wall == {"exhaustive": (12.0, 1.0), "racing": (10.0, 0.9)}
    # The sets, both ways: paper {0.4}; lenient [0.2, 0.4] at cycle 0 (0.2's d = [1, 0.5, 1]: lower bound 0.35),
    # {0.4} at cycle 1 (d = [1, 1, 1]); strict {0.4}. Racing completes 0.2 and 0.4 and drops 0.1 and 0.8, which
    # could not enter the lenient set: the same 6 edges per cycle, and SILO (paper)'s 3 flags per cycle equal.
    assert got.cycles["edges_equal"].tolist() == [6, 6] and got.cycles["lenient_lo_racing"].tolist() == [0.2, 0.4]
    assert got.cycles["flags_equal"].tolist() == got.cycles["flags"].tolist() == [3, 3] and got.differences.empty
    assert got.members == (12, 12, 0) and (got.undefined, got.flips) == (0, 0)
    # SILO (paper) at 0.2 on cycle 1 is complete in both: the same three verdicts.
    assert (got.labels_equal, got.labels) == (3, 3)
    assert got.last_line() == ("replay: racing used 18 of 24 Oracle trainings (75 %), racing b inside the run's "
                               "paper interval at 2 of 2 cycles, inside flags equal on 6 of 6, verdict labels equal "
                               "on 3 of 3")
    raced = json.loads((out / "racing.json").read_text())
    assert [d["max_lr"] for d in raced["0"]["dropped"]] == [0.1, 0.8] and raced["1"]["not_trained"] == []
    report = (out / "report.md").read_text()
    assert "Every \"inside\" flag of every compared schedule equals the exhaustive run's." in report
    assert "What racing changed" in report
    # The files: replay.csv, the rows racing used plus every non-Oracle row, unchanged; the report from them.
    assert pd.read_csv(out / "replay.csv").equals(got.cycles)
    kept = pd.read_parquet(out / "replay_rows.parquet")
    oracle = kept[kept["method"] == "oracle"]
    assert len(oracle) == 18 and len(kept) == 18 + 6
    assert set(oracle[oracle["max_lr"] == 0.1]["seed"]) == {0, 1} and len(oracle[oracle["max_lr"] == 0.8]) == 3
    assert (out / "report.md").exists() and len(pd.read_csv(out / "tables/verdict.csv")) == 3


def test_replay_replays_the_baselines_tuning_walk_by_hand(run, tmp_path):
    """A constant schedule's tuning rows, {0.1: 60, 0.2: 78, 0.4: 70, 0.8: 30} on every seed. The racing Oracle's
    cycle 0 (above) has best 0.4 and pool ss 1/6 + 0 + 0.5 on 4 df (sd 0.41); α' = 0.05 / (3 · 3), so one seed's
    margin is t(1 − α', 4)·0.41 = 2.3. The walk starts on 0.2, 0.4, 0.8. Seed 0: 0.4 (8 behind 0.2) and 0.8 (48)
    are dropped; 0.2, the low end, survives, so 0.1 joins. Seed 1's round: 0.2 and 0.1 (18 behind, dropped). Seed 2:
    0.2. 6 rows of 12, the same peak 0.2, and the run's curve is unimodal."""
    accs = {0.1: 60.0, 0.2: 78.0, 0.4: 70.0, 0.8: 30.0}
    tuning = [{"experiment": "t", "method": "constant", "stage": "tune", "schedule": "constant", "seed": s,
               "cycle": 0, "max_lr": lr, "density": 100.0, "val_acc": a, "test_acc": a, "selected": False,
               "seconds": 1.0, "key": f"constant-tune-s{s}-lr{lr}"} for lr, a in accs.items() for s in range(3)]
    table = pd.concat([pd.read_parquet(run / "results.parquet"), results_frame(tuning)], ignore_index=True)
    write_results(run, results_frame(table.to_dict("records")).to_dict("records"))
    got = replay(run, tmp_path / "replay", racing_refine=0)
    assert got.tuning.to_dict("records") == [{"schedule": "constant", "exhaustive_peak": 0.2, "racing_peak": 0.2,
                                             "trainings_exhaustive": 12, "trainings_racing": 6, "unanswered": 0,
                                             "unimodal": True}]
    assert got.tuning_line() == ("replay: the baselines' tuning raced on 6 of 12 rows (50 %), the same peak LR for "
                                 "1 of 1 schedules")
    assert got.unimodal_line().endswith("at 2 of 2 Oracle cycles and 1 of 1 tuning curves")
    assert pd.read_csv(tmp_path / "replay" / "replay_tuning.csv")["trainings_racing"].tolist() == [6]


def test_the_stream_tops_up_a_freed_slot_at_once():
    """Two close values (nothing is dropped), 3 seeds, 2 slots; 0.1 trains in 1 s, 0.2 in 3 s. Round 1: (0.1, s0)
    and (0.2, s0); nothing is known yet, so the slot freed at 1 s idles until the round ends at 3 s. Round 2:
    (0.1, s1) and (0.2, s1); at 4 s 0.1's slot frees and takes the leader's next seed, (0.2, s2) (0.2 leads,
    80.2 against 80), done at 7 s. Round 3 needs (0.1, s2), started at 6 s when (0.2, s1) ends: done at 7 s.
    12 s of training in 7 s on 2 slots; the batch plan waits for each round's slowest training: 3 × 3 s = 9 s."""
    from oracle_search.racing import Race, Settings, run_race

    acc = {0.1: [80, 81, 82], 0.2: [80.2, 81.1, 81.9]}
    table = {(v, s): {"val_acc": a[s], "diverged": False, "seconds": 1.0 if v == 0.1 else 3.0}
             for v, a in acc.items() for s in range(3)}
    clock = Clock(2, lambda item: table.get(item[1]))
    race = Race(Settings((0, 1, 2), 2))
    race.add(acc)
    run_race(race, clock, 2)
    assert not race.dropped and len(race.rows) == 6
    assert (clock.now, clock.busy) == (7.0, 12.0)
    assert makespan([[1.0, 3.0]] * 3, 2) == (9.0, 12.0 / 18.0)


def test_a_close_race_trains_everything():
    """The control: no value far behind, nothing dropped, so racing uses all 12 trainings of a cycle."""
    from oracle_search.racing import Race, Settings, run_race

    close = {0.1: [79.5, 80.5, 81.5], 0.2: [79, 80.5, 81], 0.4: [80, 81, 82], 0.8: [79.8, 80.9, 81.7]}
    race = Race(Settings((0, 1, 2), 4))
    race.add(close)
    run_race(race, lambda pairs: {(v, s): {"val_acc": close[v][s], "diverged": False} for v, s in pairs})
    assert not race.dropped and len(race.rows) == 12


def test_refinement_values_the_run_never_trained_are_unanswered(run, tmp_path):
    """With one racing refinement round, cycle 0's paper interval is {0.4}: its edges ask for √(0.2·0.4) = 0.2828
    and √(0.4·0.8) = 0.5657, which the run never trained: 2 values × 3 seeds unanswered, nothing else changes."""
    got = replay(run, tmp_path / "replay", racing_refine=1)
    assert got.cycles.loc[0, "unanswered"] == 6 and got.cycles.loc[0, "trainings_racing"] == 10


def test_makespan_spreads_each_batch_and_waits_for_its_slowest():
    assert makespan([[3, 1, 1, 1], [2]], 2) == (3 + 2, pytest.approx(8 / (2 * 5)))


def test_the_command_prints_the_last_line_and_refuses_a_folder_without_a_run(run, tmp_path, capsys):
    code = main(["replay", str(run), "--out", str(tmp_path / "r"), "--slots", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 0 and lines[-1].startswith("replay: racing used ") and "on 2 slot(s)" in "\n".join(lines)
    code = main(["replay", str(tmp_path / "nothing"), "--out", str(tmp_path / "r2")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "RUN" in err[0] and not (tmp_path / "r2").exists()
    code = main(["replay", str(run), "--out", str(tmp_path / "r3"), "--slots", "0"])
    assert code == 2 and "slots" in capsys.readouterr().err and not (tmp_path / "r3").exists()


def test_replay_plans_with_the_options_the_run_recorded(run, tmp_path, capsys):
    """The grid gains 3.2, which the run never trained. Bracketing, cycle 1 starts from the values within ×4 of
    0.4, so only cycle 0 asks for 3.2 (3 seeds unanswered). A run made with --no-bracket records it (options.json):
    replay then starts cycle 1 from the whole grid too, unasked, and 3.2 is asked there as well. A flag that
    contradicts the record is refused with one line (exit 2), nothing written."""
    (run / "spec.json").write_text(json.dumps({"grid": [*GRID, 3.2], "preset": "hand"}))
    assert replay(run, tmp_path / "bracketed", racing_refine=0).cycles["unanswered"].tolist() == [3, 0]
    (run / "options.json").write_text(json.dumps({"oracle": {"seeds": 3, "refine": 3, "bracket": False, "fuse": 0,
                                                             "mode": "exhaustive"}}))
    assert replay(run, tmp_path / "replay", racing_refine=0).cycles["unanswered"].tolist() == [3, 3]
    assert main(["replay", str(run), "--out", str(tmp_path / "r"), "--refine", "1"]) == 2
    assert "refine" in capsys.readouterr().err and not (tmp_path / "r").exists()


def test_every_differing_inside_flag_is_listed_with_both_sets():
    """compare_sets on two hand-made interval tables: cycle 1's lenient flag differs (the racing set is narrower)
    and is listed with both sets; the equal ones are counted, not listed."""
    def frame(noise_hi: float, noise_inside: bool) -> pd.DataFrame:
        return pd.DataFrame({"cycle": [1], "lo": [0.2], "hi": [0.4], "noise_lo": [0.2], "noise_hi": [noise_hi],
                             "strict_lo": [0.4], "strict_hi": [0.4], "silo_paper_max_lr": [0.5],
                             "silo_paper_inside": [False], "silo_paper_noise_inside": [noise_inside],
                             "silo_paper_within": [False]})

    sets, differ = compare_sets(frame(0.8, True), frame(0.4, False))
    assert sets.loc[0, ["edges_equal", "flags_equal", "flags"]].tolist() == [5, 2, 3]
    assert differ.to_dict("records") == [{"cycle": 1, "schedule": "silo_paper", "set": "lenient", "max_lr": 0.5,
                                          "exhaustive": True, "racing": False, "exhaustive_set": "[0.2, 0.8]",
                                          "racing_set": "[0.2, 0.4]"}]


def _oracle_trainings(rows: pd.DataFrame) -> set[tuple]:
    oracle = rows[rows["method"] == "oracle"]
    return set(zip(oracle["cycle"], oracle["max_lr"].round(9), oracle["seed"]))


def _replays_exactly(run, out) -> None:
    """Replay RUN (a racing run): its racing plan, RUN's chain and the completions ask for exactly the Oracle
    trainings RUN made, every one answered; the baselines' tuning likewise."""
    from oracle_search.schema import read_results

    assert main(["replay", str(run), "--out", str(out)]) == 0
    cycles = pd.read_csv(out / "replay.csv")
    assert (cycles["unanswered"] == 0).all(), cycles
    assert _oracle_trainings(pd.read_parquet(out / "replay_rows.parquet")) == _oracle_trainings(read_results(run))
    tuning = pd.read_csv(out / "replay_tuning.csv")
    assert (tuning["trainings_racing"] == tuning["trainings_exhaustive"]).all() and (tuning["unanswered"] == 0).all()


@pytest.mark.slow
@pytest.mark.e2e
def test_replay_predicts_exactly_the_trainings_of_a_racing_compare_without_bracket(ray_local, tmp_path, capsys):
    from conftest import TINY_COMPARE

    run = tmp_path / "no-bracket"
    assert main([*TINY_COMPARE, "--no-bracket", "--out", str(run)]) == 0
    assert json.loads((run / "options.json").read_text())["oracle"]["bracket"] is False
    _replays_exactly(run, tmp_path / "replay")
    assert main(["replay", str(run), "--no-bracket", "--out", str(tmp_path / "again")]) == 0  # agrees: accepted
    assert main(["replay", str(run), "--refine", "0", "--out", str(tmp_path / "other")]) == 2  # contradicts it


@pytest.mark.slow  # a Ray of its own with 4 fake GPUs
@pytest.mark.e2e
@pytest.mark.ray
def test_replay_predicts_exactly_the_trainings_of_an_oracle_fused_4_on_a_fake_4_gpu_ray(tmp_path):
    """`--fuse 4` on 4 fake GPUs (the trials see no CUDA and train on the CPU): one trial per (seed, round) holds up
    to 4 candidates; replay answers each candidate from its own row, and asks for exactly those."""
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()  # a disconnect: the shared Rays stay up
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4, "num_gpus": 4, "include_dashboard": False})
    run = tmp_path / "fused"
    try:
        assert main(["oracle", "--preset", "tiny", "--tuning-seeds", "2", "--refine", "1", "--no-bracket", "--fuse", "4",
                     "--gpus-per-trial", "1", "--cpus-per-trial", "1", "--address", cluster.address,
                     "--out", str(run)]) == 0
    finally:
        ray.shutdown()
        cluster.shutdown()
    from oracle_search.schema import read_results

    rows = read_results(run)
    assert (rows["fused"] > 1).any() and rows.groupby("trial_id").size().max() > 1  # candidates shared trials
    _replays_exactly(run, tmp_path / "replay")
