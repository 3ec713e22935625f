"""One pruning cycle, end to end: load the chained state, prune, set weights, retrain, measure.

`run_cycle` is the unit everything else is made of: the Oracle, the SILO fitter and the baselines are all
collections of cycles. It needs no Ray; the Tune adapter is a thin wrapper around it.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch
from torch import nn

from trainables.checkpoints import CheckpointError, checkpoint_hash, load_checkpoint, save_checkpoint
from trainables.data import Data
from trainables.lean import lean_step
from trainables.plugins import build_model, check_loss, load_data, loss_function, resolve
from trainables.precision import autocast, grad_scaler, resolve_precision
from trainables.pruning import Masks, MaskedWeights, apply_masks, density, full_masks, prunable, prune
from trainables.schedules import cycle_peak, lr_at
from trainables.spec import ExperimentSpec, OptimizerSpec
from trainables.timestamps import utc_now

HIST_BINS = 40
# Input numbers per evaluation batch: a small input (MNIST-1D's 40) is evaluated in a few large batches, which
# costs less per sample than many small ones; images keep 512 per batch.
EVAL_ELEMENTS = 1 << 17


@dataclass
class CycleResult:
    """What one cycle measured; `row()` gives the results-table fields it knows."""

    cycle: int
    seed: int
    max_lr: float
    density: float
    val_acc: float
    test_acc: float  # early-stop: the test accuracy at the best-validation epoch
    best_epoch: int
    epochs: int
    seconds: float
    device: str
    precision: str  # the arithmetic it trained in: bf16 | fp16 | fp32
    diverged: bool
    grad_std: float
    act_std: float
    grad_hist: str  # JSON {"edges": [...], "counts": [...]}
    act_hist: str
    checkpoint: str
    checkpoint_hash: str
    start_hash: str
    # UTC ISO-8601 (`trainables.timestamps.utc_now`): `started` as the training begins, before its data and model
    # are set up; `finished` once its checkpoint and statistics are written. They enclose what `seconds` measures
    # (a fused trial's candidates share the whole fused training's pair; their `seconds` are shares of it).
    started: str = ""
    finished: str = ""

    def row(self) -> dict:
        return asdict(self)


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Torch on `n` threads while it lasts, then as before (a trial holding c CPUs runs on
    `trainables.spec.trial_threads(c)`)."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def resolve_device(name: str) -> torch.device:
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cuda")
    return torch.device("cpu")


def make_optimizer(o: OptimizerSpec, params, lr: float) -> torch.optim.Optimizer:
    if o.name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=o.momentum, weight_decay=o.weight_decay)
    if o.name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=o.weight_decay)
    return torch.optim.RMSprop(params, lr=lr, momentum=o.momentum, weight_decay=o.weight_decay)


def device_backends(device: torch.device, spec: ExperimentSpec) -> None:
    """Per-trial backend switches of `device`: cuDNN's algorithm search where the spec asks for it (CUDA only)."""
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = spec.resources.cudnn_benchmark


def forward_autocast(device: torch.device, spec: ExperimentSpec):
    return autocast(device, resolve_precision(spec.precision, device))


def eval_batch(spec: ExperimentSpec, data: Data, device: torch.device) -> int:
    """The evaluation pass's batch: at least the training batch and 512, and on a CPU as many samples as hold
    EVAL_ELEMENTS input numbers. An accuracy does not depend on it: on a CPU a sample's logits are the same in any
    batch (bitwise, on this project's MLPs, in bf16 and fp32, native and AVX2 kernels: tests/test_cycle.py). A GPU
    keeps 512: there fp32 logits differ in the last bit between batch sizes (measured on an H200), and its
    evaluation was never the slow part."""
    least = max(spec.batch_size, 512)
    return least if device.type != "cpu" else max(least, EVAL_ELEMENTS // math.prod(data.input_shape))


@torch.no_grad()
def accuracy(model: nn.Module, data: Data, split: str, spec: ExperimentSpec, device: torch.device) -> float:
    model.eval()
    correct = torch.zeros((), device=device)
    with forward_autocast(device, spec):
        for x, y in data.batches(split, eval_batch(spec, data, device)):
            correct += (model(input_layout(x, spec, device)).argmax(1) == y).sum()
    return 100.0 * float(correct) / data.size(split)


def input_layout(x: torch.Tensor, spec: ExperimentSpec, device: torch.device) -> torch.Tensor:
    if x.dim() == 4 and device.type == "cuda" and spec.channels_last:
        return x.contiguous(memory_format=torch.channels_last)
    return x


def _histogram(values: torch.Tensor) -> tuple[float, str]:
    v = values.detach().double().cpu().numpy()
    if v.size == 0 or not np.all(np.isfinite(v)):
        return float("nan"), json.dumps({"edges": [], "counts": []})
    counts, edges = np.histogram(v, bins=HIST_BINS)
    return float(v.std()), json.dumps({"edges": edges.tolist(), "counts": counts.tolist()})


def layer_statistics(model: nn.Module, masks: Masks, data: Data, spec: ExperimentSpec,
                     device: torch.device) -> tuple[float, str, float, str]:
    """§3.1: std and histogram of the unpruned weights' gradients (of the training loss on one training batch) and
    of hidden post-activation outputs (one validation batch)."""
    activations: list[torch.Tensor] = []
    hooks = [m.register_forward_hook(lambda _m, _i, out: activations.append(out.detach().flatten()))
             for m in model.modules() if isinstance(m, (nn.ReLU, nn.GELU))]
    x, y = next(data.batches("train", spec.batch_size))
    model.train()
    model.zero_grad(set_to_none=True)
    loss_function(spec)(model(input_layout(x, spec, device)), y).backward()
    params = prunable(model)
    grads = torch.cat([params[n].grad[masks[n]].flatten() for n in params if params[n].grad is not None])
    model.zero_grad(set_to_none=True)
    activations.clear()
    model.eval()
    with torch.no_grad():
        model(input_layout(next(data.batches("val", spec.batch_size))[0], spec, device))
    for h in hooks:
        h.remove()
    acts = torch.cat(activations) if activations else torch.zeros(0)
    return (*_histogram(grads), *_histogram(acts))


def data_order(seed: int, cycle: int) -> torch.Generator:
    """The generator of a (seed, cycle)'s batch order, the pruning scores' batches and the training's: the same
    for every max_lr, so grid points (and fused candidates) differ only in their LR."""
    return torch.Generator().manual_seed(seed * 1_000_003 + cycle)


def state_copy(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def prepare_cycle(spec: ExperimentSpec, cycle: int, seed: int, start_checkpoint: str | None, data: Data,
             device: torch.device) -> tuple[nn.Module, Masks, dict | None, str]:
    """The network to train this cycle: fresh (cycle 0), or chained, pruned and set by the weights policy. A loss
    of the user's own is tried on it first (`check_loss`: SpecError naming the loss, before any training)."""
    torch.manual_seed(seed)
    model = build_model(spec.model, data.input_shape, data.num_classes).to(device)
    if cycle == 0:
        check_loss(spec, model, data, device)
        return model, full_masks(model), None, ""
    if start_checkpoint is None:
        raise CheckpointError(f"cycle {cycle} needs a start checkpoint (the chained state of cycle {cycle - 1})")
    state = load_checkpoint(start_checkpoint, map_location=device)
    if state["fingerprint"] != spec.chain_fingerprint():
        raise CheckpointError(f"checkpoint {start_checkpoint}: made for a different experiment "
                              "(model, data or pruning differ)")
    if state["cycle"] != cycle - 1:
        raise CheckpointError(f"checkpoint {start_checkpoint}: holds cycle {state['cycle']}, cycle {cycle} "
                              f"needs cycle {cycle - 1}")
    model.load_state_dict(state["model"])
    generator = data_order(seed, cycle)
    masks = prune(model, state["masks"], spec.rate, resolve("pruner", spec.pruner),
                  lambda: islice(data.batches("train", spec.batch_size, generator), spec.score_batches),
                  seed=seed, prune_output=spec.prune_output)
    if spec.weights == "rewind":
        model.load_state_dict(state["rewind"])
    elif spec.weights == "reinit":
        torch.manual_seed(seed + 7919 * cycle)
        model.load_state_dict(build_model(spec.model, data.input_shape, data.num_classes).state_dict())
    apply_masks(model, masks)
    check_loss(spec, model, data, device)
    return model, masks, state.get("rewind"), checkpoint_hash(start_checkpoint)


def train_step(forward: nn.Module, optimizer: torch.optim.Optimizer, masked: MaskedWeights,
               x: torch.Tensor, y: torch.Tensor, spec: ExperimentSpec, device: torch.device,
               scaler: torch.amp.GradScaler | None = None) -> torch.Tensor:
    """One optimizer step on a batch, pruned weights kept at zero; returns the detached loss (no GPU sync).
    `scaler`: fp16's gradient scaler, which skips a step whose gradients overflowed."""
    with forward_autocast(device, spec):
        loss = loss_function(spec)(forward(input_layout(x, spec, device)), y)
    optimizer.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
        masked.mask_gradients()
        optimizer.step()
    else:
        scaler.scale(loss).backward()
        masked.mask_gradients()
        scaler.step(optimizer)
        scaler.update()
    masked.apply()  # weight decay and momentum must not revive pruned weights
    return loss.detach()


def make_step(forward: nn.Module, optimizer: torch.optim.Optimizer, masked: MaskedWeights, spec: ExperimentSpec,
              device: torch.device, scaler: torch.amp.GradScaler | None = None
              ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A training's step `(x, y) -> detached loss`, chosen once per training: the lean step
    (`trainables.lean`: the same math without autograd) for a plain Linear+ReLU MLP on a CPU with the project's
    cross-entropy and SGD, else `train_step` through autograd (user models and losses, other optimizers, GPUs).
    The optimizer's LR is read at every step: set it in its param groups as before."""
    lean = lean_step(forward, optimizer, masked, spec, device, scaler)
    if lean is not None:
        return lean
    return lambda x, y: train_step(forward, optimizer, masked, x, y, spec, device, scaler)


def run_cycle(spec: ExperimentSpec, *, cycle: int, max_lr: float | None, seed: int,
              start_checkpoint: str | None = None, checkpoint_dir: str | Path | None = None,
              on_epoch: Callable[[dict], None] | None = None,
              timings: dict[str, float] | None = None) -> CycleResult:
    """Run pruning cycle `cycle` (0 = dense training) at peak LR `max_lr` (SILO derives its own).

    `on_epoch`, if given, receives {epoch, val_acc, train_loss, lr} after every finished epoch. `timings`, if
    given, receives the seconds spent per phase (data, prepare, train, evaluate, report, statistics, checkpoint,
    total), measured around whole epochs, never per step (benchmarks/step_efficiency.py reads them)."""
    started, started_at = time.perf_counter(), utc_now()  # before data loading and model set-up: they are counted
    clock = _Clock(timings)
    device = resolve_device(spec.device)
    device_backends(device, spec)
    spec = dataclasses.replace(spec, precision=resolve_precision(spec.precision, device))
    data = load_data(spec).to(device)
    clock.lap("data")
    model, masks, rewind, start_hash = prepare_cycle(spec, cycle, seed, start_checkpoint, data, device)
    if cycle == 0 and spec.weights == "rewind" and spec.rewind_epoch == 0:
        rewind = state_copy(model)
    if device.type == "cuda" and spec.channels_last and len(data.input_shape) == 3:
        model = model.to(memory_format=torch.channels_last)
    forward = torch.compile(model) if spec.compile else model

    peak = cycle_peak(spec.schedule, cycle, spec.rate, max_lr)
    optimizer = make_optimizer(spec.optimizer, model.parameters(), peak)
    masked = MaskedWeights(model, masks)
    scaler = grad_scaler(device, spec.precision)
    train = make_step(forward, optimizer, masked, spec, device, scaler)
    steps_per_epoch = math.ceil(data.size("train") / spec.batch_size)
    total = spec.epochs * steps_per_epoch
    generator = data_order(seed, cycle)
    clock.lap("prepare")

    best_val, best_epoch, best_state = -1.0, 0, state_copy(model)
    step, epochs_run, diverged = 0, 0, False
    for epoch in range(1, spec.epochs + 1):
        model.train()
        epoch_loss = torch.zeros((), device=device)
        for x, y in data.batches("train", spec.batch_size, generator):
            lr = lr_at(step, total, peak, spec.schedule)
            for group in optimizer.param_groups:
                group["lr"] = lr
            epoch_loss += train(x, y)
            step += 1
        epochs_run = epoch
        clock.lap("train")
        # One check per epoch, not per step: a per-step check would force a GPU sync in the hot loop.
        if not torch.isfinite(epoch_loss):
            diverged = True
            break
        val = accuracy(forward, data, "val", spec, device)
        if val > best_val:  # its test accuracy is measured once, at the end, on these very weights
            best_val, best_epoch, best_state = val, epoch, state_copy(model)
        if cycle == 0 and spec.weights == "rewind" and epoch == spec.rewind_epoch:
            rewind = state_copy(model)
        clock.lap("evaluate")
        if on_epoch is not None:
            on_epoch({"epoch": epoch, "val_acc": val, "train_loss": float(epoch_loss) / steps_per_epoch, "lr": lr})
            clock.lap("report")

    model.load_state_dict(best_state)  # the chained weights are those of the best-validation epoch
    if best_epoch == 0:  # diverged before a single finite epoch: report where it started
        best_val = accuracy(forward, data, "val", spec, device)
    best_test = accuracy(forward, data, "test", spec, device)  # early stop: the best-validation epoch's weights
    clock.lap("evaluate")
    result = finish_cycle(spec, model, masks, data, device, clock, cycle=cycle, seed=seed, peak=peak,
                          rewind=rewind, best_val=best_val, best_test=best_test, best_epoch=best_epoch,
                          epochs=epochs_run, diverged=diverged, start_hash=start_hash, checkpoint_dir=checkpoint_dir,
                          seconds_so_far=time.perf_counter() - started, started_at=started_at)
    if timings is not None:
        timings["total"] = result.seconds
    return result


def finish_cycle(spec: ExperimentSpec, model: nn.Module, masks: Masks, data: Data, device: torch.device,
                 clock: "_Clock | None" = None, *, cycle: int, seed: int, peak: float, rewind: dict | None, best_val: float,
                 best_test: float, best_epoch: int, epochs: int, diverged: bool, start_hash: str,
                 checkpoint_dir: str | Path | None, seconds_so_far: float, started_at: str = "") -> CycleResult:
    """The end of a cycle, for `run_cycle` and for each candidate of a fused one: `model` holds the weights of the
    best-validation epoch (the chained ones); write the checkpoint, measure §3.1's statistics on them, and make
    the row. `seconds_so_far`: the training's time before this, to which this step's own time is added;
    `started_at`: when the training began (`utc_now`), the row's `started`; its `finished` is this step's end."""
    started, clock = time.perf_counter(), clock or _Clock(None)
    path, digest = "", ""
    if checkpoint_dir is not None:  # first: the statistics' training-mode batch moves batch norm's buffers
        payload = {"model": dict(model.state_dict()), "masks": masks, "rewind": rewind, "cycle": cycle,
                   "fingerprint": spec.chain_fingerprint(),
                   "metrics": {"val_acc": best_val, "test_acc": best_test, "max_lr": peak, "seed": seed}}
        payload = {k: v for k, v in payload.items() if v is not None}
        digest = save_checkpoint(checkpoint_dir, _to_cpu(payload))
        path = str(checkpoint_dir)
    clock.lap("checkpoint")
    grad_std, grad_hist, act_std, act_hist = layer_statistics(model, masks, data, spec, device)
    clock.lap("statistics")
    return CycleResult(
        cycle=cycle, seed=seed, max_lr=peak, density=density(masks), val_acc=best_val, test_acc=best_test,
        best_epoch=best_epoch, epochs=epochs, seconds=seconds_so_far + time.perf_counter() - started,
        device=str(device), precision=spec.precision, diverged=diverged, grad_std=grad_std, act_std=act_std,
        grad_hist=grad_hist, act_hist=act_hist, checkpoint=path, checkpoint_hash=digest, start_hash=start_hash,
        started=started_at, finished=utc_now())


class _Clock:
    """Seconds per phase of a training, summed into `into` (nothing is measured without one)."""

    def __init__(self, into: dict[str, float] | None):
        self.into, self.last = into, time.perf_counter()

    def lap(self, phase: str) -> None:
        if self.into is not None:
            now = time.perf_counter()
            self.into[phase] = self.into.get(phase, 0.0) + now - self.last
            self.last = now


def _to_cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    return obj
