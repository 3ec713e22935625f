"""A run's sessions: each start of a driver (`oracle`, `compare`) on its folder, the first and every resume, with
its end, in OUT/sessions.json, so that the time a run took is the sum over all of them, not the last one's.

A session starts where the driver writes its estimate (`estimate.write_expected`) and ends where `estimate.finish`
records the run's end ("finished"). A session that ends otherwise is closed as well as its process allows:
- the process exits before the run finished (interrupted by SIGINT or SIGTERM, or failed): at exit, by the
  `atexit` hook `start` registers ("stopped");
- killed (SIGKILL, a lost node, a second signal's `os._exit`): by the next session's start, or read so by
  `measured`, at the end of its last finished training (the newest ledger file written after it started: "lost").
A folder written before sessions were recorded has none: its estimate.json's `started` and `finished` are read
as one session ("from": "estimate.json"), and a resume records that one first. Earlier sessions of such a run
left nothing but their Tune experiments in OUT/tune (`engine_starts`), counted so that a report does not compare
a part of the run with the whole job's estimate.

Light (json, os, time and the driver lock): `oracle-search status`, the live line and the report read it."""
from __future__ import annotations

import atexit
import json
import os
import re
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from oracle_search.lock import LOCK_NAME, Owner, gone
from trainables.atomic import atomic_write_json

SESSIONS_FILE = "sessions.json"
ESTIMATE_FILE = "estimate.json"  # oracle_search.estimate.ESTIMATE_FILE (that module imports pandas)
FINISHED, STOPPED, LOST = "finished", "stopped", "lost"  # how a session ended
# A Tune experiment folder of `engine.Engine`: "<experiment>-<YYYYmmdd-HHMMSS local time>-<pid>"
_ENGINE_DIR = re.compile(r"-(\d{8}-\d{6})-\d+$")

_current: tuple[Path, str, float] | None = None  # this process's open session: folder, token, time.monotonic()


def _read_json(path: Path) -> dict | list | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None


def read(out: Path) -> list[dict]:
    """OUT's sessions, oldest first: sessions.json's, else the one an older estimate.json records, else none."""
    found = _read_json(Path(out) / SESSIONS_FILE)
    if isinstance(found, dict) and isinstance(found.get("sessions"), list):
        return found["sessions"]
    legacy = _read_json(Path(out) / ESTIMATE_FILE)
    if isinstance(legacy, dict) and legacy.get("started"):
        return [{"started": legacy["started"], "finished": legacy.get("finished"),
                 "ended": FINISHED if legacy.get("finished") else None, "from": ESTIMATE_FILE}]
    return []


def _write(out: Path, sessions: list[dict]) -> None:
    atomic_write_json(Path(out) / SESSIONS_FILE, {"sessions": sessions})


def ledger_dirs(out: Path) -> list[Path]:
    """The ledgers of OUT: its own, or each replicate's (OUT/replicate-r/ledger)."""
    out = Path(out)
    return [d for d in [out / "ledger", *sorted(out.glob("replicate-*/ledger"))] if d.is_dir()]


def last_training(out: Path, after: float, before: float = float("inf")) -> float | None:
    """When the newest training of OUT that finished in [after, before) was written to the ledger (its file's
    modification time), None when none did."""
    newest = None
    for folder in ledger_dirs(out):
        with os.scandir(folder) as entries:
            for e in entries:
                if e.name.endswith(".json"):
                    t = e.stat().st_mtime
                    if after <= t < before and (newest is None or t > newest):
                        newest = t
    return newest


def _close_lost(out: Path, sessions: list[dict], until: float) -> None:
    """Close each open session of `sessions` as killed (`LOST`), at its last training before the next one's start
    (`until` for the last of them), or at its own start where it trained nothing."""
    for s, after in zip(sessions, [*(n["started"] for n in sessions[1:]), until]):
        if not s.get("finished"):
            s["finished"] = last_training(out, s["started"], after) or s["started"]
            s["ended"] = LOST


def start(out: Path) -> None:
    """Record a driver's session starting on OUT now (its first run or a resume): an open session found there was
    killed (its driver holds no lock any more: this one does), so it is closed at its last training first."""
    global _current
    out, now = Path(out).resolve(), time.time()
    sessions = read(out)
    _close_lost(out, sessions, now)
    token = uuid.uuid4().hex
    sessions.append({"started": now, "finished": None, "ended": None, "pid": os.getpid(),
                     "host": socket.gethostname(), "token": token})
    _write(out, sessions)
    _current = (out, token, time.monotonic())
    atexit.register(_at_exit, out, token)


def _close(out: Path, token: str | None, ended: str) -> bool:
    """Close OUT's session `token` (None: the last open one) now, as `ended`; False when there was none open."""
    sessions = read(out)
    for s in reversed(sessions):
        if not s.get("finished") and (token is None or s.get("token") == token):
            s["finished"], s["ended"] = time.time(), ended
            _write(out, sessions)
            return True
    return False


def end(out: Path) -> None:
    """The run on OUT finished: close this process's session there (else the last open one)."""
    global _current
    out = Path(out).resolve()
    mine = _current is not None and _current[0] == out
    _close(out, _current[1] if mine else None, FINISHED)
    if mine:
        _current = None


def _at_exit(out: Path, token: str) -> None:
    """At this process's exit, a session it left open (interrupted, failed) ends now."""
    try:
        _close(out, token, STOPPED)
    except OSError:  # the folder is gone (a test's), or cannot be written: nothing to record
        pass


def current(since: float | None = None) -> Path | None:
    """The folder of this process's open session, if it started after `since` (time.monotonic()): the live line
    (`progress`) reads the plan of the run it shows there."""
    if _current is None or (since is not None and _current[2] < since):
        return None
    return _current[0]


def engine_starts(out: Path, before: float | None = None) -> int:
    """The Tune experiments under OUT/tune (one per driver session that started its engine), those started before
    `before` (time.time()) only when given."""
    tune = Path(out) / "tune"
    if not tune.is_dir():
        return 0
    n = 0
    for e in os.scandir(tune):
        if e.is_dir() and (m := _ENGINE_DIR.search(e.name)):
            at = time.mktime(time.strptime(m.group(1), "%Y%m%d-%H%M%S"))  # local time, to the second
            n += before is None or at < before - 1
    return n


def holder(out: Path) -> tuple[Owner | None, str | None]:
    """OUT's driver lock (`oracle_search.lock`): its owner (None: no lock, or unreadable) and, when that driver no
    longer runs, why (None while it runs)."""
    path = Path(out) / LOCK_NAME
    try:
        text = path.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None, "no driver holds the folder"
    owner = Owner.parse(text)
    return owner, gone(owner, path)


def running(out: Path) -> bool:
    """Whether a live driver holds OUT's lock now."""
    owner, why = holder(out)
    return owner is not None and why is None


@dataclass(frozen=True)
class Measured:
    """The time a run took, over its sessions."""

    seconds: float  # the sessions' wall time, summed
    sessions: int  # recorded (`compare --replicates auto` starts one per wave, in one process)
    starts: int  # of them, those a new process started: the first run and each resume
    running: bool  # the last session is open and its driver runs: counted to now
    lost: int  # sessions whose end was read from their last training (killed)
    unrecorded: int  # earlier sessions of a folder written before sessions were recorded (OUT/tune's experiments)
    first_started: float
    last_started: float
    ended: str | None  # how the last session ended (FINISHED: the run finished), None while it runs

    @property
    def resumed(self) -> int:
        return self.starts + self.unrecorded - 1

    @property
    def complete(self) -> bool:
        """Every session counted: a time to compare with the whole job's estimate."""
        return self.unrecorded == 0


def measured(out: Path, live: bool | None = None, now: float | None = None) -> Measured | None:
    """OUT's sessions summed (None when none is recorded). `live` (default: whether a live driver holds OUT's lock,
    `running`): the last session, if open, counts to `now`; any other open session counts to its last training
    (`LOST`), as a resume would close it."""
    sessions = [dict(s) for s in read(out)]
    if not sessions:
        return None
    now = time.time() if now is None else now
    last = sessions[-1]
    live = not last.get("finished") and (running(out) if live is None else live)
    _close_lost(out, sessions[:-1] if live else sessions, last["started"] if live else now)
    seconds = sum((now if s is last and live else s["finished"]) - s["started"] for s in sessions)
    legacy = [s for s in sessions if s.get("from") == ESTIMATE_FILE]
    unrecorded = engine_starts(out, before=legacy[0]["started"]) if legacy else 0
    drivers = [(s.get("host"), s.get("pid")) if s.get("pid") else i for i, s in enumerate(sessions)]
    starts = sum(d != before for d, before in zip(drivers, [None, *drivers]))
    return Measured(max(0.0, seconds), len(sessions), starts, live, sum(s.get("ended") == LOST for s in sessions),
                    unrecorded, sessions[0]["started"], last["started"], None if live else last.get("ended"))
