"""Horizontally fused training (HFTA, Wang et al. MLSys 2021): the K max_lr candidates of one (seed, cycle)
trained as one network on one device.

The Oracle trains every max_lr of a cycle from the same checkpoint, with the same architecture, mask and data
order; the candidates differ only in their learning rate. So their K copies are stacked along a new leading
dimension, (K, ...) per parameter and running statistic, and run as one network. A network built from the layers
`trainables.fused_native` knows (the MLP, ResNets, VGG, MobileNetV2, AlexNet) runs HFTA's native fused layers:
one grouped convolution, one BatchNorm and one batched matmul per layer for all K, so a fused step issues about
the ops of one model's step. Any other network (DenseNet's channel concatenation, ViT's attention) runs through
`torch.func.vmap` over `functional_call`, whose batching rules give the same layers at a higher per-op cost.
`FusedOptimizer` applies torch.optim's update with one learning rate per candidate, in multi-tensor (foreach)
ops. Each candidate's result equals `trainables.cycle.run_cycle` at its max_lr up to float rounding.

Needs only torch and numpy (no Ray, Optuna or dataset packages), so it runs on a bare GPU machine.
"""
from __future__ import annotations

import dataclasses
import functools
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from trainables import fused_native
from trainables.cycle import (CycleResult, accuracy, data_order, device_backends, finish_cycle, forward_autocast,
                              eval_batch, input_layout, prepare_cycle, resolve_device, state_copy)
from trainables.data import Data
from trainables.plugins import load_data, loss_function
from trainables.pruning import Masks
from trainables.precision import resolve_precision
from trainables.schedules import cycle_peak, lr_at
from trainables.spec import ExperimentSpec, OptimizerSpec, SpecError
from trainables.timestamps import utc_now

State = dict[str, torch.Tensor]


def _float_input(_module: nn.Module, args: tuple) -> tuple:
    """vmap path only: BatchNorm in float32 under bf16 autocast, since vmap's BatchNorm backward on CUDA rejects a
    bf16 input with float32 running statistics (seen on an H200 with VGG-19-BN at K = 4)."""
    x = args[0]
    return (x.float().contiguous() if x.dtype in (torch.bfloat16, torch.float16) else x, *args[1:])


@dataclass
class Fused:
    """K copies of `model` stacked on a leading dimension. `net` is the native fused network when `model` has one
    (`fused_native.supports`); otherwise `model` is the template that vmap's `functional_call` runs."""

    model: nn.Module
    params: State  # name -> (K, ...) leaf tensors that require grad
    buffers: State  # name -> (K, ...): BatchNorm's running statistics, one set per candidate
    net: nn.Module | None = None
    channels_last: bool = False  # native convolution weights laid out so that their flat view is channels_last

    @classmethod
    def replicate(cls, model: nn.Module, k: int, native: bool | None = None) -> "Fused":
        """`native`: None picks the native layers where the model allows them; True insists; False takes vmap."""
        params, buffers = stack_module_state([model] * k)
        fused = cls(model, params, buffers)
        if native is None:
            native = fused_native.supports(model)
        if native:
            fused.net = fused_native.build(model, fused)
        else:
            for module in model.modules():
                if isinstance(module, nn.modules.batchnorm._BatchNorm):
                    module.register_forward_pre_hook(_float_input)
        return fused

    def to_channels_last(self) -> None:
        """Native path: each convolution weight (K, O, I, h, w) stored so that its flat (K·O, I, h, w) view is
        channels_last, as run_cycle's model is on CUDA (the gradients follow the weights' strides)."""
        if self.net is None:
            raise ValueError("to_channels_last: only the native path lays out its own weights")
        self.channels_last = True
        self.params = {n: _last(p).requires_grad_() if p.dim() == 5 else p for n, p in self.params.items()}

    @property
    def size(self) -> int:
        return len(next(iter(self.params.values())))

    def _forward_one(self, params: State, buffers: State, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.model, (params, buffers), (x,))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (K, N, classes) of every candidate on the same inputs x (N, ...)."""
        if self.net is not None:
            return self.net(x)
        return vmap(self._forward_one, in_dims=(0, 0, None))(self.params, self.buffers, x)

    def train(self, mode: bool = True) -> None:
        self.model.train(mode)
        if self.net is not None:
            self.net.train(mode)

    def zero_grad(self) -> None:
        for p in self.params.values():
            p.grad = None

    def state(self, slot: int) -> State:
        """Slot `slot` as a state_dict of the template (copies: a view would save the whole stack)."""
        stacked = self.params | self.buffers
        return {name: stacked[name][slot].detach().clone() for name in self.model.state_dict()}

    def keep(self, slots: list[int]) -> None:
        """Drop every slot not in `slots` (a diverged candidate stops costing compute). The native network reads
        the new tensors at its next call."""
        index = torch.tensor(slots, device=next(iter(self.params.values())).device)
        self.params = {n: (_last(p.detach()[index]) if self.channels_last and p.dim() == 5 else p.detach()[index])
                       .requires_grad_() for n, p in self.params.items()}
        self.buffers = {n: b[index] for n, b in self.buffers.items()}


def _last(weight: torch.Tensor) -> torch.Tensor:
    """A copy of (K, O, I, h, w) with I innermost: flattened to (K·O, I, h, w) it is a channels_last view."""
    return weight.detach().permute(0, 1, 3, 4, 2).contiguous().permute(0, 1, 4, 2, 3)


def _by_rank(lr: torch.Tensor, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """`lr` (K,) as a (K, 1, ...) view matching each tensor's rank: one view per rank, not per tensor."""
    views: dict[int, torch.Tensor] = {}
    return [views.setdefault(t.dim(), lr.view(-1, *[1] * (t.dim() - 1))) for t in tensors]


@dataclass
class FusedOptimizer:
    """torch.optim's SGD, Adam and RMSprop updates (their default hyperparameters, the spec's momentum and
    weight decay) on stacked parameters, with one learning rate per candidate. Each stage of an update is one
    multi-tensor (foreach) op over all parameters, as torch.optim's foreach path; the learning rate is a (K, 1, ...)
    view that broadcasts over each parameter's candidate axis."""

    spec: OptimizerSpec
    params: State
    state: dict[str, State] = field(default_factory=dict)  # per parameter: momentum / moment buffers
    steps: int = 0
    _stacked_masks: tuple[Masks, State] | None = None  # (the masks given, each as its parameter's full shape)

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

    def _buffers(self, names: list[str], key: str) -> list[torch.Tensor]:
        return [self.state[n][key] for n in names]

    @torch.no_grad()
    def step(self, lr: torch.Tensor, masks: Masks | None = None) -> None:
        """One update; `lr` holds one learning rate per slot. `masks` (name -> mask in the parameter's dtype,
        broadcast over the slots) zero the pruned weights' gradients before the update and the weights after it:
        weight decay and momentum must not revive them."""
        self.steps += 1
        o = self.spec
        names = [n for n, p in self.params.items() if p.grad is not None]
        params = [self.params[n] for n in names]
        grads = [p.grad for p in params]
        full = self._full_masks(masks or {})
        masked = [n for n in full if self.params[n].grad is not None]
        if masked:
            torch._foreach_mul_([self.params[n].grad for n in masked], [full[n] for n in masked])
        if o.weight_decay != 0:  # in place: the gradient is not read again, and K copies of a big network
            torch._foreach_add_(grads, params, alpha=o.weight_decay)  # leave no room for a temporary
        for n in names:
            if n not in self.state:  # zeros once, when a parameter first has a gradient
                self.state[n] = {k: torch.zeros_like(self.params[n]) for k in self._zero_state()}
        lrs = _by_rank(lr, params)
        if o.name == "sgd":
            if o.momentum != 0:
                fresh = [n for n, g in zip(names, grads) if "momentum" not in self.state[n]]
                if fresh:  # the first step's momentum is the gradient itself, as torch.optim's
                    for n, g in zip(names, grads):
                        self.state[n]["momentum"] = g.clone()
                else:
                    bufs = self._buffers(names, "momentum")
                    torch._foreach_mul_(bufs, o.momentum)
                    torch._foreach_add_(bufs, grads)
                grads = self._buffers(names, "momentum")
            torch._foreach_addcmul_(params, grads, lrs, value=-1)
        elif o.name == "adam":
            b1, b2 = self.betas
            m, v = self._buffers(names, "exp_avg"), self._buffers(names, "exp_avg_sq")
            torch._foreach_lerp_(m, grads, 1 - b1)
            torch._foreach_mul_(v, b2)
            torch._foreach_addcmul_(v, grads, grads, value=1 - b2)
            denom = torch._foreach_sqrt(v)
            torch._foreach_div_(denom, (1 - b2 ** self.steps) ** 0.5)
            torch._foreach_add_(denom, self.eps)
            torch._foreach_div_(denom, m)  # denom / m, inverted below: one temporary list, not two
            torch._foreach_reciprocal_(denom)
            torch._foreach_addcmul_(params, denom, lrs, value=-1 / (1 - b1 ** self.steps))
        else:  # rmsprop
            sq = self._buffers(names, "square_avg")
            torch._foreach_mul_(sq, self.alpha)
            torch._foreach_addcmul_(sq, grads, grads, value=1 - self.alpha)
            avg = torch._foreach_sqrt(sq)
            torch._foreach_add_(avg, self.eps)
            if o.momentum > 0:
                bufs = self._buffers(names, "momentum")
                torch._foreach_mul_(bufs, o.momentum)
                torch._foreach_addcdiv_(bufs, grads, avg)
                torch._foreach_addcmul_(params, bufs, lrs, value=-1)
            else:
                torch._foreach_div_(grads, avg)  # the gradient is not read again
                torch._foreach_addcmul_(params, grads, lrs, value=-1)
        if masked:
            torch._foreach_mul_([self.params[n] for n in masked], [full[n] for n in masked])

    def _full_masks(self, masks: Masks) -> State:
        """The masks repeated over the slots, each in its parameter's shape, dtype and strides, made once per masks
        and stack: CUDA's multi-tensor kernels take only lists of equal shapes and strides, and fall back to one
        kernel per tensor on a broadcast."""
        if self._stacked_masks is None or self._stacked_masks[0] is not masks:
            full = {n: torch.empty_like(self.params[n], requires_grad=False).copy_(m.expand_as(self.params[n]))
                    for n, m in masks.items()}
            self._stacked_masks = (masks, full)
        return self._stacked_masks[1]

    def keep(self, slots: list[int], params: State) -> None:
        """Follow `Fused.keep`: the same slots of every buffer, and the new parameter tensors."""
        index = torch.tensor(slots, device=next(iter(params.values())).device)
        self.params = params
        # In the new parameters' strides (channels_last weights), which the multi-tensor kernels need.
        self.state = {n: {k: torch.empty_like(params[n], requires_grad=False).copy_(t[index]) for k, t in s.items()}
                      for n, s in self.state.items()}
        self._stacked_masks = None


def _cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits, y)


def fused_losses(fused: Fused, x: torch.Tensor, y: torch.Tensor,
                 loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = nn.functional.cross_entropy
                 ) -> torch.Tensor:
    """Each candidate's loss on the shared batch: shape (K,). Cross-entropy in one op for all K; another loss (the
    user's, `--loss`) once per candidate's logits, as run_cycle calls it."""
    logits = fused(x)
    if loss is not nn.functional.cross_entropy:
        return torch.stack([loss(candidate, y) for candidate in logits])
    if fused.net is None:
        return vmap(_cross_entropy, in_dims=(0, None))(logits, y)
    k, n = logits.shape[:2]
    return nn.functional.cross_entropy(logits.flatten(0, 1), y.repeat(k), reduction="none").view(k, n).mean(1)


def fused_step(fused: Fused, optimizer: FusedOptimizer, masks: Masks, x: torch.Tensor, y: torch.Tensor,
               lr: torch.Tensor, spec: ExperimentSpec, device: torch.device) -> torch.Tensor:
    """One training step of every slot, as run_cycle takes one: masked gradients, update, re-zeroed pruned
    weights. Returns the per-slot losses (K,). Summing them does not mix candidates: d(sum)/d(loss_k) = 1."""
    with forward_autocast(device, spec):
        losses = fused_losses(fused, input_layout(x, spec, device), y, loss_function(spec))
    fused.zero_grad()
    losses.sum().backward()
    optimizer.step(lr, masks)
    fused.zero_grad()  # K networks' gradients need not outlive the step (they would through the next forward)
    return losses.detach()


class GraphedStep:
    """`fused_step` replayed from one CUDA graph (`Resources.cuda_graphs`). A ResNet-20 step issues about 950 small
    kernels, and on an H100 their launches, not their arithmetic, bound it; a graph launches them as one.

    - Static shapes: full batches replay the graph. An epoch's last partial batch runs eagerly, on its own, so an
      epoch sees the same batches and updates as without the graph.
    - The first `WARMUP` full batches run eagerly on a side stream, as PyTorch's whole-network capture does:
      cuDNN's, cuBLAS's and autograd's lazy set-up must not happen inside the capture, and SGD's first step (its
      momentum starts as the gradient) takes another path than the steps after it.
    - The batch and the learning rates are copied into static device tensors before each replay; nothing is read
      on the host.
    - `reset` (after `Fused.keep` replaced the stacked tensors) drops the graph; the next full batch captures anew.
    Only optimizers whose update does not depend on the step count are graphed (the spec refuses Adam, whose bias
    correction would be frozen at the captured step)."""

    WARMUP = 3
    # The dry run's probe times several copies at once in threads of one process. A capture in CUDA's default
    # ("global") mode is invalidated by any other thread's unsafe call (seen on an H100: the probe's two copies
    # failed with cudaErrorStreamCaptureInvalidated), so captures are made one at a time and checked per thread.
    _capturing = threading.Lock()

    def __init__(self, fused: Fused, optimizer: FusedOptimizer, masks: Masks, spec: ExperimentSpec,
                 device: torch.device):
        self.fused, self.optimizer, self.masks, self.spec, self.device = fused, optimizer, masks, spec, device
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # x, y, lr
        self.losses: torch.Tensor | None = None
        self.warmup = self.WARMUP
        self.captures = self.replays = 0

    def reset(self) -> None:
        self.graph = self.static = self.losses = None
        self.warmup = 1  # the optimizer's state exists: one eager step suffices before the next capture

    def _eager(self, x: torch.Tensor, y: torch.Tensor, lr: torch.Tensor) -> torch.Tensor:
        return fused_step(self.fused, self.optimizer, self.masks, x, y, lr, self.spec, self.device)

    def __call__(self, x: torch.Tensor, y: torch.Tensor, lr: torch.Tensor) -> torch.Tensor:
        if len(y) != self.spec.batch_size:  # the partial last batch: another shape
            return self._eager(x, y, lr)
        if self.warmup > 0:
            self.warmup -= 1
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                losses = self._eager(x, y, lr)
            torch.cuda.current_stream(self.device).wait_stream(side)
            return losses
        if self.graph is None:
            self.static = (x.clone(), y.clone(), lr.clone())
            self.fused.zero_grad()
            self.graph = torch.cuda.CUDAGraph()
            with self._capturing, torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                self.losses = self._eager(*self.static)  # recorded, not run: the replay below runs it
            self.optimizer.steps -= 1  # the capture counted a step that the replay below takes
            self.captures += 1
        else:
            for static, new in zip(self.static, (x, y, lr)):
                static.copy_(new)
        self.graph.replay()
        self.optimizer.steps += 1
        self.replays += 1
        return self.losses


GRAPHED_BY_DEFAULT = ("sgd",)  # the optimizers whose graphed step was measured (speed on an H100, equality in float64)


def graphs_apply(spec: ExperimentSpec, device: torch.device, fused: Fused) -> bool:
    """Whether the fused step replays from a CUDA graph: as the spec says when it says (`Resources.cuda_graphs`
    True or False), else wherever the graphed step supports the trial, decided here, where the trial's device is
    known (a spec's "auto" device is CUDA only on a GPU worker): on CUDA, with SGD, and a network with natively
    fused layers (the vmap path has none to capture). Elsewhere the eager step runs, without a word."""
    asked = spec.resources.cuda_graphs
    if asked is not None:
        return asked
    return device.type == "cuda" and spec.optimizer.name in GRAPHED_BY_DEFAULT and fused.net is not None


def step_function(fused: Fused, optimizer: FusedOptimizer, masks: Masks, spec: ExperimentSpec,
                  device: torch.device) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """The fused step as a trial takes it, (x, y, lr) -> per-slot losses: replayed from a CUDA graph where
    `graphs_apply` says so (`GraphedStep`; asked for, the spec allows it on CUDA only), else `fused_step`."""
    if not graphs_apply(spec, device, fused):
        return functools.partial(fused_step, fused, optimizer, masks, spec=spec, device=device)
    if fused.net is None:
        raise SpecError("cuda-graphs", f"{spec.model} has no natively fused layers to capture (it runs through "
                        "vmap); train it without --cuda-graphs")
    return GraphedStep(fused, optimizer, masks, spec, device)


@torch.no_grad()
def fused_accuracy(fused: Fused, data: Data, split: str, spec: ExperimentSpec,
                   device: torch.device) -> list[float]:
    """`cycle.accuracy` of every slot, in one pass over the split."""
    fused.train(False)
    correct = torch.zeros(fused.size, device=device)
    with forward_autocast(device, spec):
        for x, y in data.batches(split, eval_batch(spec, data, device)):
            correct += (fused(input_layout(x, spec, device)).argmax(-1) == y).sum(1)
    return [100.0 * c / data.size(split) for c in correct.tolist()]


def run_fused_cycle(spec: ExperimentSpec, *, cycle: int, max_lrs: list[float], seed: int,
                    start_checkpoint: str | None = None,
                    checkpoint_dirs: list[Path] | None = None) -> list[CycleResult]:
    """`run_cycle` at every max_lr of `max_lrs`, trained as one fused network; one CycleResult per max_lr, in
    order. A candidate whose epoch loss is not finite is frozen (`diverged`) and dropped from the stack.

    `seconds` is each candidate's equal share of the fused run's wall time, so summed rows give the time spent.
    `spec.compile` is not applied here (torch.compile of the fused network is untested). fp16, asked for or what
    `auto` resolves to, is refused (SpecError): one shared loss scale would let one candidate's overflow skip the
    others' steps, and without a scaler small fp16 gradients underflow.
    """
    if spec.schedule.name == "silo":
        raise ValueError("schedule: SILO derives its own max_lr per cycle; there are no candidates to fuse")
    if not max_lrs:
        raise ValueError("max_lrs: at least one candidate is needed")
    if checkpoint_dirs is not None and len(checkpoint_dirs) != len(max_lrs):
        raise ValueError(f"checkpoint_dirs: {len(checkpoint_dirs)} given for {len(max_lrs)} candidates")
    started, started_at = time.perf_counter(), utc_now()  # before data loading and set-up, as run_cycle's
    device = resolve_device(spec.device)
    device_backends(device, spec)
    spec = dataclasses.replace(spec, precision=resolve_precision(spec.precision, device))
    if spec.precision == "fp16":  # after `auto` is resolved: on a GPU older than capability 8.0 it means fp16
        raise SpecError("precision", "fp16 is never fused: the fused step has no gradient scaler (one shared loss "
                        "scale would let one candidate's overflow skip the others' steps); train it unfused")
    data = load_data(spec).to(device)
    # One prune of the shared start: every candidate's mask is this one, broadcast over the stack.
    model, masks, rewind, start_hash = prepare_cycle(spec, cycle, seed, start_checkpoint, data, device)
    start_state = state_copy(model)
    k = len(max_lrs)
    peaks = [cycle_peak(spec.schedule, cycle, spec.rate, lr) for lr in max_lrs]
    capture_rewind = cycle == 0 and spec.weights == "rewind"
    rewinds: list[State | None] = [start_state if capture_rewind and spec.rewind_epoch == 0 else rewind] * k

    fused = Fused.replicate(model, k)
    if device.type == "cuda" and spec.channels_last and len(data.input_shape) == 3 and fused.net is not None:
        fused.to_channels_last()  # as run_cycle's model
    optimizer = FusedOptimizer(spec.optimizer, fused.params)
    lr_dtype = next(iter(fused.params.values())).dtype
    # In the parameters' dtype once, as run_cycle's MaskedWeights: a bool mask would be converted at every step.
    step_masks = {name: mask.to(fused.params[name].dtype) for name, mask in masks.items()}
    steps_per_epoch = -(-data.size("train") // spec.batch_size)
    total = spec.epochs * steps_per_epoch
    # The same data order as run_cycle's for this (seed, cycle): every candidate sees the same batches.
    generator = data_order(seed, cycle)
    step_fn = step_function(fused, optimizer, step_masks, spec, device)

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
            epoch_loss += step_fn(x, y, table[i])
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
            if isinstance(step_fn, GraphedStep):
                step_fn.reset()
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

    seconds = (time.perf_counter() - started) / k  # each candidate's share of the fused training
    results = []
    for c in range(k):
        model.load_state_dict({name: best[name][c] for name in model.state_dict()})  # its best-validation epoch
        results.append(finish_cycle(
            spec, model, masks, data, device, cycle=cycle, seed=seed, peak=peaks[c],
            rewind=rewinds[c], best_val=best_val[c], best_test=best_test[c], best_epoch=best_epoch[c],
            epochs=epochs_run[c], diverged=diverged[c], start_hash=start_hash,
            checkpoint_dir=None if checkpoint_dirs is None else checkpoint_dirs[c], seconds_so_far=seconds,
            started_at=started_at))
    finished = utc_now()  # the trial's: every candidate held its slot until the last one's checkpoint and statistics
    return [dataclasses.replace(r, finished=finished) for r in results]

