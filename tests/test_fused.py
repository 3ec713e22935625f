"""Fused training (trainables.fused) equals K separate trainings: one step per paper model against torch.optim,
two chained cycles per natively fused model against run_cycle (both in float64, to 1e-6), the native layers and
their op count, a diverged candidate that disturbs no other, and the Tune adapter."""
from __future__ import annotations

import collections
import copy
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import trainables.cycle
import trainables.fused
from trainables.checkpoints import checkpoint_hash, load_checkpoint
from trainables.cycle import make_optimizer, run_cycle, train_step
from trainables.data import TensorData
from trainables.plugins import load_data
from trainables.fused import Fused, FusedOptimizer, fused_step, run_fused_cycle
from trainables import fused_native
from trainables.models import MODELS
from trainables.presets import PRESETS
from trainables.pruning import MaskedWeights, apply_masks, prunable
from trainables.spec import ExperimentSpec, OptimizerSpec, SpecError

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: as a 1-CPU trial runs
# The equivalence checked here is of the algorithm, so in float64 where it is compared to 1e-6, float32 elsewhere
# (never "auto": bf16 on one CPU, float32 on another). In bf16 one batched matmul and K separate ones round
# differently; in float32 too on some kernels: on AVX2 (ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2) eight
# epochs of Adam took the digits candidates 0.7 % apart in weight norm and 55 % apart in grad_std after two
# cycles, since Adam's normalised step turns rounding noise in a near-zero gradient into a full-size step; in
# float64 the same runs agreed to 3e-15. train_step reads only the autocast and layout switches of CPU_SPEC.
CPU_SPEC = ExperimentSpec(device="cpu", precision="fp32")

ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")
TINY = dataclasses.replace(PRESETS["tiny"].spec, device="cpu", precision="fp32")
LRS = [0.01, 0.05, 0.2]




def layer_scales(state: dict[str, torch.Tensor]) -> dict[str, float]:
    """Each floating tensor's name -> the largest |entry| among its layer's floating tensors (a layer: the names
    before the last dot), the scale that an absolute tolerance on the tensor is set against.

    Not the tensor's own largest entry: a tensor can be zero up to rounding, and then the two runs' rounding noise
    differs by about the noise itself on any CPU whose kernels round differently. MobileNetV2's first block's last
    BatchNorm shift is one: its input feeds a 1x1 convolution and a BatchNorm, whose backward sums to exactly zero
    over batch and positions, so its gradient cancels to ~1e-17 while the weights it is computed from are ~1. The
    self-scaled tolerance failed there on an AVX2-only EPYC (3.2e-17 apart at 5.7e-17 largest) and with an avx512
    EPYC's default kernels (4.5e-17 apart at 5.8e-17). Rounding errors of a layer's tensors are float64's epsilon
    times the magnitudes that entered them, the layer's weights and activations, so 1e-6 of the layer's scale
    still catches any real error (a wrong step moves a tensor by lr x gradient, far above it). Never zero: a layer
    holds a weight (random; a BatchNorm's starts at 1) and, if BatchNorm, its running variance (starts at 1)."""
    layers: dict[str, float] = collections.defaultdict(float)
    for n, t in state.items():
        if t.is_floating_point():
            layers[n.rpartition(".")[0]] = max(layers[n.rpartition(".")[0]], float(t.abs().max()))
    scales = {n: layers[n.rpartition(".")[0]] for n, t in state.items() if t.is_floating_point()}
    assert all(s > 0 for s in scales.values()), scales
    return scales


def _random_masks(model: nn.Module, keep: float = 0.7) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {n: torch.rand(p.shape, generator=g) < keep for n, p in prunable(model).items()}


def _separate_steps(model: nn.Module, masks, o: OptimizerSpec, lr: float, batches) -> tuple[dict, list[float]]:
    """What run_cycle does: torch.optim at `lr`, masked gradients, re-zeroed weights, for each batch."""
    model = copy.deepcopy(model).train()
    optimizer = make_optimizer(o, model.parameters(), lr)
    masked = MaskedWeights(model, masks)
    losses = []
    for x, y in batches:
        losses.append(train_step(model, optimizer, masked, x, y, CPU_SPEC, torch.device("cpu")).item())
    return model.state_dict(), losses


# (model, optimizer, image side, steps, native layers): the big networks take one step on 16x16 images to stay
# fast; ResNet-20 once more through vmap, the path of the models the native layers do not cover (DenseNet).
CASES = [("mlp", "sgd", 32, 2, True), ("mlp", "adam", 32, 2, True), ("mlp", "rmsprop", 32, 2, True),
         ("resnet20", "sgd", 32, 2, True), ("resnet20", "adam", 32, 2, True), ("resnet20", "rmsprop", 16, 2, True),
         pytest.param("mobilenetv2", "sgd", 16, 2, True, marks=pytest.mark.slow), pytest.param("vgg19_bn", "sgd", 16, 1, True, marks=pytest.mark.slow),
         ("alexnet", "sgd", 32, 2, True),
         ("resnet20", "sgd", 16, 2, False), ("densenet40", "sgd", 16, 1, False)]
NATIVE = ["mlp", "resnet20", "vgg19_bn", "mobilenetv2", "alexnet"]


def test_which_models_fuse_natively():
    """The paper's networks without channel concatenation or attention fuse natively; the rest keep vmap."""
    native = [name for name in MODELS if name not in ("resnet50", "vit_b16")
              and fused_native.supports(MODELS[name]((3, 32, 32), 10))]
    assert native == NATIVE


@pytest.mark.parametrize("name,optimizer,side,steps,native", CASES)
def test_fused_steps_equal_separate_steps_and_a_nan_candidate_leaks_nowhere(name, optimizer, side, steps, native):
    """Fused steps (two where cheap, so momentum and Adam's moments are used) of K=3 candidates equal three
    torch.optim runs to 1e-6 relative on the update, BatchNorm buffers included; a 4th candidate poisoned with
    NaN changes none of them, and pruned weights stay exactly zero. float64, so float32 rounding does not hide
    a real error."""
    torch.manual_seed(0)
    model = MODELS[name]((3, side, side), 10).double()
    masks = _random_masks(model)
    apply_masks(model, masks)
    before = {n: t.clone() for n, t in model.state_dict().items()}
    g = torch.Generator().manual_seed(2)
    batches = [(torch.randn(3, 3, side, side, generator=g, dtype=torch.float64), torch.tensor([1, 7, 3]))
               for _ in range(steps)]
    o = OptimizerSpec(optimizer, momentum=0.9, weight_decay=5e-4)
    spec = ExperimentSpec(model=name, device="cpu", optimizer=o, precision="fp32")

    fused = Fused.replicate(model, len(LRS) + 1, native=native)
    assert (fused.net is not None) == native
    first = next(iter(masks))
    with torch.no_grad():
        fused.params[first][-1] = float("nan")  # a diverged candidate
    opt = FusedOptimizer(o, fused.params)
    lr = torch.tensor(LRS + [0.1], dtype=torch.float64)
    fused_losses = [fused_step(fused, opt, masks, x, y, lr, spec, CPU) for x, y in batches]

    scales = layer_scales(before)  # the weights the update is computed from; 1e-10 of them is ~1e6 float64 eps
    for k, lr_k in enumerate(LRS):
        expected, losses = _separate_steps(model, masks, o, lr_k, batches)
        got = fused.state(k)
        assert [float(step[k]) for step in fused_losses] == pytest.approx(losses, rel=1e-9)
        for n, want in expected.items():
            if want.is_floating_point():  # the update, not the weight: a wrong LR would not hide in it
                torch.testing.assert_close(got[n] - before[n], want - before[n], rtol=1e-6, atol=1e-10 * scales[n],
                                           msg=n)
            else:
                assert torch.equal(got[n], want), n  # num_batches_tracked
        for n, mask in masks.items():
            assert bool((got[n][~mask] == 0).all()), n
    assert not torch.isfinite(fused_losses[-1][-1])


def test_channels_last_weights_change_no_number():
    """Convolution weights stored so that their flat view is channels_last (as on CUDA) give the same step."""
    torch.manual_seed(0)
    model = MODELS["resnet20"]((3, 8, 8), 10).double()
    x, y = torch.randn(4, 3, 8, 8, dtype=torch.float64), torch.tensor([1, 2, 3, 4])
    o, lr = OptimizerSpec("sgd", momentum=0.9, weight_decay=5e-4), torch.tensor([0.05, 0.2], dtype=torch.float64)
    states = []
    for last in (False, True):
        fused = Fused.replicate(model, 2)
        if last:
            fused.to_channels_last()
            w = fused.params["stem.0.weight"]
            assert w.is_leaf and w.flatten(0, 1).is_contiguous(memory_format=torch.channels_last)
        opt = FusedOptimizer(o, fused.params)
        for _ in range(2):
            fused_step(fused, opt, {}, x.contiguous(memory_format=torch.channels_last) if last else x, y, lr,
                       CPU_SPEC, CPU)
        fused.keep([1])  # a dropped slot keeps the layout
        assert not last or fused.params["stem.0.weight"].flatten(0, 1).is_contiguous(
            memory_format=torch.channels_last)
        states.append(fused.state(0))
    scales = layer_scales(states[0])
    for n, t in states[0].items():
        if t.is_floating_point():
            torch.testing.assert_close(states[1][n], t, rtol=1e-10, atol=1e-10 * scales[n], msg=n)
        else:
            assert torch.equal(states[1][n], t), n


def _recorded_ops(fn) -> list:
    with torch.profiler.profile(record_shapes=True) as prof:
        fn()
    return list(prof.events())


def test_native_layers_are_hfta_layers():
    """One grouped convolution per conv layer (K·groups; K·C for a depthwise one; the first layer, on the shared
    input, one convolution K times as wide), one native BatchNorm over K·C channels per BatchNorm layer, and one
    batched matmul per Linear; nothing runs per candidate."""
    k = 3
    torch.manual_seed(0)
    model = MODELS["mobilenetv2"]((3, 32, 32), 10)
    events = _recorded_ops(lambda: Fused.replicate(model, k)(torch.randn(2, 3, 32, 32)))
    convs = [(tuple(e.input_shapes[1]), e.concrete_inputs[-1]) for e in events if e.name == "aten::convolution"]
    conv_layers = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert any(m.groups == m.in_channels > 1 for m in conv_layers)  # depthwise layers are covered
    assert convs == [((k * m.out_channels, *m.weight.shape[1:]), m.groups if i == 0 else k * m.groups)
                     for i, m in enumerate(conv_layers)]
    norms = [e.input_shapes[0][1] for e in events if e.name == "aten::batch_norm"]
    assert norms == [k * m.num_features for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    head = model[-1]
    assert [tuple(map(tuple, e.input_shapes[:3])) for e in events if e.name == "aten::baddbmm"] == [
        ((k, 1, head.out_features), (k, 2, head.in_features), (k, head.in_features, head.out_features))]

    mlp = MODELS["mlp"]((32,), 10)
    mms = [tuple(map(tuple, e.input_shapes[1:3])) for e in _recorded_ops(
        lambda: Fused.replicate(mlp, k)(torch.randn(4, 32))) if e.name in ("aten::baddbmm", "aten::mm")]
    linears = [m for m in mlp.modules() if isinstance(m, nn.Linear)]
    assert mms == [((k, 4, m.in_features), (k, m.in_features, m.out_features)) for m in linears]


# Ops that launch no kernel: views, metadata and allocation. Counted with them, a fused step issues 1.29x (ResNet-20)
# and 1.30x (VGG-19) the ops of one model's step: the per-candidate parameters are viewed flat at every layer.
NO_KERNEL = {f"aten::{op}" for op in (
    "view reshape _reshape_alias _unsafe_view flatten as_strided expand expand_as transpose t permute unsqueeze "
    "squeeze detach alias slice narrow select unfold resolve_conj resolve_neg empty empty_like empty_strided "
    "new_empty_strided").split()}


def _kernel_ops(step) -> collections.Counter:
    step()  # the first step sets up momentum buffers; count a later one
    with torch.profiler.profile() as prof:
        step()
    return collections.Counter(e.name for e in prof.events() if e.name.startswith("aten::") and
                               e.name not in NO_KERNEL)


@pytest.mark.parametrize("name", ["resnet20", pytest.param("vgg19_bn", marks=pytest.mark.slow)])
def test_a_fused_step_issues_about_the_ops_of_one_model(name):
    """torch.profiler on the CPU: a fused SGD step (momentum, weight decay, masks) of K = 8 candidates issues at
    most 1.2x the kernel-launching aten ops of one model's step through run_cycle's train_step; the vmap path,
    for contrast, issues more (1.57x for ResNet-20)."""
    torch.manual_seed(0)
    model = MODELS[name]((3, 16, 16), 10)
    masks = {n: m.float() for n, m in _random_masks(model).items()}
    x, y = torch.randn(4, 3, 16, 16), torch.tensor([1, 2, 3, 4])
    o = OptimizerSpec("sgd", momentum=0.9, weight_decay=5e-4)
    one = copy.deepcopy(model)
    optimizer, masked = make_optimizer(o, one.parameters(), 0.1), MaskedWeights(one, masks)
    alone = _kernel_ops(lambda: train_step(one, optimizer, masked, x, y, CPU_SPEC, CPU))
    separate = sum(alone.values())
    counts = {}
    for native in (True, False) if name == "resnet20" else (True,):  # vmap's VGG-19 step is slow to profile
        fused = Fused.replicate(copy.deepcopy(model), 8, native=native)
        fopt, lr = FusedOptimizer(o, fused.params), torch.full((8,), 0.1)
        counts[native] = _kernel_ops(lambda: fused_step(fused, fopt, masks, x, y, lr, CPU_SPEC, CPU))
    assert sum(counts[True].values()) <= 1.2 * separate, counts[True]
    for op in ("aten::convolution", "aten::convolution_backward", "aten::native_batch_norm"):
        assert counts[True][op] == alone[op] > 0, op  # one per layer, as one model's
    assert name != "resnet20" or sum(counts[False].values()) > 1.3 * separate  # 1.57x for ResNet-20 with torch 2.14


def _chain_best(results) -> str:
    return max(results, key=lambda r: (r.val_acc, -r.max_lr)).checkpoint


@pytest.fixture
def float64(monkeypatch):
    """run_cycle and run_fused_cycle in float64: models are built in the default dtype, and load_data's answer is
    cast once per call. `use(data)` makes load_data answer with a test's own images instead of the spec's set."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    own: list[TensorData] = []

    def load(spec: ExperimentSpec) -> TensorData:
        data = own[-1] if own else load_data(spec)
        return TensorData({s: x.double() for s, x in data.x.items()}, data.y, data.num_classes)

    monkeypatch.setattr(trainables.cycle, "load_data", load)
    monkeypatch.setattr(trainables.fused, "load_data", load)
    yield own.append
    torch.set_default_dtype(before)


def _images(side: int, n: int = 96) -> TensorData:
    """Ten classes of noisy colour patches (learnable in two epochs), split 48 / 24 / 24."""
    g = torch.Generator().manual_seed(5)
    y = torch.randint(0, 10, (n,), generator=g)
    x = torch.randn(10, 3, 1, 1, generator=g)[y] + 0.8 * torch.randn(n, 3, side, side, generator=g)
    parts = {"train": slice(0, 48), "val": slice(48, 72), "test": slice(72, n)}
    return TensorData({s: x[i] for s, i in parts.items()}, {s: y[i] for s, i in parts.items()}, 10)


def _close(got: float, want: float) -> bool:
    """Accuracies (percentages of whole samples: equal or far apart) and standard deviations of thousands of
    gradients or activations (never zero up to rounding), so relative to themselves, with a floor."""
    return got == pytest.approx(want, rel=1e-6, abs=1e-12)


def _assert_rows_match(f, s) -> None:
    """A fused row is the separate run's row: every field but the wall time and the files' own names and hashes."""
    assert (f.cycle, f.seed, f.max_lr, f.density, f.best_epoch, f.epochs, f.diverged, f.device, f.precision) == (
        s.cycle, s.seed, s.max_lr, s.density, s.best_epoch, s.epochs, s.diverged, s.device, s.precision)
    for name in ("val_acc", "test_acc", "grad_std", "act_std"):
        assert _close(getattr(f, name), getattr(s, name)), name
    for name in ("grad_hist", "act_hist"):
        got, want = json.loads(getattr(f, name)), json.loads(getattr(s, name))
        assert got["counts"] == want["counts"], name
        scale = max(map(abs, want["edges"]))  # the values' extent, not one edge's: an inner edge can be ~0
        assert got["edges"] == pytest.approx(want["edges"], rel=1e-6, abs=1e-6 * scale), name


IMAGE_SPEC = dataclasses.replace(TINY, epochs=2, batch_size=16, weights="rewind", rewind_epoch=1,
                                 optimizer=OptimizerSpec("sgd", 0.9, 5e-4), grid=(0.01, 0.03, 0.1))
CHAINS = [
    pytest.param(dataclasses.replace(TINY, weights="rewind", rewind_epoch=1, grid=(0.01, 0.03, 0.1)), 0,
                 id="mlp-tiny-rewind"),
    # The case that failed in float32 on AVX2 (see CPU_SPEC): Adam, eight epochs, digits.
    pytest.param(dataclasses.replace(PRESETS["digits-mlp"].spec, device="cpu", precision="fp32", epochs=8,
                                     optimizer=OptimizerSpec("adam", 0, 1e-4), grid=(0.001, 0.003, 0.01)), 0,
                 id="mlp-digits-adam", marks=pytest.mark.slow),
    # VGG-19 has no chain of its own (117 s in float64): its layers (convolution, batch norm, max pooling, linear)
    # are ResNet-20's and AlexNet's, whose chains follow, and its fused step is checked alone above.
    pytest.param(dataclasses.replace(IMAGE_SPEC, model="resnet20"), 8, id="resnet20", marks=pytest.mark.slow),
    # MobileNetV2's grouped (depthwise) convolutions are slow in float64: two candidates, not three.
    pytest.param(dataclasses.replace(IMAGE_SPEC, model="mobilenetv2", grid=(0.01, 0.1)), 8, id="mobilenetv2",
                 marks=pytest.mark.slow),
    pytest.param(dataclasses.replace(IMAGE_SPEC, model="alexnet"), 32, id="alexnet", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("spec,side", CHAINS)
def test_two_fused_cycles_match_run_cycle_in_float64(spec, side, float64, tmp_path):
    """Cycles 0 and 1, each chained from its best candidate, natively fused: per-candidate rows (accuracies,
    statistics and their histograms), masks and checkpoint tensors as run_cycle gives them to 1e-6 relative, and
    the same best max_lr. `side` > 0: the model trains on the test's own side x side images."""
    if side:
        float64(_images(side))
    assert fused_native.supports(MODELS[spec.model]((3, side, side) if side else (64,), 10))
    lrs = list(spec.grid)
    start_sep = start_fused = None
    for cycle in range(2):
        separate = [run_cycle(spec, cycle=cycle, max_lr=lr, seed=3, start_checkpoint=start_sep,
                              checkpoint_dir=tmp_path / f"sep{cycle}-{i}") for i, lr in enumerate(lrs)]
        fused = run_fused_cycle(spec, cycle=cycle, max_lrs=lrs, seed=3, start_checkpoint=start_fused,
                                checkpoint_dirs=[tmp_path / f"fused{cycle}-{i}" for i in range(len(lrs))])
        for s, f in zip(separate, fused):
            _assert_rows_match(f, s)
            assert f.start_hash == (checkpoint_hash(start_fused) if start_fused else "")
            assert f.checkpoint_hash == checkpoint_hash(f.checkpoint)
            got, want = load_checkpoint(f.checkpoint), load_checkpoint(s.checkpoint)
            assert got.keys() == want.keys() and got["cycle"] == cycle
            assert got["metrics"] == {"val_acc": f.val_acc, "test_acc": f.test_acc, "max_lr": f.max_lr, "seed": 3}
            assert all(_close(got["metrics"][m], want["metrics"][m]) for m in want["metrics"])
            for n, mask in want["masks"].items():
                assert torch.equal(got["masks"][n], mask)
                assert bool((got["model"][n][~mask] == 0).all()), n  # pruned weights stayed zero
            for part in ("model", "rewind") if "rewind" in want else ("model",):
                assert list(got[part]) == list(want[part])
                scales = layer_scales(want[part])
                for n, t in want[part].items():
                    assert got[part][n].dtype == t.dtype, (part, n)
                    if not t.is_floating_point():
                        assert torch.equal(got[part][n], t), (part, n)
                        continue
                    torch.testing.assert_close(got[part][n], t, rtol=1e-6, atol=1e-6 * scales[n], msg=(part, n))
        assert _chain_best(fused).rsplit("-", 1)[1] == _chain_best(separate).rsplit("-", 1)[1]  # same max_lr
        start_sep, start_fused = _chain_best(separate), _chain_best(fused)
    if spec.weights == "rewind":  # cycle 1 carries cycle 0's epoch-1 state of the chained candidate
        assert "rewind" in load_checkpoint(start_fused)


def test_a_diverged_candidate_is_frozen_and_disturbs_no_other():
    """A huge max_lr diverges in the fused run exactly as alone; the others' results are those of a fused run
    without it and of run_cycle."""
    lrs = [0.03, 3e4, 0.1]
    with_it = run_fused_cycle(TINY, cycle=0, max_lrs=lrs, seed=0)
    without = run_fused_cycle(TINY, cycle=0, max_lrs=[0.03, 0.1], seed=0)
    alone = [run_cycle(TINY, cycle=0, max_lr=lr, seed=0) for lr in lrs]
    assert [r.diverged for r in with_it] == [False, True, False] == [r.diverged for r in alone]
    bad = with_it[1]
    assert (bad.epochs, bad.best_epoch) == (alone[1].epochs, alone[1].best_epoch) and bad.epochs < TINY.epochs
    assert bad.val_acc == pytest.approx(alone[1].val_acc, abs=0.6)
    for got, ref, sep in zip((with_it[0], with_it[2]), without, (alone[0], alone[2])):
        assert (got.val_acc, got.test_acc, got.best_epoch) == (ref.val_acc, ref.test_acc, ref.best_epoch)
        assert got.grad_std == pytest.approx(ref.grad_std, rel=1e-5)
        assert got.val_acc == pytest.approx(sep.val_acc, abs=0.6) and got.epochs == TINY.epochs


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA graph needs a GPU, and none is here")
def test_a_graphed_fused_cycle_equals_the_eager_one_on_a_gpu(float64, tmp_path, monkeypatch):
    """`Resources.cuda_graphs`: on a GPU, run_fused_cycle replaying its step from a CUDA graph gives every candidate
    the eager fused run's row and checkpoint tensors to 1e-6 relative. Six epochs of 48 images in batches of 20:
    two full batches and a partial one (run eagerly) per epoch, so the graph is captured after the eager warm-up
    and replayed; a diverging candidate (1e10: a loss that overflows only in epoch 4 on the CPU, BatchNorm keeps
    smaller rates finite) is dropped, and the graph captured again for the others."""
    made: list[trainables.fused.GraphedStep] = []

    class Recorded(trainables.fused.GraphedStep):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(trainables.fused, "GraphedStep", Recorded)
    float64(_images(8))
    spec = dataclasses.replace(IMAGE_SPEC, model="resnet20", device="cuda", epochs=6, batch_size=20,
                               weights="continue", resources=dataclasses.replace(IMAGE_SPEC.resources,
                                                                                 cuda_graphs=False))  # eager, said so
    graphed = dataclasses.replace(spec, resources=dataclasses.replace(spec.resources, cuda_graphs=True))
    lrs = [0.01, 1e10, 0.1]
    eager = run_fused_cycle(spec, cycle=0, max_lrs=lrs, seed=3, checkpoint_dirs=[tmp_path / f"e{i}" for i in range(3)])
    assert not made
    replayed = run_fused_cycle(graphed, cycle=0, max_lrs=lrs, seed=3,
                               checkpoint_dirs=[tmp_path / f"g{i}" for i in range(3)])
    assert [r.diverged for r in replayed] == [False, True, False] == [r.diverged for r in eager]
    assert [r.epochs for r in replayed] == [r.epochs for r in eager]
    # Captured in epoch 2 (after three eager full batches); again after the drop when that came later.
    assert len(made) == 1 and made[0].replays >= 6
    assert made[0].captures == 1 + (2 <= eager[1].epochs < spec.epochs)
    for g, e in zip(replayed, eager):
        _assert_rows_match(g, e)
        got, want = load_checkpoint(g.checkpoint)["model"], load_checkpoint(e.checkpoint)["model"]
        scales = layer_scales(want)
        for n, t in want.items():
            if t.is_floating_point():
                torch.testing.assert_close(got[n], t, rtol=1e-6, atol=1e-6 * scales[n], msg=n)
            else:
                assert torch.equal(got[n], t), n


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA graph needs a GPU, and none is here")
def test_the_probe_times_graphed_copies_in_threads_at_once_on_a_gpu():
    """The dry run's probe times `together` copies in threads of one process; with `--cuda-graphs` each captures its
    own graph while the other trains (an H100 run failed here before captures were made one at a time)."""
    from concurrent.futures import ThreadPoolExecutor

    from oracle_search.estimate import time_epoch
    from trainables.spec import Resources

    spec = dataclasses.replace(TINY, device="cuda", resources=Resources(cuda_graphs=True))
    with ThreadPoolExecutor(2) as pool:
        timed = list(pool.map(lambda _: time_epoch(spec, steps=20, fuse=2), range(2)))
    assert all(t["fuse"] == 2 and t["seconds_per_epoch"] > 0 and t["device"].startswith("cuda") for t in timed)


def test_cuda_graphs_are_refused_where_they_cannot_apply():
    """--cuda-graphs is validated at the edge: CUDA only, and never with Adam (its bias correction changes every
    step, which a captured graph would freeze)."""
    from oracle_search.cli import build_parser, spec_from_args
    from trainables.spec import Resources, SpecError, validate

    graphs = Resources(cuda_graphs=True)
    validate(dataclasses.replace(TINY, device="cuda", resources=graphs))
    for device in ("cpu", "auto"):
        with pytest.raises(SpecError, match="cuda-graphs"):
            validate(dataclasses.replace(TINY, device=device, resources=graphs))
    with pytest.raises(SpecError, match="cuda-graphs.*Adam"):
        validate(dataclasses.replace(TINY, device="cuda", resources=graphs, optimizer=OptimizerSpec("adam")))
    args = build_parser().parse_args(["compare", "--preset", "tiny", "--out", "x", "--device", "cuda",
                                      "--cuda-graphs"])
    assert spec_from_args(args).resources.cuda_graphs is True
    # A network without natively fused layers (DenseNet's channel concatenation runs through vmap): nothing to
    # capture, refused when its trial builds the step (no GPU is touched before that).
    from trainables.fused import step_function

    model = MODELS["densenet40"]((3, 32, 32), 10)
    fused = Fused.replicate(model, 2)
    assert fused.net is None
    on_cuda = dataclasses.replace(TINY, model="densenet40", device="cuda", resources=graphs)
    with pytest.raises(SpecError, match="cuda-graphs.*vmap"):
        step_function(fused, FusedOptimizer(on_cuda.optimizer, fused.params), {}, on_cuda, torch.device("cuda"))


def test_invalid_calls_raise():
    with pytest.raises(ValueError, match="schedule"):
        run_fused_cycle(TINY.with_schedule(name="silo"), cycle=0, max_lrs=[0.1, 0.2], seed=0)
    with pytest.raises(ValueError, match="max_lrs"):
        run_fused_cycle(TINY, cycle=0, max_lrs=[], seed=0)
    with pytest.raises(ValueError, match="checkpoint_dirs"):
        run_fused_cycle(TINY, cycle=0, max_lrs=[0.1, 0.2], seed=0, checkpoint_dirs=[Path("a")])


BLOCKED = ("ray", "optuna", "mnist1d", "sklearn", "pandas", "scipy", "torchvision", "matplotlib", "pyarrow")
NO_EXTRAS = "import sys\nfor name in {!r}:\n    sys.modules[name] = None  # importing it now raises\n".format(BLOCKED)


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}  # oversubscribed OpenMP crawls
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow  # a fresh interpreter importing torch: seconds
def test_fused_trainer_and_its_benchmark_need_only_torch_and_numpy():
    """`import trainables.fused` pulls no Ray, Optuna or dataset package, and the GPU benchmark runs (here on the
    CPU, a few steps) with every other package unimportable."""
    done = _python(NO_EXTRAS + "import trainables.fused\nimport runpy\n"
                   "runpy.run_path('benchmarks/fused_throughput.py', run_name='__main__')\n",
                   "--quick", "--device", "cpu", "--models", "resnet20", "--ks", "1,2", "--steps", "1",
                   "--warmup", "1", "--batch-size", "4")
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines() if line.startswith("resnet20")]
    assert [line[1:3] for line in lines] == [["1", "native"], ["2", "native"]]  # one row per K
    assert all(float(v) > 0 for line in lines for v in line[3:8])  # ms/step, images/s and their ratio


@pytest.mark.slow  # a real training of several seconds: the fast lane stays under a minute
def test_fused_trials_through_tune_match_in_process(ray_local, tmp_path):
    """fused_cycle_trainable in a real Tuner (cycle 0, and cycle 1 from a start checkpoint): one result holding
    K rows, one checkpoint with a chainable subfolder per candidate, the numbers of run_fused_cycle here."""
    from ray import tune

    from trainables.tune_adapter import fused_cycle_trainable, fused_rows

    local = {0: run_fused_cycle(TINY, cycle=0, max_lrs=LRS, seed=1, checkpoint_dirs=[tmp_path / f"c{i}" for i in
                                                                                   range(len(LRS))])}
    start = local[0][0].checkpoint
    local[1] = run_fused_cycle(TINY, cycle=1, max_lrs=LRS, seed=1, start_checkpoint=start)
    keys = [f"k{i}" for i in range(len(LRS))]
    param_space = {"spec": TINY, "cycle": tune.grid_search([0, 1]), "max_lrs": LRS, "seed": 1, "keys": keys,
                   "start_checkpoint": tune.sample_from(lambda s: start if s.config["cycle"] else None)}
    tuner = tune.Tuner(tune.with_resources(fused_cycle_trainable, {"cpu": 1}), param_space=param_space,
                       run_config=tune.RunConfig(storage_path=str(tmp_path / "tune"), name="fused", verbose=0))
    results = tuner.fit()
    assert not results.errors
    assert sorted(fused_rows(r.metrics)[0]["cycle"] for r in results) == [0, 1]
    for result in results:
        rows = fused_rows(result.metrics)
        # Nothing for Tune's TensorBoard logger to take as a histogram and print whole in a warning.
        assert not any(isinstance(v, list) and v for k, v in result.metrics.items() if k != "gpu_ids")
        expected = local[rows[0]["cycle"]]
        assert result.metrics["gpu_ids"] == [] and result.metrics["node_id"]
        assert [r["key"] for r in rows] == keys and [r["fused"] for r in rows] == [3, 3, 3]
        assert [r["checkpoint_subdir"] for r in rows] == ["cand00", "cand01", "cand02"]
        for row, want in zip(rows, expected):
            for name in ("cycle", "max_lr", "val_acc", "test_acc", "best_epoch", "epochs", "diverged", "density",
                         "device", "start_hash"):
                assert row[name] == getattr(want, name), name
            folder = Path(result.checkpoint.path) / row["checkpoint_subdir"]
            assert checkpoint_hash(folder) == row["checkpoint_hash"]
            assert load_checkpoint(folder)["metrics"]["max_lr"] == row["max_lr"]
    # A candidate's subfolder chains like any checkpoint.
    second = next(r for r in results if fused_rows(r.metrics)[0]["cycle"] == 1)
    row = fused_rows(second.metrics)[1]
    nxt = run_fused_cycle(TINY, cycle=2, max_lrs=[0.1], seed=1,
                          start_checkpoint=str(Path(second.checkpoint.path) / row["checkpoint_subdir"]))
    assert nxt[0].start_hash == row["checkpoint_hash"] and nxt[0].density == pytest.approx(64.0, abs=0.1)


@pytest.mark.slow
def test_gpu_check_script_rehearses_every_stage_on_cpu(tmp_path):
    """scripts/gpu_check.sh --cpu: the GPU-only tests (skipped here, saying why), the fair benchmark, cuDNN's
    search on and off, the dry run's estimate and a racing Oracle cycle through Ray beside the sampler, each
    stage's result under OUT."""
    out = tmp_path / "out"
    env = os.environ | {"OUT": str(out), "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(["bash", "scripts/gpu_check.sh", "--cpu"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (out / "summary.txt").read_text() == "failed stages: 0\n"
    tests = (out / "1_gpu_tests.txt").read_text()
    assert "3 skipped" in tests and "a CUDA graph needs a GPU" in tests

    def rows(name: str) -> list[list[str]]:
        return [line.split()[:3] for line in (out / name).read_text().splitlines()
                if line.split()[:1] in (["resnet20"], ["vgg19_bn"])]

    assert rows("2_fused_throughput.txt") == [[m, k, "native"] for m in ("resnet20", "vgg19_bn") for k in ("1", "4")]
    k1 = [["resnet20", "1", "native"], ["vgg19_bn", "1", "native"]]
    assert rows("3_cudnn_on.txt") == rows("3_cudnn_off.txt") == k1
    assert "\nestimate: " in (out / "4_estimate.txt").read_text()
    cycle = (out / "4_cycle.txt").read_text()
    assert "Oracle table" in cycle and "exit 0" in cycle
    samples = (out / "4_utilisation.csv").read_text().splitlines()
    assert samples[0] == "time,load_1min" and len(samples) > 3
    assert (out / "4_utilisation.txt").read_text().startswith(f"samples {len(samples) - 1},")


def _graphed(spec: ExperimentSpec, device: str, model: str = "mlp") -> bool:
    """Whether a trial's fused step of `spec` on `device` would replay from a CUDA graph: the step function the
    trial gets, built for real (no GPU is touched before the first step)."""
    net = MODELS[model]((3, 32, 32) if model != "mlp" else (40,), 10)
    fused = Fused.replicate(net, 2)
    step = trainables.fused.step_function(fused, FusedOptimizer(spec.optimizer, fused.params), {}, spec,
                                          torch.device(device))
    return isinstance(step, trainables.fused.GraphedStep)


def test_cuda_graphs_are_on_by_default_wherever_the_graphed_step_applies_and_off_without_a_word_elsewhere(capsys):
    """Issue 51: no flag -> the fused step replays from a CUDA graph on CUDA with SGD and natively fused layers
    (decided per trial, where its device is known: a spec's "auto" device is CUDA on a GPU worker); on the CPU,
    with Adam or RMSProp, or through vmap, the eager step runs and nothing is said. --no-cuda-graphs opts out;
    --cuda-graphs asks for it and is refused where it cannot apply, as before."""
    from oracle_search.cli import build_parser, spec_from_args

    def spec_of(*flags: str, optimizer: str = "sgd") -> ExperimentSpec:
        args = build_parser().parse_args(["compare", "--preset", "tiny", "--out", "x", "--optimizer", optimizer,
                                          *flags])
        return spec_from_args(args)

    default = spec_of()
    assert default.resources.cuda_graphs is None  # decided by each trial
    assert _graphed(default, "cuda") and _graphed(spec_of("--device", "cuda"), "cuda")
    assert not _graphed(default, "cpu")
    assert not _graphed(spec_of(optimizer="adam"), "cuda") and not _graphed(spec_of(optimizer="rmsprop"), "cuda")
    assert not _graphed(dataclasses.replace(default, model="densenet40"), "cuda", "densenet40")  # vmap: nothing
    assert capsys.readouterr() == ("", "")  # off without a word
    opted_out = spec_of("--no-cuda-graphs")
    assert opted_out.resources.cuda_graphs is False and not _graphed(opted_out, "cuda")
    asked = spec_of("--device", "cuda", "--cuda-graphs", optimizer="rmsprop")
    assert asked.resources.cuda_graphs is True and _graphed(asked, "cuda")
    with pytest.raises(SpecError, match="cuda-graphs"):  # asked for where it cannot apply: refused, as before
        spec_of("--device", "cpu", "--cuda-graphs")
    with pytest.raises(SpecError, match="cuda-graphs.*vmap"):
        _graphed(dataclasses.replace(asked, model="densenet40", optimizer=OptimizerSpec("sgd")), "cuda", "densenet40")
