"""One driver per results folder: `oracle`, `fit-silo`, `baselines` and `compare` hold OUT/driver.lock while they
run, so a second driver on the same folder stops at once instead of training the same trials again.

The lock is a small JSON file naming its driver (pid, host, command, start time, a random token), created
atomically (a complete temporary file hard-linked into place: the link fails if the name exists, on local and NFS
file systems alike) and touched every `HEARTBEAT_S` seconds by a thread while the driver lives. A driver that
finds a lock decides whether its owner still runs:
- on the same machine (same host name, kernel boot and pid namespace): whether that pid is alive and is still the
  process that took the lock (its start time, so a reused pid does not count), so a SIGKILLed driver's lock is
  taken over at once;
- on another machine, where its pid means nothing here: whether the heartbeat (the file's modification time) is
  younger than `STALE_S`. A lock untouched for longer belongs to a lost node. A live driver whose heartbeats
  stopped that long (a machine suspended, a file system unreachable) loses the lock; it notices at its next
  heartbeat and warns on stderr. Clocks that disagree by more than a fraction of `STALE_S` defeat the rule.
A live owner: `FolderBusy` (a SpecError naming the folder and the owner; the CLI exits 2), nothing written. A dead
one: the lock is taken over, and the driver says so. Two drivers taking over the same dead lock at once race for
one more file (`.driver.lock.takeover-<dead token>`, created the same atomic way), so only one wins.

Drivers that share an Optuna study through --study-storage each have their own folder, so their own lock.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

from trainables.errors import SpecError

LOCK_NAME = "driver.lock"
HEARTBEAT_S = 5.0  # how often a driver touches its lock
STALE_S = 60.0  # a lock from another machine untouched this long belongs to a lost driver (twelve heartbeats)


class FolderBusy(SpecError):
    """Another driver holds the folder: exit 2, nothing trained, nothing written."""


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _machine() -> str:
    """What makes pids comparable: this kernel's boot and this pid namespace ("" where /proc does not say)."""
    parts = []
    for read in (lambda: Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
                 lambda: os.readlink("/proc/self/ns/pid")):
        try:
            parts.append(read())
        except OSError:
            parts.append("")
    return "/".join(parts) if any(parts) else ""


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat), "" where /proc is absent, None when
    there is no such process or it is a zombie (killed, not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None if Path("/proc/self/stat").exists() else ""
    except OSError:
        return ""
    fields = stat.rpartition(")")[2].split()  # the command name may hold spaces and parentheses
    return None if fields[0] in ("Z", "X") else fields[19]


@dataclass(frozen=True)
class Owner:
    pid: int
    host: str
    command: str
    started: float  # time.time() when the lock was taken
    token: str
    machine: str = ""  # _machine() of the owner
    process_start: str = ""  # _process_start(pid) when the lock was taken

    @classmethod
    def me(cls, command: str) -> "Owner":
        return cls(os.getpid(), socket.gethostname(), command, time.time(), uuid.uuid4().hex, _machine(),
                   _process_start(os.getpid()) or "")

    @classmethod
    def parse(cls, text: str | None) -> "Owner | None":
        try:
            d = json.loads(text or "")
            return cls(int(d["pid"]), str(d["host"]), str(d["command"]), float(d["started"]), str(d["token"]),
                       str(d.get("machine", "")), str(d.get("process_start", "")))
        except (ValueError, KeyError, TypeError):
            return None

    def dump(self) -> str:
        return json.dumps(asdict(self))

    def here(self) -> bool:
        """Whether the owner ran on this machine, where its pid can be looked up."""
        return self.host == socket.gethostname() and self.machine == _machine()

    def describe(self) -> str:
        return f"{self.command}, pid {self.pid} on host {self.host}"


def _age(path: Path) -> float | None:
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return None


def gone(owner: Owner | None, path: Path) -> str | None:
    """Why the lock at `path` (held by `owner`, None when unreadable) no longer has a live driver, or None while it
    has one."""
    if owner is not None and owner.here():
        try:
            os.kill(owner.pid, 0)
        except ProcessLookupError:
            return "no such process on this host"
        except PermissionError:
            pass  # another user's process: alive
        start = _process_start(owner.pid)
        if start is None:
            return "no such process on this host (a zombie)"
        if start and owner.process_start and start != owner.process_start:
            return "its pid now belongs to another process"
        return None
    age = _age(path)
    if age is not None and age > STALE_S:
        return f"its heartbeat stopped {age:.0f} s ago (a lost node?)"
    return None


def _create(path: Path, text: str) -> bool:
    """Create `path` holding `text` if no file has that name: atomically, whole (a hard link of a complete
    temporary file; where a file system has no hard links, an exclusive create). False if it existed."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError:  # no hard links here (some FUSE or SMB mounts)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return True
    finally:
        tmp.unlink(missing_ok=True)


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _busy(out: Path, owner: Owner | None, path: Path) -> FolderBusy:
    who = owner.describe() if owner is not None else "a driver whose lock file is unreadable"
    age = _age(path)
    beat = f", last heartbeat {age:.0f} s ago" if age is not None else ""
    return FolderBusy("out", f"{out} is in use by another driver ({who}{beat}); wait for it to finish, or give "
                             f"this one its own --out (drivers share a study through --study-storage)")


class Lock:
    """A held folder lock and its heartbeat thread; `release()` ends both."""

    def __init__(self, out: Path, owner: Owner, created: bool):
        self.out, self.owner, self.path, self.created = out, owner, out / LOCK_NAME, created
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lock heartbeat {out}", daemon=True)
        self._thread.start()

    def held(self) -> bool:
        found = Owner.parse(_read(self.path))
        return found is not None and found.token == self.owner.token

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            if not self.held():
                found = Owner.parse(_read(self.path))
                print(f"oracle-search: warning: the lock on {self.out} was taken over"
                      f"{' by ' + found.describe() if found else ''} after this driver's heartbeat lapsed; two "
                      "drivers may now write to it", file=sys.stderr, flush=True)
                return
            try:
                os.utime(self.path)
            except OSError:
                pass  # the next beat looks again

    def release(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.held():
            self.path.unlink(missing_ok=True)
        if self.created:
            try:
                self.out.rmdir()  # only if empty: a driver that stopped before writing anything leaves nothing
            except OSError:
                pass


def _say(message: str) -> None:
    print(message, flush=True)


def acquire(out: Path, command: str, say: Callable[[str], None] = _say) -> Lock:
    """Take `out`'s lock for `command` (creating the folder), or raise FolderBusy naming the driver that holds it.
    A dead driver's lock is taken over, and `say` tells so."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise SpecError("out", f"{out} is a file, not a folder")
    created = not out.exists()
    path = out / LOCK_NAME
    for _ in range(10):  # each turn ends in a lock, FolderBusy, or a lock that changed under it (a race)
        if path.exists():  # the common refusal writes nothing
            owner = Owner.parse(_read(path))
            reason = gone(owner, path)
            if reason is None:
                raise _busy(out, owner, path)
        me = Owner.me(command)
        try:
            out.mkdir(parents=True, exist_ok=True)
            made = _create(path, me.dump())
        except OSError as err:  # a folder that cannot be made or written (the CLI checks first; the API here)
            if created:
                try:
                    out.rmdir()
                except OSError:
                    pass
            raise SpecError("out", f"{out} cannot be written: {err.strerror or err}") from None
        if made:
            return Lock(out, me, created)
        owner = Owner.parse(_read(path))
        reason = gone(owner, path)
        if reason is None:
            raise _busy(out, owner, path)
        # A dead driver's lock: only the driver that creates the takeover file for its token replaces it.
        marker = path.with_name(f".{LOCK_NAME}.takeover-{owner.token if owner else 'unreadable'}")
        if not _create(marker, me.dump()):
            if (_age(marker) or 0.0) > STALE_S:  # a taker that died in the act
                marker.unlink(missing_ok=True)
                continue
            raise _busy(out, Owner.parse(_read(marker)), marker)
        try:
            if Owner.parse(_read(path)) != owner:
                continue  # it changed meanwhile: look again
            _replace(path, me.dump())
        finally:
            marker.unlink(missing_ok=True)
        say(f"lock: took over {out} from {owner.describe() if owner else 'an unreadable lock'}, which is no longer "
            f"running ({reason})")
        return Lock(out, me, created)
    raise FolderBusy("out", f"{out}: its lock kept changing while this driver tried to take it; is another "
                            "driver starting there?")


@contextmanager
def holding(out: Path, command: str, say: Callable[[str], None] = _say) -> Iterator[Lock]:
    """`out`'s lock for the duration of the block (see `acquire`)."""
    lock = acquire(out, command, say)
    try:
        yield lock
    finally:
        lock.release()
