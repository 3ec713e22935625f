"""What trains what the Runners hand over: the contract `Executor`, a few methods, as Optuna's samplers are one small
interface with many implementations. A Runner (`oracle_search.runner`) hands trainings over (`submit`, which gives
back the trial keys to wait on; `prioritise` when another line needs one sooner), reads what ended (`rows`,
`failures`), blocks until something ends (`wait`) and asks whether the executor still runs (`alive`); the lines of
work that share an executor (`side_by_side`) say when they start and end and wait on each other through its events.
The Runner calls nothing else of it (`tests/test_runner_contract.py` reads the Runner's source to hold it so): no
shared condition, no dictionaries read under another object's lock.

Two implement it: `engine.Engine` (Ray Tune on the cluster's slots) and `simulate_job.SimEngine` (a virtual clock
with N slots, for the dry run and the estimate; it moves its clock inside its own `wait`). The bookkeeping both keep,
which Runner owns each trial, what ended and what is still in flight, lives here once (`Trials`); neither reaches
into the other. No Ray here, nor in the Runner: the simulated job runs without it."""
from __future__ import annotations

import dataclasses
import threading
from typing import Iterable, Protocol

from oracle_search.fusion import pack
from oracle_search.identity import Training
from oracle_search.schema import COLUMNS
from trainables.cycle import CycleResult

# What a trial reports that becomes its row: the cycle's own fields (trainables.cycle.CycleResult) that are
# results-table columns, but its checkpoint's local path (the row holds the storage URI), plus where it ran.
PLACEMENT = ("gpu_ids", "node_id")
ROW_METRICS = tuple(f.name for f in dataclasses.fields(CycleResult) if f.name in COLUMNS and f.name != "checkpoint") \
    + PLACEMENT
# What the executor adds to a row beside the metrics and the training's tags.
BOOKKEEPING = ("experiment", "key", "trial_id", "queued", "checkpoint", "fused", "reused")
RERUN = "finished trials are kept, rerun the command to resume"

Ticket = frozenset  # the trial keys of one hand-over (`Executor.submit`): a fused trial's key stands for its candidates


class RunFailed(RuntimeError):
    """Trials failed even after retries; finished ones are kept, a rerun resumes."""


class Owner(Protocol):
    """What an executor needs of whoever hands it a training (`runner.Runner`): its experiment's name, and where a
    finished training's row goes."""

    experiment: str

    def landed(self, row: dict) -> None: ...


class Executor(Protocol):
    """The contract (module docstring). Keys are trial keys: a training's own, or a fused trial's."""

    def submit(self, owner: Owner, trainings: list[Training], fuse: int) -> Ticket:
        """Train `trainings` for `owner` (none handed over before), up to `fuse` max_lr candidates of one (seed,
        cycle) as one fused trial (`fusion.pack`); each finished row goes to `owner.landed` at once. Returns the
        trial keys to wait on."""

    def prioritise(self, key: str, priority: float) -> None:
        """A trial already handed over is also needed where `priority` says (another line waits on it): it keeps
        the higher of the two."""

    def rows(self, keys: Iterable[str]) -> dict[str, dict]:
        """The rows of `keys` that finished (a fused trial's own key: the keys of its candidates' rows)."""

    def failures(self, keys: Iterable[str]) -> dict[str, str]:
        """The `keys` that failed for good, in their order: the last line of each one's error."""

    def wait(self, seen: int | None = None, timeout: float = 1.0) -> int:
        """Block while the count of trials ended (finished or failed) is still `seen`, at most `timeout` seconds
        (None: return at once); returns the count. It may return before anything ended."""

    def alive(self) -> bool:
        """Whether trials handed over can still end (False once the executor stopped, or could not go on)."""

    def failure(self, keys: list[str]) -> RunFailed:
        """The error naming `keys`, trials that did not finish (the first's own error, and what stopped the
        executor, if anything did)."""

    def in_flight(self, owner: Owner) -> dict[str, str]:
        """`owner`'s trainings handed over and neither finished nor failed: training identity -> the trial key its
        row will land under."""

    def starts_in_flight(self) -> set[str]:
        """The start checkpoints of trials handed over and neither finished nor failed (`retention` keeps them)."""

    def where(self) -> str:
        """Where every trial writes its checkpoint (a storage path or URI; "" for none)."""

    def slots(self, per: int = 1) -> int:
        """How many groups of `per` trials run at once."""

    def close(self, abort: bool = False) -> None:
        """End: once the trials handed over ran, or with `abort` at once (finished rows are kept)."""

    # --- the lines of work that drive it (`side_by_side`): a real executor needs none of this; the simulated one
    # moves its clock only once every line waits

    def event(self) -> threading.Event:
        """An event one line sets and others wait on."""

    def lines_started(self, n: int) -> object:
        """The calling thread hands its work to `n` new lines and waits for them; returns their group's token."""

    def line_begun(self, group: object) -> None:
        """A line of `group` starts, in its own thread."""

    def line_ended(self, group: object, last: bool) -> None:
        """A line of `group` ended; `last`: the last of them, so the thread that started them goes on."""


CONTRACT = frozenset(name for name in vars(Executor) if not name.startswith("_"))


class Trials:
    """The bookkeeping every executor keeps, and the contract's methods that read it. `cond`: notified whenever a
    trial ends (the real executor's `wait` waits on it); `storage`: where every trial writes; `retries`: how often
    a failed trial is run again before it fails for good. An implementation queues configs (`_queue`)."""

    def __init__(self, cond: threading.Condition, storage: str = "", retries: int = 0):
        self.cond, self.storage, self.retries = cond, storage, retries
        self.finished: dict[str, dict] = {}  # key -> its row (a fused trial's own key: its candidates' keys)
        self.failed: dict[str, str] = {}  # key -> the last line of its error
        self.news = 0  # trials finished or failed so far (`wait`)
        self.stopped: BaseException | None = None  # what stopped the executor itself, if anything did
        self._owner: dict[str, tuple[Owner, Training]] = {}  # trial key -> (its Runner, its training)

    def submit(self, owner: Owner, trainings: list[Training], fuse: int) -> Ticket:
        for t in trainings:
            self._owner[t.key] = (owner, t)
        configs = pack(trainings, fuse, lambda key, t: self._owner.__setitem__(key, (owner, t)))
        self._queue(configs)
        return Ticket(c["key"] for c in configs)

    def _queue(self, configs: list[dict]) -> None:
        """Train these trials' configs (each one's owner recorded)."""
        raise NotImplementedError

    def rows(self, keys: Iterable[str]) -> dict[str, dict]:
        with self.cond:
            return {k: self.finished[k] for k in keys if k in self.finished}

    def failures(self, keys: Iterable[str]) -> dict[str, str]:
        with self.cond:
            return {k: self.failed[k] for k in keys if k in self.failed}

    def wait(self, seen: int | None = None, timeout: float = 1.0) -> int:
        with self.cond:
            if seen is not None and self.news == seen:
                self.cond.wait(timeout=timeout)
            return self.news

    def failure(self, keys: list[str]) -> RunFailed:
        with self.cond:
            cause = f" ({self.stopped})" if self.stopped else ""
            first = keys[0] + (f": {self.failed[keys[0]]}" if keys[0] in self.failed else "")
        return RunFailed(f"{len(keys)} trial(s) failed after {self.retries} retries{cause} (first: {first}); {RERUN}")

    def in_flight(self, owner: Owner) -> dict[str, str]:
        with self.cond:
            return {t.tags["training"]: key for key, (who, t) in self._owner.items()
                    if who is owner and t.tags.get("training") and key == t.key
                    and key not in self.finished and key not in self.failed}

    def starts_in_flight(self) -> set[str]:
        with self.cond:
            return {t.start_checkpoint for key, (_, t) in self._owner.items()
                    if t.start_checkpoint and key not in self.finished and key not in self.failed}

    def where(self) -> str:
        return self.storage

    def event(self) -> threading.Event:
        return threading.Event()

    def lines_started(self, n: int) -> object:
        return None

    def line_begun(self, group: object) -> None:
        pass

    def line_ended(self, group: object, last: bool) -> None:
        pass
