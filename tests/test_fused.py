"""Fused training (trainables.fused) equals K separate trainings: one step per paper model against torch.optim,
full short runs against run_cycle, a diverged candidate that disturbs no other, and the Tune adapter."""
from __future__ import annotations

import copy
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from trainables.checkpoints import checkpoint_hash, load_checkpoint
from trainables.cycle import make_optimizer, run_cycle, train_step
from trainables.fused import Fused, FusedOptimizer, fused_step, run_fused_cycle
from trainables.models import MODELS
from trainables.presets import PRESETS
from trainables.pruning import MaskedWeights, apply_masks, prunable
from trainables.spec import ExperimentSpec, OptimizerSpec

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: as a 1-CPU trial runs
# The equivalence checked here is of the algorithm, so in float32: under bf16 autocast one batched matmul and K
# separate ones round differently. train_step reads only the autocast and layout switches of CPU_SPEC.
CPU_SPEC = ExperimentSpec(device="cpu", precision="fp32")

ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")
TINY = dataclasses.replace(PRESETS["tiny"].spec, device="cpu", precision="fp32")
LRS = [0.01, 0.05, 0.2]




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


# (model, optimizer, image side, steps): the big networks take one step on 16x16 images to stay fast.
CASES = [("mlp", "sgd", 32, 2), ("mlp", "adam", 32, 2), ("mlp", "rmsprop", 32, 2), ("resnet20", "sgd", 32, 2),
         ("resnet20", "adam", 32, 2), ("mobilenetv2", "sgd", 16, 2), ("vgg19_bn", "sgd", 16, 1),
         ("densenet40", "sgd", 16, 1)]


@pytest.mark.parametrize("name,optimizer,side,steps", CASES)
def test_fused_steps_equal_separate_steps_and_a_nan_candidate_leaks_nowhere(name, optimizer, side, steps):
    """Fused steps (two where cheap, so momentum and Adam's moments are used) of K=3 candidates equal three
    torch.optim runs to 1e-5 relative on the update, BatchNorm buffers included; a 4th candidate poisoned with
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
    spec = ExperimentSpec(model=name, device="cpu", optimizer=o)

    fused = Fused.replicate(model, len(LRS) + 1)
    first = next(iter(masks))
    with torch.no_grad():
        fused.params[first][-1] = float("nan")  # a diverged candidate
    opt = FusedOptimizer(o, fused.params)
    lr = torch.tensor(LRS + [0.1], dtype=torch.float64)
    fused_losses = [fused_step(fused, opt, masks, x, y, lr, spec, CPU) for x, y in batches]

    for k, lr_k in enumerate(LRS):
        expected, losses = _separate_steps(model, masks, o, lr_k, batches)
        got = fused.state(k)
        assert [float(step[k]) for step in fused_losses] == pytest.approx(losses, rel=1e-9)
        for n, want in expected.items():
            if want.is_floating_point():  # the update, not the weight: a wrong LR would not hide in it
                torch.testing.assert_close(got[n] - before[n], want - before[n], rtol=1e-5, atol=1e-12, msg=n)
            else:
                assert torch.equal(got[n], want), n  # num_batches_tracked
        for n, mask in masks.items():
            assert bool((got[n][~mask] == 0).all()), n
    assert not torch.isfinite(fused_losses[-1][-1])


def _recorded_ops(fn) -> list:
    with torch.profiler.profile(record_shapes=True) as prof:
        fn()
    return list(prof.events())


def test_fused_layers_are_hfta_layers():
    """vmap's batching rules give one grouped convolution per conv layer (K·groups; K·C for a depthwise one;
    the first layer, on the shared input, one convolution K times as wide) and one batched matmul per Linear."""
    k = 3
    torch.manual_seed(0)
    model = MODELS["mobilenetv2"]((3, 32, 32), 10)
    fused = Fused.replicate(model, k)
    convs = {(tuple(e.input_shapes[1]), e.concrete_inputs[-1]) for e in _recorded_ops(
        lambda: fused(torch.randn(2, 3, 32, 32))) if e.name == "aten::convolution"}
    conv_layers = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert any(m.groups == m.in_channels > 1 for m in conv_layers)  # depthwise layers are covered
    for i, m in enumerate(conv_layers):
        groups = m.groups if i == 0 else k * m.groups
        assert ((k * m.out_channels, *m.weight.shape[1:]), groups) in convs, m

    mlp = MODELS["mlp"]((32,), 10)
    bmms = [tuple(map(tuple, e.input_shapes)) for e in _recorded_ops(
        lambda: Fused.replicate(mlp, k)(torch.randn(4, 32))) if e.name == "aten::bmm"]
    linears = [m for m in mlp.modules() if isinstance(m, nn.Linear)]
    assert bmms == [((k, 4, m.in_features), (k, m.in_features, m.out_features)) for m in linears]


def _chain_best(results) -> str:
    return max(results, key=lambda r: (r.val_acc, -r.max_lr)).checkpoint


@pytest.mark.parametrize("spec", [
    # max_lr 0.3 is on the edge of stability on `tiny` (its 4th epoch can collapse), where float rounding
    # alone moves the result: the comparison uses stable max_lrs.
    dataclasses.replace(TINY, weights="rewind", rewind_epoch=1, grid=(0.01, 0.03, 0.1)),
    dataclasses.replace(PRESETS["digits-mlp"].spec, device="cpu", precision="fp32", epochs=8,
                        optimizer=OptimizerSpec("adam", 0, 1e-4), grid=(0.001, 0.003, 0.01)),
], ids=["tiny-rewind", "digits-adam"])
def test_two_fused_cycles_match_run_cycle(spec, tmp_path):
    """Cycles 0 and 1, each chained from its best candidate: per-candidate accuracies, statistics, masks and
    checkpoints as run_cycle gives them, and the same best max_lr."""
    lrs = list(spec.grid)
    start_sep = start_fused = None
    for cycle in range(2):
        separate = [run_cycle(spec, cycle=cycle, max_lr=lr, seed=3, start_checkpoint=start_sep,
                              checkpoint_dir=tmp_path / f"sep{cycle}-{i}") for i, lr in enumerate(lrs)]
        fused = run_fused_cycle(spec, cycle=cycle, max_lrs=lrs, seed=3, start_checkpoint=start_fused,
                                checkpoint_dirs=[tmp_path / f"fused{cycle}-{i}" for i in range(len(lrs))])
        for s, f in zip(separate, fused):
            assert f.max_lr == s.max_lr and f.density == s.density and f.cycle == cycle
            assert f.val_acc == pytest.approx(s.val_acc, abs=0.6) and f.test_acc == pytest.approx(s.test_acc, abs=0.6)
            assert (f.best_epoch, f.epochs, f.diverged) == (s.best_epoch, s.epochs, s.diverged)
            assert f.grad_std == pytest.approx(s.grad_std, rel=1e-2) and f.act_std == pytest.approx(s.act_std, rel=1e-3)
            assert f.start_hash == (checkpoint_hash(start_fused) if start_fused else "")
            assert f.checkpoint_hash == checkpoint_hash(f.checkpoint)
            got, want = load_checkpoint(f.checkpoint), load_checkpoint(s.checkpoint)
            assert got.keys() == want.keys() and got["cycle"] == cycle
            assert got["metrics"] == {"val_acc": f.val_acc, "test_acc": f.test_acc, "max_lr": f.max_lr, "seed": 3}
            for n, mask in want["masks"].items():
                assert torch.equal(got["masks"][n], mask)
                assert bool((got["model"][n][~mask] == 0).all()), n  # pruned weights stayed zero
            for part in ("model", "rewind") if "rewind" in want else ("model",):
                assert list(got[part]) == list(want[part])
                for n, t in want[part].items():  # relative in norm: Adam turns rounding noise in a
                    # near-zero gradient into a full-size step for a few weights
                    t = t.double()
                    assert float((got[part][n].double() - t).norm()) <= 1e-3 * float(t.norm()) + 1e-6, (part, n)
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


def test_fused_trainer_and_its_benchmark_need_only_torch_and_numpy():
    """`import trainables.fused` pulls no Ray, Optuna or dataset package, and the GPU benchmark runs (here on the
    CPU, a few steps) with every other package unimportable."""
    done = _python(NO_EXTRAS + "import trainables.fused\nimport runpy\n"
                   "runpy.run_path('benchmarks/fused_throughput.py', run_name='__main__')\n",
                   "--quick", "--device", "cpu", "--models", "resnet20", "--ks", "1,2", "--steps", "1",
                   "--warmup", "1", "--batch-size", "4")
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines() if line.startswith("resnet20")]
    assert [line[1] for line in lines] == ["1", "2"]  # one row per K
    assert all(float(v) > 0 for line in lines for v in line[2:5])


def test_fused_trials_through_tune_match_in_process(ray_local, tmp_path):
    """fused_cycle_trainable in a real Tuner (cycle 0, and cycle 1 from a start checkpoint): one result holding
    K rows, one checkpoint with a chainable subfolder per candidate, the numbers of run_fused_cycle here."""
    from ray import tune

    from trainables.tune_adapter import fused_cycle_trainable

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
    assert sorted(r.metrics["fused_rows"][0]["cycle"] for r in results) == [0, 1]
    for result in results:
        rows = result.metrics["fused_rows"]
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
    second = next(r for r in results if r.metrics["fused_rows"][0]["cycle"] == 1)
    row = second.metrics["fused_rows"][1]
    nxt = run_fused_cycle(TINY, cycle=2, max_lrs=[0.1], seed=1,
                          start_checkpoint=str(Path(second.checkpoint.path) / row["checkpoint_subdir"]))
    assert nxt[0].start_hash == row["checkpoint_hash"] and nxt[0].density == pytest.approx(64.0, abs=0.1)


@pytest.mark.slow
def test_gpu_tune_trial_script_runs_degraded_on_cpu():
    """benchmarks/gpu_tune_trial.py --cpu: the same Tune trials (a fake GPU resource, CUDA absent) end to end."""
    env = os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "benchmarks/gpu_tune_trial.py", "--cpu", "--k", "2", "--per-file", "30"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "cycle trial ok" in done.stdout and "fused trial ok" in done.stdout
