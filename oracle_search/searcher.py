"""`TrialQueue`: the Tune searcher that hands Tune the trials the driver asks for, as it asks."""
from __future__ import annotations

import threading
import time
from collections import deque

from ray.tune.search import Searcher

IDLE_WAIT_S = 2.0  # how long the searcher holds Tune's idle poll open for the driver's next batch
KEEP_IDLE_S = 60.0  # idle trial actors are kept while the driver wanted that many within this window


class TrialQueue(Searcher):
    """Feeds Tune the trials the driver asks for, as it asks: one Tune experiment serves a whole driver run,
    so actors (and the data cached in them) live across cycles instead of restarting with every batch."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: deque[dict] = deque()  # trial configs not yet handed to Tune
        self.live: set[str] = set()  # Tune trial ids handed out and not yet complete
        # (time, trials wanted) with decreasing counts: the most trials in flight or queued at once within the
        # last KEEP_IDLE_S seconds is peaks[0] (a sliding-window maximum)
        self.peaks: deque[tuple[float, int]] = deque()
        self.resources = None  # the trials' placement group factory, once one started
        self.extra = 0  # idle actors kept beyond Tune's own count (see `warm_actors`)
        self.closed = False
        self.ready = threading.Condition()
        self.rank: dict[str, tuple[float, int]] = {}  # trial key -> (priority, -order put): `suggest` takes the max
        self.order = 0

    def put(self, configs: list[dict], priorities: list[float] | None = None) -> None:
        """Queue `configs`; Tune takes the highest `priorities` first (`identity.Training.priority`), ties in
        the order put."""
        with self.ready:
            for config, priority in zip(configs, priorities or [0.0] * len(configs)):
                self.order += 1
                self.pending.append(config)
                self.rank[config["key"]] = (priority, -self.order)
            self._note_demand()
            self.ready.notify_all()

    def prioritise(self, key: str, priority: float) -> None:
        """Raise a pending trial's priority (`Engine.prioritise`)."""
        with self.ready:
            if key in self.rank and self.rank[key][0] < priority:
                self.rank[key] = (priority, self.rank[key][1])

    def close(self, drop: bool = False) -> None:
        """Hand out no more trials once the queue is empty, or at once with `drop`."""
        with self.ready:
            self.closed = True
            if drop:
                self.pending.clear()
                self.rank.clear()
            self.ready.notify_all()

    def suggest(self, trial_id: str) -> dict | str | None:
        with self.ready:
            if not self.pending and not self.closed and not self.live:
                # Tune has nothing to run and polls an idle searcher once a second; between two driver batches
                # that second is pure waiting. Wait here for the next batch instead.
                self.ready.wait(IDLE_WAIT_S)
            if self.pending:
                self.live.add(trial_id)
                first = max(self.pending, key=lambda c: self.rank[c["key"]])
                self.pending.remove(first)
                del self.rank[first["key"]]
                return {"trial": first}
            return Searcher.FINISHED if self.closed else None

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        with self.ready:
            self.live.discard(trial_id)

    def _note_demand(self) -> int:
        """Record the trials wanted now (in flight or queued); return the most wanted within KEEP_IDLE_S."""
        now, wanted = time.monotonic(), len(self.live) + len(self.pending)
        while self.peaks and self.peaks[-1][1] <= wanted:
            self.peaks.pop()
        self.peaks.append((now, wanted))
        while now - self.peaks[0][0] > KEEP_IDLE_S:
            self.peaks.popleft()
        return self.peaks[0][1]

    def actors_wanted(self) -> int:
        """How many actors the driver has wanted at once within the last KEEP_IDLE_S seconds (0 once closed)."""
        with self.ready:
            return 0 if self.closed else self._note_demand()

    def idle_wanted(self) -> int:
        """Idle actors worth keeping beyond Tune's own count of staged trials: those the driver wanted within
        the last KEEP_IDLE_S seconds, less its trials in flight; more are released.

        Released too early, an actor is hard to get back: Tune hands a pending trial to a cached actor the
        moment one frees up and cancels the new actor it had asked for, so while a trial is shorter than an
        actor's start (seconds: a worker process importing torch) no new actor ever starts, and a run that
        shrank to one actor between two batches stayed at one (measured: the main job's later phases ran one
        trial at a time on 2 CPUs). Kept for a while, they bridge the driver's short gaps; released after it,
        a cluster can still scale down while a long narrow phase runs."""
        with self.ready:
            return 0 if self.closed else max(0, self._note_demand() - len(self.live))

    def save(self, checkpoint_path: str) -> None:  # the ledger, not Tune's experiment state, resumes runs
        pass

    def restore(self, checkpoint_path: str) -> None:
        pass

    # Tune pickles its searcher and callbacks for `Tuner.restore`, which we never use (the ledger resumes).
    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()
        self.closed = True
