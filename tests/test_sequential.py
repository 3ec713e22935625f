"""The sequential rule over replicates (issue 61, `oracle_search.sequential`): its spending against the published
value, its looks on hand numbers, a simulation that fails for a rule that looks without correction, the edge of
`compare --replicates auto`, the waves' state in looks.json, and the report's lines."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from oracle_search import sequential
from oracle_search.options import AUTO, CompareOptions
from oracle_search.sequential import (Decision, Design, LABELS, Waves, look, obf_spent, sentence, sequential_section,
                                      simulate)
from oracle_search.statistics import label
from trainables.spec import SpecError

ALPHA = 0.05
MARGIN = 3.0  # points: the committed runs' summed margin (0.5 per cycle over 6 cycles)
FAMILY = 18  # each SILO variant against ~9 references
SDS = np.tile([1.0, 2.0, 3.0, 4.0], 5)[:FAMILY]  # the spreads between replicates the committed runs measured


# --- spending --------------------------------------------------------------------------------------------------

def test_obrien_fleming_spending_matches_the_published_values():
    """Lan & DeMets (1983), O'Brien–Fleming type, two-sided α = 0.05: α(0.5) = 0.0056 (and 0.0015 one-sided
    at 0.025, gsDesign's sfLDOF), α(1) = α, increasing."""
    assert obf_spent(0.5) == pytest.approx(0.0056, abs=5e-5)
    assert obf_spent(0.5, alpha=0.025) == pytest.approx(0.0015, abs=5e-5)
    assert obf_spent(1.0) == ALPHA and obf_spent(0.0) == 0.0
    t = np.linspace(0.05, 1, 20)
    assert np.all(np.diff(obf_spent(t)) > 0)


def test_increments_spend_alpha_exactly_and_an_extension_spends_only_the_rest():
    d = Design(first=3, wave=3, max_replicates=12, family_size=FAMILY)
    looks = d.schedule()
    assert looks == [3, 6, 9, 12]
    increments = [d.increment(R, p) for R, p in zip(looks, [0, *looks[:-1]])]
    assert sum(increments) == pytest.approx(ALPHA, abs=1e-15)
    assert increments[1] == pytest.approx(obf_spent(0.5) - obf_spent(0.25))
    assert Design(first=3, wave=2, max_replicates=8).schedule() == [3, 5, 7, 8]
    # Looked at 3 and 6 under N = 12, then extended to N = 20: what is left is spent after R = 6, no more.
    wider = d.extended(20, at=6)
    assert wider.spent == pytest.approx(obf_spent(0.5))
    later = wider.schedule()
    assert later == [9, 12, 15, 18, 20]
    spent = wider.spent + sum(wider.increment(R, p) for R, p in zip(later, [6, *later[:-1]]))
    assert spent == pytest.approx(ALPHA, abs=1e-15)
    narrower = d.extended(9, at=6)  # a smaller N re-plans the rest the same way
    assert narrower.spent + narrower.increment(9, 6) == pytest.approx(ALPHA, abs=1e-15)
    for N, at in ((12, 6), (20, 12), (6, 6)):  # the same N; after the last look at N; no look left
        with pytest.raises(ValueError):
            d.extended(N, at=at)


# --- a look, by hand --------------------------------------------------------------------------------------------

def test_vectorised_labels_are_the_one_label_rule():
    rng = np.random.default_rng(3)
    lo = rng.normal(0, 3, 2000)
    hi = lo + rng.exponential(3, 2000)
    lo[:5], hi[:5] = [-3.0, -3.0 - 1e-13, 0.0, -1.0, math.nan], [3.0, 1.0, 2.0, 0.0, 1.0]  # touching, NaN
    codes = sequential._labels(lo, hi, MARGIN)
    assert [LABELS[c] for c in codes] == [label(a, b, MARGIN) for a, b in zip(lo, hi)]


def test_a_look_uses_the_looks_share_of_alpha_over_the_family():
    d = Design(first=3, wave=3, max_replicates=6, family_size=2)
    values = {"tight": np.array([0.1, -0.2, 0.3, 0.0, 0.1, -0.1]), "far": np.array([9.0, 10.0, 11.0, 10, 9, 11])}
    found = look(values, MARGIN, d, 6, previous=3)
    error = (ALPHA - obf_spent(0.5)) / 2  # α_2 over m = 2
    for key, v in values.items():
        half = stats.t.isf(error / 2, 5) * np.std(v, ddof=1) / math.sqrt(6)
        assert found[key].lo == pytest.approx(v.mean() - half) and found[key].hi == pytest.approx(v.mean() + half)
        assert found[key].level == pytest.approx(1 - error)
    assert (found["tight"].label, found["tight"].stopped) == ("equivalent", "decided")
    assert (found["far"].label, found["far"].stopped) == ("better", "decided")


def test_decided_and_futile_decisions_are_frozen_and_the_last_look_is_the_budget():
    d = Design(first=3, wave=3, max_replicates=9, family_size=3)
    first = look({"a": np.array([8.0, 10.0, 12.0]), "noisy": np.array([-4.0, 4.0, 0.5]),
                  "open": np.array([1.0, 2.5, 4.0])}, MARGIN, d, 3)
    # R = 3 spends α(1/3) = 0.0007 over 3: t(2) = 66, so even 10 ± 2 is undecided; sd 4 can neither fit in ±3 nor
    # exclude 0 by N = 9.
    assert first["a"].stopped == "continue" and first["noisy"].stopped == "futile"
    assert first["noisy"].label == "inconclusive" and first["open"].stopped == "continue"
    second = look({"a": np.array([8.0, 10.0, 12.0, 9.0, 11.0, 10.0]), "noisy": np.array([0.0] * 6),
                   "open": np.array([1.0, 2.5, 4.0, 1.0, 2.5, 4.0])}, MARGIN, d, 6, 3, first)
    assert (second["a"].label, second["a"].stopped, second["a"].replicates) == ("better", "decided", 6)
    assert second["noisy"] == first["noisy"]  # futile is final, whatever came later
    third = look({"a": np.zeros(9), "noisy": np.zeros(9), "open": np.array([1.0, 2.5, 4.0] * 3)}, MARGIN, d, 9,
                 6, second)
    assert third["a"] == second["a"]
    assert third["open"].stopped in ("budget", "decided")
    with pytest.raises(ValueError, match="family"):
        look({k: np.zeros(3) for k in "abcd"}, MARGIN, d, 3)


def test_futility_never_stops_a_comparison_that_the_last_look_could_decide():
    """Futility only withholds labels; here it must not withhold one that is within reach: mean 0 at sd 1 over
    3 replicates could still be shown equivalent at N = 12."""
    d = Design(first=3, wave=3, max_replicates=12, family_size=FAMILY)
    found = look({"k": np.array([-1.0, 0.0, 1.0])}, MARGIN, d, 3)
    assert found["k"].stopped == "continue"


# --- the simulation: the rate holds across looks, and does not without the correction -------------------------------

SIMS = 4000
SCENARIOS = {  # effect per comparison (points): at 0, at the margin, beyond it, and a family of all three
    "zero": np.zeros(FAMILY),
    "margin": np.full(FAMILY, MARGIN),
    "beyond": np.full(FAMILY, 2 * MARGIN),
    "mixed": np.repeat([0.0, MARGIN, -2 * MARGIN], FAMILY // 3),
}


def holds(found, alpha: float = ALPHA) -> bool:
    """The family-wise error is at most α within the Monte Carlo error: estimate ≤ α + 3 standard errors."""
    return found.fwer <= alpha + 3 * found.fwer_se


@pytest.mark.parametrize("N", [6, 12])
@pytest.mark.parametrize("shape", ["normal", "t3"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_family_wise_error_holds_across_the_looks(scenario, shape, N):
    design = Design(first=3, wave=3, max_replicates=N, family_size=FAMILY)
    found = simulate(SCENARIOS[scenario], SDS, MARGIN, design, shape=shape, sims=SIMS, seed=61)
    assert holds(found), found


@pytest.mark.parametrize("N", [6, 12])
@pytest.mark.parametrize("shape", ["normal", "t3"])
@pytest.mark.parametrize("scenario", ["zero", "margin", "mixed"])
def test_looking_without_correction_breaks_the_rate(scenario, shape, N):
    """The naive rule (a 95 % t interval at every look, no correction for the looks or the family) must fail the
    same check: its error is far above α."""
    design = Design(first=3, wave=3, max_replicates=N, family_size=FAMILY)
    found = simulate(SCENARIOS[scenario], SDS, MARGIN, design, shape=shape, sims=SIMS, seed=61, rule="naive")
    assert not holds(found) and found.fwer - 3 * found.fwer_se > ALPHA, found


def test_the_rule_still_decides_large_effects():
    """Not a rule that is safe by never deciding: an effect of twice the margin is decided in most comparisons by
    N = 12, and a family that all decide stops before N."""
    design = Design(first=3, wave=3, max_replicates=12, family_size=FAMILY)
    found = simulate(SCENARIOS["beyond"], SDS, MARGIN, design, sims=1000, seed=1)
    assert found.power > 0.8
    easy = simulate(np.full(FAMILY, 10.0), np.full(FAMILY, 1.0), MARGIN, design, sims=500, seed=2)
    assert easy.power > 0.99 and easy.replicates < 12


# --- compare --replicates auto, at the edge ----------------------------------------------------------------------

def test_options_of_an_auto_run():
    o = CompareOptions(replicates=AUTO, max_replicates=6)
    assert o.auto and o.wave is None  # chosen from the slots when the run starts (auto_price.choose_wave)
    assert CompareOptions(replicates=3).replicates == 3 and not CompareOptions(replicates=3).auto
    for given, name in [({"replicates": AUTO}, "max-replicates"),
                        ({"replicates": AUTO, "max_replicates": 2}, "max-replicates"),
                        ({"replicates": AUTO, "max_replicates": 6, "wave": 1}, "wave"),
                        ({"replicates": 3, "max_replicates": 6}, "max-replicates"),
                        ({"replicates": "many"}, "replicates")]:
        with pytest.raises(SpecError) as err:
            CompareOptions(**given)
        assert err.value.field == name


EDGE = {  # argv after `compare`, the option the one line names
    "no-max": (["--replicates", "auto"], "max-replicates"),
    "max-below-the-first-wave": (["--replicates", "auto", "--max-replicates", "2"], "max-replicates"),
    "wave-of-one": (["--replicates", "auto", "--max-replicates", "6", "--wave", "1"], "wave"),
    "max-without-auto": (["--replicates", "3", "--max-replicates", "6"], "max-replicates"),
    "not-a-count": (["--replicates", "several"], "replicates"),
    "max-not-a-number": (["--replicates", "auto", "--max-replicates", "x"], "max-replicates"),
}


@pytest.mark.parametrize("argv, name", EDGE.values(), ids=EDGE.keys())
def test_bad_auto_values_are_one_line_exit_2(tmp_path, capsys, argv, name):
    from oracle_search.cli import main

    code = main(["compare", "--preset", "tiny", *argv, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and name in err[0], err
    assert not (tmp_path / "out").exists()


def test_integer_replicates_parse_as_before():
    from oracle_search.cli import _compare_options, build_parser, spec_from_args

    args = build_parser().parse_args(["compare", "--preset", "tiny", "--replicates", "4", "--out", "x"])
    options = _compare_options(args, spec_from_args(args))
    assert options.replicates == 4 and options.max_replicates is None
    args = build_parser().parse_args(["compare", "--preset", "tiny", "--replicates", "auto", "--max-replicates",
                                      "9", "--wave", "2", "--out", "x"])
    options = _compare_options(args, spec_from_args(args))
    assert (options.replicates, options.max_replicates, options.wave) == (AUTO, 9, 2)


# --- the waves and looks.json, on synthetic tables (no training) -----------------------------------------------------

KEYS = [("silo_paper", "oracle"), ("silo_paper", "constant_dense"), ("silo_fit", "oracle")]
TRUTH = {KEYS[0]: (0.0, 1.0), KEYS[1]: (20.0, 0.5), KEYS[2]: (1.0, 6.0)}  # mean, sd: equivalent, better, futile


def write_tables(out: Path, R: int, seed: int = 0) -> None:
    """What `compare` at R replicates leaves for a look: tables/replicates.csv and tables/verdict.csv (its margin
    column), and replicates.json."""
    rng = np.random.default_rng(seed)
    rows = [{"replicate": f"replicate-{r}", "schedule": s, "versus": v,
             "advantage": TRUTH[(s, v)][0] + TRUTH[(s, v)][1] * z, "ci_lo": 0, "ci_hi": 0, "n": 3, "verdict": "x"}
            for r, zs in zip(range(1, R + 1), rng.standard_normal((R, len(KEYS)))) for (s, v), z in zip(KEYS, zs)]
    (out / "tables").mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out / "tables" / "replicates.csv", index=False)
    pd.DataFrame([{"schedule": s, "versus": v, "margin": MARGIN} for s, v in KEYS]).to_csv(
        out / "tables" / "verdict.csv", index=False)
    (out / "replicates.json").write_text(json.dumps({"replicates": R}))


def run_waves(out: Path, max_replicates: int, wave: int = 3) -> list[int]:
    """The pipeline's loop with `write_tables` for compare: the R of every wave run."""
    held = json.loads((out / "replicates.json").read_text())["replicates"] if (out / "replicates.json").exists() else 0
    waves = Waves(out, 0.5, wave, max_replicates, held=held, say=lambda line: None)
    ran = []
    while (R := waves.next_replicates()) is not None:
        write_tables(out, R)
        waves.record(R)
        ran.append(R)
    return ran


def test_waves_stop_each_comparison_with_its_reason_and_resume(tmp_path):
    ran = run_waves(tmp_path, max_replicates=12)
    found = json.loads((tmp_path / "looks.json").read_text())
    assert ran == [R["replicates"] for R in found["looks"]] and ran[0] == 3
    final = found["looks"][-1]["decisions"]
    assert final["silo_paper vs constant_dense"]["label"] == "better"
    assert final["silo_paper vs oracle"]["label"] == "equivalent"
    assert final["silo_fit vs oracle"]["stopped"] in ("futile", "budget")
    assert all(d["stopped"] != "continue" for d in final.values())
    assert found["design"]["family_size"] == 3 and found["rule"] == sentence(Design(**found["design"]))
    # Rerun: nothing new is looked at; the last R runs once more (compare resumes, trains nothing).
    assert run_waves(tmp_path, max_replicates=12) == [ran[-1]]
    assert json.loads((tmp_path / "looks.json").read_text())["looks"] == found["looks"]


def test_a_larger_max_extends_a_run_that_stopped_before_its_n(tmp_path):
    ran = run_waves(tmp_path, max_replicates=12)
    found = json.loads((tmp_path / "looks.json").read_text())
    last = ran[-1]
    assert last < 12, ran  # every comparison stopped before N: α is left
    futile = [k for k, d in found["looks"][-1]["decisions"].items() if d["stopped"] == "futile"]
    assert futile == ["silo_fit vs oracle"]
    more = run_waves(tmp_path, max_replicates=30)
    found = json.loads((tmp_path / "looks.json").read_text())
    assert more[0] == last + 3 and found["design"]["since"] == last and found["designs"][0]["max_replicates"] == 12
    assert found["design"]["spent"] == pytest.approx(Design(**found["designs"][0]).cumulative(last))
    # The futile comparison reopened; the decided ones kept their look.
    final = found["looks"][-1]["decisions"]
    assert final["silo_paper vs constant_dense"]["replicates"] <= last
    assert found["looks"][len(ran)]["decisions"]["silo_fit vs oracle"]["replicates"] == last + 3


def test_a_run_that_looked_at_its_n_reopens_only_its_futile_comparisons(tmp_path):
    """Looked at N = 6, then N = 9: a comparison that stopped as futile at R = 3 left its share of the look at 6
    unspent, and reopens on the rest of its own α; the others stay as they were."""
    ran = run_waves(tmp_path, max_replicates=6)
    assert ran == [3, 6]
    final = json.loads((tmp_path / "looks.json").read_text())["looks"][-1]["decisions"]
    futile = {k: d["replicates"] for k, d in final.items() if d["stopped"] == "futile"}
    assert futile == {"silo_fit vs oracle": 3}  # sd 6 against a margin of 3: out of reach by 6
    assert run_waves(tmp_path, max_replicates=9) == [9]
    found = json.loads((tmp_path / "looks.json").read_text())
    old = Design(**found["design"])
    assert old.max_replicates == 6 and set(found["own"]) == set(futile)
    own = Design(**found["own"]["silo_fit vs oracle"])
    assert (own.max_replicates, own.since) == (9, 3) and own.spent == pytest.approx(old.cumulative(3))
    last = found["looks"][-1]
    assert last["replicates"] == 9 and set(last["levels"]) == set(futile)  # only the reopened one was looked at
    assert {k: d for k, d in last["decisions"].items() if k not in futile} == \
        {k: d for k, d in final.items() if k not in futile}
    assert last["decisions"]["silo_fit vs oracle"]["replicates"] == 9
    # Its α over all its looks: its share at R = 3 under the old design, then the rest of its own at 9: α / m.
    charged = sum(look["levels"]["silo_fit vs oracle"][0] for look in found["looks"]
                  if "silo_fit vs oracle" in look.get("levels", {}))
    assert charged * old.family_size == pytest.approx(ALPHA) and charged * old.family_size <= ALPHA + 1e-12
    text = "\n".join(sequential_section(tmp_path))
    assert "N was raised from 6 to 9 after the look at R = 6: the 1 comparison that had stopped as futile before " \
           "it (at R = 3) reopened" in text
    assert "R = 9 (1 comparison looked at, each at its own α_k " in text
    assert "the looks give the decisions recorded at them" in text  # replayed at each comparison's own level
    assert run_waves(tmp_path, max_replicates=9) == [9]  # a resume: nothing new


def test_a_run_that_spent_its_alpha_at_n_is_not_extended_and_bad_resumes_are_refused(tmp_path):
    ran = run_waves(tmp_path, max_replicates=6)
    assert ran == [3, 6]
    path = tmp_path / "looks.json"
    found = json.loads(path.read_text())
    for d in found["looks"][-1]["decisions"].values():  # as if every undecided one had been open at N = 6
        if d["stopped"] == "futile":
            d["stopped"], d["replicates"] = "budget", 6
    path.write_text(json.dumps(found))
    for N, margin, name in ((9, 0.5, "max-replicates"), (4, 0.5, "max-replicates"), (6, 1.0, "margin")):
        with pytest.raises(SpecError) as err:
            Waves(tmp_path, margin, 3, N, held=6)
        assert err.value.field == name
    with pytest.raises(SpecError, match="no error rate left"):
        Waves(tmp_path, 0.5, 3, 9, held=6)


def test_the_pipeline_loop_runs_compare_in_waves(tmp_path, monkeypatch):
    """`pipeline.compare` with --replicates auto: compare at R = 3, 6, ... (each a resume), a look after each,
    then the report again; no training here (compare's body is replaced by one that writes its tables)."""
    from oracle_search import pipeline

    called = []

    def fake_compare(spec, out, options, *args):
        assert options.replicates in (3, 6, 9, 12) and options.max_replicates is None
        called.append(options.replicates)
        write_tables(Path(out), options.replicates)
        return pipeline.CompareResult(pd.DataFrame({"x": [1]}), Path(out) / "report.html")

    monkeypatch.setattr(pipeline.compare, "__wrapped__", fake_compare)
    monkeypatch.setattr(pipeline, "report", lambda out, margin=None: Path(out) / "report.html")
    monkeypatch.setattr(pipeline, "reject_silo_schedule", lambda spec: None)
    monkeypatch.setattr(pipeline, "holding", _no_lock)
    result = pipeline.compare(None, tmp_path, CompareOptions(replicates=AUTO, max_replicates=12, wave=3))
    looks = json.loads((tmp_path / "looks.json").read_text())["looks"]
    assert called == [R["replicates"] for R in looks] and result.report == tmp_path / "report.html"
    # A resume without --wave keeps the recorded wave (no slots simulated: the spec is not even given).
    called.clear()
    pipeline.compare(None, tmp_path, CompareOptions(replicates=AUTO, max_replicates=12))
    assert called == [looks[-1]["replicates"]]


class _no_lock:
    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# --- the report's lines -------------------------------------------------------------------------------------------

def test_sequential_section_over_a_hand_made_looks_json(tmp_path):
    d = Design(first=3, wave=3, max_replicates=6, family_size=2)
    keep = Decision("equivalent", "decided", -1.0, 1.0, 0.999, 0.0, 0.5, 3, 3, MARGIN)
    go = Decision("inconclusive", "continue", -9.0, 9.0, 0.999, 1.0, 4.0, 3, 3, MARGIN)
    (tmp_path / "looks.json").write_text(json.dumps({
        "design": vars(d) | {}, "margin_per_cycle": 0.5, "designs": [],
        "looks": [{"replicates": 3, "previous": 0, "alpha": d.increment(3, 0), "cumulative": d.cumulative(3),
                   "error": d.increment(3, 0) / 2, "max_replicates": 6,
                   "decisions": {"silo_paper vs oracle": keep.record(), "silo_fit vs warmup": go.record()}}]}))
    lines = sequential_section(tmp_path)
    text = "\n".join(lines)
    assert lines[0] == sentence(d)
    assert "silo_paper vs oracle: equivalent, decided at R = 3" in text
    assert "silo_fit vs warmup: still open at R = 3" in text and "rerun the same command" in text
    assert "recorded at the looks" in text  # no replicates' advantages at hand: the recorded decisions
    # With the advantages at hand, the looks are applied again: these give other decisions, and it says so.
    per = pd.DataFrame([{"replicate": f"replicate-{r}", "schedule": s, "versus": v, "advantage": a}
                        for r in (1, 2, 3) for (s, v), a in ((("silo_paper", "oracle"), 20.0 + r),
                                                             (("silo_fit", "warmup"), 0.1 * r))])
    again = "\n".join(sequential_section(tmp_path, per))
    assert "differ from what was recorded for silo_paper vs oracle" in again


def test_a_fixed_r_run_says_its_labels_are_fixed_r_labels(tmp_path):
    assert sequential_section(tmp_path) is None  # neither looks nor replicates
    (tmp_path / "replicates.json").write_text(json.dumps({"replicates": 3}))
    lines = sequential_section(tmp_path)
    assert len(lines) == 1 and "fixed-R labels: one look at R = 3" in lines[0] and "optional stopping" in lines[0]
    assert "R = 5" in sequential_section(tmp_path / "nowhere", replicates=5)[0]
