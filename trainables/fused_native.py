"""HFTA's fused layers (Wang et al., MLSys 2021) as native torch ops: K candidates of one network run as one
network that issues as many ops as one model, each one K times wider.

Layouts: the network's input (N, ...) is shared by every candidate. A convolutional activation is (N, K·C, H, W),
candidate k's channels at [k·C, (k+1)·C); a linear activation is (K, N, F). So a convolution is one grouped
convolution (K·groups groups; on the shared input, one convolution K times as wide), BatchNorm one
`F.batch_norm` over K·C channels, a Linear one batched matmul, and pooling, ReLU, flattening and residual sums
are the template's own ops on the wider tensor. Each layer reads its (K, ...) parameters and running statistics
from the stack at call time, through flat views, so gradients and running-statistic updates land in the
per-candidate tensors `trainables.fused.Fused` keeps.

Only networks built from the layers and blocks listed here fuse natively (`supports`); any other keeps the vmap
path of `trainables.fused`. DenseNet is one of them: its `torch.cat(..., 1)` would interleave the candidates'
channel blocks wrongly in this layout.
"""
from __future__ import annotations

import copy
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn


class Stack(Protocol):
    params: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor]


# Layers that act on each channel (or element) alone: in the (N, K·C, ...) layout they are already fused.
CHANNELWISE = (nn.ReLU, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.Identity)
# Blocks whose own forward only calls their children and adds: correct in these layouts as they are. Named, not
# imported. torchvision's ResNet-50 has the same structure (plus a functional flatten this layout allows) but is
# left to vmap until a float64 equivalence test covers it: one such step needs gigabytes in float64.
BLOCKS = frozenset({"torch.nn.modules.container.Sequential", "trainables.models.BasicBlock",
                    "trainables.models.CifarResNet", "trainables.models.InvertedResidual"})


def _qualname(module: nn.Module) -> str:
    return f"{type(module).__module__}.{type(module).__qualname__}"


def _native_leaf(module: nn.Module) -> bool:
    if type(module) is nn.Conv2d:
        return module.padding_mode == "zeros"
    if type(module) is nn.BatchNorm2d or type(module) is nn.Linear:
        return True
    if type(module) is nn.Flatten:
        return module.start_dim == 1 and module.end_dim == -1
    return type(module) in CHANNELWISE


def supports(model: nn.Module) -> bool:
    """Whether every module of `model` is a layer or block this module fuses natively."""
    return all(_native_leaf(m) or _qualname(m) in BLOCKS for m in model.modules())


class _Layer(nn.Module):
    """A fused layer: the template layer's settings, its parameters read from the stack by qualified name."""

    def __init__(self, stack: Stack, name: str):
        super().__init__()
        self._stack = [stack]  # in a list: nn.Module would otherwise try to register it
        self._name = name

    def _param(self, leaf: str) -> torch.Tensor | None:
        return self._stack[0].params.get(f"{self._name}.{leaf}")

    def _buffer(self, leaf: str) -> torch.Tensor | None:
        return self._stack[0].buffers.get(f"{self._name}.{leaf}")


def _channel_stacked(x: torch.Tensor, k: int, channels: int) -> bool:
    """True for an (N, K·C, ...) activation, False for the shared input (N, C, ...) (the same when K = 1)."""
    if x.shape[1] == k * channels:
        return True
    if x.shape[1] == channels:
        return False
    raise ValueError(f"fused layer: {x.shape[1]} channels, expected {channels} or {k}·{channels}")


class FusedConv2d(_Layer):
    def __init__(self, stack: Stack, name: str, conv: nn.Conv2d):
        super().__init__(stack, name)
        self.in_channels, self.groups = conv.in_channels, conv.groups
        self.stride, self.padding, self.dilation = conv.stride, conv.padding, conv.dilation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self._param("weight"), self._param("bias")
        k = weight.shape[0]
        groups = k * self.groups
        if not _channel_stacked(x, k, self.in_channels):
            if self.groups == 1:  # every candidate convolves the same input: one convolution K times as wide
                groups = 1
            else:
                x = x.repeat(1, k, 1, 1)
        return F.conv2d(x, weight.flatten(0, 1), None if bias is None else bias.flatten(), self.stride,
                        self.padding, self.dilation, groups)


class FusedBatchNorm2d(_Layer):
    def __init__(self, stack: Stack, name: str, bn: nn.BatchNorm2d):
        super().__init__(stack, name)
        self.num_features, self.eps, self.momentum = bn.num_features, bn.eps, bn.momentum
        self.track_running_stats = bn.track_running_stats

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self._param("weight"), self._param("bias")
        mean, var = self._buffer("running_mean"), self._buffer("running_var")
        tracked = self._buffer("num_batches_tracked")
        k = (weight if weight is not None else mean).shape[0]
        if not _channel_stacked(x, k, self.num_features):
            x = x.repeat(1, k, 1, 1)
        # nn.BatchNorm2d's own rules, with every candidate's counter moving together.
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and tracked is not None:
            tracked.add_(1)
            if self.momentum is None:  # cumulative average: the counters are equal, read the first
                momentum = 1.0 / float(tracked[0])
        use_batch = self.training or mean is None
        return F.batch_norm(x, None if mean is None or (self.training and not self.track_running_stats)
                            else mean.view(-1),
                            None if var is None or (self.training and not self.track_running_stats) else var.view(-1),
                            None if weight is None else weight.view(-1), None if bias is None else bias.view(-1),
                            use_batch, momentum, self.eps)


class FusedLinear(_Layer):
    def __init__(self, stack: Stack, name: str, linear: nn.Linear):
        super().__init__(stack, name)
        self.in_features = linear.in_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self._param("weight"), self._param("bias")  # (K, out, in), (K, out)
        k = weight.shape[0]
        if x.dim() == 2:
            if x.shape[1] == self.in_features:  # the shared input: the same rows for every candidate
                x = x.expand(k, *x.shape)
            else:  # flattened (N, K·F) channel-stacked features: candidate k's F columns, as (K, N, F)
                x = x.view(x.shape[0], k, self.in_features).transpose(0, 1)
        if bias is None:
            return torch.bmm(x, weight.transpose(1, 2))
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))


def build(template: nn.Module, stack: Stack) -> nn.Module:
    """The fused network of `template` (which `supports`), reading its parameters from `stack`; called on an
    input (N, ...), it returns logits (K, N, classes)."""
    if not supports(template):
        raise ValueError("fused_native.build: the model has a layer or block that does not fuse natively")
    net = copy.deepcopy(template)
    for name, module in list(net.named_modules()):
        fused: nn.Module | None = None
        if type(module) is nn.Conv2d:
            fused = FusedConv2d(stack, name, module)
        elif type(module) is nn.BatchNorm2d:
            fused = FusedBatchNorm2d(stack, name, module)
        elif type(module) is nn.Linear:
            fused = FusedLinear(stack, name, module)
        if fused is not None:
            parent, _, child = name.rpartition(".")
            setattr(net.get_submodule(parent) if parent else net, child, fused)
    if isinstance(net, (nn.Conv2d, nn.BatchNorm2d, nn.Linear)):
        raise ValueError("fused_native.build: a bare layer is no network")
    return net
