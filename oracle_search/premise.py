"""The paper's §3.1 premise (Fig. 1), measured as the paper measures it: iterative pruning at one fixed max_lr, and
at every cycle the distribution of the weight gradients and of the hidden representations, with their σ.

Two readings of "the distribution of all weight gradients" (issue 60):

- `all`: every prunable weight's gradient, a pruned weight's counted as zero (its gradient as the training applies
  it: `MaskedWeights.mask_gradients` zeroes it before each step). At λ = 13.4 % that is 86.6 % zeros.
- `surviving`: the gradients of the unpruned weights only (what `trainables.cycle.layer_statistics` reads).

Each at two moments of a cycle:

- `start`: the pruned network before it trains (cycle 0: the fresh network), with its weights as the spec's policy
  sets them (rewound, continued or reinitialised): Theorem 1's setting.
- `end`: the weights the cycle chains (its best-validation epoch's), where `layer_statistics` reads them today.

Each σ pools the per-batch gradients (and hidden ReLU outputs) of the first `batches` training batches, unshuffled:
the same inputs at every λ and moment, each batch's gradient the one an SGD step would see. The first batch is
`layer_statistics`' own, so `sigma_grad_first_batch` of (end, surviving) is the σ the results table records.

`premise` trains the chain with the project's own cycle (`trainables.cycle.run_cycle`: the same pruning, schedule,
early stop and weights policy as every trial), checkpoints in a temporary folder removed afterwards; it writes
nothing else. `analysis.premise_figure` writes its csv, figure and sentence."""
from __future__ import annotations

import dataclasses
import math
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

import numpy as np
import torch
from torch import nn

from oracle_search.premise_settings import MOMENTS, PAPER_OUTSIDE  # noqa: F401  (re-exported)
from oracle_search.premise_settings import PAPER_SIGMA, READINGS, WINDOW, PremiseSettings, figure_cycles, premise_spec
from trainables.checkpoints import load_checkpoint
from trainables.cycle import prepare_cycle, resolve_device, run_cycle, torch_threads
from trainables.data import Data
from trainables.plugins import build_model, load_data, loss_function
from trainables.precision import resolve_precision
from trainables.pruning import NORMS, Masks, prunable, weight_masks
from trainables.spec import ExperimentSpec, SpecError

# Normalisation layers the premise's note counts (the paper's Fig. 1 is of an MLP without any).
NORM_LAYERS = (*NORMS, nn.LayerNorm, nn.GroupNorm, nn.InstanceNorm1d, nn.InstanceNorm2d)


# --- the two readings: pure functions of tensors -------------------------------------------------------------------

def gradient_readings(grads: Mapping[str, torch.Tensor], masks: Masks) -> dict[str, torch.Tensor]:
    """The weight gradients `grads` (by prunable weight name) in both readings, flat, float64: `all` every weight's,
    a pruned weight's (mask False) as zero; `surviving` the unpruned weights' only."""
    names = [n for n in weight_masks(masks) if n in grads]
    flat = [grads[n].detach().double().flatten() for n in names]
    kept = [masks[n].flatten().to(f.device) for n, f in zip(names, flat)]
    return {"all": torch.cat([f * k for f, k in zip(flat, kept)]),
            "surviving": torch.cat([f[k] for f, k in zip(flat, kept)])}


def sigma(values: torch.Tensor | np.ndarray) -> float:
    """The standard deviation over `values` (population, as `layer_statistics`' histograms take it); NaN if empty."""
    v = torch.as_tensor(values).double()
    return float(v.std(correction=0)) if v.numel() else float("nan")


def outside(values: torch.Tensor | np.ndarray, window: tuple[float, float] = WINDOW) -> float:
    """The fraction of `values` below window[0] or above window[1] (the paper's [−0.012, 0.008])."""
    v = torch.as_tensor(values)
    return float(((v < window[0]) | (v > window[1])).double().mean()) if v.numel() else float("nan")


# --- one measurement -----------------------------------------------------------------------------------------------

@dataclass
class Measurement:
    """One (cycle, moment)'s pooled values: the gradients in both readings and the hidden representations, plus
    each reading's σ per batch."""

    grads: dict[str, torch.Tensor]
    acts: torch.Tensor
    per_batch: dict[str, list[float]]
    batches: int


def measure(model: nn.Module, masks: Masks, batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
            loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Measurement:
    """The weight gradients of `loss` on each batch of `batches` (both readings) and the outputs of every hidden
    ReLU/GELU on the same inputs, pooled over the batches. Training mode, as a step would see it; the model's
    weights and buffers are left as they were, its gradients cleared."""
    acts: list[torch.Tensor] = []
    hooks = [m.register_forward_hook(lambda _m, _i, out: acts.append(out.detach().double().flatten()))
             for m in model.modules() if isinstance(m, (nn.ReLU, nn.GELU))]
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}  # batch norm's running statistics
    was_training = model.training
    params = prunable(model)
    pooled: dict[str, list[torch.Tensor]] = {r: [] for r in READINGS}
    per_batch: dict[str, list[float]] = {r: [] for r in READINGS}
    count = 0
    try:
        model.train()
        for x, y in batches:
            model.zero_grad(set_to_none=True)
            loss(model(x), y).backward()
            readings = gradient_readings({n: p.grad for n, p in params.items() if p.grad is not None}, masks)
            for r in READINGS:
                pooled[r].append(readings[r].cpu())
                per_batch[r].append(sigma(readings[r]))
            count += 1
    finally:
        for h in hooks:
            h.remove()
        model.zero_grad(set_to_none=True)
        model.train(was_training)
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(buffers[name])
    if count == 0:
        raise SpecError("batches", "the training split holds no batch to measure")
    return Measurement({r: torch.cat(pooled[r]) for r in READINGS},
                       torch.cat([a.cpu() for a in acts]) if acts else torch.zeros(0, dtype=torch.float64),
                       per_batch, count)


# --- the chain -----------------------------------------------------------------------------------------------------

@dataclass
class PremiseResult:
    """`rows`: one per (cycle, moment, reading), the csv's; `values`: the pooled values of the figure's cycles,
    {(cycle, moment): {"all": grads, "surviving": grads, "act": hidden representations}} (float32 numpy)."""

    spec: ExperimentSpec
    settings: PremiseSettings
    rows: list[dict]
    values: dict[tuple[int, str], dict[str, np.ndarray]]
    figure_cycles: list[int]
    norm_layers: int
    device: str
    seconds: float
    threads: int = 1
    cycle_seconds: list[float] = field(default_factory=list)


def _rows(cycle: int, lam: float, moment: str, m: Measurement, accuracy: tuple[float, float],
          dense: Mapping[str, float]) -> list[dict]:
    """The csv's rows of one measurement; `dense`: each reading's σ at cycle 0 at this moment (this one's own at
    cycle 0), which scales the paper's window to this network's gradients (`outside_scaled_window`)."""
    act_sigma = sigma(m.acts)
    rows = []
    for r in READINGS:
        s = sigma(m.grads[r])
        scale = (dense.get(r, s) / PAPER_SIGMA[0]) if math.isfinite(dense.get(r, s)) else float("nan")
        rows.append({"lambda": lam, "cycle": cycle, "moment": moment, "reading": r, "batches": m.batches,
                     "sigma_grad": s, "sigma_grad_first_batch": m.per_batch[r][0],
                     "sigma_grad_sd_over_batches": float(np.std(m.per_batch[r], ddof=1)) if m.batches > 1
                     else float("nan"),
                     "sigma_act": act_sigma, "outside_window": outside(m.grads[r]),
                     "outside_scaled_window": outside(m.grads[r], (WINDOW[0] * scale, WINDOW[1] * scale)),
                     "zeros": float((m.grads[r] == 0).double().mean()),
                     "val_acc": accuracy[0], "test_acc": accuracy[1]})
    return rows


def premise(spec: ExperimentSpec, settings: PremiseSettings = PremiseSettings(),
            on_cycle: Callable[[dict], None] | None = None) -> PremiseResult:
    """Prune `spec`'s network iteratively to `settings.density_target` (the spec's rate and pruner; every cycle at
    `settings.max_lr` on the spec's schedule and weights policy), and measure both readings at both moments of
    every cycle (module docstring). `on_cycle`, if given, receives each cycle's end rows as they are measured.
    Torch runs on the spec's trial threads (`resources.threads`), as a trial of the spec would."""
    started = time.perf_counter()
    spec = premise_spec(spec, settings)
    device = resolve_device(spec.device)
    spec = dataclasses.replace(spec, precision=resolve_precision(spec.precision, device))
    loss = loss_function(spec)
    shown = figure_cycles(spec.cycles, settings.figure_lambdas)
    rows: list[dict] = []
    values: dict[tuple[int, str], dict[str, np.ndarray]] = {}
    cycle_seconds: list[float] = []
    norm_layers = 0

    def record(cycle: int, moment: str, model: nn.Module, masks: Masks, accuracy: tuple[float, float]) -> list[dict]:
        data = load_data(spec).to(device)
        batches = (b for _, b in zip(range(settings.batches), data.batches("train", spec.batch_size)))
        m = measure(model, masks, batches, loss)
        lam = 100.0 * (1.0 - spec.rate) ** cycle
        dense = {r["reading"]: r["sigma_grad"] for r in rows if r["cycle"] == 0 and r["moment"] == moment}
        made = _rows(cycle, lam, moment, m, accuracy, dense)
        rows.extend(made)
        if cycle in shown:
            values[(cycle, moment)] = {**{r: m.grads[r].float().numpy() for r in READINGS},
                                       "act": m.acts.float().numpy()}
        return made

    nan = (float("nan"), float("nan"))
    with torch_threads(spec.resources.threads), tempfile.TemporaryDirectory(prefix="premise-") as work:
        start: str | None = None
        for cycle in range(spec.cycles + 1):
            began = time.perf_counter()
            data = load_data(spec).to(device)
            model, masks, _, _ = prepare_cycle(spec, cycle, spec.seed, start, data, device)
            norm_layers = sum(isinstance(m, NORM_LAYERS) for m in model.modules())
            record(cycle, "start", model, masks, nan)
            del model
            ckpt = Path(work) / f"cycle{cycle:02d}"
            result = run_cycle(spec, cycle=cycle, max_lr=settings.max_lr, seed=spec.seed, start_checkpoint=start,
                               checkpoint_dir=ckpt)
            model, masks = _chained(spec, ckpt, data, device)
            made = record(cycle, "end", model, masks, (result.val_acc, result.test_acc))
            for row in made:
                row["layer_statistics_grad_std"] = result.grad_std if row["reading"] == "surviving" else float("nan")
                row["best_epoch"] = result.best_epoch
            cycle_seconds.append(time.perf_counter() - began)
            if on_cycle is not None:
                on_cycle({"cycle": cycle, "lambda": made[0]["lambda"], "val_acc": result.val_acc,
                          "seconds": cycle_seconds[-1], "rows": made})
            if start is not None:  # no later cycle reads it
                shutil.rmtree(start, ignore_errors=True)
            start = str(ckpt)
    for row in rows:
        row.setdefault("layer_statistics_grad_std", float("nan"))
        row.setdefault("best_epoch", "")
    return PremiseResult(spec, settings, rows, values, shown, norm_layers, str(device),
                         time.perf_counter() - started, spec.resources.threads, cycle_seconds)


def _chained(spec: ExperimentSpec, checkpoint: Path, data: Data, device: torch.device) -> tuple[nn.Module, Masks]:
    """The network a cycle chains (its checkpoint's weights and masks: the best-validation epoch's), as the next
    cycle loads it."""
    state = load_checkpoint(str(checkpoint), map_location=device)
    model = build_model(spec.model, data.input_shape, data.num_classes).to(device)
    model.load_state_dict(state["model"])
    return model, state["masks"]
