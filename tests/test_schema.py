"""The results table's schema and the one rule for the rows a report may use (issue 11: abandoned Oracle chains,
superseded SILO final chains), on hand-made tables."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from analysis.intervals import oracle_intervals
from analysis.select import silo_params
from oracle_search.compared import final_rows, silo_max_lr_by_cycle
from oracle_search.schema import (COLUMNS, current_rows, oracle_chain, read_results, results_frame,
                                  write_results)

ROOT = Path(__file__).resolve().parents[1]


def oracle(seed: int, cycle: int, accs: dict[float, float], *, start: str, pick: float | None, tag: str = "",
           stage: str = "grid") -> list[dict]:
    """One Oracle cycle of one seed from checkpoint `start`; `pick` is the value marked selected."""
    return [{"method": "oracle", "stage": stage, "seed": seed, "cycle": cycle, "density": 100 * 0.8**cycle,
             "max_lr": lr, "val_acc": a, "test_acc": a - 1, "selected": lr == pick, "start_hash": start,
             "checkpoint_hash": f"{tag}s{seed}c{cycle}lr{lr}"} for lr, a in accs.items()]


# The design card's contract (its "Columns at least" list), written out by hand from the card.
CARD_COLUMNS = ("experiment method schedule seed cycle density max_lr val_acc test_acc best_epoch epochs seconds "
                "device grad_std act_std diverged selected trial_id checkpoint epsilon delta q beta").split()


def documented_extras() -> set[str]:
    """The columns docs/design.md's "Results table" section names beyond the card's."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text[text.index("## Results table"):].split("\n## ", 1)[0]
    beyond = section[section.index("Beyond the design card"):]
    return {name for name in re.findall(r"`([a-z_]+)`", beyond)}


def test_every_documented_column_is_in_the_table_and_a_bare_row_gets_each_ones_meaning():
    frame = results_frame([{"method": "oracle", "seed": 1, "cycle": 0, "max_lr": 0.1, "gpu_ids": [0, 2]}])
    extras = documented_extras()
    assert {"stage", "stopped_early", "reused", "fused", "checkpoint_hash", "start_hash", "key"} <= extras
    assert set(CARD_COLUMNS) | extras <= set(frame.columns)
    first = frame.iloc[0]
    # A row that says nothing of them: trained (not reused), one candidate (not fused), not stopped early, on no
    # chain yet (no hashes), not measured (NaN); GPU ids as the comma list the table stores.
    assert first["gpu_ids"] == "0,2" and first["fused"] == 1 and first["checkpoint_hash"] == ""
    assert not first["stopped_early"] and not first["reused"] and math.isnan(first["val_acc"])
    assert not first["diverged"] and not first["selected"]


@pytest.mark.filterwarnings("error")
def test_old_tables_pruned_column_becomes_stopped_early():
    frame = results_frame([{"method": "silo_fit", "stage": "fit", "study_trial": 0.0, "pruned": True},
                           {"method": "silo_fit", "stage": "fit", "study_trial": 1.0, "pruned": None},
                           {"method": "silo_fit", "stage": "fit", "study_trial": 2.0, "pruned": False}])
    assert frame["stopped_early"].tolist() == [True, False, False]
    assert "pruned" not in frame
    floats = results_frame([{"study_trial": 0.0, "pruned": 1.0}, {"study_trial": 1.0, "pruned": float("nan")}])
    assert floats["stopped_early"].tolist() == [True, False]


@pytest.mark.filterwarnings("error")  # pandas warns that filling a float column with False will raise
def test_flags_are_booleans_and_rows_are_sorted():
    frame = results_frame([{"method": "oracle", "seed": 1, "cycle": 1, "selected": 1.0, "reused": None},
                           {"method": "constant", "stage": "final", "seed": 0, "cycle": 0, "fused": None},
                           {"method": "oracle", "seed": 0, "cycle": 2, "diverged": float("nan")}])
    assert [(m, s, c) for m, s, c in zip(frame["method"], frame["seed"], frame["cycle"])] == [
        ("constant", 0, 0), ("oracle", 0, 2), ("oracle", 1, 1)]
    assert frame["selected"].tolist() == [False, False, True]
    assert frame["diverged"].dtype == bool and frame["reused"].dtype == bool
    assert frame["fused"].tolist() == [1, 1, 1]


def test_write_results_round_trips_through_parquet_and_csv(tmp_path):
    rows = oracle(0, 0, {0.01: 70.0, 0.02: 80.0}, start="", pick=0.02)
    rows[0] |= {"reused": True, "fused": 4, "gpu_ids": [1]}
    written = write_results(tmp_path, rows)
    back = read_results(tmp_path)
    pd.testing.assert_frame_equal(back, written)
    assert back["reused"].tolist() == [True, False] and back["fused"].tolist() == [4, 1]
    csv = pd.read_csv(tmp_path / "results.csv")
    assert list(csv.columns) == COLUMNS and csv["val_acc"].tolist() == [70.0, 80.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv", "results.parquet"]  # no temp files


def abandoned_chain() -> pd.DataFrame:
    """Seed 0 ran cycles 0-2 from a first cycle-0 choice (0.01, hash s0c0lr0.01); a rerun refined cycle 0,
    selected 0.02 instead and retrained cycle 1 from it. The first chain's rows stay in the table."""
    rows = oracle(0, 0, {0.01: 80.0, 0.04: 70.0}, start="", pick=None)
    rows += oracle(0, 0, {0.02: 80.5}, start="", pick=0.02, stage="refine")
    rows += oracle(0, 1, {0.01: 70.0, 0.02: 75.0, 0.04: 90.0}, start="s0c0lr0.01", pick=0.04, tag="old-")
    rows += oracle(0, 2, {0.04: 91.0, 0.08: 92.0}, start="old-s0c1lr0.04", pick=0.08, tag="old-")
    rows += oracle(0, 1, {0.01: 79.0, 0.02: 80.0, 0.04: 78.0}, start="s0c0lr0.02", pick=0.02)
    return results_frame(rows)


def test_oracle_chain_keeps_only_rows_on_the_selected_chain():
    df = abandoned_chain()
    chain = oracle_chain(df)
    assert sorted(zip(chain["cycle"], chain["max_lr"])) == [(0, 0.01), (0, 0.02), (0, 0.04),
                                                            (1, 0.01), (1, 0.02), (1, 0.04)]
    assert set(chain.loc[chain["cycle"] == 1, "start_hash"]) == {"s0c0lr0.02"}
    assert len(df) - len(chain) == 5  # the abandoned cycle-1 and cycle-2 rows


def test_cycle_one_best_comes_from_the_selected_chain_not_the_abandoned_one():
    pooled = oracle_intervals(abandoned_chain()).set_index("cycle")
    assert pooled.loc[1, "best_max_lr"] == 0.02 and pooled.loc[1, "best_val_acc"] == 80.0
    assert pooled.index.tolist() == [0, 1]  # cycle 2 exists only on the abandoned chain


def test_each_seed_follows_its_own_chain_and_a_chain_stops_where_the_choice_is_unclear():
    rows = oracle(0, 0, {0.01: 80.0, 0.02: 70.0}, start="", pick=0.01)
    rows += oracle(0, 1, {0.01: 80.0, 0.02: 70.0}, start="s0c0lr0.01", pick=None)  # cycle 1 still running
    rows += oracle(0, 2, {0.01: 80.0}, start="s0c1lr0.01", pick=0.01)
    rows += oracle(1, 0, {0.01: 70.0, 0.02: 80.0}, start="", pick=0.02)
    rows += oracle(1, 1, {0.01: 70.0}, start="s1c0lr0.02", pick=0.01)
    rows += oracle(1, 1, {0.01: 70.0}, start="s0c0lr0.01", pick=None)  # seed 0's checkpoint: not seed 1's chain
    rows += oracle(2, 0, {0.01: 70.0, 0.02: 80.0}, start="", pick=0.02)
    rows += [r | {"selected": True} for r in oracle(2, 1, {0.01: 70.0, 0.02: 80.0}, start="s2c0lr0.02", pick=None)]
    rows += oracle(2, 2, {0.01: 70.0}, start="s2c1lr0.02", pick=0.01)  # after two selected rows: ambiguous
    rows += [{"method": "oracle", "stage": "single", "seed": 0, "cycle": 0, "max_lr": 0.5, "start_hash": ""}]
    chain = oracle_chain(results_frame(rows))
    assert sorted(chain.groupby("seed")["cycle"].apply(lambda c: sorted(c)).items()) == [
        (0, [0, 0, 1, 1]), (1, [0, 0, 1]), (2, [0, 0, 1, 1])]
    assert (chain["stage"] != "single").all()


def superseded_silo() -> pd.DataFrame:
    """silo_fit's final chain was rerun with other parameters; the first run's rows were deselected."""
    old = {"epsilon": 0.05, "delta": 0.3, "q": 1, "beta": 2.0}
    new = {"epsilon": 0.08, "delta": 0.6, "q": 2, "beta": 5.0}
    rows = [{"method": "silo_fit", "stage": "final", "seed": s, "cycle": c, "max_lr": lr, "test_acc": acc,
             "selected": sel, **params}
            for params, sel, lrs, acc in ((old, False, (0.05, 0.2), 60.0), (new, True, (0.08, 0.08), 70.0))
            for s in (10, 11) for c, lr in enumerate(lrs)]
    rows += [{"method": "silo_fit", "stage": "fit", "seed": 0, "cycle": c, "max_lr": 0.1, "selected": False,
              "study_trial": 0.0, **old} for c in (0, 1)]
    return results_frame(rows)


def test_only_the_selected_silo_final_chain_is_current():
    df = superseded_silo()
    current = current_rows(df)
    finals = current[current["stage"] == "final"]
    assert len(finals) == 4 and finals["epsilon"].eq(0.08).all()
    assert len(current[current["stage"] == "fit"]) == 2  # tuning rows always count
    assert final_rows(df, "silo_fit")["test_acc"].tolist() == [70.0] * 4
    assert silo_params(df, "silo_fit") == {"epsilon": 0.08, "delta": 0.6, "q": 2, "beta": 5.0}
    assert silo_max_lr_by_cycle(df, "silo_fit").to_dict() == {0: 0.08, 1: 0.08}
    assert silo_params(df, "silo_paper") is None


def test_an_older_tables_rows_read_back_with_the_conventions_for_columns_it_lacked(tmp_path):
    """Rows as a version before `stage`, `reused`, `fused` and the hashes wrote them: framed and written, they read
    back as separate (fused = 1), trained (reused = False), unhashed rows, their own values untouched."""
    old = [{"experiment": "tiny", "method": "oracle", "schedule": "warmup", "seed": s, "cycle": 0, "density": 100.0,
            "max_lr": 0.1, "val_acc": 90.0 + s, "test_acc": 89.0, "best_epoch": 3, "epochs": 4, "seconds": 1.5,
            "device": "cpu", "diverged": False, "selected": s == 0, "trial_id": f"t{s}", "checkpoint": f"/c/{s}"}
           for s in (0, 1)]
    write_results(tmp_path, old)
    back = read_results(tmp_path).sort_values("seed").reset_index(drop=True)
    assert back["fused"].tolist() == [1, 1] and back["reused"].tolist() == [False, False]
    assert back["checkpoint_hash"].tolist() == ["", ""] and back["start_hash"].tolist() == ["", ""]
    assert back["val_acc"].tolist() == [90.0, 91.0] and back["selected"].tolist() == [True, False]
    assert back["trial_id"].tolist() == ["t0", "t1"] and back["checkpoint"].tolist() == ["/c/0", "/c/1"]


def test_a_table_without_timestamps_reads_with_empty_ones_and_written_ones_round_trip(tmp_path):
    """`queued`, `started`, `finished` (issue 37): a table written before them reads back with "" (never NaN, from
    Parquet or CSV); a row with them keeps its strings through both files."""
    old = oracle(0, 0, {0.01: 70.0, 0.02: 80.0}, start="", pick=0.02)
    frame = write_results(tmp_path, old).drop(columns=["queued", "started", "finished"])
    frame.to_parquet(tmp_path / "results.parquet", index=False)  # as the older version wrote it
    frame.to_csv(tmp_path / "results.csv", index=False)
    for path in (tmp_path / "results.parquet", tmp_path / "results.csv"):
        raw = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
        assert "started" not in raw
        back = results_frame(raw.to_dict("records"))
        for col in ("queued", "started", "finished"):
            assert back[col].tolist() == ["", ""], (path.name, col)
    stamped = [old[0] | {"started": "2026-11-27T11:41:03.123Z", "finished": "2026-11-27T11:41:09.456Z"}, old[1]]
    write_results(tmp_path, stamped)
    csv = pd.read_csv(tmp_path / "results.csv")
    assert csv["queued"].isna().all()  # what pandas makes of an empty CSV cell ...
    back = results_frame(csv.to_dict("records")).sort_values("max_lr")
    assert back["started"].tolist() == ["2026-11-27T11:41:03.123Z", ""]  # ... and the frame makes it "" again
    assert back["finished"].tolist() == ["2026-11-27T11:41:09.456Z", ""] and back["queued"].tolist() == ["", ""]
    assert read_results(tmp_path).sort_values("max_lr")["started"].tolist() == ["2026-11-27T11:41:03.123Z", ""]
