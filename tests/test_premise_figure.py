"""The premise, as the paper measures it (issue 60; oracle_search.premise, analysis.premise_figure, `oracle-search
premise`): the two readings of the gradients' σ on a hand-built masked gradient, the command's refusals at the
edge (one line, exit 2, before torch loads), and one real tiny chain that writes the csv, the figure and the
sentence."""
from __future__ import annotations

import csv
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from analysis.premise_figure import shape_sentence
from oracle_search.cli import main
from oracle_search.premise import gradient_readings, measure, outside, sigma
from oracle_search.premise_settings import MOMENTS, PremiseSettings, cycles_to, figure_cycles

ROOT = Path(__file__).resolve().parents[1]


def test_the_two_readings_differ_as_they_must_on_a_hand_built_masked_gradient():
    """`all` counts a pruned weight's gradient as zero, `surviving` leaves it out: both checked against numpy by
    hand. The zeros pull `all`'s σ towards zero (three of eight weights pruned here)."""
    g1 = np.array([[0.010, -0.020, 0.030], [0.005, -0.015, 0.040]])
    g2 = np.array([[-0.030, 0.025]])
    m1 = np.array([[True, False, True], [True, True, False]])
    m2 = np.array([[False, True]])
    grads = {"0.weight": torch.tensor(g1), "2.weight": torch.tensor(g2)}
    masks = {"0.weight": torch.tensor(m1), "2.weight": torch.tensor(m2), "0.bias": torch.ones(2, dtype=torch.bool)}
    readings = gradient_readings(grads, masks)

    all_by_hand = np.array([0.010, 0.0, 0.030, 0.005, -0.015, 0.0, 0.0, 0.025])
    surviving_by_hand = np.array([0.010, 0.030, 0.005, -0.015, 0.025])
    np.testing.assert_allclose(readings["all"].numpy(), all_by_hand)
    np.testing.assert_allclose(readings["surviving"].numpy(), surviving_by_hand)
    s_all = math.sqrt(np.mean((all_by_hand - all_by_hand.mean()) ** 2))  # population σ, written out
    s_surv = math.sqrt(np.mean((surviving_by_hand - surviving_by_hand.mean()) ** 2))
    assert sigma(readings["all"]) == pytest.approx(s_all, rel=1e-12)
    assert sigma(readings["surviving"]) == pytest.approx(s_surv, rel=1e-12)
    # By hand: mean 0.055/8, squared deviations summing to 1.496875e-3; mean 0.011, summing to 1.27e-3.
    assert s_all == pytest.approx(math.sqrt(1.496875e-3 / 8)) and s_surv == pytest.approx(math.sqrt(1.27e-3 / 5))
    assert sigma(readings["all"]) < sigma(readings["surviving"])
    # The paper's window [-0.012, 0.008]: 0.010, 0.030, -0.015, 0.025 lie outside.
    assert outside(readings["all"]) == pytest.approx(4 / 8)
    assert outside(readings["surviving"]) == pytest.approx(4 / 5)
    # Nothing pruned: the two readings are one.
    full = {n: torch.ones_like(m) for n, m in masks.items()}
    both = gradient_readings(grads, full)
    assert torch.equal(both["all"], both["surviving"]) and both["all"].numel() == 8


def test_measure_zeroes_a_pruned_weights_gradient_which_autograd_does_not():
    """A pruned weight (held at zero) still has a nonzero gradient from autograd; the `all` reading counts it as
    zero, as the training applies it. Pooled over several batches; the model is left as it was."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    masks = {"0.weight": torch.rand(3, 4) > 0.5, "2.weight": torch.ones(2, 3, dtype=torch.bool)}
    with torch.no_grad():
        model[0].weight.mul_(masks["0.weight"])
        model[0].bias.fill_(5.0)  # every hidden unit active: each weight of the first layer gets a gradient
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batches = [(torch.randn(5, 4), torch.randint(0, 2, (5,))) for _ in range(3)]
    m = measure(model, masks, batches, nn.functional.cross_entropy)
    assert m.batches == 3 and len(m.per_batch["all"]) == 3
    pruned = int((~masks["0.weight"]).sum())
    assert m.grads["all"].numel() == 3 * 18 and m.grads["surviving"].numel() == 3 * (18 - pruned)
    assert int((m.grads["all"] == 0).sum()) >= 3 * pruned
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()) and model[0].weight.grad is None
    nn.functional.cross_entropy(model(batches[0][0]), batches[0][1]).backward()
    assert model[0].weight.grad[~masks["0.weight"]].abs().sum() > 0  # autograd's own: not zero
    assert m.acts.numel() == 3 * 5 * 3  # the hidden ReLU's outputs of every batch


def test_the_density_target_gives_the_papers_cycles():
    assert cycles_to(13.4, 0.2) == 9 and cycles_to(51.2, 0.2) == 3 and cycles_to(99.0, 0.2) == 1
    assert figure_cycles(9) == [0, 3, 6, 9] and figure_cycles(3) == [0, 1, 2, 3]
    with pytest.raises(Exception, match="batches"):
        PremiseSettings(batches=0)


@pytest.mark.parametrize("argv, flag", [
    (["--density-target", "0"], "density-target"),
    (["--density-target", "100"], "density-target"),
    (["--density-target", "nan"], "density-target"),
    (["--density-target", "abc"], "density-target"),
    (["--max-lr", "-0.1"], "max-lr"),
    (["--batches", "0"], "batches"),
    (["--epochs", "0"], "epochs"),
    (["--num-samples", "-5"], "num-samples"),
    (["--rate", "1.5"], "rate"),
    (["--schedule", "silo"], "schedule"),
])
def test_a_bad_value_is_refused_in_one_line_naming_its_flag(argv, flag, tmp_path, capsys):
    code = main(["premise", "--out", str(tmp_path / "out"), *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith("oracle-search: error:") and flag in err, err
    assert not (tmp_path / "out").exists()


def test_the_refusals_come_before_torch_loads(tmp_path):
    """One fresh process: every refusal exits 2 with one line, and torch was never imported."""
    file = tmp_path / "a-file"
    file.write_text("")
    cases = [["--density-target", "0"], ["--max-lr", "0"], ["--batches", "-1"], ["--epochs", "0"],
             ["--out", str(file)], ["--schedule", "silo"]]
    code = ("import sys\nfrom oracle_search.cli import main\n"
            f"for extra in {cases!r}:\n"
            f"    assert main(['premise', '--out', {str(tmp_path / 'out')!r}, *extra]) == 2, extra\n"
            "print('torch' in sys.modules)\n")
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == len(cases) and all(line.startswith("oracle-search: error:") for line in lines), lines
    assert "--out" in lines[4] or "out:" in lines[4]


def test_a_tiny_real_run_writes_both_readings_at_both_moments_and_the_figure(tmp_path, capsys):
    """MNIST-1D, 1,000 samples, 2 epochs a cycle, 3 cycles (λ = 100, 80, 64, 51.2): the csv holds every (λ, moment,
    reading), the end's surviving first-batch σ is `layer_statistics`' own, and the figure and sentence are written."""
    out = tmp_path / "premise"
    code = main(["premise", "--out", str(out), "--epochs", "2", "--num-samples", "1000", "--density-target", "51.2",
                 "--batches", "2", "--seed", "3"])
    printed, err = capsys.readouterr()
    assert code == 0, err
    with open(out / "premise.csv") as f:
        rows = list(csv.DictReader(f))
    keys = {(round(float(r["lambda"]), 1), r["moment"], r["reading"]) for r in rows}
    assert keys == {(lam, m, r) for lam in (100.0, 80.0, 64.0, 51.2) for m in ("start", "end")
                    for r in ("all", "surviving")}
    assert len(rows) == 16 and {r["batches"] for r in rows} == {"2"}
    by = {(int(r["cycle"]), r["moment"], r["reading"]): r for r in rows}
    for cycle in range(4):
        for moment in ("start", "end"):
            a, s = by[(cycle, moment, "all")], by[(cycle, moment, "surviving")]
            assert float(a["sigma_grad"]) > 0 and float(s["sigma_grad"]) > 0 and float(a["sigma_act"]) > 0
            assert a["sigma_act"] == s["sigma_act"]
            pruned = 1 - 0.8 ** cycle
            assert float(a["zeros"]) >= pruned - 1e-9  # the pruned weights' zeros, at least
            if cycle == 0:
                assert a["sigma_grad"] == s["sigma_grad"]  # nothing pruned: one reading
            else:
                assert float(a["sigma_grad"]) < float(s["sigma_grad"])
        end = by[(cycle, "end", "surviving")]
        assert float(end["sigma_grad_first_batch"]) == pytest.approx(float(end["layer_statistics_grad_std"]),
                                                                     rel=1e-5)
        assert end["val_acc"] != "" and by[(cycle, "start", "all")]["val_acc"] == ""
    assert (out / "premise.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = (out / "premise.svg").read_text()  # the same figure, vector, for a paper
    # per moment: the gradients in both readings, the hidden representations, σ against λ
    assert svg.startswith("<?xml") and len(re.findall(r'<g id="axes_\d+">', svg)) == 4 * len(MOMENTS)
    md = (out / "premise.md").read_text()
    assert "![" in md and "(premise.png)" in md and "(premise.svg)" in md and "8.40e-3 → 3.30e-3" in md
    assert "over all weights (pruned ones as zeros)" in md and "over the surviving weights" in md
    assert "seed 3" in md and "rate 0.2" in md and "no normalisation layer" in md
    assert "written:" in printed and "cycle 3 λ = 51.2 %" in printed


def test_the_sentence_names_the_reading_that_falls_the_one_that_rises_and_one_that_stays():
    sigmas = {("start", "all"): (5e-4, 1e-4), ("start", "surviving"): (5e-4, 5.2e-4),
              ("end", "all"): (8e-4, 3e-4), ("end", "surviving"): (8e-4, 1.6e-3)}
    rows = [{"cycle": c, "lambda": lam, "moment": m, "reading": r, "sigma_grad": s[i]}
            for (m, r), s in sigmas.items() for i, (c, lam) in enumerate([(0, 100.0), (9, 13.42)])]
    said = shape_sentence(rows)
    assert said.startswith("From λ = 100 to λ = 13.4, the weight gradients' σ falls as in the paper's Fig. 1(a) "
                           "(8.40e-3 → 3.30e-3, ×0.39) over all weights (pruned ones as zeros) at the cycle's start")
    assert "rises over the surviving weights at the cycle's end (trained) (8.00e-4 → 1.60e-3, ×2.00)" in said
    assert "stays within ±10 % over the surviving weights at the cycle's start" in said
    rising = [dict(r, sigma_grad=r["sigma_grad"] * (15 if r["reading"] == "all" else 3)) if r["cycle"] else r
              for r in rows]
    assert shape_sentence(rising).startswith("No reading reproduces the paper's shape")
