"""run_cycle end to end on real data: accuracy, chaining, masks that stay zero, and the weights policies."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from trainables.checkpoints import CheckpointError, checkpoint_hash, load_checkpoint
from trainables.cycle import prepare_cycle, run_cycle, torch_threads, train_step
from trainables.plugins import build_model, load_data
from trainables.presets import PRESETS
from trainables.pruning import MaskedWeights, prunable

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: as a 1-CPU trial runs

DIGITS = dataclasses.replace(PRESETS["digits-mlp"].spec, device="cpu")
TINY = dataclasses.replace(PRESETS["tiny"].spec, device="cpu")
CPU = torch.device("cpu")




@pytest.fixture(scope="module")
def digits_chain(tmp_path_factory):
    """digits-mlp cycles 0, 1, 2 at max_lr 0.1, each chained from the one before."""
    root = tmp_path_factory.mktemp("digits")
    results, start = [], None
    with torch_threads(1):
        for m in range(3):
            r = run_cycle(DIGITS, cycle=m, max_lr=0.1, seed=0, start_checkpoint=start, checkpoint_dir=root / f"c{m}")
            results.append(r)
            start = r.checkpoint
    return results


@pytest.mark.slow  # the embedded default's full 20-epoch training
def test_mnist1d_dense_cycle_at_its_best_grid_value():
    # Measured here: val 80.7 %, test 79.7 % at max_lr 0.32 (the best of the preset's grid).
    r = run_cycle(PRESETS["mnist1d-mlp"].spec, cycle=0, max_lr=0.32, seed=0)
    assert r.test_acc >= 75.0 and r.val_acc >= 75.0
    assert r.density == 100.0 and not r.diverged and r.epochs == 20 and 1 <= r.best_epoch <= 20
    assert r.checkpoint == "" and r.checkpoint_hash == ""  # no checkpoint_dir: nothing written


def test_digits_dense_then_two_pruning_cycles(digits_chain):
    c0, c1, c2 = digits_chain
    assert c0.test_acc >= 90.0 and c0.density == 100.0 and c0.max_lr == 0.1
    assert c1.density == pytest.approx(80.0, abs=0.1)
    assert c2.density == pytest.approx(64.0, abs=0.1)
    assert c1.start_hash == c0.checkpoint_hash == checkpoint_hash(c0.checkpoint)
    assert c2.start_hash == c1.checkpoint_hash and c0.start_hash == ""


def test_pruned_weights_are_exactly_zero_after_retraining(digits_chain):
    states = [load_checkpoint(r.checkpoint) for r in digits_chain]
    for state in states[1:]:
        assert state["masks"]  # the MLP's Linear weights are prunable
        for name, mask in state["masks"].items():
            assert not mask.all()
            assert torch.all(state["model"][name][~mask] == 0.0)
            assert torch.count_nonzero(state["model"][name][mask]) > 0.9 * mask.sum()  # the rest did train
    # Masks only shrink: a weight pruned in cycle 1 stays pruned in cycle 2.
    for name, m2 in states[2]["masks"].items():
        assert not torch.any(m2 & ~states[1]["masks"][name])
    assert [s["cycle"] for s in states] == [0, 1, 2]


def test_checkpoint_holds_best_epoch_metrics(digits_chain):
    state = load_checkpoint(digits_chain[1].checkpoint)
    assert state["metrics"]["val_acc"] == digits_chain[1].val_acc
    assert state["metrics"]["test_acc"] == digits_chain[1].test_acc
    assert state["fingerprint"] == DIGITS.chain_fingerprint()


def bn_mlp(input_shape: tuple[int, ...], num_classes: int) -> torch.nn.Module:
    """A network with batch-norm buffers (running statistics and a batch counter), for the checkpoint's test."""
    return torch.nn.Sequential(torch.nn.Linear(input_shape[0], 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(),
                               torch.nn.Linear(32, num_classes))


def test_the_checkpoint_holds_the_best_epochs_buffers_untouched_by_the_statistics(tmp_path):
    """§3.1's statistics run a training-mode batch, which moves batch norm's buffers; the checkpoint must hold
    the best-validation epoch's state as it was evaluated. Worked independently: cycle 0's batch counter is the
    best epoch's count of training steps, and the checkpoint's network scores the row's validation accuracy."""
    spec = dataclasses.replace(TINY, model=f"{__name__}:bn_mlp", epochs=3, precision="fp32")  # as counted below
    r = run_cycle(spec, cycle=0, max_lr=0.1, seed=0, checkpoint_dir=tmp_path / "c0")
    state = load_checkpoint(r.checkpoint)["model"]
    data = load_data(spec)
    steps = math.ceil(data.size("train") / spec.batch_size)
    assert int(state["1.num_batches_tracked"]) == r.best_epoch * steps
    model = build_model(spec.model, data.input_shape, data.num_classes)
    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        hits = sum(int(model(x).argmax(1).eq(y).sum()) for x, y in data.batches("val", data.size("val")))
    assert 100.0 * hits / data.size("val") == r.val_acc


def test_statistics_are_measured(digits_chain):
    r = digits_chain[2]
    assert r.grad_std > 0 and r.act_std > 0 and math.isfinite(r.grad_std + r.act_std)
    for hist in (r.grad_hist, r.act_hist):
        h = json.loads(hist)
        assert len(h["edges"]) == len(h["counts"]) + 1 and sum(h["counts"]) > 0


def test_same_seed_same_result_other_seed_differs():
    a = run_cycle(TINY, cycle=0, max_lr=0.1, seed=3)
    b = run_cycle(TINY, cycle=0, max_lr=0.1, seed=3)
    c = run_cycle(TINY, cycle=0, max_lr=0.1, seed=4)
    assert (a.val_acc, a.test_acc, a.best_epoch, a.grad_std) == (b.val_acc, b.test_acc, b.best_epoch, b.grad_std)
    assert a.grad_std != c.grad_std


def test_silo_schedule_derives_its_own_peak():
    spec = TINY.with_schedule(name="silo")  # epsilon 0.05 for cycles <= q = 1
    assert run_cycle(spec, cycle=0, max_lr=None, seed=0).max_lr == 0.05


def test_divergence_is_reported():
    r = run_cycle(TINY, cycle=0, max_lr=1e6, seed=0)
    assert r.diverged and r.best_epoch < r.epochs <= TINY.epochs
    assert 0.0 <= r.val_acc <= 100.0 and 0.0 <= r.test_acc <= 100.0


def test_chaining_errors(tmp_path):
    c0 = run_cycle(TINY, cycle=0, max_lr=0.1, seed=0, checkpoint_dir=tmp_path / "c0")
    with pytest.raises(CheckpointError, match="needs a start checkpoint"):
        run_cycle(TINY, cycle=1, max_lr=0.1, seed=0)
    with pytest.raises(CheckpointError, match="different experiment"):
        run_cycle(dataclasses.replace(TINY, rate=0.5), cycle=1, max_lr=0.1, seed=0, start_checkpoint=c0.checkpoint)
    with pytest.raises(CheckpointError, match="needs cycle 1"):
        run_cycle(TINY, cycle=2, max_lr=0.1, seed=0, start_checkpoint=c0.checkpoint)


def _prepared(spec, start: str, seed: int = 0) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The network cycle 1 would train: pruned, with weights set by the policy."""
    data = load_data(spec)
    model, masks, _, _ = prepare_cycle(spec, 1, seed, start, data, CPU)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, masks


def _initial(spec, seed: int = 0) -> dict[str, torch.Tensor]:
    data = load_data(spec)
    torch.manual_seed(seed)
    return build_model(spec.model, data.input_shape, data.num_classes).state_dict()


@pytest.mark.parametrize("policy", ["continue", "rewind", "reinit"])
def test_weights_policy_after_pruning(tmp_path, policy):
    spec = dataclasses.replace(TINY, weights=policy, rewind_epoch=0)
    c0 = run_cycle(spec, cycle=0, max_lr=0.1, seed=0, checkpoint_dir=tmp_path / "c0")
    state = load_checkpoint(c0.checkpoint)
    weights, masks = _prepared(spec, c0.checkpoint)
    trained, initial = state["model"], _initial(spec)
    pruned = set(masks)
    assert pruned == set(prunable(build_model(spec.model, (32,), 10)))
    assert all(not masks[n].all() for n in pruned)
    if policy == "rewind":  # rewind_epoch 0: the initial weights
        assert all(torch.equal(state["rewind"][k], initial[k]) for k in initial)
    else:
        assert "rewind" not in state
    for name, w in weights.items():
        mask = masks.get(name)
        keep = (lambda t: t * mask) if mask is not None else (lambda t: t)
        if policy == "continue":
            assert torch.equal(w, keep(trained[name]))
        elif policy == "rewind":  # the rewind weights (epoch 0 = initial values) times the mask
            assert torch.equal(w, keep(state["rewind"][name]))
        elif name in pruned:  # reinit: a fresh draw, neither the trained nor the initial weights
            assert torch.equal(w, w * mask)
            assert not torch.equal(w, keep(trained[name])) and not torch.equal(w, keep(initial[name]))


def test_rewind_to_a_later_epoch_saves_that_epoch(tmp_path):
    spec = dataclasses.replace(TINY, weights="rewind", rewind_epoch=2)
    c0 = run_cycle(spec, cycle=0, max_lr=0.1, seed=0, checkpoint_dir=tmp_path / "c0")
    rewind = load_checkpoint(c0.checkpoint)["rewind"]
    initial = _initial(spec)
    assert rewind.keys() == initial.keys()
    assert not any(torch.equal(rewind[k], initial[k]) for k in prunable(build_model(spec.model, (32,), 10)))


@pytest.mark.parametrize("precision,dtype", [("bf16", torch.bfloat16), ("fp32", torch.float32)])
def test_precision_autocasts_the_forward_pass_on_cpu_too(precision, dtype):
    """bf16 autocasts the forward pass on any device; the weights and their updates stay float32."""
    spec = dataclasses.replace(TINY, precision=precision)
    model = build_model(spec.model, (8,), 3)
    seen = []
    model[1].register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    masks = {n: torch.ones_like(p, dtype=torch.bool) for n, p in prunable(model).items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = train_step(model, optimizer, MaskedWeights(model, masks), torch.randn(4, 8), torch.tensor([0, 1, 2, 0]),
                      spec, CPU)
    assert seen == [dtype]
    assert loss.dtype == torch.float32 and all(p.dtype == torch.float32 for p in model.parameters())
    other = "fp32" if precision == "bf16" else "bf16"
    assert dataclasses.replace(TINY, precision=other).training_fingerprint() != spec.training_fingerprint()


STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def test_a_cycle_stamps_when_it_started_and_finished_and_the_stamps_reach_its_row(tmp_path):
    """Issue 37: `started` (before data and model set-up) and `finished` (checkpoint and statistics written) in UTC
    with milliseconds; they enclose `seconds`. The engine's row fields (`ROW_METRICS`, what `_record` copies from
    a trial's result) carry them into the results table. A fused trial's candidates share the trial's pair."""
    import re
    from datetime import datetime, timezone

    import pandas as pd

    from oracle_search.engine import PLACEMENT, ROW_METRICS
    from oracle_search.schema import results_frame
    from trainables.fused import run_fused_cycle

    def now() -> pd.Timestamp:
        return pd.Timestamp(datetime.now(timezone.utc)).floor("ms")  # as the stamps are truncated

    before = now()
    r = run_cycle(TINY, cycle=0, max_lr=0.1, seed=0, checkpoint_dir=tmp_path / "c0")
    after = now()
    assert re.fullmatch(STAMP, r.started) and re.fullmatch(STAMP, r.finished)
    started, finished = pd.to_datetime(r.started, utc=True), pd.to_datetime(r.finished, utc=True)
    assert before <= started <= finished <= after
    assert (finished - started).total_seconds() == pytest.approx(r.seconds, rel=0.02, abs=0.02)

    assert {"started", "finished"} <= set(ROW_METRICS)
    metrics = r.row() | {"final": True, "key": "k"}  # as cycle_trainable reports it, placement aside
    row = {k: metrics[k] for k in ROW_METRICS if k not in PLACEMENT} | {"method": "oracle", "stage": "grid"}
    framed = results_frame([row]).iloc[0]
    assert (framed["started"], framed["finished"], framed["queued"]) == (r.started, r.finished, "")

    fused = run_fused_cycle(dataclasses.replace(TINY, precision="fp32"), cycle=0, max_lrs=[0.03, 0.1], seed=0)
    assert len({(c.started, c.finished) for c in fused}) == 1 and re.fullmatch(STAMP, fused[0].finished)
    span = pd.to_datetime(fused[0].finished, utc=True) - pd.to_datetime(fused[0].started, utc=True)
    # shares of the span; the stamps and the timer are read a few statements apart, which a loaded machine
    # stretches (25 ms seen at load 15 on 2 cores): 2 % of the span, at least 20 ms
    assert span.total_seconds() == pytest.approx(sum(c.seconds for c in fused), rel=0.02, abs=0.02)


def test_cudnn_benchmark_is_set_on_cuda_trials_only_when_asked(monkeypatch):
    """`device_backends`: a CUDA trial sets cuDNN's algorithm search to the spec's `resources.cudnn_benchmark`
    (off by default); a CPU trial leaves it alone. A CUDA device object needs no GPU, so this runs anywhere."""
    from trainables.cycle import device_backends
    from trainables.spec import Resources

    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    spec = PRESETS["tiny"].spec
    on = dataclasses.replace(spec, resources=Resources(cudnn_benchmark=True))
    device_backends(torch.device("cpu"), on)
    assert torch.backends.cudnn.benchmark is False
    device_backends(torch.device("cuda"), on)
    assert torch.backends.cudnn.benchmark is True
    device_backends(torch.device("cuda"), spec)
    assert torch.backends.cudnn.benchmark is False and spec.resources.cudnn_benchmark is False
    from oracle_search.cli import build_parser, spec_from_args

    args = build_parser().parse_args(["compare", "--preset", "tiny", "--out", "x", "--cudnn-benchmark"])
    assert spec_from_args(args).resources.cudnn_benchmark is True
    plain = build_parser().parse_args(["compare", "--preset", "tiny", "--out", "x"])
    assert spec_from_args(plain).resources.cudnn_benchmark is False


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_an_evaluation_in_large_batches_gives_every_sample_the_same_logits(precision):
    """`eval_batch` evaluates MNIST-1D's 20,000 validation samples 3,276 at a time instead of 512 on a CPU: each
    sample's logits are bitwise those of the old batches, so no accuracy changes (run under AVX2 kernels too: CI's
    other CPU kind)."""
    from trainables.cycle import EVAL_ELEMENTS, eval_batch, forward_autocast

    spec = dataclasses.replace(PRESETS["mnist1d-mlp"].spec, precision=precision, num_samples=3000)
    data = load_data(spec)
    assert eval_batch(spec, data, CPU) == EVAL_ELEMENTS // 40 == 3276
    assert eval_batch(dataclasses.replace(spec, batch_size=4096), data, CPU) == 4096
    torch.manual_seed(0)
    model = build_model(spec.model, data.input_shape, data.num_classes).eval()
    with torch.no_grad(), forward_autocast(CPU, spec):
        small, large = (torch.cat([model(x).float() for x, _ in data.batches("val", n)]) for n in (512, 1000))
    assert small.shape == (data.size("val"), 10) and torch.equal(small, large)


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_a_gpu_evaluates_in_batches_of_512_as_before(device):
    """On an H200 the default's fp32 logits at batch 3,276 differed from batch 512's in the last bit (all 20,000
    validation samples, by at most 1.3e-7; no predicted class; docs/measured.md), so a GPU keeps 512 and its rows
    stay as they were. No GPU is needed: the batch is chosen from the device's type."""
    from trainables.cycle import eval_batch

    spec = dataclasses.replace(PRESETS["mnist1d-mlp"].spec, num_samples=3000)
    data = load_data(spec)
    assert eval_batch(spec, data, torch.device(device)) == 512
    assert eval_batch(dataclasses.replace(spec, batch_size=1024), data, torch.device(device)) == 1024
