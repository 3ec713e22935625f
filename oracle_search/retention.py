"""Checkpoint retention (`--keep-checkpoints`, `Resources.keep_checkpoints`): `chain`, the default, deletes a
checkpoint once no chain, resume or completion can start from it; `all` keeps every one.

Every training writes one checkpoint (VGG-19: about 100 MB), and the Oracle alone trains hundreds. Only a few are
ever started from again, and the ledger says which, so the rule reads the ledger alone:

- **The Oracle's chain is kept**: the row chosen at each (cycle, seed) (`selected`). The next cycle, the
  completions before the verdict and any rerun start from it.
- **An Oracle row not chosen is deleted once its cycle is decided**: a row of the same (cycle, seed) trained
  from the same start is chosen.
- **A final run's chain keeps only its head**: a row is deleted once a later row of the same chain (method and
  seed) has started from its checkpoint (its `training` identity ends with `-from<that checkpoint's hash>`); a
  resume then reuses that later row. A final chain never branches; two methods' chains can share a reused row
  and advance at their own pace, and each keeps it while it is its head.
- **silo_paper's δ search and silo_fit's trials keep theirs until the command ends**: both start new chains from
  old rows as they go (a new δ continues the cycles every δ shares).
- **When a command has finished**, every other checkpoint goes too, except each final run's last cycle (the
  trained networks the report describes).
- **Never** one that a queued or running trial starts from.
- **Never** one that a line of work still running may start from, by its plan (`Claim`): a line says, before it
  starts, which chains from scratch it will train (seeds and the peak of each cycle), and every row on those
  chains is kept until the line ends, whichever line trained it. silo_paper trains cycles 0..q at ε, the Oracle's
  dense best, so the Oracle's cycle-1 row at ε is its chain too even when the Oracle's cycle 1 chose another
  value; a baseline held at ε trains what silo_paper's final chain trains at cycles 0..q (`study.run_study`).

A checkpoint is a path; reused rows share their original's. A path is deleted only when no row keeps it. A deleted
checkpoint leaves a one-line tombstone beside it (`PATH.deleted`). A trial whose start is gone all the same (an
earlier command's retention, a lost node, a folder deleted by hand) has that start trained again from its own
ancestor (`restore.Starts`).
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from oracle_search import identity
from oracle_search.schema import Method, Stage

TOMBSTONE = ".deleted"


@dataclass(frozen=True)
class Claim:
    """What a line of work will still train, from its plan: on each of `seeds`, for each of `peaks`, the chain from
    scratch whose cycle-k peak LR is `peaks[k]`, under the training fingerprint `fingerprint`. Every row on such a
    chain is kept while the claim is held (`Runner.claiming`): the line may reuse it and start from it."""

    fingerprint: str
    seeds: frozenset[int]
    peaks: tuple[tuple[float, ...], ...]

    def paths(self, by_training: dict[str, list[dict]]) -> set[str]:
        """The checkpoints of the rows on the claimed chains; `by_training`: the ledger's rows by identity."""
        kept: set[str] = set()
        for seed in self.seeds:
            for peaks in self.peaks:
                starts = {""}
                for cycle, peak in enumerate(peaks):
                    rows = [r for h in starts
                            for r in by_training.get(identity.training(self.fingerprint, cycle, seed, peak, h), ())]
                    kept |= {r["checkpoint"] for r in rows if r.get("checkpoint")}
                    starts = {r["checkpoint_hash"] for r in rows if r.get("checkpoint_hash")}
                    if not starts:
                        break
        return kept


def claimed(rows: list[dict], claims) -> set[str]:
    """The checkpoint paths of `rows` that any of `claims` keeps."""
    if not claims:
        return set()
    by_training: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("training"):
            by_training.setdefault(row["training"], []).append(row)
    return set().union(*(c.paths(by_training) for c in claims))


def _started_from(row: dict) -> str:
    """The checkpoint hash `row` trained from ("" for a first cycle), from its training identity."""
    return identity.started_from(row.get("training") or "")


def _oracle(row: dict) -> bool:
    return row.get("method") == Method.ORACLE.value


def deletable(rows: list[dict], *, finished: bool, in_flight: set[str] = frozenset(),
              claims: tuple[Claim, ...] = ()) -> set[str]:
    """The checkpoint paths of `rows` (a folder's ledger) that no chain, resume or completion can start from
    (module docstring); `finished`: the command is done; `in_flight`: start checkpoints of queued or running
    trials; `claims`: what the lines still running will train."""
    # A final chain is a (method, seed): its head is the row that chain has not started from yet. Chains of two
    # methods can share a row's checkpoint (a reused training) and advance at their own pace (`study.run_study`).
    started = {(r.get("method"), r.get("seed"), _started_from(r)) for r in rows}
    decided = {(r["cycle"], r["seed"], _started_from(r)) for r in rows if _oracle(r) and r.get("selected")}
    keep, drop = set(in_flight) | claimed(rows, claims), set()
    for row in rows:
        path = row.get("checkpoint")
        if not path:
            continue
        if _oracle(row):
            gone = not row.get("selected") and (finished or (row["cycle"], row["seed"], _started_from(row)) in decided)
        elif row.get("stage") == Stage.FINAL.value:
            head = (row.get("method"), row.get("seed"), row.get("checkpoint_hash")) not in started
            gone = not head or (finished and not row.get("selected"))
        else:  # the δ search and silo_fit branch new chains from old rows as they go: kept until the end
            gone = finished
        (drop if gone else keep).add(path)
    return drop - keep


def is_deleted(path: str) -> bool:
    """Whether retention deleted the checkpoint at `path` (its tombstone is there)."""
    if "://" in path:
        import pyarrow.fs

        fs, inner = pyarrow.fs.FileSystem.from_uri(path)
        return fs.get_file_info(inner + TOMBSTONE).type == pyarrow.fs.FileType.File
    return Path(path + TOMBSTONE).exists()


def delete(path: str) -> None:
    """Delete the checkpoint folder at `path` (a local path or a storage URI) and leave its tombstone; the
    tombstone is written first, so a crash in between never leaves a half-deleted checkpoint unmarked."""
    note = b"deleted by --keep-checkpoints chain: nothing could start from it any more\n"
    if "://" in path:
        import pyarrow.fs

        fs, inner = pyarrow.fs.FileSystem.from_uri(path)
        with fs.open_output_stream(inner + TOMBSTONE) as f:
            f.write(note)
        if fs.get_file_info(inner).type == pyarrow.fs.FileType.Directory:
            fs.delete_dir(inner)
        return
    Path(path + TOMBSTONE).write_bytes(note)
    shutil.rmtree(path, ignore_errors=True)


def prune(rows: list[dict], *, finished: bool, in_flight: set[str] = frozenset(),
          known: set[str] | None = None, claims: tuple[Claim, ...] = ()) -> int:
    """Delete what `deletable` names and is not deleted yet; returns how many were deleted now. `known`: paths
    already found deleted, not looked at again (updated)."""
    known = set() if known is None else known
    drop = deletable(rows, finished=finished, in_flight=in_flight, claims=claims)
    todo = [p for p in sorted(drop - known) if not is_deleted(p)]
    for path in todo:
        delete(path)
    known.update(drop)
    return len(todo)
