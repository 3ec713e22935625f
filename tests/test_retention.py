"""Checkpoint retention (oracle_search.retention): which checkpoints no chain, resume or completion can start from,
on ledgers written by hand; deleting leaves a tombstone; a trial that would start from a deleted checkpoint is
refused with one line. The whole compare under SIGKILL at every phase boundary: tests/test_compare.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from oracle_search import retention
from oracle_search.retention import deletable


def row(key: str, method: str, stage: str, cycle: int, seed: int, start: str = "", selected: bool = False) -> dict:
    """A ledger row whose checkpoint is /ck/KEY with hash h-KEY, trained from the checkpoint hashed `start`."""
    return {"key": key, "method": method, "stage": stage, "cycle": cycle, "seed": seed, "selected": selected,
            "checkpoint": f"/ck/{key}", "checkpoint_hash": f"h-{key}",
            "training": f"fp-c{cycle}-s{seed}-lr0.1-from{start}"}


def oracle_cycle(cycle: int, start: str, chosen: str | None) -> list[dict]:
    """Three values at one (cycle, seed 0), all from `start`; `chosen` selected (None: not decided yet)."""
    return [row(f"o{cycle}{v}", "oracle", "grid", cycle, 0, start, selected=v == chosen) for v in "abc"]


def test_the_oracle_keeps_its_chain_and_drops_the_values_not_chosen_once_a_cycle_is_decided():
    rows = oracle_cycle(0, "", "b") + oracle_cycle(1, "h-o0b", None)  # cycle 1 under way
    assert deletable(rows, finished=False) == {"/ck/o0a", "/ck/o0c"}
    rows = oracle_cycle(0, "", "b") + oracle_cycle(1, "h-o0b", "c")
    assert deletable(rows, finished=False) == {"/ck/o0a", "/ck/o0c", "/ck/o1a", "/ck/o1b"}
    # a rerun's rows trained from another start (another chain) are not decided by this chain's choice
    other = row("o1x", "oracle", "refine", 1, 0, "h-o0a")
    assert "/ck/o1x" not in deletable(rows + [other], finished=False)
    assert "/ck/o1x" in deletable(rows + [other], finished=True)


def test_a_final_chain_keeps_only_its_head_and_the_searches_keep_theirs_until_the_end():
    final = [row(f"f{c}", "constant", "final", c, 1000, f"h-f{c - 1}" if c else "", selected=True) for c in range(3)]
    # silo_paper's δ search: a new δ (e) branches from the cycle-0 row every δ shares, after d1 started from it
    delta = [row(f"d{c}", "silo_paper", "tune", c, 0, f"h-d{c - 1}" if c else "") for c in range(2)]
    fit = [row("t0", "silo_fit", "fit", 0, 0), row("t1", "silo_fit", "fit", 1, 0, "h-t0")]
    assert deletable(final + delta + fit, finished=False) == {"/ck/f0", "/ck/f1"}
    branch = row("e1", "silo_paper", "tune", 1, 0, "h-d0")
    assert deletable(final + delta + fit + [branch], finished=False) == {"/ck/f0", "/ck/f1"}
    # finished: the searches' rows go too; a final run's last cycle (the network the report describes) stays
    assert deletable(final + delta + fit + [branch], finished=True) == {
        "/ck/f0", "/ck/f1", "/ck/d0", "/ck/d1", "/ck/e1", "/ck/t0", "/ck/t1"}


def test_two_final_chains_sharing_a_reused_row_each_keep_it_while_it_is_their_head():
    """silo_fit's final chain reused the constant baseline's cycle-1 training (the same peak from the same start):
    the constant chain moving on to cycle 2 does not delete the checkpoint silo_fit's chain still starts from."""
    constant = [row(f"f{c}", "constant", "final", c, 1000, f"h-f{c - 1}" if c else "", selected=True)
                for c in range(3)]
    shared = dict(constant[1], key="silo-f1", method="silo_fit")  # its copy: the same path and hash
    assert deletable(constant + [shared], finished=False) == {"/ck/f0"}
    moved_on = row("s2", "silo_fit", "final", 2, 1000, "h-f1", selected=True)
    assert deletable(constant + [shared, moved_on], finished=False) == {"/ck/f0", "/ck/f1"}


def test_a_shared_or_in_flight_checkpoint_is_never_deleted():
    rows = oracle_cycle(0, "", "b")
    # the baselines' tuning reused the Oracle's value a: the same path, a row that is a head of its own
    reused = dict(rows[0], key="warmup-tune", method="warmup", stage="tune", selected=False)
    assert "/ck/o0a" not in deletable(rows + [reused], finished=False)
    assert "/ck/o0a" in deletable(rows + [reused], finished=True)
    assert deletable(rows, finished=False, in_flight={"/ck/o0c"}) == {"/ck/o0a"}


def test_deleting_leaves_a_tombstone_and_counts_each_checkpoint_once(tmp_path):
    rows = [dict(r, checkpoint=str(tmp_path / r["key"])) for r in oracle_cycle(0, "", "b")]
    for r in rows:
        (tmp_path / r["key"]).mkdir()
        (tmp_path / r["key"] / "model.pt").write_bytes(b"x")
    known: set[str] = set()
    assert retention.prune(rows, finished=False, known=known) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o0a.deleted", "o0b", "o0c.deleted"]
    assert retention.is_deleted(str(tmp_path / "o0a")) and not retention.is_deleted(str(tmp_path / "o0b"))
    assert retention.prune(rows, finished=False, known=known) == 0
    assert retention.prune(rows, finished=False) == 0  # a new session finds the tombstones


def test_a_checkpoint_behind_a_uri_is_deleted_through_its_file_system(tmp_path):
    folder = tmp_path / "cand00"
    folder.mkdir()
    (folder / "model.pt").write_bytes(b"x")
    uri = f"file://{folder}"
    assert not retention.is_deleted(uri)
    retention.delete(uri)
    assert retention.is_deleted(uri) and not folder.exists() and (tmp_path / "cand00.deleted").exists()


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["chain", "all"])
def test_a_trial_from_a_deleted_checkpoint_is_refused_in_one_line_and_all_keeps_every_one(ray_local, tmp_path,
                                                                                        policy):
    """`oracle` on the tiny preset: under `chain` the values not chosen are deleted (tombstones beside them) and the
    chosen chain stays; a trial that would start from a deleted one is refused before it starts. Under `all`
    nothing is deleted."""
    from oracle_search import cli
    from oracle_search.engine import RunFailed, Runner
    from oracle_search.ledger import Ledger
    from oracle_search.trials import oracle_trial
    from oracle_search.schema import Stage
    from trainables.presets import PRESETS

    out = tmp_path / policy
    assert cli.main(["oracle", "--preset", "tiny", "--cycles", "1", "--grid", "0.02,0.1,0.3", "--seeds", "1",
                     "--refine", "0", "--no-bracket", "--keep-checkpoints", policy, "--out", str(out)]) == 0
    rows = Ledger(out).rows()
    assert len(rows) == 6
    gone = [r for r in rows if retention.is_deleted(r["checkpoint"])]
    if policy == "all":
        assert not gone
        return
    assert {r["key"] for r in gone} == {r["key"] for r in rows if not r.get("selected")}
    kept = [r for r in rows if r.get("selected")]
    assert len(kept) == 2 and all(Path(r["checkpoint"]).is_dir() for r in kept)
    lost = next(r for r in gone if r["cycle"] == 0)
    spec = PRESETS["tiny"].spec
    with Runner(out, spec, "refused") as runner:
        with pytest.raises(RunFailed, match="deleted by --keep-checkpoints chain.*--keep-checkpoints all"):
            runner.run([oracle_trial(runner, 1, 0, 0.05, lost, Stage.REFINE)])
