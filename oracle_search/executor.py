"""What trains what the Runners hand over, behind one small interface (`Executor`), as Optuna's samplers are one
interface with many implementations. A Runner hands trainings over (`owns`, then `submit`; `prioritise` when
another line needs one sooner), hears them end (it waits on `done`; `finished` holds the rows, `failed` the last
line of an error, `news` counts both) and asks whether the executor still runs (`alive`, `tune_error`). The lines
of work that share an executor (`side_by_side`) say when they start and end (`lines_started`, `line_begun`,
`line_ended`) and wait on each other through its events (`event`).

Two implement it: `engine.Engine` (Ray Tune on the cluster's slots) and `simulate_job.SimEngine` (a virtual clock
with N slots, for the dry run and the estimate). The bookkeeping both need, which Runner owns each trial and what
is still in flight, lives here once; neither reaches into the other."""
from __future__ import annotations

import threading
from typing import Protocol

from oracle_search.identity import Training


class Owner(Protocol):
    """What an executor needs of whoever hands it a training (`runner.Runner`): its experiment's name, and where a
    finished training's row goes."""

    experiment: str

    def landed(self, row: dict) -> None: ...


class Executor:
    """The interface (module docstring) and the bookkeeping every executor keeps. `done`: the condition the Runners
    wait on, notified whenever a trial finishes or fails; `storage`: where every trial writes (a real engine's
    storage path or URI; a simulated one has none)."""

    def __init__(self, done, storage: str = ""):
        self.done = done
        self.storage = storage
        self.finished: dict[str, dict] = {}  # key -> its row (a fused trial's own key: its candidates' keys)
        self.failed: dict[str, str] = {}  # key -> the last line of its error
        self.news = 0  # trials finished or failed so far (the Runners' waits)
        self.tune_error: BaseException | None = None  # what stopped the executor itself, if anything did
        self._owner: dict[str, tuple[Owner, Training]] = {}  # trial key -> (its Runner, its training)

    # --- handing trainings over ----------------------------------------------------------------------------------

    def owns(self, runner: Owner, key: str, training: Training) -> None:
        """Record that the trial `key` trains `training` for `runner`."""
        self._owner[key] = (runner, training)

    def training(self, key: str) -> Training:
        return self._owner[key][1]

    def starts_in_flight(self) -> set[str]:
        """The start checkpoints of trials handed over and neither finished nor failed (`retention` keeps them)."""
        with self.done:
            return {t.start_checkpoint for key, (_, t) in self._owner.items()
                    if t.start_checkpoint and key not in self.finished and key not in self.failed}

    def trainings_in_flight(self, runner: Owner) -> dict[str, str]:
        """`runner`'s trainings handed over and neither finished nor failed: training identity -> the trial key
        its row will land under."""
        with self.done:
            return {t.tags["training"]: key for key, (owner, t) in self._owner.items()
                    if owner is runner and t.tags.get("training") and key == t.key
                    and key not in self.finished and key not in self.failed}

    def submit(self, configs: list[dict]) -> None:
        """Train these trials' configs (each `owns`'d before)."""
        raise NotImplementedError

    def prioritise(self, key: str, priority: float) -> None:
        """A trial already handed over is also needed where `priority` says (another line waits on it): it keeps
        the higher of the two."""
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def alive(self) -> bool:
        raise NotImplementedError

    def close(self, abort: bool = False) -> None:
        raise NotImplementedError

    # --- the lines of work that drive it ---------------------------------------------------------------------------
    # A real engine needs none of this; the simulated one advances its clock only once every line waits.

    def event(self) -> threading.Event:
        return threading.Event()

    def lines_started(self, n: int) -> object:
        """The calling thread hands its work to `n` new lines and waits for them; returns their group's token."""
        return None

    def line_begun(self, group: object) -> None:
        """A line of `group` starts, in its own thread."""

    def line_ended(self, group: object, last: bool) -> None:
        """A line of `group` ended; `last`: the last of them, so the thread that started them goes on."""
