"""Models, datasets and pruners by registry name or by import path `package.module:callable`.

An import path names the user's own code with the registry's signature: a model builder
`(input_shape, num_classes) -> nn.Module`, a dataset `(spec) -> TensorData` (it makes its own train/val/test
split), a pruner score function `(model, masks, batches) -> {parameter name: scores}` (global selection; it gets
the trial seed if it takes a `seed` keyword) or a `trainables.pruning.Pruner` (its own selection, e.g. per
layer). Resolution fails with a `SpecError` naming the field, so bad input exits 2 before anything starts.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from torch import nn

from trainables.data import DATASETS, SPLITS, TensorData
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


KINDS: dict[str, Kind] = {
    "model": Kind(MODELS, ("input_shape", "num_classes")),
    "dataset": Kind(DATASETS, ("spec",)),
    "pruner": Kind(PRUNERS, ("model", "masks", "batches")),
}
assert tuple(KINDS) == KIND_NAMES


def resolve(kind: str, name: str) -> Any:
    """The registry entry `name` of `kind` ("model", "dataset" or "pruner"), or the object its import path names."""
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
    """The user's dataset, with its result checked: a wrong one is bad input, found when the edge loads it."""
    @functools.wraps(load)
    def checked(spec: "ExperimentSpec") -> TensorData:
        data = load(spec)
        if not isinstance(data, TensorData):
            raise DataError("dataset", f"{path!r} returned a {type(data).__name__}, not a trainables.data.TensorData")
        if sorted(data.x) != sorted(SPLITS) or sorted(data.y) != sorted(SPLITS):
            raise DataError("dataset", f"{path!r} must return the splits {', '.join(SPLITS)}, got {sorted(data.x)}")
        if any(len(data.x[s]) != len(data.y[s]) or len(data.y[s]) == 0 for s in SPLITS):
            raise DataError("dataset", f"{path!r}: every split needs as many labels as inputs, and at least one")
        return data

    return checked


def check_names(spec: "ExperimentSpec") -> "ExperimentSpec":
    """Resolve the model, dataset and pruner (a registry name or an import path), or raise SpecError naming the
    field. Done once at the edge (the command line, the pipeline), not on construction: resolving imports torch,
    which `--help`, `presets` and a spec built in a notebook need not pay for."""
    for kind in KINDS:
        resolve(kind, getattr(spec, kind))
    return spec


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return resolve("model", name)(input_shape, num_classes)


DATA_FIELDS = ("dataset", "data_dir", "num_samples", "val_fraction", "test_fraction", "split_seed")
_loaded: dict[tuple, TensorData] = {}
LOADED_MAX = 4


def load_data(spec: "ExperimentSpec") -> TensorData:
    """The spec's dataset, loaded once per process (Ray reuses worker processes across trials). The loader gets
    the real spec; the cache keys on the fields that decide the data. By hand rather than functools.lru_cache,
    which would key on the whole spec, so trials differing only in their training would each load it again."""
    key = tuple(getattr(spec, f) for f in DATA_FIELDS)
    if key not in _loaded:
        if len(_loaded) >= LOADED_MAX:
            _loaded.pop(next(iter(_loaded)))  # the oldest
        _loaded[key] = resolve("dataset", spec.dataset)(spec)
    return _loaded[key]
