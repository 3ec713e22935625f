"""Optuna on a real PostgreSQL started by scripts/start_postgres.sh: parallel workers share one study, and
fit-silo keeps its study there without writing the password anywhere."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

import optuna
import pytest

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
def test_fit_silo_keeps_its_study_in_postgres_and_never_writes_the_password(pg_url, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([CLI, "fit-silo", "--preset", "tiny", "--trials", "2", "--study-storage", pg_url,
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    summaries = {s.study_name: s.n_trials for s in optuna.get_all_study_summaries(storage=pg_url)}
    assert summaries.get("silo-tiny") == 2
    assert not (out / "optuna-journal.log").exists()  # the study lives in PostgreSQL, not the default journal
    report = subprocess.run([CLI, "report", str(out)], capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    password = urlsplit(pg_url).password
    assert password not in proc.stdout + proc.stderr + report.stdout + report.stderr
    written = [p for p in out.rglob("*") if p.is_file()]
    assert {"spec.json", "results.csv", "report.md"} <= {p.name for p in written}
    assert not [p for p in written if password.encode() in p.read_bytes()]  # nor the ledger, Tune's files
