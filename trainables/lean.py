"""A lean training step for a plain MLP on a CPU: the forward and backward written out, SGD as its fused kernel,
no autograd graph.

The §3.1 MLP's step through autograd took 2.3-2.4x its bare matmuls in fp32 on one CPU thread, 4.1-4.2x in bf16
(benchmarks/step_efficiency.py): at batch 128 and width 256 each op's dispatch, the autograd engine's graph and
SGD's per-parameter loop cost about as much as the arithmetic. This step issues the ATen ops the autograd step
runs (`addmm`, `relu`, `log_softmax`, `nll_loss`, their backward kernels, `mm` and `sum` for the gradients,
autocast's casts in bf16), in the same order and dtypes: its loss and gradients are autograd's bit for bit. Its
update is SGD's own fused kernel, which rounds about one float32 ulp apart from SGD's default loop. It leaves out
the engine, the graph, the per-step allocation of the gradients and three of SGD's four passes over each tensor:
1.5-1.6x the bare matmuls in fp32, 2.5x in bf16. tests/test_lean_step.py checks it against
`trainables.cycle.train_step`.

It applies only where that holds (`lean_step` says where): an `nn.Sequential` of `Flatten` (optional), then
`Linear`, `ReLU`, ..., `Linear` with nothing else in it, on a CPU, the project's cross-entropy, `torch.optim.SGD`
(plain, momentum and weight decay; not Nesterov, dampening or maximize), in fp32 or bf16 autocast, no gradient
scaler, not compiled, with torch's CPU kernel of fused SGD (torch 2.4 on). Everything else (user models and
losses, other optimizers, GPUs, older torch) keeps the autograd step.
"""
from __future__ import annotations

import functools

import torch
from torch import nn

from trainables.plugins import loss_function
from trainables.precision import DTYPES, resolve_precision
from trainables.pruning import MaskedWeights
from trainables.spec import ExperimentSpec

MEAN = 1  # ATen's reduction code of nll_loss's "mean" (torch.nn._reduction.get_enum("mean"))
IGNORE_INDEX = -100  # nll_loss's default, as F.cross_entropy passes it


def mlp_layers(model: nn.Module) -> list[nn.Linear] | None:
    """The Linear layers of `model` if it is exactly Flatten?, Linear, (ReLU, Linear)*; else None. Exact types: a
    subclass may compute something else; a hook would see nothing of the lean step."""
    if type(model) is not nn.Sequential:
        return None
    modules = list(model)
    if modules and type(modules[0]) is nn.Flatten and (modules[0].start_dim, modules[0].end_dim) == (1, -1):
        modules = modules[1:]
    if not modules or len(modules) % 2 == 0:
        return None
    linears = modules[0::2]
    if any(type(m) is not nn.Linear for m in linears) or any(type(m) is not nn.ReLU for m in modules[1::2]):
        return None
    hooked = [m for m in model.modules() if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks]
    if hooked or any(True for _ in model.buffers()):
        return None
    return linears


@functools.cache
def fused_sgd_on_cpu() -> bool:
    """Whether this torch has SGD's fused kernel for CPU tensors (torch 2.4 on; pyproject allows 2.3)."""
    try:
        torch._fused_sgd_([torch.zeros(1)], [torch.zeros(1)], [], weight_decay=0.0, momentum=0.0, lr=0.0,
                          dampening=0.0, nesterov=False, maximize=False, is_first_step=False)
    except (RuntimeError, NotImplementedError, AttributeError):
        return False
    return True


def lean_step(model: nn.Module, optimizer: torch.optim.Optimizer, masked: MaskedWeights, spec: ExperimentSpec,
              device: torch.device, scaler: torch.amp.GradScaler | None = None) -> LeanMLPStep | None:
    """The lean step for this training, or None where it does not apply (then the autograd step runs)."""
    precision = resolve_precision(spec.precision, device)  # `auto` as train_step's autocast resolves it
    if device.type != "cpu" or scaler is not None or spec.compile or precision not in ("fp32", "bf16") \
            or not fused_sgd_on_cpu():
        return None
    if loss_function(spec) is not nn.functional.cross_entropy:
        return None
    if type(optimizer) is not torch.optim.SGD or len(optimizer.param_groups) != 1:
        return None
    group = optimizer.param_groups[0]
    if group["nesterov"] or group["dampening"] != 0 or group["maximize"] or group.get("differentiable"):
        return None
    linears = mlp_layers(model)
    if linears is None:
        return None
    params = [p for m in linears for p in (m.weight, m.bias) if p is not None]
    if {id(p) for p in group["params"]} != {id(p) for p in params} or len(group["params"]) != len(params) \
            or len(params) != len(list(model.parameters())):
        return None
    if any(not p.requires_grad or p.dtype != torch.float32 or p.device.type != "cpu" for p in params):
        return None
    if any(optimizer.state.get(p) for p in params):  # a fresh optimizer only: the step keeps the momenta itself
        return None
    return LeanMLPStep(linears, optimizer, masked, DTYPES.get(precision))


class LeanMLPStep:
    """`step(x, y)`: one SGD step of the MLP on a batch, as `train_step` does it; returns the detached loss.

    The weights are updated in place through detached aliases of the parameters (no autograd to record). The
    momenta are the optimizer's own `momentum_buffer`s, so the optimizer's state reads as after `train_step`;
    the parameters' `.grad` stays unset (nothing reads it between steps: §3.1's statistics take their own
    gradient). The LR is read from the optimizer's group at every step, where `run_cycle` sets it.

    Pruned weights: the masks are folded into the weights once, here, and each step multiplies the masked
    gradients by their masks (as `MaskedWeights.mask_gradients`). A weight that is zero with a zero gradient
    stays zero under SGD with momentum and weight decay (its momentum starts at zero and stays so), so the
    autograd step's `masked.apply()` after every update changes nothing and is left out."""

    def __init__(self, linears: list[nn.Linear], optimizer: torch.optim.SGD, masked: MaskedWeights,
                 autocast_dtype: torch.dtype | None):
        masked.apply()
        self.optimizer, self.group = optimizer, optimizer.param_groups[0]
        self.dtype = autocast_dtype  # None: fp32
        self.weights = [m.weight.detach() for m in linears]
        self.weights_t = [w.t() for w in self.weights]  # views: they follow the in-place updates
        self.biases = [m.bias.detach() if m.bias is not None else None for m in linears]
        # Gradient buffers, allocated once and written by `out=` (the autograd step allocates them every step).
        self.grad_w = [torch.empty_like(w) for w in self.weights]
        self.grad_b = [torch.empty_like(b) if b is not None else None for b in self.biases]
        self.params = [p for m in linears for p in (m.weight, m.bias) if p is not None]
        self.values = [p.detach() for p in self.params]
        self.grads = [g for gw, gb in zip(self.grad_w, self.grad_b) for g in (gw, gb) if g is not None]
        masks = {id(p): mask for p, mask in masked.pairs}
        self.pruned = [g for p, g in zip(self.params, self.grads) if id(p) in masks]
        self.masks = [masks[id(p)] for p in self.params if id(p) in masks]
        self.momenta: list[torch.Tensor] = []  # SGD's momentum buffers, made at the first step
        self.one = torch.ones((), dtype=torch.float32)

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = self.forward_backward(x, y)
        self.sgd()
        return loss

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The loss; the gradients into `self.grads` (the pruned weights' not yet masked)."""
        dtype, last = self.dtype, len(self.weights) - 1
        if dtype is None:
            weights, weights_t, biases, h = self.weights, self.weights_t, self.biases, x.flatten(1)
        else:  # autocast's casts: every operand of a Linear to bf16 (its backward casts the gradients back)
            weights = [w.to(dtype) for w in self.weights]
            weights_t = [w.t() for w in weights]
            biases = [b.to(dtype) if b is not None else None for b in self.biases]
            h = x.flatten(1).to(dtype)
        inputs = []
        for k, (w_t, b) in enumerate(zip(weights_t, biases)):
            inputs.append(h)
            h = torch.addmm(b, h, w_t) if b is not None else torch.mm(h, w_t)  # F.linear on a 2-D input
            if k < last:
                h = h.relu_()  # in place: nothing else reads the pre-activation
        logits = h.float() if dtype is not None else h  # autocast runs log_softmax in fp32
        logp = torch.log_softmax(logits, 1)  # F.cross_entropy: log_softmax, then nll_loss's mean
        loss, total = torch.ops.aten.nll_loss_forward(logp, y, None, MEAN, IGNORE_INDEX)
        g = torch.ops.aten.nll_loss_backward(self.one, logp, y, None, MEAN, IGNORE_INDEX, total)
        g = torch._log_softmax_backward_data(g, logp, 1, logits.dtype)
        if dtype is not None:
            g = g.to(dtype)
        for k in range(last, -1, -1):
            # addmm's backward (autograd's mm_mat2_backward for the transposed weight): grad_W = g^T @ input
            if dtype is None:
                torch.mm(g.t(), inputs[k], out=self.grad_w[k])
                if biases[k] is not None:
                    torch.sum(g, 0, out=self.grad_b[k])
            else:
                self.grad_w[k].copy_(torch.mm(g.t(), inputs[k]))
                if biases[k] is not None:
                    self.grad_b[k].copy_(g.sum(0))
            if k > 0:
                g = torch.mm(g, weights[k])  # ReLU's backward, in place: zero where its output was zero
                g = torch.ops.aten.threshold_backward.grad_input(g, inputs[k], 0, grad_input=g)
        return loss.detach()

    def sgd(self) -> None:
        """torch.optim.SGD's update, after masking the pruned weights' gradients, as `torch._fused_sgd_`: one pass
        over each tensor (SGD's `fused=True` kernel) where SGD's default loop makes three. On the §3.1 MLP's
        tensors (one thread of the 2-core Xeon, hot in cache, the masking included): 0.06 ms a step against
        0.17 ms for SGD's default loop and 0.13 ms for its multi-tensor (foreach) form."""
        group = self.group
        if self.pruned:
            torch._foreach_mul_(self.pruned, self.masks)
        first = not self.momenta and group["momentum"] != 0
        if first:  # SGD's first step: the momentum is the gradient itself (the kernel writes it)
            self.momenta = [torch.empty_like(g) for g in self.grads]
            for p, m in zip(self.params, self.momenta):
                self.optimizer.state[p]["momentum_buffer"] = m
        torch._fused_sgd_(self.values, self.grads, self.momenta, weight_decay=group["weight_decay"],
                          momentum=group["momentum"], lr=group["lr"], dampening=0.0, nesterov=False,
                          maximize=False, is_first_step=first)
