"""Train once: which trainings of a batch need not train, by their identity (`identity.Training`'s `training` tag).
A training an earlier row of the folder did is copied from that row (`Trained.copies`); one that another trial of
the batch, or a trial already in flight, trains waits for that trial's row (`Trained.split`: the twins, their
leaders, and the twins of other batches, `awaited`, which get their copies when the leader's row lands). Plain
bookkeeping, no Tune: the Runner (`oracle_search.runner`) holds the lock, the ledger and the engine, and does what
this module says."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from oracle_search.identity import Training


@dataclass
class Batch:
    """What a batch's trials without a row do (`Trained.split`)."""

    todo: list[Training] = field(default_factory=list)  # train now: the first trial of each training not in flight
    twins: list[Training] = field(default_factory=list)  # copy the row of another trial of their training
    running: list[Training] = field(default_factory=list)  # handed over before under the same key: their own row
    # (the key in flight, the trial waiting on it), in the batch's order: each leader is waited for, and kept at
    # the higher of the two priorities
    leaders: list[tuple[str, Training]] = field(default_factory=list)


class Trained:
    """The rows that trained each training identity in one results folder (not their copies), read from its ledger
    once, when first needed (`rows`); and the trials waiting for a training in flight in another batch."""

    def __init__(self, rows: Callable[[], Iterable[dict]], measured: tuple[str, ...]):
        self._rows = rows
        self.measured = measured  # the fields of a row that a copy takes (what the training measured, where)
        self._trainings: dict[str, list[dict]] | None = None  # training -> the rows that trained it (not copies)
        self._awaited: dict[str, list[Training]] = {}  # training -> trials of other batches waiting for its row

    def _index(self) -> dict[str, list[dict]]:
        if self._trainings is None:
            self._trainings = {}
            for row in self._rows():
                if row.get("training") and not row.get("reused"):
                    self._trainings.setdefault(row["training"], []).append(row)
        return self._trainings

    def copies(self, trials: list[Training], gone: Callable[[str], bool],
               need_checkpoints: bool = False) -> dict[str, dict]:
        """Copies of the rows that already trained `trials`' trainings, under their keys and tags, marked `reused`;
        from a row whose checkpoint is not `gone` where there is one. A row whose checkpoint is gone is copied only
        when nothing starts from the copy (not `need_checkpoints`)."""
        if not any(t.tags.get("training") for t in trials):
            return {}
        trainings = self._index()
        reused = {}
        for t in trials:
            rows = trainings.get(t.tags.get("training"), [])
            row = next((r for r in rows if not gone(r["checkpoint"])), None)
            if row is None and not need_checkpoints and rows:
                row = rows[0]
            if row is None:
                continue
            measured = {k: row[k] for k in self.measured if k in row}
            reused[t.key] = measured | t.tags | {"key": t.key, "reused": True}
        return reused

    def split(self, trials: list[Training], flying: dict[str, str]) -> Batch:
        """`trials` (none with a row yet) by what they do, given the trainings in flight (`flying`: identity -> the
        key its row will land under). The first trial of a training neither in flight nor earlier in the batch
        trains; the others are twins. A twin of a training in flight under its own key waits for its own row
        (`running`); under another key it waits for that leader's row, and is `awaited` until it lands."""
        batch, leaders = Batch(), set(flying)
        for t in trials:
            training = t.tags.get("training")
            (batch.twins if training and training in leaders else batch.todo).append(t)
            if training:
                leaders.add(training)
        for t in batch.twins:
            if (training := t.tags["training"]) in flying:
                batch.leaders.append((flying[training], t))
                if flying[training] == t.key:
                    batch.running.append(t)
                else:
                    self._awaited.setdefault(training, []).append(t)
        batch.twins = [t for t in batch.twins if t not in batch.running]
        return batch

    def landed(self, row: dict) -> list[Training]:
        """A training's row landed: it is the training's newest row (the same key trained again replaces the old
        one); the trials of other batches that waited for it, which now take their copies."""
        if self._trainings is not None and row.get("training"):
            rows = self._trainings.setdefault(row["training"], [])
            rows[:] = [r for r in rows if r["key"] != row["key"]] + [row]
        return self._awaited.pop(row.get("training"), [])

    def refused(self, training: str | None, key: str) -> None:
        """The ledger refused `key`'s row, which recorded `training`: no copy is made from it."""
        if self._trainings is not None and training in self._trainings:
            self._trainings[training] = [r for r in self._trainings[training] if r["key"] != key]
