"""Faults mid-cycle: a worker node lost while its trials run, the driver SIGKILLed, a chained checkpoint corrupted
on disk. Each must end in a complete run or a clear error naming what broke, never silently wrong results."""
from __future__ import annotations

import dataclasses
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest
import ray
from ray import cloudpickle
from ray.cluster_utils import Cluster

from conftest import cli, flip_middle_byte, ray_env
from oracle_search.engine import Progress, RunFailed
from oracle_search.identity import Training
from oracle_search.engine import own_runner
from oracle_search.ledger import Ledger
from trainables.presets import PRESETS
from trainables.spec import Resources
from trainables.tune_adapter import cycle_trainable

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import this test module

CLI = str(Path(sys.executable).parent / "oracle-search")
TINY = PRESETS["tiny"].spec


# --- a worker node lost mid-cycle --------------------------------------------------------------------------------

def stalls_on(doomed_node: str, log_dir: Path) -> Callable[[dict], None]:
    """A trainable that logs where each attempt starts; on `doomed_node` it stalls until that node is removed,
    elsewhere it first waits (up to a minute) until some trial has started there."""

    def trainable(config: dict) -> None:
        node = ray.get_runtime_context().get_node_id()
        (log_dir / f"{config['key']}@{node}.{time.monotonic_ns()}").touch()
        if node == doomed_node:
            time.sleep(600)
        deadline = time.monotonic() + 60
        while not any(f"@{doomed_node}." in p.name for p in log_dir.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        cycle_trainable(config)

    return trainable


@pytest.fixture
def cluster(make_cluster) -> Cluster:
    return make_cluster(1)


@pytest.mark.slow
def test_trials_of_a_lost_node_are_retried_elsewhere(cluster, tmp_path):
    doomed = cluster.add_node(num_cpus=2)
    log = tmp_path / "log"
    log.mkdir()
    out = tmp_path / "out"
    trials = [Training(key=f"t{i}", spec=TINY, cycle=0, max_lr=0.1, seed=i, start_checkpoint=None) for i in range(4)]

    def started_on_doomed() -> list[str]:
        return [p.name.split("@")[0] for p in log.iterdir() if f"@{doomed.node_id}." in p.name]

    def remove_when_busy() -> None:  # once a trial has finished and others are stuck on the doomed node
        while not (list((out / "ledger").glob("*.json")) and started_on_doomed()):
            time.sleep(0.1)
        lost.extend(started_on_doomed())
        cluster.remove_node(doomed)

    lost: list[str] = []
    remover = threading.Thread(target=remove_when_busy, daemon=True)
    remover.start()
    started = time.monotonic()
    with own_runner(out=out, spec=TINY, experiment="faults", address=cluster.address,
                    trainable=stalls_on(doomed.node_id, log), progress=Progress(io.StringIO())) as runner:
        rows = runner.run(trials)
    remover.join(timeout=5)

    assert lost, "no trial was running on the removed node"
    assert time.monotonic() - started < 300  # the stalled attempts were abandoned, not waited out
    assert sorted(rows) == sorted(r["key"] for r in Ledger(out).rows()) == ["t0", "t1", "t2", "t3"]
    head = cluster.head_node.node_id
    assert all(rows[k]["node_id"] == head for k in lost)  # retried on the surviving node
    assert all(rows[k]["val_acc"] > 0 for k in rows)


# --- the driver killed, a checkpoint corrupted (through the command line) ----------------------------------------

def oracle(out: Path, grid: str = "0.03,0.1,0.3,1.0") -> list[str]:
    return ["oracle", "--preset", "tiny", "--cycles", "1", "--grid", grid, "--tuning-seeds", "1", "--refine", "0",
            "--no-bracket", "--cpus-per-trial", "1", "--out", str(out)]


def kill_session(sid: int) -> None:
    """SIGKILL what is left of a process session we started (the killed driver's Ray processes)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:  # fields after the command: state, ppid, pgrp, session
                os.kill(int(stat.parent.name), signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            pass


def run_until(args: list[str], pattern: str, tmp_path: Path, ray_address: str) -> list[str]:
    """Run the CLI (a driver joining the tests' local Ray) and SIGKILL it the moment a stdout line matches
    `pattern`; returns the lines it printed."""
    with open(tmp_path / "killed.stderr", "w") as err:
        proc = subprocess.Popen([CLI, *args], stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True,
                                env=ray_env(ray_address))
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if re.search(pattern, line):
                os.kill(proc.pid, signal.SIGKILL)
                break
        proc.wait(timeout=60)
    finally:
        kill_session(proc.pid)
    assert proc.returncode == -signal.SIGKILL, f"never saw {pattern!r}:\n{''.join(lines)}"
    return lines


def run(args: list[str], capsys) -> tuple[int, str]:
    """The CLI in this process (on the tests' local Ray): its exit status and what it wrote to stderr."""
    capsys.readouterr()
    code = cli(args)
    return code, capsys.readouterr().err


def ledger_ids(out: Path) -> dict[str, str]:
    return {r["key"]: r["trial_id"] for r in Ledger(out).rows()}


@pytest.mark.slow
def test_a_driver_killed_mid_cycle_resumes_without_retraining(ray_local, tmp_path, capsys):
    out = tmp_path / "out"
    args = oracle(out)
    run_until(args, r"cycle 1 seed 0 max_lr .*: val", tmp_path, ray_local)  # the first finished trial of cycle 1
    before = ledger_ids(out)
    assert len([k for k in before if k.startswith("oracle-c01-")]) < 4  # killed mid-cycle

    code, err = run(args, capsys)
    assert code == 0, err
    after = ledger_ids(out)
    assert len(after) == 8  # 4 max_lr x 2 cycles
    assert {k: after[k] for k in before} == before  # finished trials were not retrained
    assert (out / "results.csv").read_text().count("\n") == 9


@pytest.mark.slow
def test_a_corrupt_chained_checkpoint_is_a_clear_error(ray_local, tmp_path, capsys):
    """The driver checks the chained checkpoint before cycle 1 starts from it: one clear error, no trial started
    (each would fail, and be retried on a new actor, before the run gave up)."""
    out = tmp_path / "out"
    args = oracle(out, grid="0.03,0.3")  # two max_lr: fewer futile retries of the doomed trials
    run_until(args, r"^oracle cycle 1:", tmp_path, ray_local)  # cycle 0 chose its checkpoint; cycle 1 had not started
    (chosen,) = [r for r in Ledger(out).rows() if r["cycle"] == 0 and r.get("selected")]
    state = Path(chosen["checkpoint"]) / "state.pt"
    flip_middle_byte(state)  # a loadable-looking file with wrong weights
    experiments = sorted((out / "tune").iterdir())

    code, err = run(args, capsys)
    assert code == 1
    (summary,) = [line for line in err.splitlines() if line.startswith("oracle-search: failed:")]
    assert f"CheckpointError: checkpoint {state}: content hash mismatch" in summary
    assert not [r for r in Ledger(out).rows() if r["cycle"] == 1]  # nothing was trained from the bad chain
    assert sorted((out / "tune").iterdir()) == experiments  # no Tune experiment began: no trial was started

    flip_middle_byte(state)  # repaired: the same command now completes
    code, err = run(args, capsys)
    assert code == 0, err
    assert {r["start_hash"] for r in Ledger(out).rows() if r["cycle"] == 1} == {chosen["checkpoint_hash"]}


@pytest.mark.slow
def test_a_corrupt_checkpoint_behind_a_uri_is_named_by_its_uri(ray_local, tmp_path):
    """With cloud storage trials get the start checkpoint as a URI (file:// stands in for s3:// here) and load a
    temporary local copy of it; the error names the URI."""
    spec = dataclasses.replace(TINY, resources=Resources(storage_path=f"file://{tmp_path / 'shared'}"))
    with own_runner(out=tmp_path / "out", spec=spec, experiment="uri", max_failures=0,
                    progress=Progress(io.StringIO())) as runner:
        (row,) = runner.run([Training("c0", spec, cycle=0, max_lr=0.1, seed=0, start_checkpoint=None)]).values()
        uri = row["checkpoint"]
        assert uri.startswith(f"file://{tmp_path / 'shared'}/")
        flip_middle_byte(Path(uri.removeprefix("file://")) / "state.pt")
        with pytest.raises(RunFailed, match=re.escape(f"(first: c1: trainables.errors.CheckpointError: {uri}: ")
                           + ".*content hash mismatch"):
            runner.run([Training("c1", spec, cycle=1, max_lr=0.1, seed=0, start_checkpoint=uri)])


# --- the driver interrupted (Ctrl-C, SIGTERM) ----------------------------------------------------------------------

def interrupt(args: list[str], pattern: str, sig: signal.Signals, ray_address: str) -> tuple[int, str, float]:
    """Run the CLI (a driver joining the tests' local Ray), send `sig` when a stdout line matches `pattern`; its
    exit code, stderr, and seconds to exit."""
    proc = subprocess.Popen([CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=ray_env(ray_address))
    try:
        for line in proc.stdout:
            if re.search(pattern, line):
                break
        proc.send_signal(sig)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=60)
        return proc.returncode, err, time.monotonic() - sent
    finally:
        kill_session(proc.pid)


def interrupted_line(sig: signal.Signals) -> str:
    return f"oracle-search: interrupted by {sig.name}; finished trials are kept, rerun the same command to resume"


@pytest.mark.slow
def test_ctrl_c_mid_cycle_stops_the_trials_exits_130_and_a_rerun_completes_the_table(ray_local, tmp_path, capsys):
    out = tmp_path / "out"
    args = oracle(out)
    # The first finished trial of cycle 1: two more of the cycle run or wait (2 CPUs, 4 max_lr).
    code, err, took = interrupt(args, r"cycle 1 seed 0 max_lr .*: val", signal.SIGINT, ray_local)
    assert code == 130, err
    assert took < 30 and err.strip().splitlines()[-1] == interrupted_line(signal.SIGINT)
    before = ledger_ids(out)
    assert 1 <= len([k for k in before if k.startswith("oracle-c01-")]) < 4  # not every trial was handed out

    code, err = run(args, capsys)
    assert code == 0, err
    after = ledger_ids(out)
    assert len(after) == 8 and {k: after[k] for k in before} == before  # finished trials were not retrained
    assert (out / "results.csv").read_text().count("\n") == 9


@pytest.mark.slow
def test_sigterm_ends_a_run_like_ctrl_c_with_exit_143(ray_local, tmp_path):
    """Ray's own SIGTERM handler (set by ray.init, which the driver runs to join the cluster too) would exit 15
    without stopping anything."""
    code, err, took = interrupt(oracle(tmp_path / "out"), r"cycle 0 seed 0 max_lr .*: val", signal.SIGTERM,
                                ray_local)
    assert code == 143, err
    assert took < 30 and err.strip().splitlines()[-1] == interrupted_line(signal.SIGTERM)
    assert 1 <= len(ledger_ids(tmp_path / "out")) < 8
