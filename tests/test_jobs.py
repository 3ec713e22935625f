"""Ray Jobs, end to end: the install provides what `ray job submit` needs, and `oracle-search compare` submitted
to a real token-protected `ray start --head` on this machine runs to its report (the flow docs/cluster.md shows).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10, which pyproject claims: the backport it installs there
    import tomli as tomllib

import pandas as pd
import pytest
from packaging.requirements import Requirement

from trainables.presets import PRESETS

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TINY = PRESETS["tiny"].spec


def test_the_install_provides_token_auth_and_job_submission():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (ray,) = [Requirement(r) for r in project["dependencies"] if Requirement(r).name == "ray"]
    assert not ray.specifier.contains("2.58.0") and ray.specifier.contains("2.60.0")  # local token auth: >= 2.59
    extras = project["optional-dependencies"]
    (jobs,) = [Requirement(r) for r in extras["jobs"]]
    assert jobs.name == "ray" and "default" in jobs.extras and jobs.specifier == ray.specifier
    assert "oracle-search[jobs]" in extras["test"]  # so the test command installs it


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def stop_session(sid: int, marker: str) -> None:
    """Stop what we started: the processes of the `ray start` session, and any job driver (its own session)
    whose command line names our temporary folder. SIGTERM, then SIGKILL what is left after a short grace: Ray's
    GCS, raylet, monitor and runtime-env agent outlast 10 s of SIGTERM."""
    def ours() -> list[int]:
        found = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                state, _, _, session = (proc / "stat").read_text().rsplit(")", 1)[1].split()[:4]
                if state == "Z":  # exited, waiting for its parent to reap it: nothing left to stop
                    continue
                if int(session) == sid or marker in (proc / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(proc.name))
            except (OSError, IndexError, ValueError):
                pass
        return [pid for pid in found if pid != os.getpid()]

    for sig, grace in ((signal.SIGTERM, 2), (signal.SIGKILL, 10)):
        for pid in ours():
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + grace
        while ours() and time.monotonic() < deadline:
            time.sleep(0.2)


@pytest.fixture
def head():
    """A real Ray head on 127.0.0.1 with token authentication, its own temp dir and free ports; yields
    (dashboard URL, client environment, temp dir). Only its own processes are stopped afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="osj", dir="/tmp"))  # short: Ray's socket paths must stay short
    token = tmp / "token"
    token.write_text(secrets.token_hex(32))
    env = os.environ | {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token),
                        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("RAY_ADDRESS", None)
    gcs, dashboard, client, agent = free_ports(4)
    start = subprocess.Popen(
        [str(BIN / "ray"), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={gcs}",
         "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}", f"--ray-client-server-port={client}",
         f"--dashboard-agent-listen-port={agent}", f"--temp-dir={tmp / 'ray'}", "--num-cpus=2",
         "--disable-usage-stats"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = start.communicate(timeout=120)
        assert start.returncode == 0, out
        yield f"http://127.0.0.1:{dashboard}", env, tmp
    finally:
        stop_session(start.pid, str(tmp))
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.slow
def test_compare_submitted_as_a_ray_job_writes_its_results_and_report(head, tiny_compare):
    """The job resumes a copy of the shared tiny `compare` whose cosine final runs are gone from the ledger: it
    trains exactly those, on the head, and writes the table and the report."""
    url, env, tmp = head
    ray = str(BIN / "ray")
    job = ["--address", url]
    without_token = {k: v for k, v in env.items() if k != "RAY_AUTH_MODE"}
    refused = subprocess.run([ray, "job", "list", *job], env=without_token, capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode != 0 and "token" in refused.stderr + refused.stdout  # the client needs the token

    out = tmp / "run"
    shutil.copytree(tiny_compare.out, out, ignore=shutil.ignore_patterns("tune", "report*", "results.*", "tables"))
    dropped = {p.stem for p in (out / "ledger").glob("*.json")
               if (row := json.loads(p.read_text()))["method"] == "cosine" and row["stage"] == "final"}
    assert len(dropped) >= 2  # both evaluation seeds' chains
    for key in dropped:
        (out / "ledger" / f"{key}.json").unlink()
    submit = subprocess.run(
        [ray, "job", "submit", *job, "--submission-id", "compare-1", "--no-wait", "--",
         str(BIN / "oracle-search"), *tiny_compare.argv, "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=120)
    assert submit.returncode == 0, submit.stderr
    logs = subprocess.run([ray, "job", "logs", *job, "--follow", "compare-1"], env=env, capture_output=True,
                          text=True, timeout=400)
    status = subprocess.run([ray, "job", "status", *job, "compare-1"], env=env, capture_output=True, text=True,
                            timeout=120)
    assert "succeeded" in (status.stdout + status.stderr).lower(), logs.stdout[-3000:] + logs.stderr[-3000:]

    assert "== 4/4 report ==" in logs.stdout and "report.html" in logs.stdout
    results = pd.read_parquet(out / "results.parquet")
    assert set(results["method"]) >= {"oracle", "constant", "cosine"}
    assert sorted(results.loc[results["method"] == "oracle", "cycle"].unique()) == list(range(TINY.cycles + 1))
    assert (out / "report.md").read_text().startswith("#") and (out / "report.html").stat().st_size > 1000
    # Only the dropped trainings ran again, every one on this head (the job's RAY_ADDRESS), not on a second Ray
    # started inside the job nor on the Ray that trained the rest.
    copied = {json.loads(p.read_text())["trial_id"] for p in (tiny_compare.out / "ledger").glob("*.json")}
    trained = results[~results["trial_id"].isin(copied) & ~results["reused"]]
    assert sorted(trained["key"]) == sorted(dropped)
    assert set(trained["node_id"]) == {head_node_id(tmp)}
    assert head_node_id(tmp) not in set(results.loc[results["trial_id"].isin(copied), "node_id"])


def head_node_id(tmp: Path) -> str:
    """The node id our head's raylet was started with (its command line names our temp dir)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if args[0].endswith("/raylet") and any(str(tmp) in a for a in args):
            return next(a.split("=", 1)[1] for a in args if a.startswith("--node_id="))
    raise AssertionError("the head's raylet is not running")


def test_inside_a_job_the_local_machine_does_not_bound_the_trial_resources(monkeypatch):
    """A job's driver runs on the head, which may have no GPU; RAY_ADDRESS says trials run on the cluster."""
    from oracle_search.cli import build_parser, check_inputs, spec_from_args
    from trainables.spec import SpecError

    args = build_parser().parse_args(["oracle", "--preset", "tiny", "--gpus-per-trial", "64", "--out", "x"])
    spec = spec_from_args(args)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(SpecError, match="gpus-per-trial"):
        check_inputs(args, spec)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    check_inputs(args, spec)  # nothing is started: the cluster is joined only when the run begins
