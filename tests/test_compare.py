"""compare: Oracle, fitter, baselines and report as one resumable run, including after SIGKILL (conftest's shared
`tiny_compare`, which the other end-to-end tests read too)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import TINY_COMPARE

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def test_compare_writes_results_and_report_and_resumes_after_sigkill(tiny_compare):
    out = tiny_compare.out
    before = tiny_compare.before_kill
    assert any(name.startswith("oracle-") for name in before)
    assert tiny_compare.code == 0, tiny_compare.stdout[-2000:]
    # the killed driver's lock (oracle_search.lock) was taken over, and the resuming driver said so first
    assert tiny_compare.stdout.startswith(f"lock: took over {out} from oracle-search compare, pid "), \
        tiny_compare.stdout[:500]
    assert "which is no longer running (no such process on this host)" in tiny_compare.stdout.splitlines()[0]
    assert not (out / "driver.lock").exists()  # released at the end
    for name, trial_id in before.items():  # finished before the kill: not trained again
        assert json.loads((out / "ledger" / name).read_text())["trial_id"] == trial_id

    rows = pd.read_parquet(out / "results.parquet")
    assert {"oracle", "silo_paper", "silo_fit", "constant", "decay", "cyclical", "warmup", "cosine"} <= set(rows["method"])
    assert len(rows) == len(list((out / "ledger").glob("*.json")))
    # what racing (the default) promises: every value the Oracle trained on fewer than both tuning seeds is one
    # racing.json lists as dropped, with that many seeds; the values table gives each value's n and status
    oracle = rows[rows["method"] == "oracle"]
    seeds_of = oracle.groupby(["cycle", oracle["max_lr"].round(6)])["seed"].nunique()
    raced = json.loads((out / "racing.json").read_text())
    dropped = {(int(c), round(d["max_lr"], 6)): d["seeds"] for c, s in raced.items() for d in s["dropped"]}
    for (cycle, lr), n in seeds_of.items():
        assert n == 2 or dropped.get((cycle, lr)) == n, (cycle, lr, n, raced)
    values = pd.read_csv(out / "tables" / "oracle_values.csv")
    assert set(values["status"]) <= {"complete", "dropped", "diverged", "not trained"}
    assert (values.loc[values["status"] == "complete", "n"] == 2).all()
    assert json.loads((out / "options.json").read_text())["oracle"]["mode"] == "racing"
    # final runs use evaluation seeds that no tuning row used
    final = rows[rows["stage"] == "final"]
    assert set(final["seed"]) == {1000, 1001}
    assert set(rows[rows["stage"] != "final"]["seed"]) == {0, 1}
    # identical trainings ran once: LR warmup's cycle-0 tuning is the Oracle's cycle-0 grid
    warmup_tune = rows[(rows["method"] == "warmup") & (rows["stage"] == "tune")]
    assert len(warmup_tune) and warmup_tune["reused"].all()
    report = (out / "report.md").read_text()
    assert report.index("## The answer") < report.index("## Oracle max_lr") < report.index("## Settings")
    assert "## Cost" in report and "## Test accuracy" in report
    oracle_csv = pd.read_csv(out / "tables" / "oracle.csv")
    assert {"noise_lo", "noise_hi", "silo_paper_noise_inside", "silo_fit_inside"} <= set(oracle_csv.columns)
    assert (out / "report.html").exists()


def test_a_racing_compare_races_every_tuning_phase_and_keeps_the_verdict_defined(ray_local, tmp_path, capsys):
    """`compare --oracle racing` on the tiny preset with 3 tuning seeds, on the local Ray: the Oracle, silo_paper's
    δ search and the baselines' tuning race (each says so); b at every cycle is a value every seed trained; every
    δ in silo_paper.json says on how many seeds it trained and the winner on all 3; every verdict is defined,
    on n = 3 (the completions before the analysis)."""
    from oracle_search.cli import main as cli

    out = tmp_path / "racing"
    assert cli([*TINY_COMPARE, "--tuning-seeds", "3", "--oracle", "racing", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "racing:" in said and "silo_paper: ε" in said and "racing" in said.split("silo_paper: ε")[1].splitlines()[0]
    assert "baselines: tuning the peak LR of" in said and ", racing" in said.split("baselines: tuning")[1].splitlines()[0]
    assert "baselines: racing from the Oracle's cycle-0 pool" in said
    rows = pd.read_parquet(out / "results.parquet")
    oracle = rows[rows["method"] == "oracle"]
    chosen = pd.read_csv(out / "tables" / "oracle.csv")
    for _, c in chosen.iterrows():
        at = oracle[(oracle["cycle"] == c["cycle"]) & (oracle["max_lr"].round(9) == round(c["best_max_lr"], 9))]
        assert set(at["seed"]) == {0, 1, 2}, c.to_dict()
    record = json.loads((out / "silo_paper.json").read_text())
    seeds = {c["delta"]: c["seeds_trained"] for c in record["candidates"]}
    assert all(1 <= n <= 3 for n in seeds.values()) and seeds[record["delta"]] == 3
    verdict = pd.read_csv(out / "tables" / "verdict.csv")
    assert len(verdict) and not verdict["verdict"].isin(["undefined"]).any() and (verdict["n"] == 3).all()
    report = (out / "report.md").read_text()
    assert "The Oracle raced" in report and "What racing changed" in report and "trained by every seed" not in report


def test_chain_retention_resumes_after_sigkill_at_every_phase_boundary(tiny_compare, ray_local, tmp_path):
    """`--keep-checkpoints chain` (the default) deletes checkpoints while the run goes on. The same compare as the
    shared run, SIGKILLed at each marker in turn (an Oracle cycle decided, its cycle 0 decided and the lines beside
    it starting, silo_paper's δ search starting, every final run done, a final cycle done, the report starting),
    each time resumed by a new driver: every resume finds what it starts from, and the finished table equals the
    shared run's row for row. What is left is the Oracle's chosen chain and each final run's last cycle; every other
    checkpoint left a tombstone."""
    import sys

    from conftest import cli, ray_env, run_until
    from oracle_search import retention
    from oracle_search.ledger import Ledger

    out = tmp_path / "killed"
    argv = [*TINY_COMPARE, "--out", str(out)]
    for marker in ("cycle 1 density", "== 2/4", "silo_paper: ε", "== 3/4", "final runs: cycle 0 done", "== 4/4"):
        run_until([sys.executable, "-m", "oracle_search.cli", *argv], marker, ray_env(ray_local))
    assert cli(argv) == 0

    science = ["key", "val_acc", "test_acc", "best_epoch", "selected", "diverged"]
    got = pd.read_parquet(out / "results.parquet")[science].sort_values("key", ignore_index=True)
    want = pd.read_parquet(tiny_compare.out / "results.parquet")[science].sort_values("key", ignore_index=True)
    pd.testing.assert_frame_equal(got, want)
    rows = Ledger(out).rows()
    kept = {r["checkpoint"] for r in rows if not retention.is_deleted(r["checkpoint"])}
    chain = {r["checkpoint"] for r in rows if r.get("selected") and r["method"] == "oracle"}
    heads = {r["checkpoint"] for r in rows if r.get("selected") and r["stage"] == "final"
             and not any(o.get("training", "").endswith(f"-from{r['checkpoint_hash']}") for o in rows)}
    assert kept == chain | heads and all(Path(p).is_dir() for p in kept)
    assert len({r["checkpoint"] for r in rows}) > 3 * len(kept)  # most of them went


def test_the_held_out_references_follow_the_tuning_seeds_choices_and_train_after_them(tiny_compare):
    """Issue 59: the Oracle's schedule and both controls run as final chains on the evaluation seeds. Each uses
    exactly the max_lr chosen on the tuning seeds at every cycle (b per cycle; b at cycle 0 kept; the best constant
    on the Oracle's chain), those choices come out the same from the table with every evaluation-seed row removed
    (no evaluation seed is read to make them), and every evaluation-seed training a held-out chain ran started
    after the last tuning-seed row of the Oracle (completions included) had finished."""
    from analysis.regret import best_benchmark
    from oracle_search.compared import constant_best, oracle_curves
    from oracle_search.held_out import schedules_of
    from oracle_search.schema import results_frame

    rows = pd.read_parquet(tiny_compare.out / "results.parquet")
    df = results_frame(rows.to_dict("records"))
    evaluation = {1000, 1001}
    tuning_only = results_frame(rows[~rows["seed"].isin(evaluation)].to_dict("records"))
    assert schedules_of(tuning_only) == schedules_of(df)
    assert best_benchmark(tuning_only) == best_benchmark(df) is not None

    oracle = df[(df["method"] == "oracle") & df["current"] & df["selected"]]
    b = {int(c): set(g["max_lr"].round(6)) for c, g in oracle.groupby("cycle")}
    assert all(len(v) == 1 for v in b.values()), b  # every tuning seed chained the same b
    b = {c: v.pop() for c, v in b.items()}
    best = round(constant_best(oracle_curves(tuning_only)), 6)
    want = {"oracle_schedule": b, "constant_dense": {c: b[0] for c in b}, "constant_best": {c: best for c in b}}
    for method, lrs in want.items():
        final = df[(df["method"] == method) & (df["stage"] == "final") & df["selected"]]
        assert set(final["seed"]) == evaluation, method
        for seed, chain in final.groupby("seed"):
            trained = dict(zip(chain["cycle"].astype(int), chain["max_lr"].round(6)))
            assert trained == lrs, (method, seed, trained, lrs)
    tuned_end = df.loc[df["method"] == "oracle", "finished"].max()
    held = df[df["method"].isin(want) & ~df["reused"]]
    assert len(held) and (held["started"] > tuned_end).all(), (tuned_end, held["started"].min())
