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

A checkpoint is a path; reused rows share their original's. A path is deleted only when no row keeps it. A deleted
checkpoint leaves a one-line tombstone beside it (`PATH.deleted`), so a trial that would start from it is refused
with a clear message (`Runner._check_starts`) and the Oracle can retrain a chosen row whose checkpoint an earlier
run deleted (`Runner.restore_checkpoints`).
"""
from __future__ import annotations

import shutil
from pathlib import Path

from oracle_search.schema import Method, Stage

TOMBSTONE = ".deleted"


def _started_from(row: dict) -> str:
    """The checkpoint hash `row` trained from ("" for a first cycle), from its training identity."""
    training = row.get("training") or ""
    return training.rsplit("-from", 1)[1] if "-from" in training else ""


def _oracle(row: dict) -> bool:
    return row.get("method") == Method.ORACLE.value


def deletable(rows: list[dict], *, finished: bool, in_flight: set[str] = frozenset()) -> set[str]:
    """The checkpoint paths of `rows` (a folder's ledger) that no chain, resume or completion can start from
    (module docstring); `finished`: the command is done; `in_flight`: start checkpoints of queued or running
    trials."""
    # A final chain is a (method, seed): its head is the row that chain has not started from yet. Chains of two
    # methods can share a row's checkpoint (a reused training) and advance at their own pace (`pipeline.run_study`).
    started = {(r.get("method"), r.get("seed"), _started_from(r)) for r in rows}
    decided = {(r["cycle"], r["seed"], _started_from(r)) for r in rows if _oracle(r) and r.get("selected")}
    keep, drop = set(in_flight), set()
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
          known: set[str] | None = None) -> int:
    """Delete what `deletable` names and is not deleted yet; returns how many were deleted now. `known`: paths
    already found deleted, not looked at again (updated)."""
    known = set() if known is None else known
    drop = deletable(rows, finished=finished, in_flight=in_flight)
    todo = [p for p in sorted(drop - known) if not is_deleted(p)]
    for path in todo:
        delete(path)
    known.update(drop)
    return len(todo)
