"""`compare --replicates auto` priced before it runs (issue 61, `oracle_search.auto_price`): the wave's width from
the slots, each wave's wall simulated, the replicates expected under the rule at stated assumptions, and the dry
run's lines. The simulator runs the drivers' own code on the accuracy model; nothing trains, no Ray starts."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from oracle_search import auto_price, sequential
from oracle_search.options import AUTO, CompareOptions
from oracle_search.sequential import MIN_WAVE, Design, simulate, wave_from_slots
from trainables.spec import ExperimentSpec


# --- the wave's width ---------------------------------------------------------------------------------------------

def test_the_wave_holds_as_many_replicates_as_one_leaves_room_for():
    # One replicate keeps 18 of 256 slots busy on average: 14 fit; capped at N = 12, or 14 of N = 20.
    assert wave_from_slots(256, busy=18 * 1000.0, wall=1000.0, max_replicates=12) == 12
    assert wave_from_slots(256, busy=18 * 1000.0, wall=1000.0, max_replicates=20) == 14
    # Slots that one replicate already fills (2 slots, 1.97 busy): the least wave, 3.
    assert wave_from_slots(2, busy=1.97 * 500.0, wall=500.0, max_replicates=6) == MIN_WAVE
    assert wave_from_slots(64, busy=10 * 500.0, wall=500.0, max_replicates=6) == 6  # 6 fit: N
    assert wave_from_slots(64, busy=20 * 500.0, wall=500.0, max_replicates=6) == MIN_WAVE  # 3 fit


def test_options_leave_the_wave_to_the_slots_unless_given():
    assert CompareOptions(replicates=AUTO, max_replicates=6).wave is None
    assert CompareOptions(replicates=AUTO, max_replicates=6, wave=2).wave == 2
    with pytest.raises(Exception) as err:  # without --wave the first wave is 3: N must allow it
        CompareOptions(replicates=AUTO, max_replicates=2)
    assert err.value.field == "max-replicates"


# --- the replicates expected ----------------------------------------------------------------------------------------

def test_the_simulation_says_where_each_family_stopped():
    design = Design(first=3, wave=3, max_replicates=12, family_size=4)
    easy = simulate(np.full(4, 10.0), np.full(4, 0.5), 3.0, design, sims=300, seed=1)
    shares = dict(easy.ends)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert easy.replicates == pytest.approx(sum(R * p for R, p in shares.items()))
    assert easy.reach(3) == pytest.approx(1.0) and easy.replicates < 12  # large effects: stopped before N
    assert easy.reach(12) == pytest.approx(sum(p for R, p in shares.items() if R >= 12))
    hard = simulate(np.full(4, 3.0), np.full(4, 4.0), 3.0, design, sims=300, seed=1)
    assert hard.replicates > easy.replicates and hard.replicates_se > 0


def test_the_family_and_the_assumptions():
    family = auto_price.family(CompareOptions(replicates=AUTO, max_replicates=6))
    assert len(family) == 18 and set(family) == set(sequential.COMMITTED)
    assert len(auto_price.family(CompareOptions(replicates=AUTO, max_replicates=6, silo_fit=False))) == 9
    found = sequential.scenarios(family)
    assert list(found) == ["the committed example's effects", "every effect 0", "every effect at the margin",
                           "every effect twice the margin"]
    effects, sds = found["the committed example's effects"]
    assert effects[0] == sequential.COMMITTED[family[0]][0] and sds[0] == sequential.COMMITTED[family[0]][1]
    assert np.all(found["every effect twice the margin"][0] == 2.0)


# --- priced on the simulator ----------------------------------------------------------------------------------------

def tiny() -> ExperimentSpec:
    from oracle_search.cli import build_parser, spec_from_args

    args = build_parser().parse_args(["compare", "--preset", "tiny", "--dry-run"])
    return dataclasses.replace(spec_from_args(args), precision="fp32")


def test_a_price_on_two_slots_runs_every_wave_and_expects_no_more():
    options = CompareOptions(replicates=AUTO, max_replicates=6)
    found = auto_price.price(tiny(), options, 2, 0.05, sims=300)
    alone = found.alone
    assert found.chosen and found.design.wave == wave_from_slots(2, alone.busy, alone.wall, 6)
    assert found.waves() == [(3, 3), (6, 3)] and found.design.family_size == 18
    assert found.most() == pytest.approx(2 * found.walls[3])
    assert found.walls[3] > alone.wall  # three side by side on two slots take longer than one alone
    for s in found.expected.values():
        assert 3 <= s.replicates <= 6 and found.expected_wall(s) <= found.most() + 1e-9
    text = "\n".join(found.lines())
    assert "waves of 3 replicates side by side (from the slots" in text
    assert "expected: " in text and "at most: 6 replicates in 2 waves" in text
    assert "the committed example's effects" in text
    given = auto_price.price(tiny(), dataclasses.replace(options, wave=2), 2, 0.05, sims=100, other=False)
    assert not given.chosen and given.waves() == [(2, 2), (4, 2), (6, 2)] and "(--wave)" in given.lines()[0]


def test_the_dry_run_prints_the_expected_and_the_most(capsys, tmp_path):
    from oracle_search.cli import main

    code = main(["compare", "--preset", "tiny", "--precision", "fp32", "--seconds-per-epoch", "0.05", "--dry-run",
                 "--replicates", "auto", "--max-replicates", "6", "--slots", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "the plan below is one replicate's" in out
    assert "--replicates auto: waves of 3 replicates side by side" in out
    assert "replicates expected under the sequential rule" in out and "at most: 6 replicates" in out
