"""Horizontally fused training (HFTA, Wang et al. MLSys 2021): the K max_lr candidates of one (seed, cycle)
trained as one network on one device.

The Oracle trains every max_lr of a cycle from the same checkpoint, with the same architecture, mask and data
order; the candidates differ only in their learning rate. So their K copies are stacked along a new leading
dimension and run by `torch.func.vmap` over `functional_call`, whose batching rules are exactly HFTA's fused
layers: a Linear becomes one batched matmul, a convolution one grouped convolution (K·groups; a depthwise one
K·C groups; the first, on the shared input, one convolution K times as wide), and BatchNorm keeps per-candidate
statistics and running buffers. `FusedOptimizer` applies torch.optim's update with one learning rate per
candidate. Each candidate's result equals `trainables.cycle.run_cycle` at its max_lr up to float rounding.

Needs only torch and numpy (no Ray, Optuna or dataset packages), so it runs on a bare GPU machine.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from trainables.checkpoints import save_checkpoint
from trainables.cycle import (CycleResult, _autocast, _layout, _prepare, _state_copy, _to_cpu, accuracy,
                              layer_statistics, resolve_device)
from trainables.data import TensorData, load_data
from trainables.pruning import Masks, density
from trainables.schedules import cycle_peak, lr_at
from trainables.spec import ExperimentSpec, OptimizerSpec

State = dict[str, torch.Tensor]


def _float_input(_module: nn.Module, args: tuple) -> tuple:
    """BatchNorm in float32 under bf16 autocast: vmap's BatchNorm backward on CUDA rejects a bf16 input with float32
    running statistics (seen on an H200 with VGG-19-BN at K = 4), and float32 statistics are what run_cycle keeps."""
    x = args[0]
    return (x.float().contiguous() if x.dtype in (torch.bfloat16, torch.float16) else x, *args[1:])


@dataclass
class Fused:
    """K copies of `model` stacked on a leading dimension; `model` is only the template `functional_call` runs."""

    model: nn.Module
    params: State  # name -> (K, ...) leaf tensors that require grad
    buffers: State  # name -> (K, ...): BatchNorm's running statistics, one set per candidate

    @classmethod
    def replicate(cls, model: nn.Module, k: int) -> "Fused":
        params, buffers = stack_module_state([model] * k)
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.register_forward_pre_hook(_float_input)
        return cls(model, params, buffers)

    @property
    def size(self) -> int:
        return len(next(iter(self.params.values())))

    def _forward_one(self, params: State, buffers: State, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.model, (params, buffers), (x,))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (K, N, classes) of every candidate on the same inputs x (N, ...)."""
        return vmap(self._forward_one, in_dims=(0, 0, None))(self.params, self.buffers, x)

    def train(self, mode: bool = True) -> None:
        self.model.train(mode)

    def zero_grad(self) -> None:
        for p in self.params.values():
            p.grad = None

    def state(self, slot: int) -> State:
        """Slot `slot` as a state_dict of the template (copies: a view would save the whole stack)."""
        stacked = self.params | self.buffers
        return {name: stacked[name][slot].detach().clone() for name in self.model.state_dict()}

    def keep(self, slots: list[int]) -> None:
        """Drop every slot not in `slots` (a diverged candidate stops costing compute)."""
        index = torch.tensor(slots, device=next(iter(self.params.values())).device)
        self.params = {n: p.detach()[index].requires_grad_() for n, p in self.params.items()}
        self.buffers = {n: b[index] for n, b in self.buffers.items()}


@dataclass
class FusedOptimizer:
    """torch.optim's SGD, Adam and RMSprop updates (their default hyperparameters, the spec's momentum and
    weight decay) on stacked parameters, with one learning rate per candidate."""

    spec: OptimizerSpec
    params: State
    state: dict[str, State] = field(default_factory=dict)  # per parameter: momentum / moment buffers
    steps: int = 0

    betas = (0.9, 0.999)  # Adam's defaults
    alpha = 0.99  # RMSprop's default
    eps = 1e-8  # Adam's and RMSprop's default

    def _zero_state(self) -> tuple[str, ...]:
        """The buffers an update starts from zero (SGD's momentum starts as the first gradient instead)."""
        if self.spec.name == "adam":
            return ("exp_avg", "exp_avg_sq")
        if self.spec.name == "rmsprop":
            return ("square_avg", "momentum") if self.spec.momentum > 0 else ("square_avg",)
        return ()

    @torch.no_grad()
    def step(self, lr: torch.Tensor) -> None:
        """One update; `lr` holds one learning rate per slot."""
        self.steps += 1
        o = self.spec
        for name, p in self.params.items():
            if p.grad is None:
                continue
            lr_p = lr.view(-1, *[1] * (p.dim() - 1))
            grad = p.grad.add_(p, alpha=o.weight_decay) if o.weight_decay != 0 else p.grad  # in place: the
            # gradient is not read again, and K copies of a big network leave no room for a temporary
            s = self.state.setdefault(name, {})
            if not s:  # zeros once: a `setdefault` default would be allocated, and dropped, at every step
                s.update({k: torch.zeros_like(p) for k in self._zero_state()})
            if o.name == "sgd":
                if o.momentum != 0:
                    if "momentum" not in s:
                        s["momentum"] = grad.detach().clone()
                    else:
                        s["momentum"].mul_(o.momentum).add_(grad)
                    grad = s["momentum"]
                p.addcmul_(grad, lr_p, value=-1)
            elif o.name == "adam":
                b1, b2 = self.betas
                m, v = s["exp_avg"], s["exp_avg_sq"]
                m.lerp_(grad, 1 - b1)
                v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
                denom = (v.sqrt() / (1 - b2 ** self.steps) ** 0.5).add_(self.eps)
                p.sub_(m.div(denom).mul_(lr_p / (1 - b1 ** self.steps)))
            else:  # rmsprop
                sq = s["square_avg"]
                sq.mul_(self.alpha).addcmul_(grad, grad, value=1 - self.alpha)
                avg = sq.sqrt().add_(self.eps)
                if o.momentum > 0:
                    buf = s["momentum"]
                    buf.mul_(o.momentum).addcdiv_(grad, avg)
                    p.addcmul_(buf, lr_p, value=-1)
                else:
                    p.sub_(grad.div(avg).mul_(lr_p))

    def keep(self, slots: list[int], params: State) -> None:
        """Follow `Fused.keep`: the same slots of every buffer, and the new parameter tensors."""
        index = torch.tensor(slots, device=next(iter(params.values())).device)
        self.params = params
        self.state = {n: {k: t[index] for k, t in s.items()} for n, s in self.state.items()}


def _cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits, y)


def fused_losses(fused: Fused, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Each candidate's mean cross-entropy on the shared batch: shape (K,)."""
    return vmap(_cross_entropy, in_dims=(0, None))(fused(x), y)


def fused_step(fused: Fused, optimizer: FusedOptimizer, masks: Masks, x: torch.Tensor, y: torch.Tensor,
               lr: torch.Tensor, spec: ExperimentSpec, device: torch.device) -> torch.Tensor:
    """One training step of every slot, as run_cycle takes one: masked gradients, update, re-zeroed pruned
    weights. Returns the per-slot losses (K,). Summing them does not mix candidates: d(sum)/d(loss_k) = 1."""
    with _autocast(device, spec):
        losses = fused_losses(fused, _layout(x, spec, device), y)
    fused.zero_grad()
    losses.sum().backward()
    with torch.no_grad():
        for name, mask in masks.items():
            fused.params[name].grad.mul_(mask)
        optimizer.step(lr)
        for name, mask in masks.items():
            fused.params[name].mul_(mask)  # weight decay and momentum must not revive pruned weights
    fused.zero_grad()  # K networks' gradients need not outlive the step (they would through the next forward)
    return losses.detach()


@torch.no_grad()
def fused_accuracy(fused: Fused, data: TensorData, split: str, spec: ExperimentSpec,
                   device: torch.device) -> list[float]:
    """`cycle.accuracy` of every slot, in one pass over the split."""
    fused.train(False)
    correct = torch.zeros(fused.size, device=device)
    with _autocast(device, spec):
        for x, y in data.batches(split, max(spec.batch_size, 512)):
            correct += (fused(_layout(x, spec, device)).argmax(-1) == y).sum(1)
    return [100.0 * c / data.size(split) for c in correct.tolist()]


def run_fused_cycle(spec: ExperimentSpec, *, cycle: int, max_lrs: list[float], seed: int,
                    start_checkpoint: str | None = None,
                    checkpoint_dirs: list[Path] | None = None) -> list[CycleResult]:
    """`run_cycle` at every max_lr of `max_lrs`, trained as one fused network; one CycleResult per max_lr, in
    order. A candidate whose epoch loss is not finite is frozen (`diverged`) and dropped from the stack.

    `seconds` is each candidate's equal share of the fused run's wall time, so summed rows give the time spent.
    `spec.compile` is not applied here (torch.compile of the vmapped network is untested).
    """
    if spec.schedule.name == "silo":
        raise ValueError("schedule: SILO derives its own max_lr per cycle; there are no candidates to fuse")
    if not max_lrs:
        raise ValueError("max_lrs: at least one candidate is needed")
    if checkpoint_dirs is not None and len(checkpoint_dirs) != len(max_lrs):
        raise ValueError(f"checkpoint_dirs: {len(checkpoint_dirs)} given for {len(max_lrs)} candidates")
    started = time.perf_counter()
    device = resolve_device(spec.device)
    data = load_data(spec).to(device)
    # One prune of the shared start: every candidate's mask is this one, broadcast over the stack.
    model, masks, rewind, start_hash = _prepare(spec, cycle, seed, start_checkpoint, data, device)
    start_state = _state_copy(model)
    k = len(max_lrs)
    peaks = [cycle_peak(spec.schedule, cycle, spec.rate, lr) for lr in max_lrs]
    capture_rewind = cycle == 0 and spec.weights == "rewind"
    rewinds: list[State | None] = [start_state if capture_rewind and spec.rewind_epoch == 0 else rewind] * k

    fused = Fused.replicate(model, k)
    optimizer = FusedOptimizer(spec.optimizer, fused.params)
    lr_dtype = next(iter(fused.params.values())).dtype
    # In the parameters' dtype once, as run_cycle's MaskedWeights: a bool mask would be converted at every step.
    step_masks = {name: mask.to(fused.params[name].dtype) for name, mask in masks.items()}
    steps_per_epoch = -(-data.size("train") // spec.batch_size)
    total = spec.epochs * steps_per_epoch
    # The same data order as run_cycle's for this (seed, cycle): every candidate sees the same batches.
    generator = torch.Generator().manual_seed(seed * 1_000_003 + cycle)

    active = list(range(k))  # slot -> candidate
    best = {name: t.detach().clone() for name, t in (fused.params | fused.buffers).items()}  # per candidate
    best_val, best_test, best_epoch = [-1.0] * k, [0.0] * k, [0] * k
    epochs_run, diverged = [0] * k, [False] * k
    step = 0
    for epoch in range(1, spec.epochs + 1):
        fused.train()
        epoch_loss = torch.zeros(len(active), device=device)
        # One host-to-device copy per epoch, not per step.
        table = torch.tensor([[lr_at(t, total, peaks[c], spec.schedule) for c in active]
                              for t in range(step, step + steps_per_epoch)], dtype=lr_dtype, device=device)
        for i, (x, y) in enumerate(data.batches("train", spec.batch_size, generator)):
            epoch_loss += fused_step(fused, optimizer, step_masks, x, y, table[i], spec, device)
        step += steps_per_epoch
        for c in active:
            epochs_run[c] = epoch
        finite = torch.isfinite(epoch_loss).tolist()  # one sync per epoch, as run_cycle's check
        if not all(finite):
            for slot, ok in enumerate(finite):
                diverged[active[slot]] = not ok
            keep = [slot for slot, ok in enumerate(finite) if ok]
            active = [active[slot] for slot in keep]
            if not active:
                break
            fused.keep(keep)
            optimizer.keep(keep, fused.params)
        val = fused_accuracy(fused, data, "val", spec, device)
        improved = [slot for slot, c in enumerate(active) if val[slot] > best_val[c]]
        if improved:
            test = fused_accuracy(fused, data, "test", spec, device)
            for slot in improved:
                c = active[slot]
                best_val[c], best_test[c], best_epoch[c] = val[slot], test[slot], epoch
            slots = torch.tensor(improved, device=device)
            cands = torch.tensor([active[s] for s in improved], device=device)
            with torch.no_grad():
                for name, t in (fused.params | fused.buffers).items():
                    best[name][cands] = t[slots]
        if capture_rewind and epoch == spec.rewind_epoch:
            for slot, c in enumerate(active):
                rewinds[c] = fused.state(slot)

    if 0 in best_epoch:  # diverged before a single finite epoch: report where it started, as run_cycle does
        model.load_state_dict(start_state)
        start_val = accuracy(model, data, "val", spec, device)
        start_test = accuracy(model, data, "test", spec, device)
        for c in range(k):
            if best_epoch[c] == 0:
                best_val[c], best_test[c] = start_val, start_test

    seconds = (time.perf_counter() - started) / k
    results = []
    for c in range(k):
        state = {name: best[name][c].clone() for name in model.state_dict()}
        model.load_state_dict(state)  # the chained weights are those of the best-validation epoch
        grad_std, grad_hist, act_std, act_hist = layer_statistics(model, masks, data, spec, device)
        path, digest = "", ""
        if checkpoint_dirs is not None:
            payload = {"model": state, "masks": masks, "rewind": rewinds[c], "cycle": cycle,
                       "fingerprint": spec.chain_fingerprint(),
                       "metrics": {"val_acc": best_val[c], "test_acc": best_test[c], "max_lr": peaks[c],
                                   "seed": seed}}
            payload = {key: v for key, v in payload.items() if v is not None}
            digest = save_checkpoint(checkpoint_dirs[c], _to_cpu(payload))
            path = str(checkpoint_dirs[c])
        results.append(CycleResult(
            cycle=cycle, seed=seed, max_lr=peaks[c], density=density(masks), val_acc=best_val[c],
            test_acc=best_test[c], best_epoch=best_epoch[c], epochs=epochs_run[c], seconds=seconds,
            device=str(device), diverged=diverged[c], grad_std=grad_std, act_std=act_std, grad_hist=grad_hist,
            act_hist=act_hist, checkpoint=path, checkpoint_hash=digest, start_hash=start_hash))
    return results

