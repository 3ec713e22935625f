"""`oracle-search status DIR` on hand-made run folders (ledger rows, estimate.json, sessions, a driver lock): a
running run (its lock held by a live pid), one killed (its lock's pid dead), a finished one and a failed one, a
replicates folder; the whole plan's ETA; DIR refused in one line; no Ray, torch or pandas loaded."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oracle_search import sessions, status
from oracle_search.cli import main
from oracle_search.lock import LOCK_NAME, Owner

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "ray", "pandas", "optuna", "scipy", "matplotlib")
PLAN = [{"name": "oracle", "most": 20, "typical": 10, "epochs": 4, "width": 3},
        {"name": "silo_paper", "most": 8, "typical": 4, "epochs": 4, "width": 2},
        {"name": "finals", "most": 6, "typical": 6, "epochs": 4, "width": 6}]


def estimate_json(out: Path, command: str = "compare", slots: int = 2) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / sessions.ESTIMATE_FILE).write_text(json.dumps({
        "command": command, "precision": "fp32", "slots": slots, "seconds_per_epoch": 1.0, "source": "given",
        "phases": PLAN, "replicates": 1, "seconds": 200.0, "seconds_at_most": 340.0, "started": None,
        "finished": None}))


def run_folder(folder: Path, rows: list[dict]) -> None:
    """spec.json and a ledger of `rows` (each finished at its `at`, seconds after the epoch of this test)."""
    (folder / "ledger").mkdir(parents=True, exist_ok=True)
    (folder / "spec.json").write_text(json.dumps({"preset": "tiny", "schedule": {"name": "warmup"},
                                                  "resources": {"storage_path": None}}))
    for i, r in enumerate(rows):
        at = r.pop("at", time.time())
        row = {"key": f"k{i}", "cycle": 0, "seed": 0, "seconds": 10.0, "training": f"t{i}",
               "finished": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(at)), **r}
        path = folder / "ledger" / f"{row['key']}.json"
        path.write_text(json.dumps(row))
        os.utime(path, (at, at))


def oracle_rows(n: int, at: float, **kw) -> list[dict]:
    return [{"method": "oracle", "stage": "grid", "cycle": i % 3, "at": at + i, **kw} for i in range(n)]


def session(out: Path, started: float, finished: float | None = None, ended: str | None = None) -> None:
    sessions.start(out)
    record = json.loads((out / sessions.SESSIONS_FILE).read_text())
    record["sessions"][-1].update(started=started, finished=finished, ended=ended,
                                  pid=1000 + len(record["sessions"]))  # each in a process of its own
    (out / sessions.SESSIONS_FILE).write_text(json.dumps(record))


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def show(out: Path) -> str:
    return "\n".join(status.lines(status.read_status(out)))


def test_a_running_run_its_driver_its_trainings_against_the_plan_and_the_whole_plans_eta(tmp_path):
    """4 of the Oracle's ~10 typical trainings done at 10 s each, and 1 reused (counted, no cost): ~5 + 4 + 6 = 15
    typical trainings left over the plan at 40 / 5 = 8 s each on 2 slots: 60 s (at most 15 + 8 + 6 = 29: 116 s),
    whatever is queued now."""
    out, now = tmp_path / "run", time.time()
    estimate_json(out)
    run_folder(out, [*oracle_rows(4, now - 60), {"method": "oracle", "stage": "refine", "reused": True,
                                                 "seconds": 10.0, "at": now - 50}])
    session(out, now - 100)
    (out / LOCK_NAME).write_text(Owner.me("oracle-search compare").dump())  # this process: alive
    text = show(out)
    lines = text.splitlines()
    assert lines[0].startswith(f"{out}: compare: running: oracle-search compare, pid {os.getpid()} on host ")
    assert lines[1].startswith("elapsed: 1.7 min (100 s) over 1 session(s), the first started ")
    assert lines[2].startswith("run: 5 of ~20 trainings (at most 34): oracle 5/10, silo_paper 0/4, finals 0/6; "
                               "now: oracle c0-2")
    assert lines[3] == ("ETA: 1.0 min (60 s) for the whole plan's ~15 typical trainings left at 8 s per training "
                        "(measured) on 2 slot(s) (at most 1.9 min (116 s)); not the trials queued now")
    assert len(lines) == 4


def test_a_phase_whose_line_went_on_to_its_finals_leaves_nothing_of_its_typical_count(tmp_path):
    """silo_paper's search trained 2 of its typical 4, then its final runs began: its search is over."""
    out, now = tmp_path / "run", time.time()
    estimate_json(out)
    run_folder(out, [*oracle_rows(4, now - 60),
                     *[{"method": "silo_paper", "stage": "tune", "at": now - 40 + i} for i in range(2)],
                     {"method": "silo_paper", "stage": "final", "selected": True, "at": now - 30}])
    session(out, now - 100)
    (out / LOCK_NAME).write_text(Owner.me("oracle-search compare").dump())
    text = show(out)
    assert "oracle 4/10, silo_paper 2/4 done, finals 1/6" in text
    # left: 6 (oracle) + 0 (silo_paper, over) + 5 (finals) = 11, at 70 s / 7 trainings = 10 s each, on 2 slots
    assert "ETA: 55.0 s for the whole plan's ~11 typical trainings left at 10 s per training" in text


def test_a_killed_run_a_dead_pid_holds_a_stale_lock_and_its_session_ends_at_its_last_training(tmp_path):
    out, now = tmp_path / "run", time.time()
    estimate_json(out)
    run_folder(out, oracle_rows(4, now - 600))  # the last at now - 597
    session(out, now - 1000)
    owner = Owner.me("oracle-search compare")
    (out / LOCK_NAME).write_text(json.dumps(json.loads(owner.dump()) | {"pid": dead_pid()}))
    lines = show(out).splitlines()
    assert lines[0] == (f"{out}: compare: not running: its last session stopped before the run finished (killed (its "
                        "end is its last finished training)); rerun its command to resume; a stale lock: no such "
                        "process on this host")
    assert lines[1].startswith("elapsed: 6.7 min (403 s) over 1 session(s), the first started ")
    assert lines[1].endswith("; 1 killed session(s) counted to their last training")
    assert lines[3].startswith("ETA: ") and lines[3].endswith("; once resumed")
    assert not (out / sessions.SESSIONS_FILE).read_text().count('"lost"')  # status writes nothing


def test_a_resumed_run_is_timed_over_its_sessions(tmp_path):
    out, now = tmp_path / "run", time.time()
    estimate_json(out)
    run_folder(out, oracle_rows(4, now - 60))
    session(out, now - 3000, now - 2500, sessions.STOPPED)
    session(out, now - 100)
    (out / LOCK_NAME).write_text(Owner.me("oracle-search compare").dump())
    assert "elapsed: 10.0 min (600 s) over 2 session(s), resumed 1 time(s), the first started " in show(out)


def test_a_finished_run_says_so_and_has_no_eta(tmp_path):
    out, now = tmp_path / "run", time.time()
    estimate_json(out)
    run_folder(out, oracle_rows(4, now - 60))
    session(out, now - 100, now - 10, sessions.FINISHED)
    (out / "report.md").write_text("# report\n")
    lines = show(out).splitlines()
    assert lines[0].startswith(f"{out}: compare: the driver ended at ") and lines[0].endswith(": finished")
    assert lines[1].startswith("elapsed: 1.5 min (90 s) over 1 session(s)")
    assert len(lines) == 3 and "last:" in lines[2]


def test_a_failed_run_ended_without_its_report_and_shows_its_last_trial_error(tmp_path):
    out, now = tmp_path / "run", time.time()
    estimate_json(out)
    run_folder(out, oracle_rows(4, now - 60))
    session(out, now - 100, now - 10, sessions.FINISHED)
    trial = out / "tune" / "tiny-20261202-101010-123" / "oracle-grid-c01-s0-lr0.1"
    trial.mkdir(parents=True)
    (trial / "error.txt").write_text("Failure # 1 (occurred at 2026-12-02_10:10:10)\nTraceback ...\n"
                                     "\x1b[36mValueError: the loss is nan\x1b[0m\n")
    lines = show(out).splitlines()
    assert lines[0].endswith(" without its report: failed (the last trial error below, if any); rerun its "
                             "command to resume")
    assert lines[-1].startswith("last trial error (") and lines[-1].endswith(
        "): ValueError: the loss is nan (tune/tiny-20261202-101010-123/oracle-grid-c01-s0-lr0.1/error.txt)")


def test_a_replicates_folder_shows_each_replicate(tmp_path):
    out, now = tmp_path / "run", time.time()
    estimate_json(out, slots=4)
    (out / "replicates.json").write_text(json.dumps({"replicates": 2, "folders": ["replicate-1", "replicate-2"]}))
    run_folder(out / "replicate-1", oracle_rows(6, now - 60))
    run_folder(out / "replicate-2", [*oracle_rows(2, now - 60),
                                     *[{"method": "silo_paper", "stage": "tune", "cycle": 2, "at": now - 5}]])
    session(out, now - 100)
    (out / LOCK_NAME).write_text(Owner.me("oracle-search compare").dump())
    lines = show(out).splitlines()
    assert lines[0].startswith(f"{out}: compare, 2 replicates: running")
    assert lines[2] == ("replicate-1: 6 of ~20 trainings (at most 34): oracle 6/10, silo_paper 0/4, finals 0/6; "
                        "now: oracle c0-2")
    assert lines[3].startswith("replicate-2: 3 of ~20 trainings (at most 34): oracle 2/10, silo_paper 1/4, "
                               "finals 0/6; now: silo_paper c2, oracle c0-1")
    # left: (4 + 4 + 6) + (8 + 3 + 6) = 31 at 10 s on 4 slots
    assert "ETA: 1.3 min (78 s) for the whole plan's ~31 typical trainings left" in lines[4]


def test_a_folder_without_a_plan_counts_its_trainings(tmp_path):
    out = tmp_path / "fit"
    run_folder(out, oracle_rows(3, time.time() - 60))
    lines = show(out).splitlines()
    assert lines[0] == (f"{out}: a run: not running (no driver holds its lock; no session recorded: fit-silo and "
                        "baselines record none)")
    assert lines[1].startswith("run: 3 trainings (no plan: no estimate.json); last: oracle c0-2")
    assert lines[2] == "ETA: unknown (no plan: no estimate.json)"


def test_a_run_copied_without_its_ledger_says_so_rather_than_counting_zero(tmp_path):
    """The committed example ships without its ledgers: status says they are absent, not "0 of ~586 trainings"."""
    out, now = tmp_path / "run", time.time()
    estimate_json(out)
    run_folder(out, oracle_rows(3, now - 60))
    session(out, now - 100, finished=now - 10, ended=sessions.FINISHED)
    (out / "ledger").rename(tmp_path / "kept-ledger")
    lines = show(out).splitlines()
    assert lines[2] == ("run: no ledger/ folder, so its trainings are not counted here (a run copied without its "
                        "ledger; its results table, if any, holds the rows)")
    assert not any("of ~" in line for line in lines)


@pytest.mark.parametrize("make,says", [
    (lambda d: d / "absent", "does not exist"),
    (lambda d: (d / "a-file").write_text("x") and d / "a-file", "is a file, not a run folder"),
    (lambda d: (d / "empty").mkdir() or d / "empty", "is not a run folder (none of spec.json, ledger, "),
])
def test_a_folder_that_is_not_a_run_is_refused_in_one_line_naming_it(tmp_path, capsys, make, says):
    target = make(tmp_path)
    assert main(["status", str(target)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith(f"oracle-search: error: DIR: {target} {says}")


def test_status_loads_no_ray_torch_or_pandas_and_answers_fast(tmp_path):
    out, now = tmp_path / "run", time.time()
    estimate_json(out)
    run_folder(out, oracle_rows(300, now - 600))
    session(out, now - 700)
    code = ("import sys, time\nfrom oracle_search.cli import main\n"
            f"t = time.perf_counter(); bad = main(['status', {str(tmp_path / 'absent')!r}]); "
            f"good = main(['status', {str(out)!r}]); took = time.perf_counter() - t\n"
            f"print(bad, good, sorted(m for m in {HEAVY!r} if m in sys.modules), took)\n")
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    bad, good, heavy, took = done.stdout.strip().splitlines()[-1].split(" ", 3)
    assert (bad, good, heavy) == ("2", "0", "[]"), done.stderr[-2000:]
    assert "run: 300 of ~20 trainings" in done.stdout
    assert float(took) < 1.0  # 300 rows (the main job has ~1,000: 0.1-0.2 s on a 2-core Xeon)


def test_the_phases_are_the_estimates():
    """status.phase_of (no pandas) is estimate.phase_of, on every method, stage and selection; its names are the
    schema's and the replicates'."""
    from oracle_search.estimate import phase_of
    from oracle_search.schema import BASELINES, HELD_OUT, Method, Stage

    from oracle_search.replicates import MANIFEST

    assert status.BASELINES == BASELINES and status.HELD_OUT == HELD_OUT and status.MANIFEST == MANIFEST
    for method, stage, selected, own in itertools.product(
            [m.value for m in Method], [s.value for s in Stage], (False, True), ("warmup", "constant")):
        row = {"method": method, "stage": stage, "selected": selected}
        assert status.phase_of(row, own) == phase_of(row, own), row


def test_the_pace_reads_new_rows_only_and_drops_refused_ones(tmp_path):
    out, now = tmp_path / "run", time.time()
    estimate_json(out)
    run_folder(out, oracle_rows(2, now - 60))
    pace = status.Pace(out, every=0.0)
    assert pace.eta().left == 8 + 4 + 6
    (out / "ledger" / "k9.json").write_text(json.dumps({"key": "k9", "method": "oracle", "stage": "grid",
                                                       "training": "t9", "seconds": 10.0}))
    assert pace.eta().left == 7 + 4 + 6
    (out / "ledger" / "k0.json").unlink()
    assert pace.eta().left == 8 + 4 + 6
