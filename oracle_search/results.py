"""The results table: one row per trained (trial, cycle), the only thing analysis reads."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Iterable

import pandas as pd

COLUMNS = [
    "experiment", "method", "stage", "schedule", "seed", "cycle", "density", "max_lr", "val_acc", "test_acc",
    "best_epoch", "epochs", "seconds", "device", "grad_std", "act_std", "diverged", "selected", "stopped_early",
    "trial_id", "study_trial", "checkpoint", "checkpoint_hash", "start_hash", "epsilon", "delta", "q", "beta",
    "grad_hist", "act_hist", "gpu_ids", "node_id", "key",
]
SORT = ["method", "stage", "schedule", "seed", "cycle", "study_trial", "max_lr"]


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def atomic_write_json(path: Path, obj) -> None:
    atomic_write_bytes(path, json.dumps(obj, indent=1, sort_keys=True, default=str).encode())


def results_frame(rows: Iterable[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(list(rows))
    for col in COLUMNS:
        if col not in frame:
            frame[col] = pd.NA
    frame = frame[COLUMNS]
    if "gpu_ids" in frame:
        frame["gpu_ids"] = frame["gpu_ids"].map(lambda v: ",".join(v) if isinstance(v, list) else (v or ""))
    for col in ("diverged", "selected", "stopped_early"):
        frame[col] = frame[col].fillna(False).astype(bool)
    return frame.sort_values(SORT, na_position="first", kind="stable").reset_index(drop=True)


def write_results(out: Path, rows: Iterable[dict]) -> pd.DataFrame:
    """Write DIR/results.parquet and DIR/results.csv atomically; returns the table."""
    frame = results_frame(rows)
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".results.parquet.")
    os.close(fd)
    frame.to_parquet(tmp, index=False)
    os.replace(tmp, out / "results.parquet")
    atomic_write_bytes(out / "results.csv", frame.to_csv(index=False).encode())
    return frame


def read_results(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "results.parquet")
