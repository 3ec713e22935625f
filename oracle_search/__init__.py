"""oracle-search as a library: the same runs as the command line, returning tables and paths.

    from oracle_search import ExperimentSpec, compare, oracle, fit_silo, baselines, report
    result = compare(spec, "runs/mine")          # CompareResult: .results (DataFrame), .report (Path)

Names are imported on first use, so `import oracle_search` (and the command line's `--help`) stays light.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "ExperimentSpec": "trainables.spec", "Preset": "trainables.spec", "SpecError": "trainables.errors",
    "PRESETS": "trainables.presets",
    "OracleOptions": "oracle_search.options", "FitOptions": "oracle_search.options",
    "CompareOptions": "oracle_search.options", "CompareResult": "oracle_search.pipeline",
    "oracle": "oracle_search.pipeline", "fit_silo": "oracle_search.pipeline", "baselines": "oracle_search.pipeline",
    "compare": "oracle_search.pipeline", "report": "oracle_search.pipeline", "results": "oracle_search.pipeline",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'oracle_search' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
