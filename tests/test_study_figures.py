"""Optuna's figures of the fitter's study, from a real small fitted study: SILO trials trained with run_cycle,
driven by ask/tell with one trial stopped early, kept in a journal file as the fitter keeps it."""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from wsgiref.util import setup_testing_defaults

import numpy as np
import optuna
import pytest
import torch
from PIL import Image

from analysis.study_figures import JOURNAL, study_figures
from trainables.cycle import run_cycle
from trainables.presets import PRESETS
from trainables.schedules import SiloParams

TINY = PRESETS["tiny"].spec  # cycles 0..2


def fit(out: Path, name: str, trials: int, cycles: int, stop: set[int] = frozenset()) -> None:
    """A SILO study of `trials` trials over cycles 0..`cycles`, each cycle a real training; trial numbers in
    `stop` are stopped early (Optuna's PRUNED) after cycle 1."""
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(out / JOURNAL)))
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=len(name)))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(trials):
            trial = study.ask()
            params = SiloParams(epsilon=trial.suggest_float("epsilon", 0.005, 0.5, log=True),
                                delta=trial.suggest_float("delta", 0.0, 0.5), q=trial.suggest_int("q", 0, 2),
                                beta=trial.suggest_float("beta", 3.0, 6.0))
            spec, start = TINY.with_schedule(name="silo", silo=params), None
            for cycle in range(cycles + 1):
                result = run_cycle(spec, cycle=cycle, max_lr=None, seed=0, start_checkpoint=start,
                                   checkpoint_dir=out / "checkpoints" / f"{name}-{trial.number}-{cycle}")
                trial.report(result.val_acc, step=cycle)
                start = result.checkpoint
                if trial.number in stop and cycle == 1:
                    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                    break
            else:
                study.tell(trial, result.val_acc)
    finally:
        torch.set_num_threads(threads)
    shutil.rmtree(out / "checkpoints")


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fitted")
    fit(out, "silo-tiny", trials=4, cycles=TINY.cycles, stop={2})
    return out


def decoded(png: bytes) -> np.ndarray:
    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    assert image.shape[0] > 200 and image.shape[1] > 300
    assert len(np.unique(image.reshape(-1, 3), axis=0)) > 20  # a drawing, not a blank canvas
    return image


def test_three_figures_of_a_fitted_study_without_touching_its_journal(fitted):
    journal = fitted / JOURNAL
    before, files = journal.read_bytes(), sorted(p.name for p in fitted.iterdir())
    figures = study_figures(fitted)
    assert journal.read_bytes() == before and sorted(p.name for p in fitted.iterdir()) == files  # read-only
    assert [name for name, _, _ in figures] == ["optuna_history", "optuna_importances", "optuna_intermediate"]
    captions = dict((name, caption) for name, caption, _ in figures)
    assert "study silo-tiny" in captions["optuna_history"]
    assert "from the 3 completed trials of study silo-tiny" in captions["optuna_importances"]
    images = [decoded(figure.png) for _, _, figure in figures]
    assert all(a.shape != b.shape or (a != b).any() for i, a in enumerate(images) for b in images[i + 1:])


def test_the_figures_follow_the_study(fitted, tmp_path):
    """Another study in another run gives other figures: they are drawn from the journal, not canned."""
    fit(tmp_path, "silo-other", trials=2, cycles=1)
    mine = dict((n, png) for n, _, png in study_figures(fitted))
    other = dict((n, png) for n, _, png in study_figures(tmp_path))
    assert set(other) == {"optuna_history", "optuna_importances", "optuna_intermediate"}
    assert all(mine[n] != other[n] for n in other)


def test_every_study_of_a_journal_is_taken(fitted, tmp_path):
    shutil.copy(fitted / JOURNAL, tmp_path / JOURNAL)
    fit(tmp_path, "silo-tiny-epochs8", trials=1, cycles=1)  # one completed trial: no importances for it
    figures = study_figures(tmp_path)
    assert [name for name, _, _ in figures] == [
        "optuna_history", "optuna_importances_silo-tiny", "optuna_intermediate_silo-tiny",
        "optuna_intermediate_silo-tiny-epochs8"]
    assert "studies silo-tiny, silo-tiny-epochs8" in figures[0][1]


def test_no_journal_or_no_trials_gives_no_figures(tmp_path):
    assert study_figures(tmp_path) == []
    assert not (tmp_path / JOURNAL).exists()  # looking did not create one
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / JOURNAL)))
    optuna.create_study(study_name="empty", storage=storage)
    assert study_figures(tmp_path) == []


def test_optuna_dashboard_opens_the_journal(fitted):
    """What the README shows, `optuna-dashboard DIR/optuna-journal.log`, loads the study with all its trials."""
    dashboard = pytest.importorskip("optuna_dashboard", reason="optuna-dashboard is in the test extra")
    app = dashboard.wsgi(str(fitted / JOURNAL))  # the string path goes through the dashboard's storage loader

    def get(path: str) -> dict:
        environ: dict = {"PATH_INFO": path, "REQUEST_METHOD": "GET"}
        setup_testing_defaults(environ)
        status: list[str] = []
        body = b"".join(app(environ, lambda s, headers, exc_info=None: status.append(s)))
        assert status == ["200 OK"], body[:300]
        return json.loads(body)

    (study,) = get("/api/studies")["study_summaries"]
    assert study["study_name"] == "silo-tiny"
    trials = get(f"/api/studies/{study['study_id']}")["trials"]
    assert sorted(t["state"] for t in trials) == ["Complete", "Complete", "Complete", "Pruned"]
