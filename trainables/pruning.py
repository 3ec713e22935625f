"""Pruning masks on Conv/Linear weights. A pruner is a scoring function plus a selection scope.

Each call removes a fraction `rate` of the weights that are still unpruned, lowest scores first (ties broken by
position, so results are reproducible); the structured pruner removes that fraction of each layer's alive output
channels instead. Biases and normalisation layers are never pruned by score; the structured pruner silences a
removed channel's bias and BatchNorm γ, β along with it (see `channel_masks`).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import nn

# Parameter name -> bool tensor of the same shape, True = kept. Every prunable weight has an entry (≥ 2-D); after
# structured pruning there are also 1-D entries for the bias and BatchNorm γ, β of each layer's channels.
Masks = dict[str, torch.Tensor]
Batches = Callable[[], Iterable[tuple[torch.Tensor, torch.Tensor]]]
LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


def prunable(model: nn.Module) -> dict[str, nn.Parameter]:
    """The weight tensors of every Conv and Linear layer, by parameter name, in module order.

    Attention's packed query/key/value projection (`in_proj_weight`) is a Linear weight held outside an nn.Linear,
    so it counts too (a quarter of ViT-B/16's weights).
    """
    out = {}
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(module, LAYERS):
            out[prefix + "weight"] = module.weight
        elif isinstance(module, nn.MultiheadAttention) and module.in_proj_weight is not None:
            out[prefix + "in_proj_weight"] = module.in_proj_weight
    return out


def norms_after(model: nn.Module) -> dict[str, tuple[str, nn.Module]]:
    """Prunable weight name -> (name, module) of the BatchNorm right after its layer in module order, where that
    BatchNorm normalises as many channels as the layer outputs (the LAP reference's `get_bn_weights` pairing).

    Module order is the layer sequence, not the graph: a DenseNet BatchNorm that reads a concatenation starting
    with this layer's output pairs with it too (its first channels are this layer's), and so would, wrongly, a
    pre-activation network's BatchNorm that reads a residual sum of matching width (none in `MODELS`).
    """
    out, last = {}, None
    for name, module in model.named_modules():
        if isinstance(module, LAYERS):
            last = (f"{name}.weight" if name else "weight", module.weight.shape[0])
        elif isinstance(module, nn.MultiheadAttention):
            last = None
        elif isinstance(module, NORMS) and last is not None:
            if module.num_features == last[1]:
                out[last[0]] = (name, module)
            last = None
    return out


def full_masks(model: nn.Module) -> Masks:
    return {name: torch.ones_like(p, dtype=torch.bool) for name, p in prunable(model).items()}


def weight_masks(masks: Masks) -> Masks:
    """The entries for prunable weights: Conv/Linear weights are ≥ 2-D, biases and BatchNorm parameters 1-D."""
    return {n: m for n, m in masks.items() if m.dim() >= 2}


def density(masks: Masks) -> float:
    """Percent of prunable (Conv/Linear) weights kept.

    After structured pruning a kernel of the next layer that reads a removed channel still counts as kept: it
    multiplies zeros in a plain chain, but in a residual sum or a concatenation it may read live values, and the
    masks do not know the graph. So density counts what the masks keep, not what the network can still use.
    """
    weights = weight_masks(masks)
    kept = sum(int(m.sum()) for m in weights.values())
    return 100.0 * kept / sum(m.numel() for m in weights.values())


@torch.no_grad()
def apply_masks(model: nn.Module, masks: Masks) -> None:
    params = dict(model.named_parameters())
    for name, mask in masks.items():
        params[name].mul_(mask)


class MaskedWeights:
    """A model's masked parameters paired with their masks once per training, for the hot loop. Each mask is
    stored in its parameter's dtype and memory layout: multiplying by a bool mask converts it at every step,
    which cost 14 % of the §3.1 MLP's bf16 training step on a CPU (0.98 ms against 0.84 ms)."""

    def __init__(self, model: nn.Module, masks: Masks):
        params = dict(model.named_parameters())
        # A mask that keeps everything (every mask of a dense cycle 0) would multiply by one: exact, so skipped.
        self.pairs = [(params[name], torch.empty_like(params[name]).copy_(mask)) for name, mask in masks.items()
                      if not bool(mask.all())]

    def mask_gradients(self) -> None:
        for param, mask in self.pairs:
            if param.grad is not None:
                param.grad.mul_(mask)

    @torch.no_grad()
    def apply(self) -> None:
        """Pruned weights back to zero (after an optimizer step: weight decay and momentum move them)."""
        for param, mask in self.pairs:
            param.mul_(mask)


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


def _behind(prev: torch.Tensor, prev_scale: torch.Tensor | None, w: torch.Tensor, groups: int) -> torch.Tensor | None:
    """‖W_prev[k, :]‖² (times the BatchNorm factor of channel k, if any) for the input channel k that each weight of
    `w` reads, or None if the shapes disagree."""
    norms = prev.flatten(1).pow(2).sum(1)
    if prev_scale is not None:
        norms = norms * prev_scale
    channels = w.shape[1] * groups
    if w.dim() == 2 and prev.dim() > 2 and channels % len(norms) == 0:
        norms = norms.repeat_interleave(channels // len(norms))  # flatten: channel c feeds inputs c·s .. c·s+s-1
    if len(norms) != channels:
        return None
    out, per_group = w.shape[:2]
    group = torch.arange(out, device=w.device) // (out // groups)
    k = group[:, None] * per_group + torch.arange(per_group, device=w.device)[None, :]  # grouped conv's input
    return norms[k].view(out, per_group, *([1] * (w.dim() - 2)))


def _ahead(nxt: torch.Tensor, nxt_groups: int, w: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor | None:
    """‖W_next[:, j]‖² (times this layer's BatchNorm factor of channel j, if any) for the output channel j of each
    weight of `w`, or None if the shapes disagree."""
    sq = nxt.flatten(2).pow(2).sum(2) if nxt.dim() > 2 else nxt.pow(2)
    out, per_group = sq.shape
    norms = sq.view(nxt_groups, out // nxt_groups, per_group).sum(1).flatten()  # per input channel of nxt
    if nxt.dim() == 2 and w.dim() > 2 and len(norms) % w.shape[0] == 0:
        norms = norms.view(w.shape[0], -1).sum(1)  # flatten: our channel j spans several Linear inputs
    if len(norms) != w.shape[0]:
        return None
    if scale is not None:
        norms = norms * scale
    return norms.view(-1, *([1] * (w.dim() - 1)))


def _groups(model: nn.Module, param_name: str) -> int:
    return getattr(model.get_submodule(param_name.rpartition(".")[0]), "groups", 1)


def _bn_scales(model: nn.Module) -> dict[str, torch.Tensor]:
    """(γ / √(running var + ε))² per output channel, for each layer a BatchNorm follows (`norms_after`).

    ε is the BatchNorm's own eps, the scale its forward pass applies (the LAP reference adds 1e-10 instead).
    """
    out = {}
    for name, (_, bn) in norms_after(model).items():
        if bn.running_var is None:  # no running statistics: no fixed scale to look through
            continue
        scale = bn.running_var.detach().double().add(bn.eps).rsqrt()
        if bn.weight is not None:
            scale = scale * bn.weight.detach().double()
        out[name] = scale.pow(2)
    return out


def lap_scores(model: nn.Module, masks: Masks, batches: Batches) -> dict[str, torch.Tensor]:
    """LAP (Park et al. 2020): W[j,k]² · ‖W_prev[k,:]‖² · ‖W_next[:,j]‖², neighbours in module order.

    Where a BatchNorm follows a layer (`norms_after`), its squared scale (γ/√(var+ε))² multiplies the look-behind
    term of the next layer and the look-ahead term of this one: the reference's `lap_bn`, used automatically on
    BatchNorm networks (without BatchNorm these are the reference's `lap` scores).
    Conv neighbours enter through per-channel norms: a conv→Linear flatten spreads a channel over its spatial
    positions, and a grouped (depthwise) conv's weight reads its own group's input channels. A missing neighbour
    (first and last layer) or one whose channel count does not fit is left out (factor 1). In residual networks
    module order is not the computation graph: a projection shortcut reads the block's input, not the preceding
    conv's output, and skip connections add terms no neighbour sees; where counts happen to fit, the
    module-order neighbour is used anyway. So on ResNet, DenseNet and MobileNetV2 this is LAP's chain formula over
    the layer sequence, an approximation of the true lookahead.
    """
    scales = _bn_scales(model)
    layers = [(name, p.detach().double() * masks[name], _groups(model, name), scales.get(name))
              for name, p in prunable(model).items()]
    out = {}
    for i, (name, w, groups, scale) in enumerate(layers):
        score = w.pow(2)
        behind = _behind(layers[i - 1][1], layers[i - 1][3], w, groups) if i > 0 else None
        ahead = _ahead(layers[i + 1][1], layers[i + 1][2], w, scale) if i + 1 < len(layers) else None
        for factor in (behind, ahead):
            if factor is not None:
                score = score * factor
        out[name] = score
    return out


def lap_global_scores(model: nn.Module, masks: Masks, batches: Batches) -> dict[str, torch.Tensor]:
    """LAP's global mode (the reference's `lap_global_normalize`): each layer's scores divided by their L2 norm,
    so one global ranking compares layers of different scale."""
    out = {}
    for name, score in lap_scores(model, masks, batches).items():
        norm = score.norm()
        out[name] = score / norm if norm > 0 else score
    return out


def random_scores(model: nn.Module, masks: Masks, batches: Batches, seed: int = 0) -> dict[str, torch.Tensor]:
    """Uniform random scores (a control), drawn from the trial seed and the number of alive weights: each seed
    prunes differently, each cycle draws anew, and the same (seed, masks) give the same draw."""
    alive = sum(int(m.sum()) for m in masks.values())
    digest = hashlib.sha256(f"{seed}:{alive}".encode()).digest()
    generator = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))
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


def select_global(scores: dict[str, torch.Tensor], masks: Masks, rate: float,
                  fixed: frozenset[str] = frozenset()) -> Masks:
    """Drop round(rate · alive) weights, lowest scores over all layers.

    Layers in `fixed` are never selected but their alive weights still count in the number removed (OpenLTH's
    `pruning_layers_to_ignore`), so density keeps following 100·(1−p)^m.
    """
    names = list(masks)
    flat_scores = torch.cat([scores[n].flatten().double() for n in names])
    alive = torch.cat([masks[n].flatten() for n in names])
    held = torch.cat([torch.full((masks[n].numel(),), n in fixed, device=alive.device) for n in names]) & alive
    open_ = alive & ~held
    k = min(round(rate * int(alive.sum())), int(open_.sum()))
    keep = _drop_lowest(flat_scores, open_, k) | held
    out, start = {}, 0
    for n in names:
        size = masks[n].numel()
        out[n] = keep[start:start + size].view_as(masks[n])
        start += size
    return out


def select_layer(scores: dict[str, torch.Tensor], masks: Masks, rate: float,
                 fixed: frozenset[str] = frozenset()) -> Masks:
    """Drop round(rate · alive) weights of each layer not in `fixed`, lowest scores first."""
    out = {}
    for n, m in masks.items():
        alive = m.flatten()
        out[n] = m.clone() if n in fixed else _drop_lowest(scores[n].flatten(), alive,
                                                             round(rate * int(alive.sum()))).view_as(m)
    return out


def select_channels(scores: dict[str, torch.Tensor], masks: Masks, rate: float,
                    fixed: frozenset[str] = frozenset()) -> Masks:
    """Per layer, drop round(rate · alive) whole output channels (rows) with the lowest summed score.

    A channel is alive while any of its weights is. The output layer (last in module order) keeps every row:
    removing one would remove a class. Layers in `fixed` keep every row too.
    """
    names = list(masks)
    out = {}
    for n in names:
        m = masks[n]
        if n == names[-1] or n in fixed:
            out[n] = m.clone()
            continue
        alive = m.flatten(1).any(1)
        channel_scores = (scores[n] * m).flatten(1).sum(1)
        keep = _drop_lowest(channel_scores, alive, round(rate * int(alive.sum())))
        out[n] = m & keep.view(-1, *([1] * (m.dim() - 1)))
    return out


def channel_masks(model: nn.Module, masks: Masks) -> Masks:
    """Masks for the bias and the following BatchNorm's γ and β of every output channel whose weights are all
    pruned, so a removed channel outputs zero instead of a constant (β, or the bias through the activation) and
    stays silent through retraining. For the structured pruner only: an unstructured pruner that happens to empty
    a row leaves its constant in place, as the reference implementations do.
    """
    params = dict(model.named_parameters())
    norms = norms_after(model)
    out = {}
    for name, mask in masks.items():
        alive = mask.flatten(1).any(1)
        if alive.all():
            continue
        silenced = [name[:-len("weight")] + "bias"]  # X.weight → X.bias, X.in_proj_weight → X.in_proj_bias
        if name in norms:
            silenced += [f"{norms[name][0]}.weight", f"{norms[name][0]}.bias"]
        out.update({n: alive.clone() for n in silenced if n in params})
    return out


@dataclass(frozen=True)
class Pruner:
    score: Callable[..., dict[str, torch.Tensor]]  # (model, masks, batches[, seed]) -> scores, higher = kept
    select: Callable[..., Masks]  # (scores, masks, rate, fixed) -> masks
    needs_data: bool = False
    seeded: bool = False  # the score takes the trial seed
    structured: bool = False  # removed channels also lose their bias and BatchNorm γ, β (`channel_masks`)


PRUNERS: dict[str, Pruner] = {
    "global_magnitude": Pruner(magnitude_scores, select_global),
    "layer_magnitude": Pruner(magnitude_scores, select_layer),
    "global_gradient": Pruner(gradient_scores, select_global, needs_data=True),
    "lamp": Pruner(lamp_scores, select_global),
    "lap": Pruner(lap_scores, select_layer),  # the LAP reference's default: the same rate in every layer
    "lap_global": Pruner(lap_global_scores, select_global),
    "imp": Pruner(magnitude_scores, select_global),  # IMP's rewinding is the spec's weights="rewind"
    "l1_structured": Pruner(magnitude_scores, select_channels, structured=True),  # Li et al. 2017: filters by L1
    "random": Pruner(random_scores, select_global, seeded=True),
}


def prune(model: nn.Module, masks: Masks, rate: float, pruner: Pruner, batches: Batches, *, seed: int = 0,
          prune_output: bool = True) -> Masks:
    """New masks with a fraction `rate` of the remaining weights removed, applied to the model.

    `seed` is the trial seed (the random pruner draws from it). With `prune_output=False` the output layer (the
    last prunable layer in module order) keeps all its weights, as OpenLTH sets its CIFAR models.
    """
    weights = weight_masks(masks)
    scores = pruner.score(model, weights, batches, **({"seed": seed} if pruner.seeded else {}))
    fixed = frozenset() if prune_output else frozenset(list(weights)[-1:])
    new = {n: m.to(scores[n].device) for n, m in pruner.select(scores, weights, rate, fixed).items()}
    if pruner.structured:
        new.update(channel_masks(model, new))
    apply_masks(model, new)
    return new
