"""Models, datasets, pruners and losses by registry name or by import path `package.module:callable`.

An import path names the user's own code with the registry's signature: a model builder
`(input_shape, num_classes) -> nn.Module`, a dataset `(spec) -> TensorData | DatasetSplits` (it makes its own
train/val/test split), a pruner score function `(model, masks, batches) -> {parameter name: scores}` (global
selection; it gets the trial seed if it takes a `seed` keyword) or a `trainables.pruning.Pruner` (its own
selection, e.g. per layer), a loss `(logits, targets) -> scalar tensor`. Resolution fails with a `SpecError` naming
the field, so bad input exits 2 before anything starts; what a dataset or a loss gives is checked where it is
first used (`load_data`, `check_loss`), each failure one line naming the plug-in.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch import nn

from trainables.data import DATASETS, SPLITS, Data, DatasetSplits, TensorData, first_batch
from trainables.errors import DataError, SpecError
from trainables.models import MODELS
from trainables.pruning import PRUNERS, Pruner, select_global
from trainables.sources import KIND_NAMES, import_module, is_import_path

if TYPE_CHECKING:
    from trainables.spec import ExperimentSpec


@dataclass(frozen=True)
class Kind:
    registry: dict[str, Any]
    params: tuple[str, ...]  # the positional arguments an imported callable must accept


LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "cross_entropy": nn.functional.cross_entropy,
}

KINDS: dict[str, Kind] = {
    "model": Kind(MODELS, ("input_shape", "num_classes")),
    "dataset": Kind(DATASETS, ("spec",)),
    "pruner": Kind(PRUNERS, ("model", "masks", "batches")),
    "loss": Kind(LOSSES, ("logits", "targets")),
}
assert tuple(KINDS) == KIND_NAMES


def resolve(kind: str, name: str) -> Any:
    """The registry entry `name` of `kind` ("model", "dataset", "pruner" or "loss"), or the object its import path
    names."""
    if is_import_path(name):
        return _imported(kind, name)
    registry = KINDS[kind].registry
    if name not in registry:
        raise SpecError(kind, f"unknown {name!r}; allowed: {', '.join(sorted(registry))}, "
                              "or an import path package.module:callable")
    return registry[name]


@functools.lru_cache(maxsize=None)
def _imported(kind: str, path: str) -> Any:
    module, attr = import_module(kind, path)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SpecError(kind, f"module {module.__name__!r} has no attribute {attr!r} ({path!r})")
        obj = getattr(obj, part)
    if kind == "pruner" and isinstance(obj, Pruner):
        _check_signature(kind, path, obj.score)
        return obj
    _check_signature(kind, path, obj)
    if kind == "pruner":  # a score function taking `seed` gets the trial seed, as the random pruner does
        return Pruner(obj, select_global, seeded="seed" in _parameters(obj))
    if kind == "dataset":
        return _checked_dataset(obj, path)
    return obj


def _check_signature(kind: str, path: str, obj: Any) -> None:
    params = KINDS[kind].params
    if not callable(obj):
        raise SpecError(kind, f"{path!r} is a {type(obj).__name__}, not a callable ({', '.join(params)})")
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):  # some builtins and C callables have none to check
        return
    extra = {"seed": 0} if kind == "pruner" and "seed" in signature.parameters else {}
    try:
        signature.bind(*params, **extra)
    except TypeError:
        raise SpecError(kind, f"{path!r} must accept ({', '.join(params)}); its signature is {signature}") from None


def _parameters(obj: Any) -> set[str]:
    try:
        return set(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return set()


def _checked_dataset(load: Callable, path: str) -> Callable:
    """The user's dataset, with its result checked: a wrong one is bad input, found when the edge loads it (a
    DatasetSplits is checked by `load_data`, as every one is)."""
    @functools.wraps(load)
    def checked(spec: "ExperimentSpec") -> Data:
        data = load(spec)
        if isinstance(data, DatasetSplits):
            return data
        if not isinstance(data, TensorData):
            raise DataError("dataset", f"{path!r} returned a {type(data).__name__}, not a trainables.data.TensorData "
                                       "or trainables.data.DatasetSplits")
        if sorted(data.x) != sorted(SPLITS) or sorted(data.y) != sorted(SPLITS):
            raise DataError("dataset", f"{path!r} must return the splits {', '.join(SPLITS)}, got {sorted(data.x)}")
        if any(len(data.x[s]) != len(data.y[s]) or len(data.y[s]) == 0 for s in SPLITS):
            raise DataError("dataset", f"{path!r}: every split needs as many labels as inputs, and at least one")
        for s in SPLITS:
            y = data.y[s]
            if y.is_floating_point() or y.dtype == torch.bool or y.dim() != 1:
                raise DataError("dataset", f"{path!r}: split {s!r} labels must be one integer per sample, got a "
                                           f"{str(y.dtype).removeprefix('torch.')} tensor of shape {tuple(y.shape)}")
            outside = y[(y < 0) | (y >= data.num_classes)]
            if len(outside):
                raise DataError("dataset", f"{path!r}: split {s!r} has label {int(outside[0])}, outside "
                                           f"range(num_classes={data.num_classes})")
        return data

    return checked


def check_names(spec: "ExperimentSpec") -> "ExperimentSpec":
    """Resolve the model, dataset, pruner and loss (a registry name or an import path), or raise SpecError naming
    the field; a loss of the user's own is also tried on the data (`check_loss`). Done once at the edge (the
    command line, the pipeline), not on construction: resolving imports torch, which `--help`, `presets` and a
    spec built in a notebook need not pay for."""
    for kind in KINDS:
        resolve(kind, getattr(spec, kind))
    if is_import_path(spec.loss):
        data = load_data(spec)
        with torch.random.fork_rng(devices=[]):  # the caller's random state stays as it was
            torch.manual_seed(spec.seed)
            model = build_model(spec.model, data.input_shape, data.num_classes)
        check_loss(spec, model, data, torch.device("cpu"))
    return spec


def loss_function(spec: "ExperimentSpec") -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The training loss `(logits, targets) -> scalar tensor`: cross-entropy unless `spec.loss` names another."""
    return resolve("loss", spec.loss)


CHECK_SAMPLES = 32  # the first training samples a loss of the user's own is tried on


def check_loss(spec: "ExperimentSpec", model: nn.Module, data: Data, device: torch.device) -> None:
    """A loss of the user's own, on `model`'s logits for the first training samples (float32, no gradient, the
    model in eval mode so that batch norm's statistics stay): it must give a finite scalar tensor, else SpecError
    naming the loss. The edge tries it on a fresh model, each training on its own start (a trial then fails with
    this line and writes no row, where a NaN would otherwise read as a diverged training)."""
    if not is_import_path(spec.loss):
        return
    x, y = first_batch(data, min(spec.batch_size, CHECK_SAMPLES), device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            value = loss_function(spec)(model(x), y)
    finally:
        model.train(was_training)
    name = f"{spec.loss!r}"
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        got = f"a {str(value.dtype).removeprefix('torch.')} tensor" if isinstance(value, torch.Tensor) else \
            f"a {type(value).__name__}"
        raise SpecError("loss", f"{name} returned {got} on the first batch, not a floating-point scalar tensor")
    if value.dim() != 0:
        raise SpecError("loss", f"{name} returned a tensor of shape {tuple(value.shape)} on the first batch, not "
                                "a scalar (reduce it, e.g. with .mean())")
    if not bool(torch.isfinite(value)):
        raise SpecError("loss", f"{name} returned {value.item()} on the first batch, not a finite number")


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return resolve("model", name)(input_shape, num_classes)


DATA_FIELDS = ("dataset", "data_dir", "num_samples", "val_fraction", "test_fraction", "split_seed", "data_seed")
_loaded: dict[tuple, Data] = {}
LOADED_MAX = 4


def load_data(spec: "ExperimentSpec") -> Data:
    """The spec's dataset, loaded once per process (Ray reuses worker processes across trials) and checked (a
    DatasetSplits by `DatasetSplits.check`). The loader gets the real spec; the cache keys on the fields that
    decide the data. By hand rather than functools.lru_cache, which would key on the whole spec, so trials
    differing only in their training would each load it again."""
    key = tuple(getattr(spec, f) for f in DATA_FIELDS)
    if key not in _loaded:
        data = resolve("dataset", spec.dataset)(spec)
        if isinstance(data, DatasetSplits):
            data.check(spec.dataset)
        if len(_loaded) >= LOADED_MAX:
            _loaded.pop(next(iter(_loaded)))  # the oldest
        _loaded[key] = data
    return _loaded[key]
