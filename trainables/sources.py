"""Import paths as code: which module file a spec's model, dataset, pruner or loss comes from, its hash (part of a run's
identity), and how Ray ships it to cluster workers. No torch and no registry: `trainables.spec` hashes its
import paths through here, and `trainables.plugins` (the registries' resolver, above) imports user modules here."""
from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
import sys
import sysconfig
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from trainables.atomic import atomic_write_json
from trainables.errors import SpecError

class NamesCode(Protocol):
    """What this module reads of an ExperimentSpec: the fields that name code."""

    model: str
    dataset: str
    pruner: str
    loss: str


KIND_NAMES = ("model", "dataset", "pruner", "loss")  # the spec fields that name code: a registry name or an import path
OWN_PACKAGES = ("trainables", "oracle_search", "analysis")  # installed on every node with oracle-search


def is_import_path(name: str) -> bool:
    return ":" in name


def import_module(kind: str, path: str) -> tuple[ModuleType, str]:
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


def spec_sources(spec: NamesCode, kinds: tuple[str, ...] = KIND_NAMES) -> dict[str, dict[str, str | None]]:
    """Each import-path field of `spec` (of `kinds`) with its module file's hash: the code a run's results came
    from."""
    return {kind: {"path": name, "sha256": source_hash(name)}
            for kind in kinds if is_import_path(name := getattr(spec, kind))}


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


def runtime_env(spec: NamesCode) -> dict[str, Any] | None:
    """Ray's runtime environment for `spec`: `py_modules` holding each top-level package (or single-file module)
    that the spec's import paths need and that is not installed in the library folders; None when there is none."""
    modules = sorted({m for kind in KIND_NAMES if (m := shipped_module(kind, getattr(spec, kind)))})
    return {"py_modules": modules} if modules else None


SOURCES_FILE = "sources.json"


def record_sources(out: Path, spec: NamesCode) -> None:
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
        atomic_write_json(path, sources)
