"""The lean MLP step (`trainables.lean`) is the autograd step's math (`trainables.cycle.train_step`), and
`make_step` chooses it only where it applies.

Exactness, as measured on this project's MLP (fp32 and bf16 autocast, native and AVX2 kernels):
- The forward and backward issue the ops autograd runs, in its order and dtypes: the loss and every gradient of
  a step are equal bit for bit.
- The update is SGD's fused kernel (`torch._fused_sgd_`), which rounds its multiply-adds in its own order:
  weights and momenta differ from `torch.optim.SGD`'s per-tensor loop by about one float32 ulp per step, and
  the next steps start from there. Measured on digits-mlp (one thread, native and AVX2 kernels): after 30 steps
  the weights, momenta and losses are at most 7e-7 apart relative to each tensor's largest magnitude, in fp32
  and bf16; after three chained 30-epoch cycles the weights are 4e-5 apart in fp32 and 3e-8 in bf16, with the
  same accuracies and best epochs. In bf16 autocast a weight an ulp apart can round to another bfloat16 in the
  next forward pass (a relative step of 2^-8), so bf16 gets ten times fp32's tolerance.
Pruned weights and their momenta stay exactly zero on both paths.
"""
from __future__ import annotations

import copy
import dataclasses
from itertools import islice

import pytest
import torch
from torch import nn

from trainables.checkpoints import load_checkpoint
from trainables.cycle import make_optimizer, make_step, run_cycle, train_step
from trainables.lean import LeanMLPStep, lean_step
from trainables.plugins import build_model, load_data, resolve
from trainables.presets import PRESETS
from trainables.pruning import MaskedWeights, full_masks, prune
from trainables.spec import OptimizerSpec

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: as a 1-CPU trial runs

DIGITS = dataclasses.replace(PRESETS["digits-mlp"].spec, device="cpu")
CPU = torch.device("cpu")
# Relative to a tensor's largest magnitude: after STEPS steps, and after a training of two short cycles.
TOLERANCE = {"fp32": 1e-5, "bf16": 1e-4}
CYCLE_TOLERANCE = {"fp32": 1e-4, "bf16": 1e-3}
STEPS = 30


def twins(spec, rate: float):
    """Two equal MLPs on `spec`'s data, pruned by global magnitude at `rate` (0: dense), each with its optimizer
    and masks: one for the autograd step, one for the lean step."""
    data = load_data(spec)
    torch.manual_seed(0)
    model = build_model(spec.model, data.input_shape, data.num_classes)
    masks = full_masks(model)
    if rate:
        masks = prune(model, masks, rate, resolve("pruner", "global_magnitude"), lambda: iter(()), seed=0)
    out = []
    for net in (model, copy.deepcopy(model)):
        masked = MaskedWeights(net, masks)
        masked.apply()
        out.append((net, make_optimizer(spec.optimizer, net.parameters(), 0.1), masked))
    return data, masks, out


def batches(data, spec, n: int):
    return list(islice(data.batches("train", spec.batch_size, torch.Generator().manual_seed(1)), n))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_lean_step_computes_autograds_loss_and_gradients_bit_for_bit(precision):
    spec = dataclasses.replace(DIGITS, precision=precision)
    data, _, [(a, opt_a, masked_a), (b, opt_b, masked_b)] = twins(spec, 0.5)
    lean = lean_step(b, opt_b, masked_b, spec, CPU)
    assert isinstance(lean, LeanMLPStep)
    for x, y in batches(data, spec, 3):  # the first step (momenta set from the gradients) and later ones
        loss_a = train_step(a, opt_a, masked_a, x, y, spec, CPU)
        loss_b = lean(x, y)
        assert torch.equal(loss_a, loss_b)
        assert all(torch.equal(p.grad, g) for p, g in zip(a.parameters(), lean.grads))
        # the update's rounding is the fused kernel's; copy the autograd side's weights and momenta over, so that
        # the next step's gradients are compared from the same point
        with torch.no_grad():
            for p, q in zip(a.parameters(), b.parameters()):
                q.copy_(p)
                opt_b.state[q]["momentum_buffer"].copy_(opt_a.state[p]["momentum_buffer"])


def relative_gap(x: torch.Tensor, y: torch.Tensor) -> float:
    return float((x - y).abs().max() / y.abs().max().clamp_min(1e-30))


@pytest.mark.parametrize("precision,rate,optimizer", [
    ("fp32", 0.0, OptimizerSpec()), ("fp32", 0.8, OptimizerSpec()), ("bf16", 0.0, OptimizerSpec()),
    ("bf16", 0.8, OptimizerSpec()), ("fp32", 0.8, OptimizerSpec("sgd", momentum=0.0, weight_decay=0.0))])
def test_lean_steps_follow_the_autograd_steps_within_rounding(precision, rate, optimizer):
    spec = dataclasses.replace(DIGITS, precision=precision, optimizer=optimizer)
    data, masks, [(a, opt_a, masked_a), (b, opt_b, masked_b)] = twins(spec, rate)
    lean = make_step(b, opt_b, masked_b, spec, CPU)
    assert isinstance(lean, LeanMLPStep)
    steps = batches(data, spec, 10)
    losses_a, losses_b = [], []
    peak = 0.2 if optimizer.momentum else 1.0  # without momentum, a larger LR to train as far in STEPS steps
    for i in range(STEPS):
        x, y = steps[i % len(steps)]
        for opt in (opt_a, opt_b):  # an LR that moves, as run_cycle's schedule sets it
            opt.param_groups[0]["lr"] = peak * (i + 1) / STEPS
        losses_a.append(float(train_step(a, opt_a, masked_a, x, y, spec, CPU)))
        losses_b.append(float(lean(x, y)))
    assert losses_a[-1] < losses_a[0]  # it trained
    assert losses_b == pytest.approx(losses_a, rel=TOLERANCE[precision])
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert relative_gap(q.detach(), p.detach()) <= TOLERANCE[precision], name
        if name in masks:  # pruned: exactly zero
            assert not q[~masks[name]].any() and not p[~masks[name]].any()
        if optimizer.momentum:
            m_a, m_b = opt_a.state[p]["momentum_buffer"], opt_b.state[q]["momentum_buffer"]
            assert relative_gap(m_b, m_a) <= TOLERANCE[precision], name
            assert name not in masks or not m_b[~masks[name]].any()
        else:
            assert not opt_b.state[q] and opt_a.state[p].get("momentum_buffer") is None


def test_the_lean_step_applies_only_to_a_plain_mlp_with_sgd_and_cross_entropy_on_a_cpu():
    spec = dataclasses.replace(DIGITS, precision="fp32")
    data = load_data(spec)

    def chosen(spec=spec, model=None, optimizer=None, device=CPU, scaler=None) -> bool:
        torch.manual_seed(0)
        model = model or build_model("mlp", data.input_shape, data.num_classes)
        optimizer = optimizer or make_optimizer(spec.optimizer, model.parameters(), 0.1)
        step = make_step(model, optimizer, MaskedWeights(model, full_masks(model)), spec, device, scaler)
        return isinstance(step, LeanMLPStep)

    assert chosen() and chosen(dataclasses.replace(spec, precision="bf16"))
    assert chosen(dataclasses.replace(spec, precision="auto"))  # resolved as train_step's autocast resolves it
    assert not chosen(dataclasses.replace(spec, precision="fp16"))
    assert not chosen(dataclasses.replace(spec, optimizer=OptimizerSpec("adam")))
    assert not chosen(dataclasses.replace(spec, optimizer=OptimizerSpec("rmsprop")))
    assert not chosen(dataclasses.replace(spec, loss="torch.nn.functional:nll_loss"))
    assert not chosen(dataclasses.replace(spec, compile=True))
    assert not chosen(device=torch.device("cuda"))  # a GPU keeps autograd (the check needs no GPU)
    assert not chosen(scaler=torch.amp.GradScaler("cpu"))
    net = build_model("mlp", data.input_shape, data.num_classes)
    assert not chosen(model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, nesterov=True))
    hooked = build_model("mlp", data.input_shape, data.num_classes)
    hooked[2].register_forward_hook(lambda *_: None)  # a hook would see nothing of the lean forward
    assert not chosen(model=hooked)
    assert not chosen(model=nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.GELU(), nn.Linear(32, 10)))
    assert not chosen(model=nn.Sequential(nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10)))
    assert not chosen(model=build_model("resnet20", (3, 32, 32), 10))
    # the project's loss by its import path is the same function: the same math
    assert chosen(dataclasses.replace(spec, loss="torch.nn.functional:cross_entropy"))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_pruning_cycle_trains_the_same_with_either_step(tmp_path, monkeypatch, precision):
    """run_cycle chooses the lean step for the MLP; with the choice turned off it trains through autograd. Cycle
    0 and a pruned cycle 1 of digits-mlp: the same accuracies, weights within rounding, and §3.1's statistics
    (which take their own autograd gradient on one batch) read the same."""
    spec = dataclasses.replace(DIGITS, precision=precision, epochs=6)
    runs = {}
    for path in ("lean", "autograd"):
        if path == "autograd":
            monkeypatch.setattr("trainables.cycle.lean_step", lambda *args: None)
        start, rows = None, []
        for cycle in (0, 1):
            r = run_cycle(spec, cycle=cycle, max_lr=0.1, seed=0, start_checkpoint=start,
                          checkpoint_dir=tmp_path / path / f"c{cycle}")
            rows.append(r)
            start = r.checkpoint
        runs[path] = rows
    for lean, auto in zip(runs["lean"], runs["autograd"]):
        assert lean.density == auto.density and lean.best_epoch == auto.best_epoch
        assert lean.val_acc == pytest.approx(auto.val_acc, abs=0.5)
        assert lean.test_acc == pytest.approx(auto.test_acc, abs=0.5)
        assert lean.grad_std == pytest.approx(auto.grad_std, rel=CYCLE_TOLERANCE[precision])
        assert lean.act_std == pytest.approx(auto.act_std, rel=CYCLE_TOLERANCE[precision])
        weights = load_checkpoint(lean.checkpoint)["model"]
        for name, w in load_checkpoint(auto.checkpoint)["model"].items():
            assert relative_gap(weights[name], w) <= CYCLE_TOLERANCE[precision], name
