"""The results table: one schema (columns from one dataclass), the method and stage names, and the one rule that
picks the rows a report may use. The table is the only thing the analysis reads."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Iterable

import pandas as pd

from trainables.atomic import atomic_write, atomic_write_bytes


class Method(str, Enum):
    """Why a chain of cycles was trained. Labels and baseline-ness live in `METHODS`."""

    ORACLE = "oracle"
    SILO_PAPER = "silo_paper"  # the paper's protocol: q = 1, beta = 5, epsilon from the Oracle, delta tuned
    SILO_FIT = "silo_fit"  # an Optuna fit of all four parameters
    CONSTANT = "constant"
    DECAY = "decay"
    CYCLICAL = "cyclical"
    WARMUP = "warmup"
    COSINE = "cosine"
    # The held-out references: the Oracle's choices and the two schedules that do not adapt, chosen on the tuning
    # seeds and trained as final chains on the evaluation seeds, like every tuned method (`held_out.py`).
    ORACLE_SCHEDULE = "oracle_schedule"  # the Oracle's b at every cycle
    CONSTANT_DENSE = "constant_dense"  # the Oracle's cycle-0 choice kept at every cycle: not adapting
    CONSTANT_BEST = "constant_best"  # the best single max_lr on the Oracle's chain (`compared.constant_best`)


class Stage(str, Enum):
    GRID = "grid"  # Oracle: a coarse-grid or bracket value
    REFINE = "refine"  # Oracle: a value added to resolve the best or an interval edge
    TUNE = "tune"  # a baseline's peak or silo_paper's delta, on tuning seeds
    FIT = "fit"  # silo_fit's Optuna trials, on tuning seeds
    FINAL = "final"  # a tuned method's full run, on evaluation seeds no tuning row used
    SINGLE = "single"  # `oracle-search cycle`


@dataclass(frozen=True)
class MethodInfo:
    label: str
    baseline: bool  # a paper §5.1(3) benchmark schedule whose peak LR is tuned on cycle 0
    schedule: str  # the trainables schedule it trains with


METHODS: dict[Method, MethodInfo] = {
    Method.ORACLE: MethodInfo("Oracle", False, "warmup"),
    Method.SILO_PAPER: MethodInfo("SILO (paper)", False, "silo"),
    Method.SILO_FIT: MethodInfo("SILO (fit)", False, "silo"),
    Method.CONSTANT: MethodInfo("Constant LR", True, "constant"),
    Method.DECAY: MethodInfo("LR decay", True, "decay"),
    Method.CYCLICAL: MethodInfo("Cyclical LR", True, "cyclical"),
    Method.WARMUP: MethodInfo("LR warmup", True, "warmup"),
    Method.COSINE: MethodInfo("Cosine", True, "cosine"),
    Method.ORACLE_SCHEDULE: MethodInfo("Oracle's schedule (held out)", False, "warmup"),
    Method.CONSTANT_DENSE: MethodInfo("Not adapting (held out)", False, "warmup"),
    Method.CONSTANT_BEST: MethodInfo("Best constant (held out)", False, "warmup"),
}
BASELINES = tuple(m.value for m, info in METHODS.items() if info.baseline)
SILO_METHODS = (Method.SILO_PAPER.value, Method.SILO_FIT.value)
HELD_OUT = (Method.ORACLE_SCHEDULE.value, Method.CONSTANT_DENSE.value, Method.CONSTANT_BEST.value)


@dataclass
class ResultRow:
    """One trained cycle. The first block comes from `trainables.cycle.CycleResult`, the rest from the driver."""

    experiment: str = ""
    method: str = ""
    stage: str = ""
    schedule: str = ""
    seed: int = 0
    # what a replicate varies besides the seed (oracle_search.seeds.replicate_spec): the spec's split seed and data
    # generation seed; tables written before they existed read as the values every run then had
    split_seed: int = 0
    data_seed: int = 42
    cycle: int = 0
    density: float = 100.0
    max_lr: float = float("nan")
    val_acc: float = float("nan")
    test_acc: float = float("nan")  # early stop: at the epoch of best validation accuracy
    best_epoch: int = 0
    epochs: int = 0
    seconds: float = 0.0
    device: str = ""
    precision: str = ""  # bf16 | fp16 | fp32: the arithmetic the device trained in (trainables.precision)
    grad_std: float = float("nan")
    act_std: float = float("nan")
    diverged: bool = False
    selected: bool = False  # Oracle: chained forward; other methods: on their current chain
    stopped_early: bool = False  # a silo_fit trial stopped by Optuna's pruner
    reused: bool = False  # taken from an identical earlier training, not trained again
    fused: int = 1  # candidates trained together as one fused network
    trial_id: str = ""
    study_trial: float = float("nan")
    checkpoint: str = ""
    checkpoint_hash: str = ""
    start_hash: str = ""
    # UTC ISO-8601 with milliseconds ("2026-11-27T11:41:03.123Z"); "" in tables written before they existed.
    queued: str = ""  # filled by the engine (oracle_search.engine)
    started: str = ""  # CycleResult: the training began (before its data and model are set up)
    finished: str = ""  # CycleResult: its checkpoint and statistics written (a fused trial's candidates share both)
    epsilon: float = float("nan")
    delta: float = float("nan")
    q: float = float("nan")
    beta: float = float("nan")
    grad_hist: str = ""
    act_hist: str = ""
    gpu_ids: str = ""
    node_id: str = ""
    key: str = ""
    training: str = ""  # identity of the training itself (what `reused` matches on)
    current: bool = False  # a row the report uses (`current_rows`); derived, set anew whenever the table is framed


COLUMNS = [f.name for f in dataclasses.fields(ResultRow)]
REQUIRED = ["method", "stage", "seed", "cycle", "density", "max_lr", "val_acc", "test_acc", "epochs", "seconds",
            "diverged", "selected"]  # what the report cannot do without
FLAGS = ("diverged", "selected", "stopped_early", "reused")
SORT = ["method", "stage", "schedule", "seed", "cycle", "study_trial", "max_lr"]


def results_frame(rows: Iterable[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(list(rows))
    defaults = ResultRow()
    for col in COLUMNS:
        if col not in frame:
            frame[col] = getattr(defaults, col)
    if "pruned" in frame:  # tables written before the rename
        frame["stopped_early"] = frame["stopped_early"] | frame.pop("pruned").fillna(0).astype(bool)
    frame = frame[COLUMNS]
    frame["gpu_ids"] = frame["gpu_ids"].map(lambda v: ",".join(map(str, v)) if isinstance(v, list) else (v or ""))
    for col in FLAGS:
        frame[col] = frame[col].fillna(0).astype(bool)
    frame["fused"] = frame["fused"].fillna(1).astype(int)
    for col in ("split_seed", "data_seed"):  # rows recorded before these columns: the values every run then had
        frame[col] = frame[col].fillna(getattr(defaults, col)).astype(int)
    for col in ("training", "key", "checkpoint", "checkpoint_hash", "start_hash", "trial_id", "precision", "queued",
                "started", "finished"):
        frame[col] = frame[col].astype(object).fillna("").astype(str)
    frame = frame.sort_values(SORT, na_position="first", kind="stable").reset_index(drop=True)
    frame["current"] = current_mask(frame)
    return frame


def write_results(out: Path, rows: Iterable[dict]) -> pd.DataFrame:
    """Write DIR/results.parquet and DIR/results.csv atomically; returns the table."""
    frame = results_frame(rows)
    atomic_write(out / "results.parquet", lambda f: frame.to_parquet(f, index=False))
    atomic_write_bytes(out / "results.csv", frame.to_csv(index=False))
    return frame


def results_path(out: Path) -> Path:
    """results.parquet if present, else results.csv (a table copied without its Parquet file)."""
    parquet = out / "results.parquet"
    return parquet if parquet.exists() else out / "results.csv"


def read_results(out: Path) -> pd.DataFrame:
    """The results table of `out`, as written (`write_results`)."""
    path = results_path(out)
    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)


# --- the current rows ---------------------------------------------------------------------------------------------

def oracle_chain(df: pd.DataFrame) -> pd.DataFrame:
    """The Oracle's rows on each seed's selected chain: a cycle-m row counts only when it started from its seed's
    selected cycle-(m-1) checkpoint. A rerun with other options may have abandoned a chain; its rows stay in the
    table (nothing is deleted) but never count."""
    rows = df[(df["method"] == Method.ORACLE.value) & df["stage"].isin((Stage.GRID.value, Stage.REFINE.value))]
    keep = []
    for _, group in rows.groupby("seed"):
        start = ""
        for _, at in group.groupby("cycle", sort=True):
            at = at[at["start_hash"].fillna("") == start]
            if at.empty:
                break
            keep.append(at)
            chosen = at[at["selected"]]
            if len(chosen) != 1:
                break
            start = chosen["checkpoint_hash"].iloc[0]
    return pd.concat(keep) if keep else rows.iloc[0:0]


def current_mask(df: pd.DataFrame) -> pd.Series:
    """The one rule for the rows a report uses: the Oracle's current chain, every tuning row, and each other
    method's current final chain (`selected`; a rerun with other tuned parameters deselects the chain it
    supersedes)."""
    others = (df["method"] != Method.ORACLE.value) & ((df["stage"] != Stage.FINAL.value) | df["selected"])
    return others | df.index.isin(oracle_chain(df).index)


def current_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows a report uses, as `results_frame` marked them (`current`)."""
    return df[df["current"]]


def unused_finals(rows: Iterable[dict]) -> list[dict]:
    """The final rows trained and read by nothing: deselected (`baselines.supersede`: in one fresh run, the final
    runs a wide δ search started for a δ that did not win) and neither a copy nor a training another row uses (the
    cycles at ε every δ shares, a baseline's twin). The one rule the dry run's waste (`simulate_job`) and the
    report's cost sentence (`analysis.tables`) count by."""
    rows = list(rows)

    def off(row: dict) -> bool:
        return row.get("stage") == Stage.FINAL.value and not row.get("selected")

    used = {row["training"] for row in rows if row.get("training") and not off(row)}
    return [row for row in rows if off(row) and not row.get("reused")
            and not (row.get("training") and row["training"] in used)]
