"""The same experiment as experiment.toml, through the Python API. From the repository root:

    python -m examples.custom_cnn.run runs/custom-cnn-api
"""
from __future__ import annotations

import sys

from oracle_search import CompareOptions, ExperimentSpec, FitOptions, OracleOptions, compare
from trainables.schedules import ScheduleSpec, SiloParams


def experiment(**changes) -> ExperimentSpec:
    """The custom CNN on the bars dataset, both named by import path, with LR warmup and weight rewinding."""
    fields = dict(preset="custom-cnn", model="examples.custom_cnn.model:small_cnn",
                  dataset="examples.custom_cnn.data:bars", pruner="global_magnitude", rate=0.36, cycles=3,
                  epochs=8, batch_size=64, weights="rewind", grid=(0.05, 0.1, 0.2, 0.4, 0.8, 1.6),
                  schedule=ScheduleSpec("warmup", warmup=0.1, drops=(0.6, 0.8), silo=SiloParams(0.1, 0.2, 1, 5.0)))
    return ExperimentSpec(**(fields | changes))


def main(out: str, quick: bool = False) -> None:
    spec = experiment(cycles=1, epochs=2) if quick else experiment()
    options = CompareOptions(oracle=OracleOptions(seeds=2 if quick else 3, refine=0 if quick else 2),
                             fit=FitOptions(trials=2 if quick else 6), eval_seeds=2,
                             replicates=1 if quick else 3)  # quick: one study in `out`; else out/replicate-1..3
    result = compare(spec, out, options)
    oracle = result.results[result.results["method"] == "oracle"]
    print(f"{len(result.results)} rows ({len(oracle)} Oracle trainings); report: {result.report}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/custom-cnn-api", quick="--quick" in sys.argv)
