"""`oracle-search status DIR`: what a run is doing, from any terminal (a cluster's head, a run under `nohup`),
while it runs or after, read from the run's own files alone; it writes nothing and imports no Ray, torch or
pandas, so it answers in a fraction of a second. In a few lines:
- the driver: whether a live driver holds DIR's lock now (`oracle_search.lock`: its command, pid and host), else
  whether the run finished or stopped before it (`sessions`);
- the time it took so far, summed over all its sessions (the first run and every resume: `sessions.measured`);
- each replicate's trainings, counted as the plan counts them (`phase_of`, `estimate.typical`'s rule), against
  the plan's typical and at-most counts per phase (estimate.json: one replicate's), and the phases it trained
  last;
- the ETA of the whole plan (`Pace`): the plan's typical trainings not yet done × the measured seconds per
  training / the slots, not the trials queued now; the live line (`progress`) shows the same;
- the newest failed trial's error (Tune's error.txt under the run's Tune storage), if any."""
from __future__ import annotations

import argparse
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from oracle_search import sessions
from oracle_search.lock import LOCK_NAME
from oracle_search.sessions import ESTIMATE_FILE, FINISHED, LOST, SESSIONS_FILE
from trainables.errors import SpecError
from trainables.timestamps import duration

MANIFEST = "replicates.json"  # oracle_search.replicates.MANIFEST (that module imports Ray and torch)
# What a run folder holds (any of these): the folder of a run started, running, stopped or finished.
RUN_FILES = ("spec.json", "ledger", MANIFEST, ESTIMATE_FILE, SESSIONS_FILE, "driver.lock")
RECENT = 12  # the latest trainings that say which phases a replicate is in
# The methods and stages of `oracle_search.schema` (which imports pandas), as `phase_of` needs them; a test holds
# them equal to the schema's (tests/test_status.py).
BASELINES = ("constant", "decay", "cyclical", "warmup", "cosine")
HELD_OUT = ("oracle_schedule", "constant_dense", "constant_best")
# A phase is over once the work that follows it on its line has begun (`study.run_study`): a line's final runs
# start after its search, the held-out references' after the Oracle's last cycle. Its typical count, a simulated
# run's, is then no longer to come, whether the run trained fewer or more.
CLOSED_BY = {"silo_paper": ("silo_paper",), "silo_fit": ("silo_fit",), "baselines_tune": BASELINES,
             "oracle": HELD_OUT}


def phase_of(row: dict, own_schedule: str) -> str | None:
    """The plan's phase a ledger row's training belongs to: `oracle_search.estimate.phase_of`, without pandas."""
    method, stage = row.get("method"), row.get("stage")
    if method == "oracle" and stage in ("grid", "refine"):
        return "oracle"
    if method == "silo_fit" and stage == "fit":
        return "silo_fit"
    if method == "silo_paper" and stage == "tune":
        return "silo_paper"
    if method in BASELINES and method != own_schedule and stage == "tune":
        return "baselines_tune"
    if stage == "final" and row.get("selected"):
        return "finals"
    return None


def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None


def own_schedule(folder: Path) -> str:
    """The spec's schedule name (spec.json), whose cycle-0 tuning is the Oracle's own (not a baseline's)."""
    schedule = (_json(Path(folder) / "spec.json") or {}).get("schedule")
    return schedule.get("name", "") if isinstance(schedule, dict) else str(schedule or "")


class Ledger:
    """One run folder's ledger rows, read incrementally: a file once read is not read again (a row is written
    once, atomically); a row moved out (ledger/refused/) is dropped."""

    def __init__(self, folder: Path):
        self.dir = Path(folder) / "ledger"
        self._rows: dict[str, dict] = {}

    def rows(self) -> list[dict]:
        try:
            names = {e.name for e in os.scandir(self.dir) if e.name.endswith(".json")}
        except (FileNotFoundError, NotADirectoryError):
            names = set()
        self._rows = {n: r for n, r in self._rows.items() if n in names}
        for name in names - self._rows.keys():
            row = _json(self.dir / name)
            if isinstance(row, dict):
                self._rows[name] = row
        return list(self._rows.values())


@dataclass(frozen=True)
class Counted:
    """A replicate's trainings, counted as the plan counts them: per phase, each (method, training) once."""

    done: dict[str, int]
    closed: frozenset[str]  # the phases over (CLOSED_BY)
    seconds: float  # the training seconds of its rows that trained (not reused): a fused one's share
    recent: list[tuple[str, int]]  # (phase, or method/stage outside the plan's phases; cycle), the latest first
    last: str | None  # when its newest training finished (ISO 8601, UTC)

    @property
    def total(self) -> int:
        return sum(self.done.values())


def count(rows: list[dict], schedule: str) -> Counted:
    found: dict[str, set] = {}
    for row in rows:
        if (phase := phase_of(row, schedule)) is not None:
            found.setdefault(phase, set()).add((row.get("method"), row.get("training") or row.get("key")))
    trained = sorted((r for r in rows if not r.get("reused")), key=lambda r: str(r.get("finished") or ""),
                     reverse=True)
    recent = [(phase_of(r, schedule) or f"{r.get('method')}/{r.get('stage')}", int(r.get("cycle", 0)))
              for r in trained[:RECENT]]
    finals = {r.get("method") for r in rows if r.get("stage") == "final"}
    closed = frozenset(p for p, methods in CLOSED_BY.items() if finals & set(methods))
    return Counted({p: len(s) for p, s in found.items()}, closed, sum(float(r.get("seconds") or 0) for r in trained),
                   recent, str(trained[0].get("finished")) if trained and trained[0].get("finished") else None)


@dataclass(frozen=True)
class Eta:
    """The whole plan's time left: its typical (and at-most) trainings not done yet, at the measured pace."""

    left: int  # typical trainings not done, over every replicate
    left_most: int
    per_training: float  # measured: training seconds / trainings done (the plan's count: reused ones cost nothing)
    slots: int

    @property
    def seconds(self) -> float:
        return self.left * self.per_training / self.slots

    @property
    def seconds_most(self) -> float:
        return self.left_most * self.per_training / self.slots


def plan_eta(plan: dict | None, counted: list[Counted]) -> Eta | None:
    """The ETA from estimate.json's record (`plan`: its phases are one replicate's; its slots) and each
    replicate's trainings; None without a plan or before a training finished."""
    if not plan or not plan.get("phases") or not counted:
        return None
    done = sum(c.total for c in counted)
    seconds = sum(c.seconds for c in counted)
    if not done or seconds <= 0:
        return None
    def left(which: str) -> int:
        return sum(max(0, int(p[which]) - c.done.get(p["name"], 0)) for c in counted for p in plan["phases"]
                   if p["name"] not in c.closed)
    return Eta(left("typical"), left("most"), seconds / done, max(1, int(plan.get("slots") or 1)))


def folders(out: Path) -> dict[str, Path]:
    """The run folders of OUT: each replicate's (its manifest's), else OUT itself."""
    manifest = _json(Path(out) / MANIFEST)
    if isinstance(manifest, dict) and manifest.get("folders"):
        return {name: Path(out) / name for name in manifest["folders"]}
    return {"run": Path(out)}


class Pace:
    """The plan's ETA for a run folder, re-read at most every `every` seconds (new ledger rows only): the live
    line's (`progress`)."""

    def __init__(self, out: Path, every: float = 10.0):
        self.out, self.every = Path(out), every
        self.plan = _json(self.out / ESTIMATE_FILE)
        self.ledgers = {name: (Ledger(f), own_schedule(f)) for name, f in folders(self.out).items()}
        self._at, self._eta = -float("inf"), None

    def eta(self) -> Eta | None:
        """The ETA as of the last read (None until a training finished); never raises: the live line goes on."""
        if time.monotonic() - self._at >= self.every:
            self._at = time.monotonic()
            try:
                if not isinstance(self.plan, dict):  # not written yet when the pace began
                    self.plan = _json(self.out / ESTIMATE_FILE)
                self._eta = plan_eta(self.plan if isinstance(self.plan, dict) else None,
                                     [count(ledger.rows(), s) for ledger, s in self.ledgers.values()])
            except (OSError, ValueError, KeyError, TypeError):  # a file being written, or of another version
                self._eta = None
        return self._eta


# --- the command -----------------------------------------------------------------------------------------------

@dataclass
class RunStatus:
    out: Path
    plan: dict | None
    counted: dict[str, Counted]
    owner: object | None  # lock.Owner of a live driver
    lock_note: str | None  # why a lock found is not a live driver's
    measured: sessions.Measured | None
    error: tuple[float, str, Path] | None  # the newest trial error: its time, its last line, its file
    folders: dict[str, Path]
    eta: Eta | None = field(default=None)

    @property
    def replicates(self) -> int:
        return len(self.folders)


def check_run_folder(out: Path) -> None:
    """DIR must be a run folder (or a replicates folder): SpecError naming it, before anything is read."""
    out = Path(out)
    if not out.exists():
        raise SpecError("DIR", f"{out} does not exist")
    if not out.is_dir():
        raise SpecError("DIR", f"{out} is a file, not a run folder")
    if not any((out / name).exists() for name in RUN_FILES):
        raise SpecError("DIR", f"{out} is not a run folder (none of {', '.join(RUN_FILES)}): give a compare, "
                               "oracle, fit-silo or baselines --out")


def last_error(out: Path, runs: dict[str, Path], since: float | None) -> tuple[float, str, Path] | None:
    """The newest error.txt of a failed trial (Tune writes one per trial that failed, retried or not) under the
    run's Tune storage (OUT/tune, or the spec's --storage-path, that run's experiments only), written after
    `since`: its time, its last line, its path."""
    spec = _json(next(iter(runs.values())) / "spec.json") or {}
    storage = (spec.get("resources") or {}).get("storage_path")
    root = Path(storage) if storage and "://" not in storage else Path(out) / "tune"
    prefix = f"{spec.get('preset', '')}-" if storage else ""
    newest = None
    try:
        experiments = [e for e in os.scandir(root) if e.is_dir() and e.name.startswith(prefix)]
    except (FileNotFoundError, NotADirectoryError):
        return None
    for experiment in experiments:
        if since is not None and experiment.stat().st_mtime < since:
            continue
        for trial in os.scandir(experiment.path):
            try:
                t = os.stat(os.path.join(trial.path, "error.txt")).st_mtime
            except (FileNotFoundError, NotADirectoryError):
                continue
            if (since is None or t >= since) and (newest is None or t > newest[0]):
                newest = (t, Path(trial.path) / "error.txt")
    if newest is None:
        return None
    text = newest[1].read_text(errors="replace").strip().splitlines()
    return newest[0], re.sub(r"\x1b\[[0-9;]*m", "", text[-1].strip()) if text else "no error recorded", newest[1]


def read_status(out: Path) -> RunStatus:
    out = Path(out)
    runs = folders(out)
    plan = _json(out / ESTIMATE_FILE)
    counted = {name: count(Ledger(f).rows(), own_schedule(f)) for name, f in runs.items()}
    owner, why = sessions.holder(out)
    live = owner is not None and why is None
    m = sessions.measured(out, live)
    error = last_error(out, runs, m.first_started if m else None)
    return RunStatus(out, plan if isinstance(plan, dict) else None, counted, owner if live else None,
                     None if live or owner is None else why, m, error, runs,
                     plan_eta(plan if isinstance(plan, dict) else None, list(counted.values())))


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(t))


def _cycles(cycles: list[int]) -> str:
    low, high = min(cycles), max(cycles)
    return f"c{low}" if low == high else f"c{low}-{high}"


def lines(s: RunStatus, now: float | None = None) -> list[str]:
    now = time.time() if now is None else now
    plan, m = s.plan, s.measured
    what = f"{plan['command']}" if plan else "a run"
    # compare writes each run folder's report.md last: one that ended without it failed
    failed = [name for name, folder in s.folders.items() if m is not None and plan and plan["command"] == "compare"
              and not _written_since(folder / "report.md", m.last_started)]
    what += f", {s.replicates} replicates" if s.replicates > 1 else ""
    if s.owner is not None:
        try:
            age = f", lock touched {now - (s.out / LOCK_NAME).stat().st_mtime:.0f} s ago"
        except OSError:
            age = ""
        state = f"running: {s.owner.command}, pid {s.owner.pid} on host {s.owner.host}{age}"
    elif m is not None and m.ended == FINISHED:
        state = f"the driver ended at {_when(_finished(s.out))}"
        if failed:
            which = "its report" if s.replicates == 1 else f"the report of {', '.join(failed)}"
            state += f" without {which}: failed (the last trial error below, if any); rerun its command to resume"
        else:
            state += ": finished"
    elif m is not None:
        how = "killed (its end is its last finished training)" if m.ended == LOST else "interrupted or failed"
        state = f"not running: its last session stopped before the run finished ({how}); rerun its command to resume"
    else:
        state = "not running (no driver holds its lock; no session recorded: fit-silo and baselines record none)"
    if s.lock_note:
        state += f"; a stale lock: {s.lock_note}"
    out = [f"{s.out}: {what}: {state}"]
    if m is not None:
        resumed = f", resumed {m.resumed} time(s)" if m.resumed else ""
        lost = f"; {m.lost} killed session(s) counted to their last training" if m.lost else ""
        part = (f" (and {m.unrecorded} earlier session(s) not recorded: a lower bound)" if m.unrecorded else "")
        out.append(f"elapsed: {duration(m.seconds)} over {m.sessions} session(s){resumed}{part}, the first started "
                   f"{_when(m.first_started)}{lost}")
    phases = plan.get("phases", []) if plan else []
    typical = sum(int(p["typical"]) for p in phases)
    most = sum(int(p["most"]) for p in phases)
    for name, c in s.counted.items():
        if not (s.folders[name] / "ledger").is_dir():  # a copy of a run without its ledger (the committed example)
            out.append(f"{name}: no ledger/ folder, so its trainings are not counted here (a run copied without its "
                       "ledger; its results table, if any, holds the rows)")
            continue
        if phases:
            head = f"{c.total:,} of ~{typical:,} trainings (at most {most:,}): " + ", ".join(
                f"{p['name']} {c.done.get(p['name'], 0)}/{p['typical']}{' done' * (p['name'] in c.closed)}"
                for p in phases)
        else:
            head = f"{c.total:,} trainings (no plan: no {ESTIMATE_FILE})"
        if c.recent:
            grouped: dict[str, list[int]] = {}
            for phase, cycle in c.recent:
                grouped.setdefault(phase, []).append(cycle)
            where = ", ".join(f"{p} {_cycles(cs)}" for p, cs in grouped.items())
            head += f"; {'now' if s.owner is not None else 'last'}: {where}"
        out.append(f"{name}: {head}")
    e = s.eta
    if s.owner is None and m is not None and m.ended == FINISHED:
        pass  # nothing left
    elif e is None:
        out.append("ETA: unknown (" + ("no plan: no estimate.json" if not plan else "no training finished yet")
                   + ")")
    else:
        rate = f"at {e.per_training:.3g} s per training (measured) on {e.slots} slot(s)"
        if e.left:
            eta = (f"ETA: {duration(e.seconds)} for the whole plan's ~{e.left:,} typical trainings left {rate} "
                   f"(at most {duration(e.seconds_most)}); not the trials queued now")
        else:
            eta = (f"ETA: the plan's typical trainings are done; at most {e.left_most:,} more, "
                   f"{duration(e.seconds_most)} {rate}")
        out.append(eta + ("" if s.owner is not None else "; once resumed"))
    if s.error is not None:
        t, line, path = s.error
        shown = path.relative_to(s.out) if path.is_relative_to(s.out) else path
        out.append(f"last trial error ({_when(t)}): {line} ({shown})")
    return out


def _written_since(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since
    except OSError:
        return False


def _finished(out: Path) -> float:
    found = sessions.read(out)
    return found[-1].get("finished") or found[-1]["started"]


def main(args: argparse.Namespace) -> int:
    check_run_folder(Path(args.run_dir))
    print("\n".join(lines(read_status(Path(args.run_dir)))))
    return 0


def add_parser(sub) -> None:
    """The `status` command on the command line's subparsers (`cli.build_parser`)."""
    c = sub.add_parser("status", help="what a run is doing, from any terminal, read from its folder: the driver, "
                       "each replicate's trainings against the plan, the time over all sessions, the whole plan's "
                       "ETA and the last trial error; writes nothing")
    c.add_argument("run_dir", metavar="DIR", help="a results folder (--out of compare, oracle, fit-silo or "
                   "baselines), or a compare --replicates folder")
    c.set_defaults(run=main)
