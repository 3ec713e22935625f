"""Pruning masks on Conv/Linear weights. A pruner is a scoring function plus a selection scope.

Each call removes a fraction `rate` of the weights that are still unpruned, lowest scores first (ties broken by
position, so results are reproducible); the structured pruner removes that fraction of each layer's alive output
channels instead. Biases and normalisation layers are never pruned.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import nn

Masks = dict[str, torch.Tensor]  # parameter name -> bool tensor of the same shape, True = kept
Batches = Callable[[], Iterable[tuple[torch.Tensor, torch.Tensor]]]


def prunable(model: nn.Module) -> dict[str, nn.Parameter]:
    """The weight tensors of every Conv and Linear layer, by parameter name, in module order.

    Attention's packed query/key/value projection (`in_proj_weight`) is a Linear weight held outside an nn.Linear,
    so it counts too (a quarter of ViT-B/16's weights).
    """
    out = {}
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            out[prefix + "weight"] = module.weight
        elif isinstance(module, nn.MultiheadAttention) and module.in_proj_weight is not None:
            out[prefix + "in_proj_weight"] = module.in_proj_weight
    return out


def full_masks(model: nn.Module) -> Masks:
    return {name: torch.ones_like(p, dtype=torch.bool) for name, p in prunable(model).items()}


def density(masks: Masks) -> float:
    """Percent of prunable weights kept."""
    kept = sum(int(m.sum()) for m in masks.values())
    return 100.0 * kept / sum(m.numel() for m in masks.values())


@torch.no_grad()
def apply_masks(model: nn.Module, masks: Masks) -> None:
    params = prunable(model)
    for name, mask in masks.items():
        params[name].mul_(mask)


def mask_gradients(model: nn.Module, masks: Masks) -> None:
    params = prunable(model)
    for name, mask in masks.items():
        if params[name].grad is not None:
            params[name].grad.mul_(mask)


# --- scores: higher = more important ---------------------------------------------------------------------------

def magnitude_scores(model: nn.Module, masks: Masks, batches: Batches) -> dict[str, torch.Tensor]:
    return {name: p.detach().abs() for name, p in prunable(model).items()}


def gradient_scores(model: nn.Module, masks: Masks, batches: Batches) -> dict[str, torch.Tensor]:
    """|w · ∇w| with ∇w summed over several training batches (ShrinkBench uses one; one batch is noisy)."""
    params = prunable(model)
    grads = {name: torch.zeros_like(p) for name, p in params.items()}
    was_training = model.training
    # Scoring must not move BatchNorm's running statistics: those belong to the trained network.
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    model.train()
    for x, y in batches():
        model.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        for name, p in params.items():
            grads[name] += p.grad.detach()
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    with torch.no_grad():
        for name, b in model.named_buffers():
            b.copy_(buffers[name])
    return {name: (p.detach() * grads[name]).abs() for name, p in params.items()}


def lamp_scores(model: nn.Module, masks: Masks, batches: Batches) -> dict[str, torch.Tensor]:
    """LAMP (Lee et al. 2021): w_u² / Σ_{v ≥ u} w_v² over the layer's weights sorted ascending (stable order)."""
    out = {}
    for name, p in prunable(model).items():
        sq = p.detach().flatten().double() ** 2
        order = torch.argsort(sq, stable=True)
        tail = sq[order].flip(0).cumsum(0).flip(0)  # Σ of every weight at or after each sorted position
        score = torch.empty_like(sq)
        score[order] = sq[order] / tail.clamp_min(torch.finfo(torch.float64).tiny)  # an all-zero layer scores 0
        out[name] = score.view_as(p)
    return out


def _behind(prev: torch.Tensor, w: torch.Tensor, groups: int) -> torch.Tensor | None:
    """‖W_prev[k, :]‖² for the input channel k that each weight of `w` reads, or None if the shapes disagree."""
    norms = prev.flatten(1).pow(2).sum(1)
    channels = w.shape[1] * groups
    if w.dim() == 2 and prev.dim() > 2 and channels % len(norms) == 0:
        norms = norms.repeat_interleave(channels // len(norms))  # flatten: channel c feeds inputs c·s .. c·s+s-1
    if len(norms) != channels:
        return None
    out, per_group = w.shape[:2]
    group = torch.arange(out, device=w.device) // (out // groups)
    k = group[:, None] * per_group + torch.arange(per_group, device=w.device)[None, :]  # grouped conv's input
    return norms[k].view(out, per_group, *([1] * (w.dim() - 2)))


def _ahead(nxt: torch.Tensor, nxt_groups: int, w: torch.Tensor) -> torch.Tensor | None:
    """‖W_next[:, j]‖² for the output channel j of each weight of `w`, or None if the shapes disagree."""
    sq = nxt.flatten(2).pow(2).sum(2) if nxt.dim() > 2 else nxt.pow(2)
    out, per_group = sq.shape
    norms = sq.view(nxt_groups, out // nxt_groups, per_group).sum(1).flatten()  # per input channel of nxt
    if nxt.dim() == 2 and w.dim() > 2 and len(norms) % w.shape[0] == 0:
        norms = norms.view(w.shape[0], -1).sum(1)  # flatten: our channel j spans several Linear inputs
    if len(norms) != w.shape[0]:
        return None
    return norms.view(-1, *([1] * (w.dim() - 1)))


def _groups(model: nn.Module, param_name: str) -> int:
    return getattr(model.get_submodule(param_name.rpartition(".")[0]), "groups", 1)


def lap_scores(model: nn.Module, masks: Masks, batches: Batches) -> dict[str, torch.Tensor]:
    """LAP (Park et al. 2020): W[j,k]² · ‖W_prev[k,:]‖² · ‖W_next[:,j]‖², neighbours in module order.

    Conv neighbours enter through per-channel norms: a conv→Linear flatten spreads a channel over its spatial
    positions, and a grouped (depthwise) conv's weight reads its own group's input channels. A missing neighbour
    (first and last layer) or one whose channel count does not fit is left out (factor 1). In residual networks
    module order is not the computation graph: a projection shortcut reads the block's input, not the preceding
    conv's output, and skip connections add terms no neighbour sees; where counts happen to fit, the
    module-order neighbour is used anyway. So on ResNet, DenseNet and MobileNetV2 this is LAP's chain formula over
    the layer sequence, an approximation of the true lookahead. Selection is a global top-k over all layers.
    """
    layers = [(name, p.detach().double(), _groups(model, name)) for name, p in prunable(model).items()]
    out = {}
    for i, (name, w, groups) in enumerate(layers):
        score = w.pow(2)
        behind = _behind(layers[i - 1][1], w, groups) if i > 0 else None
        ahead = _ahead(layers[i + 1][1], layers[i + 1][2], w) if i + 1 < len(layers) else None
        for factor in (behind, ahead):
            if factor is not None:
                score = score * factor
        out[name] = score
    return out


def random_scores(model: nn.Module, masks: Masks, batches: Batches) -> dict[str, torch.Tensor]:
    """Uniform random scores (a control), seeded by the number of alive weights: the same masks, the same draw."""
    generator = torch.Generator().manual_seed(sum(int(m.sum()) for m in masks.values()))
    return {name: torch.rand(p.shape, generator=generator, dtype=torch.float64).to(p.device)
            for name, p in prunable(model).items()}


# --- selection ---------------------------------------------------------------------------------------------------

def _drop_lowest(scores: torch.Tensor, alive: torch.Tensor, k: int) -> torch.Tensor:
    """A copy of `alive` (flat bool) with the k lowest-scoring alive entries set False."""
    keep = alive.clone()
    if k <= 0:
        return keep
    candidates = torch.nonzero(alive).flatten()
    values = scores[candidates].double()
    # Selection, not a sort (a stable argsort of ViT-B/16's 86M scores takes 14 s on a CPU): all entries below
    # the k-th smallest value, then entries equal to it in position order.
    threshold = values.kthvalue(k).values
    below = values < threshold
    ties = torch.nonzero(values == threshold).flatten()[:k - int(below.sum())]
    keep[candidates[below]] = False
    keep[candidates[ties]] = False
    return keep


def select_global(scores: dict[str, torch.Tensor], masks: Masks, rate: float) -> Masks:
    names = list(masks)
    flat_scores = torch.cat([scores[n].flatten().double() for n in names])
    alive = torch.cat([masks[n].flatten() for n in names])
    keep = _drop_lowest(flat_scores, alive, round(rate * int(alive.sum())))
    out, start = {}, 0
    for n in names:
        size = masks[n].numel()
        out[n] = keep[start:start + size].view_as(masks[n])
        start += size
    return out


def select_layer(scores: dict[str, torch.Tensor], masks: Masks, rate: float) -> Masks:
    out = {}
    for n, m in masks.items():
        alive = m.flatten()
        out[n] = _drop_lowest(scores[n].flatten(), alive, round(rate * int(alive.sum()))).view_as(m)
    return out


def select_channels(scores: dict[str, torch.Tensor], masks: Masks, rate: float) -> Masks:
    """Per layer, drop round(rate · alive) whole output channels (rows) with the lowest summed score.

    A channel is alive while any of its weights is. The output layer (last in module order) keeps every row:
    removing one would remove a class.
    """
    names = list(masks)
    out = {names[-1]: masks[names[-1]].clone()}
    for n in names[:-1]:
        m = masks[n]
        alive = m.flatten(1).any(1)
        channel_scores = (scores[n] * m).flatten(1).sum(1)
        keep = _drop_lowest(channel_scores, alive, round(rate * int(alive.sum())))
        out[n] = m & keep.view(-1, *([1] * (m.dim() - 1)))
    return {n: out[n] for n in names}


@dataclass(frozen=True)
class Pruner:
    score: Callable[[nn.Module, Masks, Batches], dict[str, torch.Tensor]]
    select: Callable[[dict[str, torch.Tensor], Masks, float], Masks]
    needs_data: bool = False


PRUNERS: dict[str, Pruner] = {
    "global_magnitude": Pruner(magnitude_scores, select_global),
    "layer_magnitude": Pruner(magnitude_scores, select_layer),
    "global_gradient": Pruner(gradient_scores, select_global, needs_data=True),
    "lamp": Pruner(lamp_scores, select_global),
    "lap": Pruner(lap_scores, select_global),
    "imp": Pruner(magnitude_scores, select_global),  # IMP's rewinding is the spec's weights="rewind"
    "l1_structured": Pruner(magnitude_scores, select_channels),  # Li et al. 2017: filters by L1 norm
    "random": Pruner(random_scores, select_global),
}


def prune(model: nn.Module, masks: Masks, rate: float, method: str, batches: Batches) -> Masks:
    """New masks with a fraction `rate` of the remaining weights removed, applied to the model."""
    from trainables.plugins import resolve

    pruner = resolve("pruner", method)
    scores = pruner.score(model, masks, batches)
    new = {n: m.to(scores[n].device) for n, m in pruner.select(scores, masks, rate).items()}
    apply_masks(model, new)
    return new
