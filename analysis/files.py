"""Reading the results table and spec; writing files atomically."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pandas as pd


def read_results(out_dir: Path) -> pd.DataFrame:
    """The results table of `out_dir`: results.parquet if present, else results.csv."""
    parquet = out_dir / "results.parquet"
    return pd.read_parquet(parquet) if parquet.exists() else pd.read_csv(out_dir / "results.csv")


def read_spec(out_dir: Path) -> dict | None:
    """The experiment spec (spec.json) or None if absent."""
    path = out_dir / "spec.json"
    return json.loads(path.read_text()) if path.exists() else None


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write `data` to `path` via a temporary file in the same folder and os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path
