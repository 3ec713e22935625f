"""Watching a run: the live status line (redrawn on a terminal, plain lines otherwise), a failing trial's traceback
at its first failure, per-epoch Tune reports (TensorBoard curves) while the ledger keeps only the final result,
and --callback checked at the command line."""
from __future__ import annotations

import io
import json
import re
import struct
import sys
import threading
import time
from functools import partial
from pathlib import Path

import pytest
from ray import cloudpickle

from oracle_search import cli
from oracle_search.identity import Training
from oracle_search.engine import own_runner
from oracle_search.ledger import Ledger
from oracle_search import sessions
from oracle_search.progress import Progress, Status
from oracle_search.status import Eta
from trainables.presets import PRESETS
from trainables.tune_adapter import cycle_trainable

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import this test module

TINY = PRESETS["tiny"].spec


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def row(cycle: int = 0, **kw) -> dict:
    return {"method": "oracle", "stage": "grid", "cycle": cycle, "seed": 0, "max_lr": 0.1, "val_acc": 80.0,
            "test_acc": 79.0, "best_epoch": 3, "epochs": 4, "seconds": 1.0, "diverged": False, **kw}


# --- the status line ---------------------------------------------------------------------------------------------

def test_status_line_shows_counts_cycles_of_each_driver_and_eta():
    p = Progress(io.StringIO())
    line = p.status_line(Status(running=2, pending=4, finished=3, failed=1,
                                cycles={"silo": (1, 2), "oracle": (3,)}, since_first_start=30.0))
    assert "running 2 · pending 4 · finished 3 (1 failed)" in line
    assert "oracle c3, silo c1-2" in line
    assert "ETA 01:00" in line  # 6 trials left at 3 trials per 30 s
    assert "ETA ?" in p.status_line(Status(running=1))  # nothing finished yet: no estimate
    assert "ETA 01:00 (queued trials)" in line  # a driver without a plan says what its ETA covers


def test_the_live_eta_is_the_whole_plans_not_the_queued_trials(tmp_path):
    """Where the driver started a session with a plan (estimate.json), the live line's ETA is `status`'s: the
    plan's typical trainings left × the measured seconds per training / the slots, whatever is queued."""
    p = Progress(io.StringIO())
    plan = Eta(left=15, left_most=29, per_training=8.0, slots=2)
    line = p.status_line(Status(running=2, pending=1, finished=3, since_first_start=30.0, plan=plan))
    assert "ETA 01:00 (whole plan, ~15 trainings left)" in line and "queued" not in line
    done = p.status_line(Status(running=1, finished=3, plan=Eta(0, 3, 8.0, 2)))
    assert "the plan's typical trainings done (at most 00:12 more)" in done
    out = tmp_path / "run"
    (out / "ledger").mkdir(parents=True)
    (out / "estimate.json").write_text(json.dumps({"command": "oracle", "slots": 2, "phases": [
        {"name": "oracle", "typical": 10, "most": 20}]}))
    (out / "ledger" / "a.json").write_text(json.dumps({"key": "a", "method": "oracle", "stage": "grid",
                                                       "training": "a", "seconds": 8.0}))
    sessions.start(out)  # what estimate.write_expected does, after the driver's progress began
    try:
        for progress, paced in ((p, True), (Progress(io.StringIO()), False)):  # a later progress: not its run
            watch = progress.callback(lambda key: {}, lambda: 0)
            watch.setup()
            try:
                seen = watch.status().plan
            finally:
                progress.unwatch()
            assert (seen == Eta(9, 19, 8.0, 2)) if paced else seen is None
    finally:
        sessions.end(out)


def test_a_terminal_gets_one_redrawn_line_and_every_trial_line_stays():
    out = Terminal()
    p = Progress(out, interval=0.01)
    counter = iter(range(10**6))
    drawn = threading.Event()

    def status() -> Status:
        n = next(counter)
        if n >= 3:
            drawn.set()
        return Status(running=2, pending=1, finished=n, cycles={"oracle": (0,)})

    p.watch(status)
    assert drawn.wait(10)
    p.trial(row(cycle=0))
    p.say("== 2/4 SILO fitter ==")
    p.unwatch()
    text = out.getvalue()
    # Redraws return to the line start and erase it; no status line ever ends with a newline.
    assert text.count("\r\x1b[K") >= 4
    assert all("running" not in line for line in text.split("\n")[:-1] if "\r" not in line)
    # The finished trial and the stage line each sit on a line of their own, whole.
    lines = [chunk.rsplit("\x1b[K", 1)[-1] for chunk in text.split("\n")]
    assert any(line.startswith("  [") and "oracle/grid cycle 0 seed 0 max_lr 0.1: val 80.0" in line for line in lines)
    assert "== 2/4 SILO fitter ==" in lines
    assert text.endswith("\r\x1b[K")  # unwatch leaves no stale status line behind


def test_plain_output_gets_periodic_status_lines_only_while_trials_run():
    out = io.StringIO()
    p = Progress(out, interval=0.02)
    busy = {"running": 1}
    enough = threading.Event()

    def status() -> Status:
        if out.getvalue().count("\n") >= 3:
            enough.set()
        return Status(running=busy["running"], finished=2, cycles={"cosine": (5,)})

    p.watch(status)
    assert enough.wait(10)
    busy["running"] = 0
    before = out.getvalue()
    threading.Event().wait(0.2)  # several intervals with nothing running or pending
    idle = out.getvalue()[len(before):]
    p.unwatch()
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    assert all("running 1 · pending 0 · finished 2 · cosine c5 · ETA" in line for line in text.splitlines())
    assert idle.count("\n") <= 1  # at most the one line already being printed when it went idle


def test_a_failure_shows_its_traceback_once_then_one_line_per_retry():
    out = io.StringIO()
    p = Progress(out)
    trace = 'Traceback (most recent call last):\n  File "x.py", line 3, in step\nValueError: boom'
    p.failure("oracle-c00", trace, attempt=1, retrying=True)
    p.failure("oracle-c00", trace.replace("boom", "boom again"), attempt=2, retrying=False)
    lines = out.getvalue().splitlines()
    assert "trial oracle-c00 failed (attempt 1, retrying):" in lines[0]
    assert lines[1:4] == ["    | Traceback (most recent call last):", '    |   File "x.py", line 3, in step',
                          "    | ValueError: boom"]
    assert lines[4].endswith("trial oracle-c00 failed again (attempt 2, giving up): ValueError: boom again")
    assert len(lines) == 5


# --- on Ray ------------------------------------------------------------------------------------------------------

def _explode_in_a_helper(key: str) -> None:
    raise ValueError(f"first attempt of {key} fails on purpose")


def fails_first_attempt(markers: str, config: dict) -> None:
    """The first attempt of trials without a marker fails; every attempt reports every epoch, however short."""
    from trainables import tune_adapter

    tune_adapter.EPOCH_REPORT_EVERY_S = 0.0  # in this trial's worker process
    marker = Path(markers) / config["key"]
    if not marker.exists():
        marker.touch()
        _explode_in_a_helper(config["key"])
    cycle_trainable(config)


def tensorboard_scalars(events: Path) -> dict[str, list[tuple[int, float]]]:
    """Scalars of a TensorBoard event file: TFRecord frames (length, crc, Event proto, crc)."""
    from tensorboardX.proto.event_pb2 import Event

    scalars: dict[str, list[tuple[int, float]]] = {}
    data, at = events.read_bytes(), 0
    while at < len(data):
        (length,) = struct.unpack("<Q", data[at:at + 8])
        event = Event.FromString(data[at + 12:at + 12 + length])
        at += 12 + length + 4
        for value in event.summary.value:
            scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


@pytest.mark.slow
def test_a_run_reports_every_epoch_shows_progress_and_a_first_failure_and_records_only_final_rows(
        ray_local, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    (markers / "t0").touch()  # only t1 fails, once
    (markers / "t2").touch()
    out = io.StringIO()
    trials = [Training(key=f"t{i}", spec=TINY, cycle=0, max_lr=lr, seed=0, start_checkpoint=None,
                    tags={"method": "oracle", "stage": "grid"}) for i, lr in enumerate((0.03, 0.1, 0.3))]
    with own_runner(out=tmp_path / "run", spec=TINY, experiment="watch", progress=Progress(out, interval=0.2),
                    trainable=partial(fails_first_attempt, str(markers)), max_failures=1) as runner:
        rows = runner.run(trials)
    text = out.getvalue()
    lines = text.splitlines()

    # The failing trial's whole traceback, at its first failure, naming the helper that raised.
    assert "trial t1 failed (attempt 1, retrying):" in text
    assert text.count(", in _explode_in_a_helper") == 1  # the frames, shown once
    assert "    |     raise ValueError(f\"first attempt of {key} fails on purpose\")" in lines
    assert "    | ValueError: first attempt of t1 fails on purpose" in lines
    # One line per finished trial, and plain periodic status lines while they ran (stdout is not a terminal).
    assert sum("oracle/grid cycle 0 seed 0" in line for line in lines) == 3
    counts = [tuple(map(int, m.groups())) for line in lines
              if (m := re.search(r"running (\d+) · pending (\d+) · finished (\d+)", line))]
    assert counts and all(sum(c) <= 3 and c[0] <= 2 for c in counts)  # 3 trials, 2 CPUs: nothing counted twice
    assert any(c[0] >= 1 for c in counts)
    assert any("running " in line and "oracle c0" in line for line in lines)
    assert "\r" not in text and "\x1b" not in text

    for key, recorded in rows.items():
        (trial_dir,) = (tmp_path / "run" / "tune").glob(f"*/{key}")
        results = [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines()]
        epochs = [r for r in results if r["final"] is False]
        assert [r["epoch"] for r in epochs] == list(range(1, TINY.epochs + 1))
        assert all("val_acc" not in r and "epoch_val_acc" in r and r["lr"] > 0 for r in epochs)
        final = results[-1]
        assert final["final"] is True and len(results) == TINY.epochs + 1
        # The ledger holds the final report only: early-stop val_acc = the best epoch's, with the checkpoint.
        assert recorded["val_acc"] == final["val_acc"] == max(r["epoch_val_acc"] for r in epochs)
        assert recorded["best_epoch"] == max(epochs, key=lambda r: r["epoch_val_acc"])["epoch"]
        assert recorded["checkpoint"] and Path(recorded["checkpoint"]).is_dir()
        # TensorBoard holds the per-epoch curve of this trial (a retried trial opens a second event file).
        curve = [point for events in sorted(trial_dir.glob("events.out.tfevents.*"))
                 for point in tensorboard_scalars(events).get("ray/tune/epoch_val_acc", [])]
        assert [step for step, _ in curve] == [r["epoch"] for r in epochs]  # plotted against the epoch
        assert [v for _, v in curve] == pytest.approx([r["epoch_val_acc"] for r in epochs], rel=1e-6)
    assert sorted(r["key"] for r in Ledger(tmp_path / "run").rows()) == ["t0", "t1", "t2"]


# --- --callback --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["--callback", "tensorboardd"], "argument --callback: unknown 'tensorboardd'; allowed: mlflow, wandb"),
    (["--callback", "mlflow"], "argument --callback: mlflow needs the mlflow package, which is not installed "
                               "(pip install mlflow)"),
])
def test_callback_is_checked_before_anything_starts(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed, whether or not it is here
    out = tmp_path / "run"
    assert cli.main(["oracle", "--preset", "tiny", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"oracle-search: error: {message}"
    assert not out.exists()


def test_wandb_without_an_api_key_is_refused_at_the_command_line(tmp_path, monkeypatch, capsys):
    from oracle_search import callbacks

    monkeypatch.setattr(callbacks.importlib.util, "find_spec", lambda name: object())  # as if wandb were installed
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cli.main(["compare", "--preset", "tiny", "--callback", "wandb", "--out", str(tmp_path / "run")]) == 2
    assert "wandb has no API key" in capsys.readouterr().err
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert callbacks.callback_name("wandb") == "wandb"


def two_trials_logged_to(tracker: str, out) -> dict[str, dict]:
    """Two real tiny trainings through the Runner with `tracker`'s Tune logger callback attached."""
    from oracle_search.callbacks import callback_name, logger_callbacks

    trials = [Training(key=f"lr{lr}", spec=TINY, cycle=0, max_lr=lr, seed=0, start_checkpoint=None,
                       tags={"method": "oracle", "stage": "grid"}) for lr in (0.03, 0.3)]
    with own_runner(out=out, spec=TINY, experiment="tiny", progress=Progress(io.StringIO()),
                    callbacks=logger_callbacks([callback_name(tracker)], out, "tiny")) as runner:
        return runner.run(trials)


@pytest.mark.slow
def test_callback_mlflow_logs_epoch_curves_and_the_final_row_of_every_trial(ray_local, tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow", reason="mlflow-skinny is in the test extra")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "run"
    rows = two_trials_logged_to("mlflow", out)
    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "tiny"]
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 2
    by_lr = {row["max_lr"]: row for row in rows.values()}
    for run in runs:
        # Tiny's epochs last milliseconds, so a trial reports only some of them (EPOCH_REPORT_EVERY_S), the
        # first always; MLflow plots each against its epoch.
        curve = client.get_metric_history(run.info.run_id, "epoch_val_acc")
        steps = [m.step for m in curve]
        assert steps[0] == 1 and steps == sorted(set(steps)) and steps[-1] <= TINY.epochs
        row = by_lr[float(run.data.params["trial/max_lr"])]
        assert run.data.metrics["val_acc"] == pytest.approx(row["val_acc"])  # the final report, logged too
        assert max(m.value for m in curve) <= row["val_acc"]  # early stopping keeps the best epoch


def wandb_records(path: Path) -> list:
    """The records of an offline wandb run's transaction log (`run-ID.wandb`): LevelDB's log format (32 KiB
    blocks of chunks, each behind a 7-byte header: CRC, length, FULL/FIRST/MIDDLE/LAST) after a 7-byte file header,
    each record one of wandb's protobuf `Record`s."""
    from wandb.proto import wandb_internal_pb2

    blob = path.read_bytes()
    assert blob[:4] == b":W&B", blob[:7]
    block, pos, records, pending = 32768, 7, [], b""
    while pos + 7 <= len(blob):
        if block - pos % block < 7:  # no room for a chunk header: the block's tail is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", blob[pos:pos + 7])
        if kind == 0 and length == 0:
            break
        data, pos = blob[pos + 7:pos + 7 + length], pos + 7 + length
        pending = data if kind in (1, 2) else pending + data
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


@pytest.mark.slow
def test_callback_wandb_logs_offline_the_epoch_curves_and_the_final_row_of_every_trial(ray_local, tmp_path,
                                                                                       monkeypatch):
    pytest.importorskip("wandb", reason="wandb is in the test extra")
    monkeypatch.setenv("WANDB_MODE", "offline")  # no account, no network: the run's files stay under --out
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_PROJECT", "oracle-search-test")
    out = tmp_path / "run"
    rows = two_trials_logged_to("wandb", out)

    logs = {}  # trial id -> records, once each run's log holds its exit record (wandb writes it on finishing)
    # wandb's own process writes the offline log after the run; once in the whole suite one of the two was not
    # there after 120 s (its worker had printed the run's summary): wait longer, ask the same
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        logs = {p.stem.removeprefix("run-"): wandb_records(p) for p in out.glob("wandb/offline-run-*/run-*.wandb")
                if p.stat().st_size > 7}
        if len(logs) == 2 and all(any(r.WhichOneof("record_type") == "exit" for r in rs) for rs in logs.values()):
            break
        time.sleep(0.5)
    by_trial = {row["trial_id"]: row for row in rows.values()}
    assert sorted(logs) == sorted(by_trial)  # one offline run per trial, named by Tune's trial id
    for trial_id, records in logs.items():
        row = by_trial[trial_id]
        (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
        assert (run.project, run.run_group) == ("oracle-search-test", "tiny")
        history = [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
                   for r in records if r.WhichOneof("record_type") == "history"]  # a key is in one field or the other
        epochs = [h for h in history if "epoch_val_acc" in h]
        steps = [h["epoch"] for h in epochs]
        # Tiny's epochs last milliseconds, so a trial reports only some of them (EPOCH_REPORT_EVERY_S), the first
        # always, in order; the final report carries the row's val_acc (early stopping: the best epoch's).
        assert steps[0] == 1 and steps == sorted(set(steps)) and steps[-1] <= TINY.epochs
        finals = [h["val_acc"] for h in history if "val_acc" in h]
        assert finals == [pytest.approx(row["val_acc"])]
        assert max(h["epoch_val_acc"] for h in epochs) <= row["val_acc"]
