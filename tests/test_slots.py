"""Slots over time (issue 37): `analysis.slots.slot_lanes` on hand-made rows with known times, its figure, and the
report's Cost section drawing it only when the table has timestamps."""
from __future__ import annotations

import pandas as pd
import pytest

from analysis.figures import slots_figure
from analysis.report import _cost_section
from analysis.slots import phase, slot_lanes
from oracle_search.schema import results_frame

T0 = pd.Timestamp("2026-11-27T11:41:00.250Z")


def at(seconds: float) -> str:
    """T0 + seconds, as `trainables.timestamps.utc_now` writes it."""
    return (T0 + pd.Timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def row(method: str, stage: str, start: float | None, end: float | None, trial: str, rep: str = "a", **kw) -> dict:
    return {"method": method, "stage": stage, "seed": 0, "cycle": 0, "max_lr": 0.1, "val_acc": 80.0,
            "test_acc": 79.0, "epochs": 2, "seconds": 1.0, "trial_id": trial, "experiment": rep,
            "started": "" if start is None else at(start), "finished": "" if end is None else at(end), **kw}


def hand_made() -> pd.DataFrame:
    """Five trainings (one of them a fused pair), a reused row and a row without timestamps; by start:
    oracle 0-10 s, oracle refine 2-5 s, constant tune 3-4 s (three at once), silo_paper 5-12 s, the fused
    constant finals 11-14 s."""
    rows = [
        row("silo_paper", "tune", 5, 12, "t3", rep="b"),
        row("oracle", "grid", 0, 10, "t0"),
        row("constant", "final", 11, 14, "t4", max_lr=0.1, fused=2),
        row("constant", "final", 11, 14, "t4", max_lr=0.2, fused=2),  # the fused pair's other candidate
        row("oracle", "refine", 2, 5, "t1"),
        row("constant", "tune", 3, 4, "t2", rep="b"),
        row("oracle", "grid", 0, 10, "t0", reused=True, seed=1),  # a copy of t0's measurements: no slot
        row("warmup", "tune", None, None, "t5"),  # written before the timestamps
    ]
    return results_frame(rows)


def test_trainings_are_packed_into_the_lowest_free_lane_in_order_of_start():
    lanes = slot_lanes(hand_made())
    assert list(lanes.columns) == ["lane", "start_s", "end_s", "phase"]
    assert lanes["start_s"].tolist() == pytest.approx([0, 2, 3, 5, 11])
    assert lanes["end_s"].tolist() == pytest.approx([10, 5, 4, 12, 14])
    # refine takes lane 1 while the grid holds lane 0; the tune at 3 s finds both busy; silo_paper starts as the
    # refine ends (a lane is free at its last training's end); the finals find lane 0 free again at 11 s.
    assert lanes["lane"].tolist() == [0, 1, 2, 1, 0]
    assert lanes["lane"].max() + 1 == 3  # the peak concurrency: three trainings at 3-4 s
    assert lanes["phase"].tolist() == ["Oracle", "Oracle", "baselines' tuning", "silo_paper δ", "finals"]


def test_the_replicate_column_is_carried_and_a_missing_one_is_named():
    lanes = slot_lanes(hand_made(), replicate_column="experiment")
    assert list(lanes.columns) == ["lane", "start_s", "end_s", "phase", "replicate"]
    assert lanes["replicate"].tolist() == ["a", "a", "b", "b", "a"]
    with pytest.raises(KeyError, match="no_such"):
        slot_lanes(hand_made(), replicate_column="no_such")


def test_rows_without_timestamps_give_no_lanes():
    old = hand_made().drop(columns=["started", "finished"])
    assert slot_lanes(old).empty and list(slot_lanes(old).columns) == ["lane", "start_s", "end_s", "phase"]
    blank = hand_made().assign(started="", finished="")
    assert slot_lanes(blank).empty
    nan = hand_made().assign(started=float("nan"))  # as an older CSV reads before it is framed
    assert slot_lanes(nan).empty
    assert slot_lanes(hand_made().iloc[0:0]).empty


def test_phases():
    assert [phase("oracle", "grid"), phase("oracle", "refine"), phase("silo_paper", "tune"), phase("silo_fit", "fit"),
            phase("cosine", "tune"), phase("silo_fit", "final"), phase("oracle", "final"),
            phase("constant", "single")] == ["Oracle", "Oracle", "silo_paper δ", "silo_fit", "baselines' tuning",
                                             "finals", "finals", "single"]


@pytest.mark.parametrize("replicate", [None, "experiment"])
def test_the_figure_is_png_and_svg(replicate):
    figure = slots_figure(slot_lanes(hand_made(), replicate_column=replicate))
    assert figure.png.startswith(b"\x89PNG\r\n\x1a\n") and len(figure.png) > 1000
    assert figure.svg.lstrip().startswith(b"<?xml") and b"<svg" in figure.svg and b'id="axes_1"' in figure.svg


def test_replicates_are_told_apart_in_their_numbers_order():
    from analysis.figures import replicate_colours, replicate_order

    names = ["replicate-1", "replicate-3", "replicate-10", "replicate-2", "replicate-3"]  # as the lanes meet them
    assert replicate_order(names) == ["replicate-1", "replicate-2", "replicate-3", "replicate-10"]
    colours = replicate_colours(names)
    assert list(colours) == replicate_order(names) and len(set(colours.values())) == 4


def test_the_cost_section_draws_slots_only_from_a_table_with_timestamps():
    section = _cost_section(hand_made())
    (plot,) = [p for p in section.plots if p.name == "slots"]
    assert plot.png.startswith(b"\x89PNG") and "packing" in plot.caption and "3 lane(s)" in plot.caption
    old = results_frame(hand_made().drop(columns=["started", "finished"]).to_dict("records"))
    assert not [p for p in _cost_section(old).plots if p.name == "slots"]


def waiting(queued: float, start: float, end: float, trial: str, key: str, session: str = "20261127-114100-1",
            rep: int = 1) -> dict:
    """A training handed to the engine at `queued`, trained from `start` to `end`, its checkpoint in `session`."""
    return row("oracle", "grid", start, end, trial, key=key, queued=at(queued), replicate=rep,
               checkpoint=f"/runs/x/tune/mnist1d-mlp-{session}/{key}/checkpoint_000000")


def test_idle_while_ready_finds_a_free_slot_while_a_training_waited():
    from analysis.slots import idle_while_ready

    # Two slots. a and b run 0-10 s; c was ready at 1 s and waited for the first free slot: no idleness.
    busy = pd.DataFrame([waiting(0, 0, 10, "a", "a"), waiting(0, 0, 10, "b", "b", rep=2),
                         waiting(1, 10.2, 20, "c", "c")])
    assert idle_while_ready(busy, slots=2, overhead_s=0.5).empty
    # b ends at 4 s, but c waits until 10 s: a slot idles from 4.5 s (b's end + the overhead) while c is ready.
    idle = pd.DataFrame([waiting(0, 0, 10, "a", "a"), waiting(0, 0, 4, "b", "b", rep=2),
                         waiting(1, 10.2, 20, "c", "c")])
    found = idle_while_ready(idle, slots=2, overhead_s=0.5)
    assert found[["key", "at_s", "running", "replicate"]].values.tolist() == [["c", 4.5, 1, 1]]
    # The same rows against one slot: nothing idles.
    assert idle_while_ready(idle, slots=1, overhead_s=0.5).empty


def test_idle_while_ready_leaves_a_sessions_start_up_out_until_its_slots_are_warm():
    from analysis.slots import idle_while_ready

    # A resumed run (another session): its actors start one by one, the second slot's first training at 52 s;
    # waits before the session first held both slots are start-up, and count from then on.
    rows = pd.DataFrame([waiting(0, 0, 10, "a", "a"), waiting(0, 0, 10, "b", "b"),
                         waiting(49, 50, 60, "c", "c", session="20261127-114200-2"),
                         waiting(49, 52, 60, "d", "d", session="20261127-114200-2"),
                         waiting(49, 61, 70, "e", "e", session="20261127-114200-2")])
    assert idle_while_ready(rows, slots=2, overhead_s=0.5).empty
    # A session that never holds both slots counts from its first start: its second training waited on a free slot.
    never = pd.DataFrame([waiting(0, 0, 10, "a", "a"), waiting(0, 11, 20, "b", "b")])
    assert idle_while_ready(never, slots=2, overhead_s=0.5)["key"].tolist() == ["b"]
