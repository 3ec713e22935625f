"""One driver per results folder (oracle_search.lock): a live driver's lock refuses a second driver at once with
one line naming the folder, pid and host; a dead driver's lock (SIGKILL here, a silent heartbeat on another
host) is taken over, and the taker says so; two takers of one dead lock cannot both win. End to end, two
`compare` runs on one folder: the second exits 2 in seconds, having trained and written nothing."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT, TINY_COMPARE, ray_env
from oracle_search import lock
from oracle_search.lock import LOCK_NAME, STALE_S, FolderBusy, Owner, acquire, holding

HOLD = ("import sys, time\nfrom oracle_search.lock import acquire\n"
        "acquire(sys.argv[1], 'oracle-search oracle')\nprint('held', flush=True)\ntime.sleep(120)\n")


def _holder(out: Path) -> subprocess.Popen:
    """Another process that takes `out`'s lock and keeps it."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.stdout.readline() == "held\n"
    return proc


def _write_lock(out: Path, age: float = 0.0, **fields) -> Owner:
    """A lock file as another driver left it, its heartbeat `age` seconds old."""
    owner = Owner(**{"pid": 4242, "host": "node-7", "command": "oracle-search compare", "started": time.time(),
                     "token": "dead", "machine": "", "process_start": "", **fields})
    out.mkdir(parents=True, exist_ok=True)
    (out / "tmp").write_text(owner.dump())
    os.utime(out / "tmp", (time.time() - age, time.time() - age))
    os.replace(out / "tmp", out / LOCK_NAME)  # whole, as a driver's lock appears
    return owner


def _listing(out: Path, skip: str = "") -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(out)): (p.stat().st_size, p.stat().st_mtime_ns) for p in out.rglob("*")
            if p.is_file() and not (skip and p.relative_to(out).parts[0] == skip)}


def test_a_lock_names_its_driver_and_goes_with_it(tmp_path):
    out = tmp_path / "new"
    with holding(out, "oracle-search oracle") as held:
        recorded = json.loads((out / LOCK_NAME).read_text())
        assert (recorded["pid"], recorded["host"], recorded["command"]) == (
            os.getpid(), socket.gethostname(), "oracle-search oracle")
        assert held.held()
    assert not out.exists()  # made for the lock alone, it goes with it
    kept = tmp_path / "kept"
    kept.mkdir()
    with holding(kept, "oracle-search oracle"):
        (kept / "spec.json").write_text("{}")
    assert sorted(p.name for p in kept.iterdir()) == ["spec.json"]


def test_a_live_driver_refuses_a_second_and_a_sigkilled_one_is_taken_over(tmp_path, capsys):
    out = tmp_path / "out"
    proc = _holder(out)
    try:
        before = _listing(out)
        with pytest.raises(FolderBusy) as busy:
            acquire(out, "oracle-search compare")
        assert _listing(out) == before  # nothing written
        message = str(busy.value)
        assert "\n" not in message and str(out) in message
        assert f"(oracle-search oracle, pid {proc.pid} on host {socket.gethostname()}, last heartbeat " in message
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with holding(out, "oracle-search compare"):
        printed = capsys.readouterr().out
        assert printed == (f"lock: took over {out} from oracle-search oracle, pid {proc.pid} on host "
                           f"{socket.gethostname()}, which is no longer running (no such process on this host)\n")


def test_a_reused_pid_is_not_its_driver(tmp_path, capsys):
    """A lock naming a live pid of this machine that has started since (another process now) is dead."""
    out = tmp_path / "out"
    _write_lock(out, pid=os.getpid(), host=socket.gethostname(), machine=lock._machine(), process_start="1")
    with holding(out, "oracle-search oracle"):
        assert "(its pid now belongs to another process)" in capsys.readouterr().out


def test_another_hosts_lock_lives_while_its_heartbeat_does(tmp_path, capsys):
    """Its pid means nothing here: a lock from another machine counts as live until its heartbeat (mtime) is
    STALE_S old (a lost node), then it is taken over."""
    out = tmp_path / "out"
    _write_lock(out, age=STALE_S - 10)
    with pytest.raises(FolderBusy, match=r"\(oracle-search compare, pid 4242 on host node-7, last heartbeat 50 s"):
        acquire(out, "oracle-search oracle")
    _write_lock(out, age=STALE_S + 30)
    with holding(out, "oracle-search oracle"):
        assert capsys.readouterr().out.endswith("pid 4242 on host node-7, which is no longer running (its heartbeat "
                                                "stopped 90 s ago (a lost node?))\n")
    # Same host name, another kernel (another machine named alike, or a container): the heartbeat decides too.
    _write_lock(out, pid=os.getpid(), host=socket.gethostname(), machine="another-boot/pid:[1]")
    with pytest.raises(FolderBusy):
        acquire(out, "oracle-search oracle")


def test_an_unreadable_lock_is_live_until_its_heartbeat_is_stale(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).write_text("{not json")
    with pytest.raises(FolderBusy, match="a driver whose lock file is unreadable"):
        acquire(out, "oracle-search oracle")
    os.utime(out / LOCK_NAME, (time.time() - 2 * STALE_S,) * 2)
    with holding(out, "oracle-search oracle"):
        assert "took over" in capsys.readouterr().out


def test_the_heartbeat_keeps_the_lock_fresh_and_a_lost_lock_is_told(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(lock, "HEARTBEAT_S", 0.05)
    out = tmp_path / "out"
    held = acquire(out, "oracle-search oracle")
    try:
        os.utime(out / LOCK_NAME, (time.time() - 1000,) * 2)
        deadline = time.time() + 10
        while time.time() - (out / LOCK_NAME).stat().st_mtime > 100 and time.time() < deadline:
            time.sleep(0.05)
        assert time.time() - (out / LOCK_NAME).stat().st_mtime < 100  # touched again
        taker = _write_lock(out, token="taker")  # another driver judged this one lost
        held._thread.join(timeout=10)
        assert not held._thread.is_alive()
    finally:
        held.release()
    assert Owner.parse((out / LOCK_NAME).read_text()) == taker  # not ours to remove
    assert f"the lock on {out} was taken over by oracle-search compare, pid 4242 on host node-7" in \
        capsys.readouterr().err


def test_of_many_takers_of_one_dead_lock_one_wins(tmp_path):
    out = tmp_path / "out"
    _write_lock(out, age=2 * STALE_S)
    start, results = threading.Barrier(8), []

    def take() -> None:
        start.wait()
        try:
            results.append(acquire(out, "oracle-search oracle", say=lambda _: None))
        except FolderBusy as err:
            results.append(err)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [r for r in results if isinstance(r, lock.Lock)]
    assert len(won) == 1 and len(results) == 8
    assert won[0].held() and sorted(p.name for p in out.iterdir()) == [LOCK_NAME]
    won[0].release()


@pytest.mark.slow  # a real compare starts: ~10 s
def test_a_second_compare_on_one_folder_exits_2_at_once_having_done_nothing(ray_local, tmp_path):
    """Two `compare` runs on one folder: the second (a fresh process, as a user starts it) exits 2 within 10 s,
    one line naming the folder, the first driver's pid and host, nothing on stdout, no file of the folder touched.
    The first is stopped (SIGSTOP) meanwhile so that its own writes cannot blur that; then SIGKILLed, its lock is
    taken over."""
    out = tmp_path / "cmp"
    argv = [sys.executable, "-m", "oracle_search.cli", *TINY_COMPARE, "--out", str(out)]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=ray_env(ray_local), start_new_session=True)
    try:
        for line in first.stdout:
            if "== 1/4" in line:  # training: the lock is held
                break
        else:
            pytest.fail("the first compare never started its Oracle")
        os.killpg(first.pid, signal.SIGSTOP)
        before = _listing(out, skip="tune")  # trials (Ray workers, not stopped) write only under tune/
        started = time.perf_counter()
        second = subprocess.run(argv, capture_output=True, text=True, env=ray_env(ray_local), timeout=120)
        seconds = time.perf_counter() - started
        assert second.returncode == 2, second.stderr[-2000:]
        assert seconds < 10
        assert second.stdout == ""
        [line] = second.stderr.splitlines()
        assert line.startswith(f"oracle-search: error: out: {out} is in use by another driver (oracle-search "
                               f"compare, pid {first.pid} on host {socket.gethostname()}, last heartbeat ")
        assert _listing(out, skip="tune") == before
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
    taken = []
    with holding(out, "oracle-search compare", say=taken.append):
        assert taken == [f"lock: took over {out} from oracle-search compare, pid {first.pid} on host "
                         f"{socket.gethostname()}, which is no longer running (no such process on this host)"]
