"""A run stopped by SIGTERM ends in seconds with its finished trainings kept (issue 62), for a driver that starts
its own Ray, as `oracle-search compare` does on a laptop or under `nohup` (tests/test_faults.py stops drivers that
join the tests' shared Ray: `test_sigterm_ends_a_run_like_ctrl_c_with_exit_143`). The issue saw such a run hang
about 60 s once and end with Ray's "Failed to connect to GCS within 60 seconds", on a loaded machine; this test is
the honest attempt to see it again: the driver must end well inside that, say one line, and leave no Ray process
of its own behind."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent / "oracle-search")
BOUND_S = 30  # "in seconds": a stopped run's trials are cancelled and its Ray shut down; Ray's GCS wait is 60 s
# Seen on 2026-12-02 (2 runs of 3): after the interrupt, a line of the study still running in its (daemon) thread
# starts work again (silo_fit's study is created after the interrupted line), and Ray is initialised anew from
# that thread ("SIGTERM handler is not set because current thread is not the main thread", said by ray.init):
# a second local Ray, whose dashboard module processes (MetricsHead, a multiprocessing forkserver) outlive the
# driver holding its stdout and stderr. The likely source of the issue's 60 s wait and "Failed to connect to GCS
# within 60 seconds" (they give up on a GCS that is gone). The fix belongs where the lines stop (side_by_side,
# the engine's close, cluster.connect); until then this test marks it xfail, saying what it saw.
REINIT = "SIGTERM handler is not set because current thread is not the main thread"
LEFT = "Known, not fixed yet: a line's thread starts Ray again after the interrupt (see REINIT)."


def ours(sid: int, ray_tmp: Path) -> dict[int, str]:
    """The live processes this test started: in the driver's session `sid`, or naming the Ray temp folder it gave
    the driver (the Ray the driver starts, wherever Ray puts its processes); pid -> command line."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, ...
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            if fields[0] != "Z" and (int(fields[3]) == sid or str(ray_tmp) in cmdline):
                found[int(stat.parent.name)] = cmdline
        except (OSError, IndexError, ValueError):
            pass
    return found


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the driver's processes from /proc")
def test_sigterm_mid_run_ends_in_seconds_keeping_the_finished_trainings(tmp_path):
    out = tmp_path / "run"
    # A short folder of its own for the Ray the driver starts (its sockets' paths must stay under 108 bytes).
    ray_tmp = Path(tempfile.mkdtemp(prefix="sigterm-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # its own Ray, as a user's run starts
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env["RAY_TMPDIR"] = str(ray_tmp)
    stderr = tmp_path / "stderr"  # a file, not a pipe: nobody reads stderr while the run goes on
    with open(stderr, "w") as said:
        proc = subprocess.Popen([CLI, "compare", "--preset", "tiny", "--trials", "3", "--tuning-seeds", "2",
                                 "--eval-seeds", "2", "--refine", "1", "--replicates", "1", "--out", str(out)],
                                stdout=subprocess.PIPE, stderr=said, text=True, cwd=tmp_path, env=env,
                                start_new_session=True)
    watchdog = threading.Timer(600, proc.kill)  # a run that never gets going fails the test, not the suite
    watchdog.start()
    try:
        printed = []
        for line in proc.stdout:  # the second finished training: Ray is up and trials are running
            printed.append(line)
            if len([p for p in printed if re.search(r"max_lr \S+: val ", p)]) == 2:
                break
        else:
            pytest.fail("the run ended before two trainings finished:\n" + "".join(printed[-20:]))
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        proc.communicate(timeout=120)
        took = time.monotonic() - sent
        err = stderr.read_text()
        time.sleep(2)  # Ray's processes leave shortly after the driver's ray.shutdown()
        left = ours(proc.pid, ray_tmp)
    finally:
        watchdog.cancel()
        for pid in ours(proc.pid, ray_tmp):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(ray_tmp, ignore_errors=True)

    assert proc.returncode == 143, err[-3000:]
    assert took < BOUND_S, f"{took:.0f} s to end after SIGTERM\n{err[-3000:]}"
    assert "Failed to connect to GCS" not in err, err[-3000:]
    # Its one line (a line still starting as the driver exits may log after it: seen once, Optuna creating
    # silo_fit's study in the run's journal, which a resume would do the same).
    said = [line for line in err.splitlines() if line.startswith("oracle-search:")]
    assert said == ["oracle-search: interrupted by SIGTERM; finished trials are kept, rerun the same command to "
                    "resume"], err[-3000:]
    print(f"ended {took:.1f} s after SIGTERM, {len(printed)} lines printed before it")
    # The finished trainings are kept: a row per training in the run's ledger, each with its accuracy.
    rows = [json.loads(p.read_text()) for p in sorted((out / "ledger").glob("*.json"))]
    assert len(rows) >= 2, sorted(p.name for p in out.rglob("*"))[:50]  # at least those it said had finished
    assert all(0 <= row["val_acc"] <= 100 for row in rows)
    if left or REINIT in err:
        pytest.xfail(f"{LEFT} Ray initialised after the interrupt: {REINIT in err}; left 2 s after the driver "
                     f"ended: {sorted(c[:120] for c in left.values())}")
