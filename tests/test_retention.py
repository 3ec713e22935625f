"""Checkpoint retention (oracle_search.retention): which checkpoints no chain, resume or completion can start from,
on ledgers written by hand; deleting leaves a tombstone; a trial that would start from a deleted checkpoint is
refused with one line. The whole compare under SIGKILL at every phase boundary: tests/test_compare.py."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oracle_search import identity, retention
from oracle_search.ledger import Ledger
from oracle_search.retention import Claim, deletable


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
def test_a_trial_from_a_gone_checkpoint_has_its_start_trained_again_and_all_keeps_every_one(ray_local, tmp_path,
                                                                                          policy):
    """`oracle` on the tiny preset: under `chain` the values not chosen are deleted (tombstones beside them) and the
    chosen chain stays; a trial that would start from a deleted one, or from one deleted by hand, has its start
    trained again from its own ancestor (the same bytes on a CPU), said and marked `retrained`. Twins of one
    training in a chain copy the new row, never the deleted one. Where the start's row is gone too, the trial is
    refused in one line. Under `all` nothing is deleted."""
    import shutil

    from oracle_search import cli
    from oracle_search.engine import RunFailed
    from oracle_search.engine import own_runner
    from oracle_search.ledger import Ledger
    from oracle_search.pipeline import recorded_spec
    from oracle_search.progress import Progress
    from oracle_search.schema import Stage
    from oracle_search.trainings import cycle_training, oracle_training

    out = tmp_path / policy
    assert cli.main(["oracle", "--preset", "tiny", "--cycles", "1", "--grid", "0.02,0.1,0.3", "--tuning-seeds", "1",
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
    said = io.StringIO()
    spec = recorded_spec(out)  # as the command resolved it (its precision): the rows' identities are its
    with own_runner(out, spec, "restored", progress=Progress(said, live=False)) as runner:
        got = runner.run([oracle_training(runner, 1, 0, 0.05, lost, Stage.REFINE)])
        (row,) = got.values()
        again = runner.ledger.get(lost["key"])
        assert again["retrained"] and again["checkpoint"] != lost["checkpoint"]
        assert again["checkpoint_hash"] == lost["checkpoint_hash"]  # the same bytes (a CPU)
        assert retention.is_deleted(again["checkpoint"])  # the trial it was for has run: nothing needs it now
        assert again["val_acc"] == lost["val_acc"] and row["training"].endswith(lost["checkpoint_hash"])
        assert (out / "ledger" / "refused" / f"{lost['key']}.json").exists()
        assert said.getvalue().count("checkpoint gone: training") == 1

        # Twins: two chains of one training (a δ chain's cycle 1 at ε for two δ values) whose earlier row, the
        # Oracle's, was deleted. The leader trains; the twin copies the leader's row, whose checkpoint is there.
        start = next(r for r in rows if r["cycle"] == 0 and r.get("selected"))
        dead = next(r for r in gone if r["cycle"] == 1)
        twins = [cycle_training(spec, f"twin{i}", 1, 0, dead["max_lr"], start,
                                {"method": "silo_paper", "stage": "tune"})
                 for i in (1, 2)]
        assert twins[0].tags["training"] == dead["training"]
        got = runner.run(twins, need_checkpoints=True)
        assert got["twin1"]["checkpoint"] == got["twin2"]["checkpoint"] != dead["checkpoint"]
        assert Path(got["twin2"]["checkpoint"]).is_dir()

        # Deleted by hand (no tombstone): the chosen cycle-0 checkpoint; a trial from it trains it again
        shutil.rmtree(start["checkpoint"])
        runner.run([oracle_training(runner, 1, 0, 0.2, start, Stage.REFINE)])
        assert runner.ledger.get(start["key"])["retrained"]

    # The start's own row is gone from the ledger too: nothing says how to train it; refused in one line
    chosen1 = next(r for r in rows if r["cycle"] == 1 and r.get("selected"))
    Ledger(out).refuse(chosen1["key"])
    shutil.rmtree(chosen1["checkpoint"])
    with own_runner(out, spec, "refused") as runner:
        with pytest.raises(RunFailed, match="is gone and cannot be trained again.*--keep-checkpoints all"):
            runner.run([oracle_training(runner, 2, 0, 0.05, chosen1, Stage.REFINE)])


# --- retention from the lines' plans (`retention.Claim`) ----------------------------------------------------------

FP = "fp"


def trained(key: str, method: str, stage: str, cycle: int, seed: int, peak: float, start: dict | None = None,
            selected: bool = False, fingerprint: str = FP) -> dict:
    """A ledger row with a real training identity (`identity.training`): peak `peak` at `cycle`, from `start`'s
    checkpoint; its own checkpoint /ck/KEY hashed h-KEY."""
    return {"key": key, "method": method, "stage": stage, "cycle": cycle, "seed": seed, "selected": selected,
            "max_lr": peak, "checkpoint": f"/ck/{key}", "checkpoint_hash": f"h-{key}",
            "training": identity.training(fingerprint, cycle, seed, peak, start["checkpoint_hash"] if start else "")}


def copy_of(row: dict, key: str, method: str, stage: str, selected: bool = False) -> dict:
    """Another line's copy of `row` (a reused training): its checkpoint and identity, its own key and tags."""
    return dict(row, key=key, method=method, stage=stage, selected=selected, reused=True)


def oracle_two_cycles(seed: int = 0, eps: float = 0.16, b1: float = 0.32) -> list[dict]:
    """The issue's case: the Oracle's dense best is ε; its cycle 1 chose b1 ≠ ε from the chosen dense row."""
    c0 = {v: trained(f"o0-{v}", "oracle", "grid", 0, seed, v, selected=v == eps) for v in (0.08, eps, b1)}
    c1 = {v: trained(f"o1-{v}", "oracle", "grid", 1, seed, v, c0[eps], selected=v == b1) for v in (0.08, eps, b1)}
    return [*c0.values(), *c1.values()]


def test_the_oracle_row_at_epsilon_stays_while_silo_papers_plan_claims_it_though_the_oracle_chose_another():
    """The main job's failure, built by hand: silo_paper's δ chains train cycles 0..q at ε; the Oracle's cycle 1
    chose 0.32, so its cycle-1 row at ε is no longer its chain. Before silo_paper's δ chains reach it, retention
    must not delete it; once the line has ended (its claim released), it goes."""
    rows = oracle_two_cycles()
    claim = Claim(FP, frozenset({0}), ((0.16, 0.16),))
    assert "/ck/o1-0.16" in deletable(rows, finished=False)  # no plan held: the old rule deletes it
    kept = deletable(rows, finished=False, claims=(claim,))
    assert "/ck/o1-0.16" not in kept and "/ck/o0-0.16" not in kept
    assert kept == {"/ck/o0-0.08", "/ck/o0-0.32", "/ck/o1-0.08"}
    # another seed, another fingerprint (the cosine baseline), another ε: not this plan's chains
    for other in (Claim(FP, frozenset({1}), ((0.16, 0.16),)), Claim("cosine", frozenset({0}), ((0.16, 0.16),)),
                  Claim(FP, frozenset({0}), ((0.08, 0.08),))):
        assert "/ck/o1-0.16" in deletable(rows, finished=False, claims=(other,))
    assert "/ck/o1-0.16" in deletable(rows, finished=True)  # the command ended: no line is left to claim it


def test_silo_papers_claims_are_its_plan_cycles_zero_to_q_at_epsilon_on_its_seeds():
    from oracle_search import silo_paper
    from oracle_search.delta import PAPER_Q
    from trainables.presets import PRESETS

    spec = PRESETS["tiny"].spec
    (claim,) = silo_paper.claims(spec, 0.16, [0, 1, 1000])
    assert claim.seeds == {0, 1, 1000} and claim.peaks == ((0.16,) * (PAPER_Q + 1),)
    # SILO trains LR warmup at the peak its curve gives: the warmup schedule's trainings are its trainings
    assert claim.fingerprint == spec.with_schedule(name="warmup").training_fingerprint()


def test_every_reuse_path_keeps_the_rows_its_line_will_start_from():
    """δ chains, final chains of two methods, the baselines' plan, the completions: each keeps what it will start
    from while its line runs."""
    from oracle_search import baselines
    from trainables.presets import PRESETS

    rows = oracle_two_cycles()
    c0_eps = rows[1]
    # δ chains: the first δ reused the Oracle's ε rows at cycles 0 and 1; a new δ later branches from cycle 1
    delta = [copy_of(rows[1], "d-c0", "silo_paper", "tune"), copy_of(rows[4], "d-c1", "silo_paper", "tune")]
    assert "/ck/o1-0.16" not in deletable(rows + delta, finished=False)  # a copy keeps its checkpoint
    # finals on an evaluation seed: the warmup baseline at ε and silo_paper share cycles 0..1; the warmup chain
    # moved on to cycle 2 before silo_paper's final chain reached its cycle 1
    warm = [trained("w0", "warmup", "final", 0, 1000, 0.16, selected=True)]
    warm.append(trained("w1", "warmup", "final", 1, 1000, 0.16, warm[0], selected=True))
    warm.append(trained("w2", "warmup", "final", 2, 1000, 0.16, warm[1], selected=True))
    assert {"/ck/w0", "/ck/w1"} <= deletable(rows + warm, finished=False)
    plan = Claim(FP, frozenset({1000}), ((0.16, 0.16),))  # silo_paper's final chain, not started yet
    assert not {"/ck/w0", "/ck/w1"} & deletable(rows + warm, finished=False, claims=(plan,))
    # the baselines' plan: every schedule held at one grid value on the evaluation seeds
    spec = PRESETS["tiny"].spec
    claims = baselines.claims(spec, ("warmup",), [0.08, 0.16, 0.32], [1000], cycles=2)
    fp = spec.with_schedule(name="warmup").training_fingerprint()
    silo = [trained("s0", "silo_paper", "final", 0, 1000, 0.16, selected=True, fingerprint=fp)]
    silo.append(trained("s1", "silo_paper", "final", 1, 1000, 0.16, silo[0], selected=True, fingerprint=fp))
    silo.append(trained("s2", "silo_paper", "final", 2, 1000, 0.5, silo[1], selected=True, fingerprint=fp))
    assert {"/ck/s0", "/ck/s1"} <= deletable(silo, finished=False)
    assert not {"/ck/s0", "/ck/s1"} & deletable(silo, finished=False, claims=tuple(claims))
    # the baselines' own chains move on past the claimed cycles 0..1: a later cycle no longer its head goes
    chain = [trained("b0", "warmup", "final", 0, 1000, 0.16, selected=True, fingerprint=fp)]
    for c in (1, 2, 3):
        chain.append(trained(f"b{c}", "warmup", "final", c, 1000, 0.16, chain[-1], selected=True, fingerprint=fp))
    assert deletable(chain, finished=False, claims=tuple(claims)) == {"/ck/b2"}
    # the completions start from the Oracle's chosen chain, which is always kept
    assert not {c0_eps["checkpoint"], rows[5]["checkpoint"]} & deletable(rows, finished=False)


ROOT = Path(__file__).resolve().parent.parent


# --- the main job's failure at base seed 10000, as the fp32 machines train it -------------------------------------

# The issue's two steps in one driver process on one local Ray (as `compare` runs them), not a process and a Ray
# each: `oracle --base-seed 10000 --cycles 2`; its ledger as it ended (ORACLE_ROWS, read by the test); then, where
# the case holds, silo_paper's δ search on the same folder. The δ search's Runner reads the folder from disk, as a
# second process did.
ISSUE_49 = """
import json
import sys
from pathlib import Path
from oracle_search.cli import main
from oracle_search.ledger import Ledger

out = Path(sys.argv[1])
code = main(["oracle", "--base-seed", "10000", "--cycles", "2", "--precision", "fp32", "--out", str(out)])
if code:
    sys.exit(code)
rows = Ledger(out).rows()
(out.parent / "ORACLE_ROWS").write_text(json.dumps(rows))
chosen = {r["cycle"]: r["max_lr"] for r in rows if r.get("selected")}
if not (abs(chosen[0] - 0.16) < 1e-9 and abs(chosen[1] - 0.16) > 1e-9):
    sys.exit(0)  # not the case: the test skips

from oracle_search.engine import own_runner
from oracle_search.pipeline import recorded_spec
from oracle_search.seeds import tuning_seeds
from oracle_search.oracle import dense_best_here
from oracle_search.delta import DeltaPlan
from oracle_search.silo_paper import tune_silo_paper

spec = recorded_spec(out)
with own_runner(out, spec, spec.preset) as runner:
    found = tune_silo_paper(runner, DeltaPlan(0, spec.grid, tuple(tuning_seeds(spec, 3)), spec.cycles,
                                              mode="racing").for_epsilon(dense_best_here(runner)))
    runner.prune_checkpoints(finished=True)
print("delta", found.delta)
"""


@pytest.mark.slow
def test_silo_papers_delta_chains_pass_cycle_one_after_the_oracle_chose_another_value_there_fp32(tmp_path):
    """The issue's reproduction on its failing line: `oracle --seed 10000 --cycles 2` (fp32 on AVX2 kernels, forced:
    there the Oracle's dense best is 0.16 and its cycle 1 chooses 0.32, so retention deletes every cycle-1 row at
    0.16), then silo_paper's δ search on the same folder (q = 1: every δ chain trains cycle 1 at ε = 0.16, the
    Oracle's deleted row). Before, the second δ chain copied the deleted row and cycle 2 was refused. A Ray of the
    driver's own (workers inherit the kernels' environment); the rest of `compare` is left out to spare CI's time."""
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"ONEDNN_MAX_CPU_ISA": "AVX2",
                                                                          "ATEN_CPU_CAPABILITY": "avx2"}
    done = subprocess.run([sys.executable, "-c", ISSUE_49, str(out)], env=env, capture_output=True, text=True,
                          timeout=2400, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads((tmp_path / "ORACLE_ROWS").read_text())  # the ledger as the Oracle left it
    chosen = {r["cycle"]: r["max_lr"] for r in rows if r.get("selected")}
    if not (chosen[0] == pytest.approx(0.16) and chosen[1] != pytest.approx(0.16)):
        pytest.skip(f"these kernels chose {chosen}: not the case (b at cycle 1 differs from the dense best)")
    at_eps = [r for r in rows if r["cycle"] == 1 and r["max_lr"] == pytest.approx(0.16)]
    assert at_eps and all(retention.is_deleted(r["checkpoint"]) for r in at_eps)
    assert "delta" in done.stdout.splitlines()[-1]
    delta = [r for r in Ledger(out).rows() if r.get("method") == "silo_paper"]
    assert {r["seed"] for r in delta if r["cycle"] == 2} == {10000, 10001, 10002}  # every seed reached cycle 2
    assert not any(r.get("retrained") for r in Ledger(out).rows())  # trained once, not trained again


@pytest.mark.slow
def test_compare_completes_after_a_chosen_checkpoint_of_the_oracle_was_deleted_by_hand(ray_local, tmp_path):
    """`oracle` on the tiny preset, then the chosen cycle-0 checkpoint of every seed removed by hand (no tombstone:
    a moved folder, a lost disk), then `compare` on the same folder: the lines that start from the dense best train
    what is gone instead of failing, and the run completes with its report, without a new --out."""
    import shutil

    from conftest import TINY_COMPARE, cli

    out = tmp_path / "run"
    assert cli(["oracle", "--preset", "tiny", "--tuning-seeds", "2", "--refine", "1", "--out", str(out)]) == 0
    dense = [r for r in Ledger(out).rows() if r["cycle"] == 0 and r.get("selected")]
    assert len(dense) == 2
    for row in dense:
        shutil.rmtree(row["checkpoint"])
    assert cli([*TINY_COMPARE, "--out", str(out)]) == 0
    assert (out / "report.md").exists()
    rows = Ledger(out).rows()
    finals = [r for r in rows if r.get("stage") == "final" and r.get("selected")]
    last = max(r["cycle"] for r in rows)
    assert {(r["method"], r["seed"]) for r in finals if r["cycle"] == last} == \
        {(r["method"], r["seed"]) for r in finals if r["cycle"] == 0}  # every final chain reached the last cycle
