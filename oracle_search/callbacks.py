"""`--callback NAME`: Tune's own logger callbacks for experiment trackers, checked at the command line."""
from __future__ import annotations

import argparse
import importlib.util
import netrc
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # ray loads lazily: the command line checks --callback before anything heavy is imported
    from ray import tune


def _mlflow(out: Path, experiment: str) -> tune.Callback:
    from ray.air.integrations.mlflow import MLflowLoggerCallback

    # Next to the results unless the user points MLflow at a server; a database file, since MLflow 3 refuses
    # new runs in its older ./mlruns folder store.
    uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(out / 'mlflow.db').resolve()}"
    return MLflowLoggerCallback(tracking_uri=uri, experiment_name=experiment)


def _wandb(out: Path, experiment: str) -> tune.Callback:
    from ray.air.integrations.wandb import WandbLoggerCallback

    # wandb runs in a logging actor that Ray starts with only WANDB_API_KEY from this environment, so the mode
    # (offline: no key needed) is passed to wandb.init; its local files go next to the results.
    return WandbLoggerCallback(project=os.environ.get("WANDB_PROJECT", "oracle-search"), group=experiment,
                               mode=os.environ.get("WANDB_MODE"), dir=str(out.resolve()))


def _wandb_ready() -> str | None:
    """Why wandb would refuse to start, or None: it needs an API key unless it runs offline."""
    if os.environ.get("WANDB_MODE") in ("offline", "disabled") or os.environ.get("WANDB_API_KEY"):
        return None
    try:
        if netrc.netrc().authenticators("api.wandb.ai"):  # where `wandb login` keeps the key
            return None
    except (FileNotFoundError, netrc.NetrcParseError):
        pass
    return "wandb has no API key: set WANDB_API_KEY, run `wandb login`, or set WANDB_MODE=offline"


# name -> (package, how to build the callback, what else it needs before a run starts)
CALLBACKS: dict[str, tuple[str, Callable[[Path, str], "tune.Callback"], Callable[[], str | None]]] = {
    "mlflow": ("mlflow", _mlflow, lambda: None),
    "wandb": ("wandb", _wandb, _wandb_ready),
}


def callback_name(text: str) -> str:
    """argparse `type` of --callback: a known name whose package is installed and ready, else one line (exit 2)."""
    if text not in CALLBACKS:
        raise argparse.ArgumentTypeError(f"unknown {text!r}; allowed: {', '.join(CALLBACKS)}")
    package, _, ready = CALLBACKS[text]
    if importlib.util.find_spec(package) is None:
        raise argparse.ArgumentTypeError(f"{text} needs the {package} package, which is not installed "
                                         f"(pip install {package})")
    if (why := ready()) is not None:
        raise argparse.ArgumentTypeError(why)
    return text


def logger_callbacks(names: list[str] | None, out: Path, experiment: str) -> tuple[tune.Callback, ...]:
    """Tune's logger callbacks for validated `names` (see `callback_name`), logging run `experiment` of `out`."""
    return tuple(CALLBACKS[name][1](out, experiment) for name in dict.fromkeys(names or ()))
