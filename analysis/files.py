"""Reading the results table and spec."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from oracle_search.estimate import ESTIMATE_FILE  # noqa: F401  (the report reads what the estimate wrote)
from oracle_search.schema import REQUIRED


class BadResults(ValueError):
    """A results table the report cannot read: the message names the file and, if any, the missing columns."""


def required_columns() -> list[str]:
    return list(REQUIRED)



def check_results(path: Path) -> pd.DataFrame:
    """The table at `path` (Parquet or CSV), or BadResults naming the file or the columns it lacks."""
    try:
        frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except Exception as err:  # pyarrow and pandas raise many kinds; the file is what the user must fix
        raise BadResults(f"{path} is not a readable {path.suffix[1:]} results table ({type(err).__name__})") from None
    missing = [c for c in required_columns() if c not in frame.columns]
    if missing:
        raise BadResults(f"{path} lacks column(s) {', '.join(missing)}")
    return frame


def read_spec(out_dir: Path) -> dict | None:
    """The experiment spec (spec.json) or None if absent."""
    path = out_dir / "spec.json"
    return json.loads(path.read_text()) if path.exists() else None
