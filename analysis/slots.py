"""Slots over time: which phase (and which replicate) held a trial slot when, from the rows' `started` and
`finished` (UTC, `trainables.timestamps.utc_now`).

The results table does not say which Ray actor ran a training, so the lanes here are a packing, not actors: the
trainings, sorted by start, each take the lowest lane free at their start (greedy interval packing). That packing
uses exactly as many lanes as the most trainings that ever ran at once, so the number of lanes is the peak
concurrency; a lane's gaps are times when fewer trainings ran than at the peak, not an actor's idle time.
"""
from __future__ import annotations

import pandas as pd

from oracle_search.schema import BASELINES, Method, Stage

# The phases of a run, in the order they are drawn and listed; a row outside them is its stage's own phase.
ORACLE, SILO_PAPER, SILO_FIT, BASELINE_TUNING, FINALS = "Oracle", "silo_paper δ", "silo_fit", "baselines' tuning", \
    "finals"
PHASES = (ORACLE, SILO_PAPER, SILO_FIT, BASELINE_TUNING, FINALS)
COLUMNS = ["lane", "start_s", "end_s", "phase"]


def phase(method: str, stage: str) -> str:
    """The phase of a run that a (method, stage) row belongs to."""
    if stage == Stage.FINAL.value:
        return FINALS
    if method == Method.ORACLE.value and stage in (Stage.GRID.value, Stage.REFINE.value):
        return ORACLE
    if method == Method.SILO_PAPER.value and stage == Stage.TUNE.value:
        return SILO_PAPER
    if method == Method.SILO_FIT.value and stage == Stage.FIT.value:
        return SILO_FIT
    if method in BASELINES and stage == Stage.TUNE.value:
        return BASELINE_TUNING
    return str(stage)


def _times(column: pd.Series) -> pd.Series:
    """UTC times; "" / NaN / unparsable text become NaT."""
    text = column.astype(object).where(column.notna(), "").astype(str)
    return pd.to_datetime(text.where(text != "", None), utc=True, errors="coerce", format="ISO8601")


def slot_lanes(rows: pd.DataFrame, replicate_column: str | None = None) -> pd.DataFrame:
    """One row per training that held a slot: `lane` (0, 1, ...: the greedy packing described in the module's
    docstring, so lanes are not actors and their number is the peak concurrency), `start_s` and `end_s` (seconds
    since the earliest start), `phase` (`phase`), and `replicate` (the values of `replicate_column`, when given).
    Sorted by start.

    Skipped: rows without both timestamps (tables written before them), rows whose `finished` precedes their
    `started`, and reused rows (`reused`: taken from an earlier training, whose timestamps they copy). A fused
    trial's candidates (rows sharing `trial_id`, `started` and `finished`) are one training: one slot, one entry."""
    columns = COLUMNS + (["replicate"] if replicate_column else [])
    if replicate_column and replicate_column not in rows:
        raise KeyError(f"replicate_column: no column {replicate_column!r} in the rows")
    if rows.empty or "started" not in rows or "finished" not in rows:
        return pd.DataFrame(columns=columns)
    if "reused" in rows:
        rows = rows[~rows["reused"].fillna(False).astype(bool)]
    start, end = _times(rows["started"]), _times(rows["finished"])
    keep = start.notna() & end.notna() & (end >= start)
    rows, start, end = rows[keep], start[keep], end[keep]
    trainings = pd.DataFrame({
        "start": start, "end": end,
        "phase": [phase(m, s) for m, s in zip(rows.get("method", pd.Series("", rows.index)),
                                              rows.get("stage", pd.Series("", rows.index)))]})
    if replicate_column:
        trainings["replicate"] = rows[replicate_column]
    if "trial_id" in rows:  # a fused trial's candidates: one training
        trial = rows["trial_id"].astype(object).where(rows["trial_id"].notna(), "").astype(str)
        same = trial.ne("") & trainings.assign(trial=trial).duplicated(
            ["trial", "start", "end"] + (["replicate"] if replicate_column else []))
        trainings = trainings[~same]
    if trainings.empty:
        return pd.DataFrame(columns=columns)
    trainings = trainings.sort_values(["start", "end"], kind="stable").reset_index(drop=True)
    free_at: list[pd.Timestamp] = []  # per lane: when its last training ended
    lanes = []
    for s, e in zip(trainings["start"], trainings["end"]):
        lane = next((i for i, t in enumerate(free_at) if t <= s), len(free_at))
        free_at[lane:lane + 1] = [e]
        lanes.append(lane)
    t0 = trainings["start"].min()
    out = pd.DataFrame({"lane": lanes, "start_s": (trainings["start"] - t0).dt.total_seconds(),
                        "end_s": (trainings["end"] - t0).dt.total_seconds(), "phase": trainings["phase"]})
    if replicate_column:
        out["replicate"] = trainings["replicate"].to_numpy()
    return out[columns]


SESSION = r"-(\d{8}-\d{6}-\d+)/"  # the Tune experiment folder a row's checkpoint lies in: one per driver (engine.Engine)


def idle_while_ready(rows: pd.DataFrame, slots: int, overhead_s: float) -> pd.DataFrame:
    """The trainings that waited while a slot was free: one row per training (key, replicate if any, `at_s` the
    first such moment in seconds since the first start, `running` then) whose wait, from `queued` (handed to the
    engine) to `started`, holds a moment when fewer than `slots` trainings ran. Empty: no slot idled while a
    training was ready.

    A slot is counted as held from `overhead_s` before a training's `started` to `overhead_s` after its
    `finished`: what a trial spends outside the pair (Tune handing it to an actor, its report) is not idleness, and
    a wait shorter than that is no wait. Each driver session (a run, or a resumed run: the Tune experiment its
    checkpoints lie in) starts its actors one by one, so its waits count only once it first held every slot; a
    session that never did counts from its first start (an engine that never fills its slots is caught).
    Reused rows and rows without the three timestamps are left out; a fused trial is one training."""
    columns = ["key", "at_s", "running", *(["replicate"] if "replicate" in rows else [])]
    if rows.empty or not {"queued", "started", "finished"} <= set(rows.columns):
        return pd.DataFrame(columns=columns)
    if "reused" in rows:
        rows = rows[~rows["reused"].fillna(False).astype(bool)]
    q, s, f = _times(rows["queued"]), _times(rows["started"]), _times(rows["finished"])
    keep = q.notna() & s.notna() & f.notna()
    rows = rows[keep].assign(q=q[keep], s=s[keep], f=f[keep])
    rows = rows.drop_duplicates(["trial_id", "s", "f"]) if "trial_id" in rows else rows
    if rows.empty:
        return pd.DataFrame(columns=columns)
    session = (rows["checkpoint"].astype(str).str.extract(SESSION)[0].fillna("") if "checkpoint" in rows
               else pd.Series("", index=rows.index)).to_numpy()
    t0 = rows["s"].min()
    q, s, f = ((rows[c] - t0).dt.total_seconds().to_numpy() for c in ("q", "s", "f"))
    held_from, held_to = s - overhead_s, f + overhead_s

    def running(t: float) -> int:
        return int(((held_from <= t) & (held_to > t)).sum())

    warm = {}
    for name in set(session):
        starts = sorted(s[session == name])
        warm[name] = next((t for t in starts if running(t) >= slots), starts[0])
    found = []
    for i in range(len(rows)):
        lo, hi = max(q[i], warm[session[i]]) + overhead_s, s[i] - overhead_s
        if hi <= lo:
            continue
        # fewer slots held can only begin at the wait's start or when a held slot frees
        for t in [lo, *(t for t in held_to if lo < t < hi)]:
            if (n := running(t)) < slots:
                found.append({"key": rows["key"].iloc[i] if "key" in rows else i, "at_s": t, "running": n,
                              **({"replicate": rows["replicate"].iloc[i]} if "replicate" in rows else {})})
                break
    return pd.DataFrame(found, columns=columns)
