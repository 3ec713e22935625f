"""Optuna on a real PostgreSQL started by scripts/start_postgres.sh: parallel workers share one study, and
fit-silo keeps its study there without writing the password anywhere."""
from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

import io
import json
import threading
import time

import optuna
import pytest

from conftest import ray_env
from oracle_search.engine import Progress
from oracle_search.engine import own_runner
from oracle_search.fitter import Heartbeat, SearchSpace, fit_silo, open_study, rdb_storage, study_name, suggest
from trainables.presets import PRESETS

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "start_postgres.sh"
CLI = str(Path(sys.executable).parent / "oracle-search")
NOT_INSTALLED = 3  # the script's exit code when PostgreSQL is missing and only root could install it


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A throwaway server for the session; stopped and deleted afterwards."""
    data = tempfile.mkdtemp(prefix="oracle-search-pg-")  # under /tmp: reachable by the postgres user
    env = os.environ | {"PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(SCRIPT), data], capture_output=True, text=True, timeout=900, env=env)
    if proc.returncode == NOT_INSTALLED and os.geteuid() != 0:
        shutil.rmtree(data, ignore_errors=True)
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 0, proc.stderr
    try:
        yield proc.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run(["bash", str(SCRIPT), "--stop", data], capture_output=True, timeout=120, env=env)
        shutil.rmtree(data, ignore_errors=True)


def test_the_server_listens_on_loopback_with_a_password(pg_url):
    url = urlsplit(pg_url)
    assert url.scheme == "postgresql+psycopg2" and url.hostname == "127.0.0.1"
    assert url.username == "optuna" and len(url.password) >= 16
    wrong = pg_url.replace(url.password, "wrong-password")
    with pytest.raises(Exception, match="password authentication failed"):
        optuna.create_study(storage=wrong, study_name="denied")


WORKER = """
import sys, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.load_study(storage=sys.argv[1], study_name="shared")
study.optimize(lambda t: (t.suggest_float("x", -3, 3) - 1) ** 2, n_trials=4)
"""


def test_two_processes_share_one_study(pg_url):
    # Created once first: two processes creating Optuna's tables at the same moment collide in PostgreSQL.
    optuna.create_study(storage=pg_url, study_name="shared", load_if_exists=True)
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, pg_url], stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    for w in workers:
        assert w.wait(timeout=300) == 0, w.stderr.read()
    study = optuna.load_study(storage=pg_url, study_name="shared")
    assert len(study.trials) == 8
    assert sorted(t.number for t in study.trials) == list(range(8))  # no number handed out twice
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)


@pytest.mark.slow
def test_fit_silo_keeps_its_study_in_postgres_and_never_writes_the_password(pg_url, tmp_path, ray_local):
    out = tmp_path / "out"
    proc = subprocess.run([CLI, "fit-silo", "--preset", "tiny", "--precision", "fp32", "--trials", "2",
                           "--study-storage", pg_url, "--out", str(out)], capture_output=True, text=True, timeout=600,
                          env=ray_env(ray_local))  # a driver joining the tests' local Ray
    assert proc.returncode == 0, proc.stderr
    summaries = {s.study_name: s.n_trials for s in optuna.get_all_study_summaries(storage=pg_url)}
    spec = dataclasses.replace(PRESETS["tiny"].spec, precision="fp32")  # the study's name holds the precision
    assert summaries.get(study_name(spec, [0], spec.cycles)) == 2
    assert not (out / "optuna-journal.log").exists()  # the study lives in PostgreSQL, not the default journal
    report = subprocess.run([CLI, "report", str(out)], capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    password = urlsplit(pg_url).password
    assert password not in proc.stdout + proc.stderr + report.stdout + report.stderr
    written = [p for p in out.rglob("*") if p.is_file()]
    assert {"spec.json", "results.csv", "report.md"} <= {p.name for p in written}
    assert not [p for p in written if password.encode() in p.read_bytes()]  # nor the ledger, Tune's files


# --- several drivers on one study ---------------------------------------------------------------------------------

FAST = ["--preset", "tiny", "--cycles", "1", "--epochs", "2", "--precision", "fp32"]
FAST_SPEC = dataclasses.replace(PRESETS["tiny"].spec, cycles=1, epochs=2, precision="fp32")
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


def ledger(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "ledger").glob("*.json"))]


@pytest.mark.slow
def test_two_concurrent_drivers_share_one_study_and_train_no_trial_twice(pg_url, tmp_path, ray_local):
    """Two fit-silo processes, 2 s apart, on one PostgreSQL study and one Ray, each with its own --out."""
    address, env = ray_local, ray_env(ray_local)
    drivers = []
    for name in ("a", "b"):
        drivers.append(subprocess.Popen(
            [sys.executable, "-m", "oracle_search.cli", "fit-silo", *FAST, "--trials", "6", "--study-storage",
             pg_url, "--address", address, "--out", str(tmp_path / name)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT))
        time.sleep(2)
    for d in drivers:
        output = d.communicate(timeout=400)[0]
        assert d.returncode == 0, output[-3000:]
    study = optuna.load_study(study_name=study_name(FAST_SPEC, [0], 1), storage=pg_url)
    finished = study.get_trials(states=FINISHED)
    assert len(finished) == 6 and not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    rows = {name: ledger(tmp_path / name) for name in ("a", "b")}
    assert rows["a"] and rows["b"], "one driver trained nothing: the test shows no sharing"
    trained = [(r["study_trial"], r["cycle"]) for name in ("a", "b") for r in rows[name]]
    assert len(trained) == len(set(trained))  # no (trial, cycle) trained by both drivers
    assert {n for n, _ in trained} == {t.number for t in finished}
    params = {(r["epsilon"], r["delta"], r["q"], r["beta"]) for name in ("a", "b") for r in rows[name]}
    assert len(params) == 6  # and no parameter set drawn twice


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")  # this test asks by hand
def test_a_dead_drivers_trial_is_taken_over_and_a_live_ones_is_not(pg_url, tmp_path, ray_local):
    spec = dataclasses.replace(FAST_SPEC, rate=0.3)  # a study of its own on the session's server
    beat = Heartbeat(interval=1, grace=2)
    space = SearchSpace(epsilon=(0.02, 0.2), delta=(0.0, 0.3))
    storage = rdb_storage(pg_url, beat)
    study = open_study(tmp_path, spec, pg_url, [0], 1, storage)
    study.enqueue_trial({"epsilon": 0.05, "delta": 0.1, "q": 1, "beta": 5.0})  # the fitter sees a used study
    dead, live = study.ask(), study.ask()
    for t in (dead, live):
        suggest(t, space)
    study_id = storage.get_study_id_from_name(study.study_name)
    ids = {t.number: storage.get_trial_id_from_study_id_trial_number(study_id, t.number) for t in (dead, live)}
    storage.record_heartbeat(ids[dead.number])  # then nothing more: its driver died
    stop = threading.Event()

    def keep_alive() -> None:  # the live driver, still beating
        while not stop.is_set():
            storage.record_heartbeat(ids[live.number])
            stop.wait(0.5)

    beating = threading.Thread(target=keep_alive, daemon=True)
    beating.start()
    try:
        time.sleep(beat.grace + 1.5)
        out = tmp_path / "out"
        out.mkdir()
        with own_runner(out=out, spec=spec, experiment="pg", progress=Progress(io.StringIO())) as runner:
            fit_silo(runner, [0], 3, space, pg_url, parallel=1, target=1, heartbeat=beat)
    finally:
        stop.set()
        beating.join()
    trials = {t.number: t for t in optuna.load_study(study_name=study.study_name, storage=pg_url).trials}
    assert trials[dead.number].state == optuna.trial.TrialState.FAIL
    (taken,) = [t for t in trials.values() if t.user_attrs.get("resumes") == dead.number]
    assert taken.params == trials[dead.number].params and taken.state in FINISHED
    assert trials[live.number].state == optuna.trial.TrialState.RUNNING  # never failed, never trained here
    trained = {r["study_trial"] for r in ledger(out)}
    assert live.number not in trained and taken.number in trained
    assert len([t for t in trials.values() if t.state in FINISHED]) == 2  # 2 finished + the live one = 3
