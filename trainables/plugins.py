"""Models, datasets and pruners by registry name or by import path `package.module:callable`.

An import path names the user's own code with the registry's signature: a model builder
`(input_shape, num_classes) -> nn.Module`, a dataset `(spec) -> TensorData` (it makes its own train/val/test
split), a pruner score function `(model, masks, batches) -> {parameter name: scores}` (global selection; it gets
the trial seed if it takes a `seed` keyword) or a `trainables.pruning.Pruner` (its own selection, e.g. per
layer). Resolution fails with a `SpecError` naming the field, so bad input exits 2 before anything starts.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import json
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from trainables.spec import SpecError

if TYPE_CHECKING:
    from trainables.spec import ExperimentSpec

OWN_PACKAGES = ("trainables", "oracle_search", "analysis")  # installed on every node with oracle-search


def _models() -> dict:
    from trainables.models import MODELS

    return MODELS


def _datasets() -> dict:
    from trainables.data import DATASETS

    return DATASETS


def _pruners() -> dict:
    from trainables.pruning import PRUNERS

    return PRUNERS


@dataclass(frozen=True)
class Kind:
    registry: Callable[[], dict]  # lazy: the registries' modules import the spec, which validates through here
    params: tuple[str, ...]  # the positional arguments an imported callable must accept


KINDS: dict[str, Kind] = {
    "model": Kind(_models, ("input_shape", "num_classes")),
    "dataset": Kind(_datasets, ("spec",)),
    "pruner": Kind(_pruners, ("model", "masks", "batches")),
}


def is_import_path(name: str) -> bool:
    return ":" in name


def resolve(kind: str, name: str) -> Any:
    """The registry entry `name` of `kind` ("model", "dataset" or "pruner"), or the object its import path names."""
    if is_import_path(name):
        return _imported(kind, name)
    registry = KINDS[kind].registry()
    if name not in registry:
        raise SpecError(kind, f"unknown {name!r}; allowed: {', '.join(sorted(registry))}, "
                              "or an import path package.module:callable")
    return registry[name]


def _import_module(kind: str, path: str) -> tuple[ModuleType, str]:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr or ":" in attr:
        raise SpecError(kind, f"{path!r} is not an import path package.module:callable")
    # The console script's sys.path lacks the working directory that `python -m` would put first; add it last,
    # so the user's module is found where they run the command, without shadowing installed packages.
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.append(cwd)
    try:
        return importlib.import_module(module_name), attr
    except Exception as err:  # the user's module may fail any way at import time; all are bad input
        raise SpecError(kind, f"cannot import {module_name!r} from {path!r} ({type(err).__name__}: {err})") from None


@functools.lru_cache(maxsize=None)
def _imported(kind: str, path: str) -> Any:
    from trainables.pruning import Pruner, select_global

    module, attr = _import_module(kind, path)
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
    from trainables.data import SPLITS, DataError, TensorData

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


# --- identity: what the chain fingerprint and the run's record hold ----------------------------------------------

def source_file(name: str) -> Path | None:
    """The file defining an import path's module (None for a registry name, or a module without a file)."""
    if not is_import_path(name):
        return None
    module_name = name.partition(":")[0]
    module = sys.modules.get(module_name) or importlib.import_module(module_name)
    file = getattr(module, "__file__", None)
    return Path(file) if file else None


def source_hash(name: str) -> str | None:
    """SHA-256 of the file defining an import path's module, where there is one. Only that file is hashed: a
    change in a module it imports goes unseen."""
    path = source_file(name)
    if path is None or not path.is_file():
        return None
    stat = path.stat()
    return _file_hash(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _file_hash(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def spec_sources(spec: "ExperimentSpec") -> dict[str, dict[str, str | None]]:
    """Each import-path field of `spec` with its module file's hash: the code a run's results came from."""
    return {kind: {"path": name, "sha256": source_hash(name)}
            for kind in KINDS if is_import_path(name := getattr(spec, kind))}


# --- clusters: the user's code reaches the workers through Ray's runtime environment ------------------------------

def _installed(location: Path) -> bool:
    """Inside this interpreter's library folders, which a cluster's nodes install themselves."""
    paths = sysconfig.get_paths()
    roots = {Path(paths[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return any(location.resolve().is_relative_to(root) for root in roots)


def shipped_module(kind: str, name: str) -> str | None:
    """The folder (a package) or file (a single module) Ray must ship to the workers for import path `name`."""
    if not is_import_path(name):
        return None
    top = name.partition(":")[0].split(".")[0]
    if top in OWN_PACKAGES:
        return None
    module = importlib.import_module(top)
    # A namespace package lists a folder once per sys.path entry naming it ("" and the working directory too).
    locations = list(dict.fromkeys(str(Path(p).resolve()) for p in getattr(module, "__path__", [])))
    locations = locations or [getattr(module, "__file__", None)]
    if len(locations) != 1 or locations[0] is None:
        raise SpecError(kind, f"{top!r} spans {len(locations)} folders; Ray can ship a package from one folder only")
    location = Path(locations[0])
    return None if _installed(location) else str(location)


def runtime_env(spec: "ExperimentSpec") -> dict[str, Any] | None:
    """Ray's runtime environment for `spec`: `py_modules` holding each top-level package (or single-file module)
    that the spec's import paths need and that is not installed in the library folders; None when there is none."""
    modules = sorted({m for kind in KINDS if (m := shipped_module(kind, getattr(spec, kind)))})
    return {"py_modules": modules} if modules else None


SOURCES_FILE = "sources.json"


def record_sources(out: Path, spec: "ExperimentSpec") -> None:
    """Part of a run's identity in `out`: the import paths' module hashes. A rerun whose code changed since is
    refused (SpecError naming the field) instead of reusing trials trained with the old code."""
    path = out / SOURCES_FILE
    sources = spec_sources(spec)
    if path.exists():
        stored = json.loads(path.read_text())
        for kind, source in sources.items():
            if stored.get(kind) != source:
                raise SpecError(kind, f"{source['path']!r} is not the code {out} was run with (its module file "
                                      "changed since); use a new --out")
        return
    if sources:
        tmp = path.with_name(f".{SOURCES_FILE}.tmp")
        tmp.write_text(json.dumps(sources, indent=1, sort_keys=True))
        os.replace(tmp, path)
