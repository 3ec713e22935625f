"""The folders of a study's replicates: `compare --replicates R` runs R independent studies of one spec
(`pipeline.compare`), each in its own complete run folder DIR/replicate-r/ (with R = 1, DIR itself), on one engine,
so they share the cluster's slots. DIR/replicates.json records R, the base seed, the stride and the margin.

Why: a run's verdict interval counts the noise of the trainings on its own chosen chain, not that of the choices
made before them (the dense choice, δ, b at each cycle, silo_fit's study). A replicate repeats every choice on
seeds of its own, so the spread over replicates carries all of it (docs/design.md, "Replicates"). Its seeds:
`oracle_search.seeds`."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from oracle_search.executor import RERUN
from oracle_search.schema import read_results
from oracle_search.seeds import SEED_STRIDE
from trainables.atomic import atomic_write_json
from trainables.spec import SpecError

MANIFEST = "replicates.json"  # DIR's record: R, the base seed, the stride and the margin


def replicate_dir(out: Path, r: int) -> Path:
    return Path(out) / f"replicate-{r}"


def folders(out: Path, replicates: int) -> dict[int, Path]:
    """Each replicate's run folder: OUT itself for one, else OUT/replicate-1..R."""
    return {1: Path(out)} if replicates == 1 else {r: replicate_dir(out, r) for r in range(1, replicates + 1)}


def manifest(out: Path) -> dict | None:
    path = Path(out) / MANIFEST
    return json.loads(path.read_text()) if path.exists() else None


def write_manifest(out: Path, replicates: int, base_seed: int, margin: float) -> None:
    Path(out).mkdir(parents=True, exist_ok=True)
    atomic_write_json(Path(out) / MANIFEST, {
        "replicates": replicates, "base_seed": base_seed, "seed_stride": SEED_STRIDE, "margin_per_cycle": margin,
        "folders": [replicate_dir(out, r).name for r in range(1, replicates + 1)]})


def check_folder(out: Path, replicates: int) -> None:
    """A folder holds either one run or replicates, never both: SpecError("replicates") otherwise."""
    found = manifest(out)
    if replicates == 1 and found is not None:
        raise SpecError("replicates", f"{out} holds {found['replicates']} replicates; pass --replicates "
                        f"{found['replicates']} (or more) to resume it, or use a new --out")
    if replicates > 1 and found is None and (Path(out) / "spec.json").exists():
        raise SpecError("replicates", f"{out} holds a single run (--replicates 1); use a new --out for "
                        f"{replicates} replicates")


def replicate_rows(out: Path, replicates: list[int]) -> pd.DataFrame:
    """The replicates' results tables, one below the other, with a `replicate` column first."""
    frames = [read_results(replicate_dir(out, r)).assign(replicate=r) for r in replicates]
    table = pd.concat(frames, ignore_index=True)
    return table[["replicate", *[c for c in table.columns if c != "replicate"]]]


def one_line(err: BaseException) -> str:
    """A replicate's error as one line: its message's first line (its kind when it has none), without the advice
    to rerun (the command's own line gives it once)."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return text.removesuffix(f"; {RERUN}")
