"""The Runner on a real local Ray Tune: the ledger, retries of crashed trials and of trials that end without a
row, failures, skipping finished trials on a rerun, warm actors, and how wide it runs on a cluster."""
from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import sys
import threading
import time
from functools import partial
from pathlib import Path

import pytest
from ray import cloudpickle, tune

from trainables import atomic
from conftest import flip_middle_byte
from oracle_search.engine import Progress, RunFailed, own_runner
from oracle_search.identity import Training
from oracle_search.runner import Runner
from oracle_search.ledger import Ledger
from trainables.presets import PRESETS
from trainables.spec import NUMERICS, Resources, SpecError
from trainables.tune_adapter import cycle_trainable

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import this test module

TINY = PRESETS["tiny"].spec


def trial(key: str, max_lr: float = 0.1, seed: int = 0) -> Training:
    return Training(key=key, spec=TINY, cycle=0, max_lr=max_lr, seed=seed, start_checkpoint=None,
                 tags={"method": "test", "stage": "grid"})


def runner(out: Path, **kw) -> Runner:
    return own_runner(out, TINY, "engine", progress=Progress(io.StringIO()), **kw)


def trial_dirs(out: Path) -> list[str]:
    return sorted(d.name for d in (out / "tune").glob("*/*") if d.is_dir())


# --- the ledger --------------------------------------------------------------------------------------------------

def test_ledger_records_one_file_per_trial_and_reads_them_back(tmp_path):
    ledger = Ledger(tmp_path)
    assert ledger.get("a") is None and ledger.rows() == []
    ledger.record({"key": "b", "val_acc": 1.0})
    ledger.record({"key": "a", "val_acc": 2.0})
    ledger.record({"key": "b", "val_acc": 3.0, "selected": True})  # a later record replaces the row
    assert ledger.get("b") == {"key": "b", "val_acc": 3.0, "selected": True}
    assert [r["key"] for r in ledger.rows()] == ["a", "b"]
    # no temp files left; `numerics` records the arithmetic the rows were trained with
    assert sorted(p.name for p in (tmp_path / "ledger").iterdir()) == ["a.json", "b.json", "numerics"]


def test_ledger_record_is_atomic(tmp_path, monkeypatch):
    ledger = Ledger(tmp_path)
    ledger.record({"key": "a", "val_acc": 1.0})

    def crash(src, dst):  # the process dies between writing the temp file and renaming it
        raise OSError("killed")

    monkeypatch.setattr(atomic.os, "replace", crash)
    with pytest.raises(OSError):
        ledger.record({"key": "a", "val_acc": 2.0})
    assert json.loads((tmp_path / "ledger" / "a.json").read_text()) == {"key": "a", "val_acc": 1.0}
    assert ledger.rows() == [{"key": "a", "val_acc": 1.0}]  # a stray temp file is not a row


def test_trials_already_in_the_ledger_are_not_run(tmp_path):
    Ledger(tmp_path).record({"key": "done", "val_acc": 5.0})
    with runner(tmp_path, address="ray://nowhere:1") as r:  # would fail if it tried to start Ray
        assert r.run([trial("done")]) == {"done": {"key": "done", "val_acc": 5.0}}
    assert not (tmp_path / "tune").exists()


# --- on Ray ------------------------------------------------------------------------------------------------------

def crash_once(markers: str, config: dict) -> None:
    """The first attempt of each trial dies (`exit-*` keys kill the worker process, others raise); later attempts
    train normally."""
    marker = Path(markers) / config["key"]
    if not marker.exists():
        marker.touch()
        if config["key"].startswith("exit-"):
            os._exit(1)
        raise RuntimeError("crash once")
    cycle_trainable(config)


def always_fail_bad(config: dict) -> None:
    if config["key"] == "bad":
        raise RuntimeError("always")
    cycle_trainable(config)


@pytest.mark.slow
def test_crashed_trials_are_retried_and_complete(ray_local, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    with runner(tmp_path / "run", trainable=partial(crash_once, str(markers))) as r:
        rows = r.run([trial("raise-a", 0.1), trial("exit-b", 0.03)])
    assert sorted(p.name for p in markers.iterdir()) == ["exit-b", "raise-a"]
    assert {k: row["max_lr"] for k, row in rows.items()} == {"raise-a": 0.1, "exit-b": 0.03}
    assert all(row["val_acc"] > 50 and len(row["checkpoint_hash"]) == 64 for row in rows.values())
    assert sorted(row["key"] for row in Ledger(tmp_path / "run").rows()) == ["exit-b", "raise-a"]
    # Each trial's first attempt is on record as an error in its Tune trial directory.
    for key in rows:
        (trial_dir,) = (tmp_path / "run" / "tune").glob(f"*/{key}")
        assert (trial_dir / "error.txt").exists()


@pytest.mark.slow
def test_a_trial_failing_every_retry_raises_and_keeps_the_others(ray_local, tmp_path):
    with runner(tmp_path, trainable=always_fail_bad, max_failures=1) as r:
        with pytest.raises(RunFailed, match="1 trial"):
            r.run([trial("bad"), trial("good")])
    assert [row["key"] for row in Ledger(tmp_path).rows()] == ["good"]


@pytest.mark.slow
def test_a_rerun_trains_only_the_trials_missing_from_the_ledger(ray_local, tmp_path):
    with runner(tmp_path) as r:
        first = r.run([trial("a", 0.1), trial("b", 0.3)])
    with runner(tmp_path) as r:
        second = r.run([trial("a", 0.1), trial("b", 0.3), trial("c", 0.03, seed=1)])
    assert {k: second[k] for k in first} == first
    assert second["c"]["trial_id"] not in {row["trial_id"] for row in first.values()}
    assert trial_dirs(tmp_path) == ["a", "b", "c"]  # a and b ran once, in the first experiment
    assert r.write_results()["key"].tolist() == ["a", "b", "c"]


def test_a_ledger_from_older_arithmetic_is_refused_and_a_new_one_records_its_version(tmp_path):
    Ledger(tmp_path / "new").record({"key": "a", "val_acc": 80.0})
    assert (tmp_path / "new" / "ledger" / "numerics").read_text() == str(NUMERICS)
    assert [row["key"] for row in Ledger(tmp_path / "new").rows()] == ["a"]  # the same version: it resumes
    old = tmp_path / "old" / "ledger"  # rows written before the version was recorded: version 1
    old.mkdir(parents=True)
    (old / "a.json").write_text(json.dumps({"key": "a", "val_acc": 80.0}))
    with pytest.raises(SpecError) as err:
        Ledger(tmp_path / "old")
    assert err.value.field == "out" and "numerics 1" in str(err.value)
    assert not (old / "numerics").exists()  # nothing written


# --- warm actors, on Tune's public surface plus one scoped hook --------------------------------------------------

def record_pid(log: str, config: dict) -> None:
    (Path(log) / f"{config['key']}.{os.getpid()}").touch()
    cycle_trainable(config)


def pids(log: Path, keys: str | set[str]) -> set[int]:
    return {int(p.suffix[1:]) for p in log.iterdir() if p.stem in keys}


def alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow
def test_batches_reuse_the_same_worker_processes_and_idle_ones_beyond_the_batch_are_released(ray_local, tmp_path,
                                                                                            monkeypatch):
    from ray.tune.execution.tune_controller import TuneController

    from oracle_search import searcher

    # Idle actors are kept 2 s after the driver last wanted them (60 s by default), so the test sees a release.
    monkeypatch.setattr(searcher, "KEEP_IDLE_S", 2.0)
    private = {name: getattr(TuneController, name) for name in
               ("_cleanup_cached_actors", "_maybe_cache_trial_actor", "_update_trial_queue")}
    log = tmp_path / "pids"
    log.mkdir()
    with runner(tmp_path / "run", trainable=partial(record_pid, str(log))) as r:
        r.run([trial("a", seed=0), trial("b", seed=1)])
        # The hook is one wrapped method, and only while an experiment lives; Tune's others are untouched.
        assert TuneController._cleanup_cached_actors is not private["_cleanup_cached_actors"]
        assert all(getattr(TuneController, n) is f for n, f in private.items() if n != "_cleanup_cached_actors")
        r.run([trial("c", seed=0), trial("d", seed=1)])
        first, second = pids(log, "ab"), pids(log, "cd")
        assert len(first) == 2 and second == first  # the second batch ran in the first batch's actors
        # Batches of one, past the window: Tune trims its cache at each step, and it steps while trials run.
        started, n = time.monotonic(), 0
        while time.monotonic() - started < 2 * searcher.KEEP_IDLE_S:
            r.run([trial(f"e{n}", seed=2 + n)])
            n += 1
        (kept,) = pids(log, {f"e{n - 1}"})
        deadline = time.monotonic() + 30
        while any(alive(p) for p in first - {kept}) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert kept in first and alive(kept)
        assert not any(alive(p) for p in first - {kept})  # a batch of one keeps one actor, releases the other
    assert all(getattr(TuneController, n) is f for n, f in private.items())  # restored once the run ended


@pytest.mark.slow
def test_after_a_batch_of_one_the_next_batch_runs_on_every_actor_again(ray_local, tmp_path):
    """A batch of one between two wide ones (a silo_fit trial's last cycle, a reused training) must not leave the
    run on one actor: Tune hands pending trials to a cached actor first and cancels a new one's start, so an
    actor released here never came back while trials were shorter than an actor's start."""
    log = tmp_path / "pids"
    log.mkdir()
    with runner(tmp_path / "run", trainable=partial(record_pid, str(log))) as r:
        r.run([trial("a", seed=0), trial("b", seed=1)])
        r.run([trial("c", seed=2)])
        r.run([trial(key, seed=seed) for seed, key in enumerate("defg", start=3)])
    first = pids(log, "ab")
    assert len(first) == 2 and pids(log, "defg") == first


@pytest.mark.slow
def test_the_actors_grow_to_the_slots_when_trials_are_shorter_than_an_actors_start(ray_local, tmp_path):
    """4 slots (half a CPU a trial on the 2-CPU Ray), a first batch of 2, then batches of 8 trials far shorter than
    an actor's start: Tune used to hand each pending trial to a freed actor and remove the one already starting, so
    the run stayed on its first 2 actors (measured on the digits compare: 4 of 8 slots). The hook lets a started
    actor come up: the later batches run on more than 2."""
    spec = dataclasses.replace(TINY, resources=dataclasses.replace(TINY.resources, cpus_per_trial=0.5))
    log = tmp_path / "pids"
    log.mkdir()
    with own_runner(tmp_path / "run", spec, "engine", progress=Progress(io.StringIO()),
                    trainable=partial(record_pid, str(log))) as r:
        assert r.slots() == 4
        r.run([trial("a", seed=0), trial("b", seed=1)])
        for k in range(3):
            r.run([trial(f"w{k}{i}", seed=2 + 8 * k + i) for i in range(8)])
    assert len(pids(log, "ab")) == 2
    assert len(pids(log, {f"w{k}{i}" for k in (1, 2) for i in range(8)})) > 2


def test_the_warm_actor_hook_applies_on_the_installed_ray():
    """The private Tune method exists here with the parameters the hook passes: wrapped while the hook lasts, then
    the original again. Fails on a Ray whose internals moved, before anyone loses the speed-up silently."""
    from ray.tune.execution.tune_controller import TuneController

    from oracle_search import warm

    assert warm.warm_hook_missing() is None
    original = TuneController._cleanup_cached_actors
    with warm.warm_actors() as applied:
        assert applied and TuneController._cleanup_cached_actors is not original
    assert TuneController._cleanup_cached_actors is original


@pytest.mark.slow
def test_on_an_untested_ray_trials_run_with_plain_actor_reuse_and_one_warning(ray_local, tmp_path, monkeypatch):
    from ray.tune.execution.tune_controller import TuneController

    from oracle_search import warm

    original = TuneController._cleanup_cached_actors
    # a Ray whose private method takes other parameters than the ones the hook passes
    hook = {key: ("self", "force") if key[2] == "_cleanup_cached_actors" else params
            for key, params in warm.WARM_HOOK.items()}
    monkeypatch.setattr(warm, "WARM_HOOK", hook)
    monkeypatch.setattr(warm, "_warned", False)
    with pytest.warns(RuntimeWarning, match=r"does not fit Ray .*_cleanup_cached_actors\(self, force_all\) is not "
                                            r"\(self, force\)") as caught:
        with runner(tmp_path) as r:
            rows = r.run([trial("a")])
            assert TuneController._cleanup_cached_actors is original
            rows |= r.run([trial("b", seed=1)])
    assert sorted(rows) == ["a", "b"] and all(row["val_acc"] > 50 for row in rows.values())
    assert len([w for w in caught if "warm-actor" in str(w.message)]) == 1


# --- a trial that ends without a row -----------------------------------------------------------------------------

def ends_without_a_row(markers: str, config: dict) -> None:
    """`once-*`: the first attempt returns without reporting; `never-*`: every attempt reports only an
    intermediate result (no checkpoint); others train normally."""
    marker = Path(markers) / config["key"]
    first = not marker.exists()
    marker.touch()
    if config["key"].startswith("never-"):
        tune.report({"val_acc": 50.0, "final": False})
        return
    if config["key"].startswith("once-") and first:
        return
    cycle_trainable(config)


@pytest.mark.slow
def test_a_trial_ending_without_a_row_is_retried_then_named_in_the_failure(ray_local, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    r = runner(tmp_path / "run", trainable=partial(ends_without_a_row, str(markers)), max_failures=1)
    outcome: dict = {}

    def drive() -> None:
        try:
            outcome["rows"] = r.run([trial("once-a"), trial("never-b", seed=1)])
        except RunFailed as err:
            outcome["error"] = err

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    driver.join(timeout=180)
    assert not driver.is_alive(), "run() never returned: a trial without val_acc or checkpoint hung the driver"
    r.close()
    assert "error" in outcome
    assert re.search(r"1 trial\(s\) failed .*\(first: never-b: ended on an intermediate result\)",
                     str(outcome["error"]))
    assert [row["key"] for row in Ledger(tmp_path / "run").rows()] == ["once-a"]  # retried, then trained
    assert trial_dirs(tmp_path / "run") == ["never-b", "never-b-retry1", "once-a", "once-a-retry1"]


def fused_like(config: dict) -> None:
    """Reports as a fused trial does (`trainables.tune_adapter.fused_cycle_trainable`'s contract): one result
    with a row per candidate and one checkpoint whose subfolders hold each candidate's checkpoint."""
    import tempfile

    import ray

    from trainables.cycle import run_cycle

    with tempfile.TemporaryDirectory() as work:
        rows = []
        for i, (key, lr) in enumerate(zip(config["keys"], config["max_lrs"])):
            result = run_cycle(config["spec"], cycle=0, max_lr=lr, seed=config["seed"],
                               checkpoint_dir=Path(work) / f"cand{i:02d}")
            rows.append(result.row() | {"key": key, "fused": len(config["keys"]), "checkpoint_subdir": f"cand{i:02d}"})
        tune.report({"fused_rows": json.dumps(rows), "gpu_ids": [],
                     "node_id": ray.get_runtime_context().get_node_id()},
                    checkpoint=tune.Checkpoint.from_directory(work))


@pytest.mark.slow
def test_a_fused_result_lands_as_one_row_per_candidate(ray_local, tmp_path):
    fused = Training(key="fused-c00", spec=TINY, cycle=0, max_lr=None, seed=0, start_checkpoint=None,
                  tags={"method": "oracle", "stage": "grid"})

    def trainable(config: dict) -> None:
        fused_like(config | {"keys": ["cand-0.03", "cand-0.3"], "max_lrs": [0.03, 0.3]})

    with runner(tmp_path, trainable=trainable) as r:
        assert r.run([fused])["fused-c00"]["fused_keys"] == ["cand-0.03", "cand-0.3"]
    rows = {row["key"]: row for row in Ledger(tmp_path).rows()}
    assert sorted(rows) == ["cand-0.03", "cand-0.3"]
    assert [rows[k]["max_lr"] for k in sorted(rows)] == [0.03, 0.3] and {r["fused"] for r in rows.values()} == {2}
    for i, key in enumerate(sorted(rows)):
        assert rows[key]["checkpoint"].endswith(f"/cand{i:02d}") and Path(rows[key]["checkpoint"]).is_dir()
        assert rows[key]["method"] == "oracle"


def test_a_result_is_a_row_only_with_val_acc_or_fused_rows_and_a_checkpoint():
    from oracle_search.engine import incomplete

    ckpt = object()
    assert incomplete({"val_acc": 1.0}, ckpt) is None
    assert incomplete({"fused_rows": '[{"val_acc": 1.0}]'}, ckpt) is None  # a fused trial's candidates
    assert incomplete({}, ckpt) == "ended without reporting val_acc"
    assert incomplete({"val_acc": 1.0}, None) == "ended without a checkpoint"
    assert incomplete({"val_acc": 1.0, "final": False}, ckpt) == "ended on an intermediate result"


# --- where Ray runs and how wide ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_without_address_connect_joins_the_cluster_named_by_ray_address(two_nodes, monkeypatch):
    import ray

    from oracle_search.cluster import connect

    assert not ray.is_initialized()  # the fixture left this process unconnected
    monkeypatch.setenv("RAY_ADDRESS", two_nodes.address)  # what Ray sets inside every job
    connect(None)
    assert ray.get_runtime_context().gcs_address == two_nodes.address  # joined, not a second local Ray


def bootstrap_config(path: Path, worker_cpus: int, max_workers: int) -> Path:
    """An autoscaler config as `ray up` leaves it on the head (resources filled in)."""
    path.write_text(f"""
max_workers: {max_workers}
head_node_type: head
available_node_types:
  head: {{resources: {{CPU: 0}}, node_config: {{}}}}
  worker: {{resources: {{CPU: {worker_cpus}, GPU: 1}}, min_workers: 0, max_workers: {max_workers}, node_config: {{}}}}
""")
    return path


@pytest.mark.slow
def test_slots_count_what_the_cluster_may_grow_to_not_its_present_size(make_cluster, tmp_path, monkeypatch):
    from oracle_search import cluster as where

    cluster = make_cluster(0)  # a fresh cluster.yaml cluster: a head with no CPUs and no workers yet

    def slots(per: int = 1, **resources) -> int:
        spec = dataclasses.replace(TINY, resources=Resources(**resources))
        return own_runner(tmp_path / "out", spec, "slots", address=cluster.address).slots(per)

    monkeypatch.setattr(where, "AUTOSCALER_CONFIG", tmp_path / "none.yaml")
    assert slots() == 1
    assert slots(max_concurrent=6) == 6 and slots(2, max_concurrent=6) == 3  # --max-concurrent raises it
    monkeypatch.setattr(where, "AUTOSCALER_CONFIG", bootstrap_config(tmp_path / "boot.yaml", 4, 3))
    assert slots() == 12 and slots(cpus_per_trial=2) == 6 and slots(gpus_per_trial=0.5) == 6
    cluster.add_node(num_cpus=8)
    cluster.add_node(num_cpus=8)
    cluster.wait_for_nodes()
    assert slots() == 16  # now larger than the autoscaler's ceiling: the present size counts
    monkeypatch.setattr(where, "AUTOSCALER_CONFIG", tmp_path / "none.yaml")
    assert slots(cpus_per_trial=4) == 4


def test_a_corrupt_start_checkpoint_fails_the_batch_before_ray_is_contacted(tmp_path):
    """The Runner checks a start checkpoint it can read once, before any trial: no Tune experiment begins, and the
    error counts the trainings that would have started from it."""
    from trainables.checkpoints import STATE_FILE, save_checkpoint

    start = tmp_path / "start"
    save_checkpoint(start, {"x": 1})
    flip_middle_byte(start / STATE_FILE)
    trainings = [Training(f"c1-{lr}", TINY, cycle=1, max_lr=lr, seed=0, start_checkpoint=str(start))
                 for lr in (0.1, 0.2)]
    with runner(tmp_path / "out", address="ray://nowhere:1") as r:
        with pytest.raises(RunFailed, match=re.escape(f"2 trial(s) not started: CheckpointError: checkpoint "
                                                      f"{start / STATE_FILE}: content hash mismatch")):
            r.run(trainings)
    assert not (tmp_path / "out" / "tune").exists()


@pytest.mark.slow
def test_trials_run_here_on_a_local_ray_or_a_cluster_of_this_machine_alone(ray_local, tmp_path, monkeypatch):
    """Where every trial runs on this machine, the probes run in this process: no cluster named, or a one-node
    cluster on this machine. Not through Ray Client, and not where an autoscaler may add nodes."""
    from oracle_search import cluster

    assert cluster.trials_run_here(TINY, None) and cluster.trials_run_here(TINY, ray_local)
    assert not cluster.trials_run_here(TINY, "ray://10.0.0.1:10001")
    config = tmp_path / "ray_bootstrap_config.yaml"
    config.write_text("max_workers: 2\nhead_node_type: head\navailable_node_types:\n"
                      "  head: {resources: {CPU: 2}, max_workers: 0}\n  gpu: {resources: {CPU: 8, GPU: 1}}\n")
    monkeypatch.setattr(cluster, "AUTOSCALER_CONFIG", config)
    assert not cluster.trials_run_here(TINY, ray_local)


@pytest.mark.slow
def test_trials_do_not_run_here_on_a_cluster_of_several_nodes(two_nodes):
    from oracle_search.cluster import trials_run_here

    assert not trials_run_here(TINY, two_nodes.address)


def test_drivers_in_several_threads_start_one_experiment_not_two(tmp_path, monkeypatch):
    """Replicates hand an engine trainings from a thread each; the first hands start the Tune experiment, once."""
    import threading

    from oracle_search.engine import Engine
    from oracle_search.progress import Progress

    engine = Engine(TINY, "race", None, str(tmp_path), Progress(io.StringIO()))
    started = []

    def slow_start() -> None:  # stands in for Tune's start: slow enough for every thread to arrive meanwhile
        time.sleep(0.2)
        started.append(threading.current_thread().name)
        engine.queue = object()

    monkeypatch.setattr(engine, "_start", slow_start)
    threads = [threading.Thread(target=engine.start, name=f"driver-{i}") for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(started) == 1
