"""What a run shows while it runs: one line per finished trial, a live status line (redrawn on a terminal,
periodic plain lines otherwise), and a failing trial's traceback at its first failure.

The live line's ETA is the whole plan's, as `oracle-search status` gives it (`status.Pace`): the plan's typical
trainings not done yet × the measured seconds per training / the slots, read from the run's estimate.json and
ledger. Where a driver has no plan (fit-silo, baselines, an estimate that failed) it is that of the trials queued
now, and says so."""
from __future__ import annotations

import re
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from oracle_search import sessions
from oracle_search.status import Eta, Pace

TTY_INTERVAL, PLAIN_INTERVAL = 0.5, 30.0  # seconds between redraws / between plain status lines
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Ray colours its error headers


@dataclass(frozen=True)
class Status:
    """Trials of the current experiment: Tune's counts plus the driver's queue, and the cycles in flight."""

    running: int = 0
    pending: int = 0  # waiting for resources in Tune, or queued by the driver
    finished: int = 0
    failed: int = 0
    cycles: dict[str, tuple[int, ...]] = field(default_factory=dict)  # method -> cycles running or pending
    since_first_start: float | None = None  # seconds since the first trial of this experiment started
    plan: Eta | None = None  # the whole plan's time left (`status.Pace`), where the run has a plan

    def eta(self) -> float | None:
        """Seconds until the queued trials are done, at the throughput seen so far (without a plan)."""
        if not self.finished or not self.since_first_start:
            return None
        return (self.running + self.pending) * self.since_first_start / self.finished


def clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


def _cycles(cycles: tuple[int, ...]) -> str:
    low, high = min(cycles), max(cycles)
    return f"c{low}" if low == high else f"c{low}-{high}"


class Progress:
    """Prints to `stream` (None: whatever sys.stdout is at the time). `live` None: redraw one line when the
    stream is a terminal, else print a plain status line every `interval` seconds while trials run."""

    def __init__(self, stream: TextIO | None = None, *, live: bool | None = None, interval: float | None = None):
        self.stream = stream
        self.started = time.monotonic()
        self._live = live
        self._interval = interval
        self._lock = threading.RLock()
        self._status: Callable[[], Status] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._drawn = False  # a status line is on screen, not yet ended by a newline
        self._tracebacks_shown: set[str] = set()

    # --- output ----------------------------------------------------------------------------------------------

    def _out(self) -> TextIO:
        return self.stream or sys.stdout

    def _redraws(self) -> bool:
        if self._live is not None:
            return self._live
        isatty = getattr(self._out(), "isatty", None)
        return bool(isatty and isatty())

    def say(self, line: str) -> None:
        with self._lock:
            drawn = self._drawn
            self._clear()
            print(line, file=self._out(), flush=True)
            if drawn:  # put the status line back under the new line
                self._draw()

    def trial(self, row: dict) -> None:
        self.say(self.trial_line(row))

    def trial_line(self, row: dict) -> str:
        tag = f"{row.get('method', '?')}/{row.get('stage', '?')}"
        extra = f" trial {int(row['study_trial'])}" if row.get("study_trial") is not None else ""
        state = " DIVERGED" if row["diverged"] else ""
        return (f"  [{self.elapsed()}] {tag}{extra} cycle {row['cycle']} seed {row['seed']} "
                f"max_lr {row['max_lr']:.4g}: val {row['val_acc']:.1f} test {row['test_acc']:.1f} "
                f"(epoch {row['best_epoch']}/{row['epochs']}, {row['seconds']:.1f}s){state}")

    def tagged(self, tag: str) -> "Tagged":
        """This progress as one of several drivers sharing it sees it: its lines start with `tag`."""
        return Tagged(self, tag)

    def elapsed(self) -> str:
        return clock(time.monotonic() - self.started)

    def failure(self, key: str, error_text: str, attempt: int, retrying: bool) -> None:
        """The whole traceback at a trial's first failure; one line for each later one."""
        lines = _ANSI.sub("", error_text).strip().splitlines() or ["no error recorded"]
        then = "retrying" if retrying else "giving up"
        if key in self._tracebacks_shown:
            self.say(f"  [{self.elapsed()}] trial {key} failed again (attempt {attempt}, {then}): "
                     f"{lines[-1].strip()}")
            return
        self._tracebacks_shown.add(key)
        self.say(f"  [{self.elapsed()}] trial {key} failed (attempt {attempt}, {then}):\n"
                 + "\n".join(f"    | {line}" for line in lines))

    # --- the status line -------------------------------------------------------------------------------------

    def status_line(self, status: Status) -> str:
        parts = [f"running {status.running}", f"pending {status.pending}",
                 f"finished {status.finished}" + (f" ({status.failed} failed)" if status.failed else "")]
        if status.cycles:
            parts.append(", ".join(f"{m} {_cycles(c)}" for m, c in sorted(status.cycles.items())))
        if status.plan is not None:
            left = status.plan.left
            parts.append(f"ETA {clock(status.plan.seconds)} (whole plan, ~{left:,} trainings left)" if left else
                         f"the plan's typical trainings done (at most {clock(status.plan.seconds_most)} more)")
        else:
            eta = status.eta()
            parts.append(f"ETA {clock(eta)} (queued trials)" if eta is not None else "ETA ?")
        return f"  [{self.elapsed()}] " + " · ".join(parts)

    def watch(self, status: Callable[[], Status]) -> None:
        """Show `status()` until `unwatch()`: redrawn in place on a terminal, periodic plain lines otherwise."""
        with self._lock:
            self._status = status
            if self._thread is not None:
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
            self._thread.start()

    def unwatch(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._lock:
            self._clear()
            self._status = None

    def _loop(self) -> None:
        redraw = self._redraws()
        interval = self._interval or (TTY_INTERVAL if redraw else PLAIN_INTERVAL)
        while not self._stop.wait(interval):
            with self._lock:
                if self._status is None:
                    continue
                status = self._status()
                if redraw:
                    self._draw(status)
                elif status.running or status.pending:
                    print(self.status_line(status), file=self._out(), flush=True)

    def _draw(self, status: Status | None = None) -> None:
        status = status or (self._status() if self._status else None)
        if status is None:
            return
        width = shutil.get_terminal_size().columns - 1  # a wrapped line could not be redrawn in place
        self._out().write("\r\033[K" + self.status_line(status)[:width])
        self._out().flush()
        self._drawn = True

    def _clear(self) -> None:
        if self._drawn:
            self._out().write("\r\033[K")
            self._drawn = False

    # --- Tune ------------------------------------------------------------------------------------------------

    def callback(self, tags: Callable[[str], dict], queued: Callable[[], int]) -> "_Watch":
        """Tune's hooks feeding this progress (`engine.Engine` hands them to Tune: this module imports no Ray, so
        that the simulated job runs without it): `tags(key)` gives a trial's results-table tags (its method),
        `queued()` the number of trials the driver queued that Tune has not taken yet."""
        return _Watch(self, tags, queued)


class Tagged:
    """A Progress shared by several drivers (replicates), as one of them sees it: the lines it says start with its
    tag; the status line and everything else are the shared Progress's."""

    def __init__(self, progress: Progress, tag: str):
        self.progress, self.tag = progress, tag

    def say(self, line: str) -> None:
        self.progress.say(f"[{self.tag}] {line}")

    def trial(self, row: dict) -> None:
        self.say(self.progress.trial_line(row))

    def __getattr__(self, name: str):
        return getattr(self.progress, name)


class _Watch:
    """Reads Tune's trial list for the status line and shows failures as they happen, in the driver."""

    def __init__(self, progress: Progress, tags: Callable[[str], dict], queued: Callable[[], int]):
        self.progress, self.tags, self.queued = progress, tags, queued
        self.trials: list = []
        self.first_start: float | None = None
        self.pace: Pace | None = None

    def setup(self, **info) -> None:
        # The run's plan: the folder whose session this process's driver started after this progress began
        # (`estimate.write_expected` starts it), None for a driver without one (fit-silo, baselines).
        if (folder := sessions.current(since=self.progress.started)) is not None:
            self.pace = Pace(folder)
        self.progress.watch(self.status)

    def on_step_end(self, iteration, trials, **info) -> None:
        self.trials = trials  # Tune's own list: the status thread only reads it

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        if self.first_start is None:
            self.first_start = time.monotonic()

    def on_trial_recover(self, iteration, trials, trial, **info) -> None:
        self._failed(trial, retrying=True)

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        self._failed(trial, retrying=False)

    def on_experiment_end(self, trials, **info) -> None:
        self.progress.unwatch()

    def status(self) -> Status:
        counts = {"RUNNING": 0, "PENDING": 0, "TERMINATED": 0, "ERROR": 0}
        cycles: dict[str, set[int]] = {}
        for trial in list(self.trials):
            counts[trial.status] = counts.get(trial.status, 0) + 1
            if trial.status in ("RUNNING", "PENDING"):
                config = trial.config["trial"]
                method = self.tags(config["key"]).get("method", "?")
                cycles.setdefault(method, set()).add(config["cycle"])
        since = time.monotonic() - self.first_start if self.first_start is not None else None
        return Status(running=counts["RUNNING"], pending=counts["PENDING"] + self.queued(),
                      finished=counts["TERMINATED"], failed=counts["ERROR"],
                      cycles={m: tuple(sorted(c)) for m, c in cycles.items()}, since_first_start=since,
                      plan=self.pace.eta() if self.pace is not None else None)

    def _failed(self, trial, retrying: bool) -> None:
        self.progress.failure(trial.config["trial"]["key"], latest_error(trial.error_file), trial.num_failures,
                              retrying)

    def __getstate__(self) -> dict:  # Tune pickles callbacks for `Tuner.restore`, which runs never use
        return {}


def latest_error(path: str | None) -> str:
    """The latest failure's text (a traceback) in a Tune trial's error file, the one reader of that file. Tune
    appends one "Failure # N ..." block per failure; a file without that header is taken whole."""
    if not path or not Path(path).exists():
        return ""
    text = Path(path).read_text()
    marker = text.rfind("Failure # ")
    if marker < 0:
        return text
    return text[marker:].split("\n", 1)[1] if "\n" in text[marker:] else ""
