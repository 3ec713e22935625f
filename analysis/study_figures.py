"""The SILO fitter's Optuna study in Optuna's own figures: optimisation history, parameter importances and the
per-cycle intermediate values, read from the run's journal file without writing to it."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import optuna
from matplotlib import pyplot as plt
from optuna.importance import FanovaImportanceEvaluator
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState
from optuna.visualization import matplotlib as optuna_plots

from analysis.figures import Rendered, render

JOURNAL = "optuna-journal.log"  # where the fitter keeps its study under --out unless --study-storage says otherwise
OBJECTIVE = "validation accuracy (%)"


def open_journal(out_dir: Path) -> list[optuna.Study]:
    """Every study with trials in `out_dir`'s journal file; none when there is no journal."""
    path = Path(out_dir) / JOURNAL
    if not path.is_file():
        return []
    # The backend creates only a missing file and locks only to append: reading an existing journal writes nothing.
    storage = JournalStorage(JournalFileBackend(str(path)))
    studies = [optuna.load_study(study_name=name, storage=storage) for name in optuna.get_all_study_names(storage)]
    return [s for s in studies if s.trials]


def _figure(plot, *args, axis_labels: tuple[str, str] | None = None, **kwargs) -> Rendered:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        ax = plot(*args, **kwargs)
    if axis_labels:
        ax.set_xlabel(axis_labels[0])
        ax.set_ylabel(axis_labels[1])
    fig = ax.figure
    try:
        return render(fig)
    finally:
        plt.close(fig)


def study_figures(out_dir: Path) -> list[tuple[str, str, Rendered]]:
    """(name, caption, figure) of the fitter's studies in `out_dir`: one optimisation history of all studies, then
    for each study its parameter importances (when completed trials differ in their objective) and intermediate
    values. Names carry the study's name when the journal holds several studies. Empty when there is no study."""
    studies = open_journal(out_dir)
    if not studies:
        return []
    several = len(studies) > 1
    which = f"studies {', '.join(s.study_name for s in studies)}" if several else f"study {studies[0].study_name}"
    figures = [("optuna_history", f"SILO fitter, Optuna {which}: the objective ({OBJECTIVE} at the target cycle) "
                "of every completed trial and the best so far; trials stopped early have no objective.",
                _figure(optuna_plots.plot_optimization_history, studies if several else studies[0],
                        target_name=OBJECTIVE))]
    for study in studies:
        suffix = "_" + re.sub(r"[^A-Za-z0-9_.-]", "_", study.study_name) if several else ""  # a file name
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if len({t.value for t in complete}) >= 2:  # fANOVA raises on a constant objective (zero variance)
            figures.append((f"optuna_importances{suffix}", f"Importance (fANOVA) of SILO's parameters for the "
                            f"objective, from the {len(complete)} completed trials of study {study.study_name}.",
                            _figure(optuna_plots.plot_param_importances, study,
                                    evaluator=FanovaImportanceEvaluator(seed=0), target_name=OBJECTIVE)))
        if any(t.intermediate_values for t in study.trials):
            figures.append((f"optuna_intermediate{suffix}", f"{OBJECTIVE.capitalize()} of every trial of study "
                            f"{study.study_name} at each pruning cycle (the values the pruner judges); a trial "
                            "stopped early ends before the last cycle.",
                            _figure(optuna_plots.plot_intermediate_values, study,
                                    axis_labels=("pruning cycle", OBJECTIVE))))
    return figures
