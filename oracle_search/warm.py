"""Idle trial actors kept warm between the driver's batches, and grown to the slots: a guarded wrap of two private
Tune methods (docs/design.md "Engine and resuming")."""
from __future__ import annotations

import threading
import warnings
from contextlib import contextmanager
from typing import Iterator

import ray

from oracle_search.searcher import TrialQueue


# The Tune internals `warm_actors` wraps and calls, with the parameters it passes: checked before wrapping, so
# a Ray whose internals changed runs with plain actor reuse instead of breaking (tests/test_engine.py fails then).
WARM_HOOK = {("tune.execution.tune_controller", "TuneController", "_cleanup_cached_actors"): ("self", "force_all"),
             ("tune.execution.tune_controller", "TuneController", "_maybe_reuse_cached_actor"): ("self", "trial"),
             ("tune.utils.object_cache", "_ObjectCache", "increase_max"): ("self", "key", "by")}
_warm_lock = threading.Lock()
_warm = {"users": 0, "original": None, "reuse": None}
_warned = False


def _queue_of(controller) -> TrialQueue | None:
    searcher = getattr(controller, "_search_alg", None)
    while searcher is not None and not isinstance(searcher, TrialQueue):
        searcher = getattr(searcher, "searcher", None)  # SearchGenerator / ConcurrencyLimiter wrap it
    return searcher


def warm_hook_missing() -> str | None:
    """Why `warm_actors` cannot wrap this Ray's Tune (a method of `WARM_HOOK` gone or with other parameters), or
    None when it can."""
    import importlib
    import inspect

    for (module, cls, name), params in WARM_HOOK.items():
        try:
            method = getattr(getattr(importlib.import_module(f"ray.{module}"), cls), name)
            found = tuple(inspect.signature(method).parameters)
        except (ImportError, AttributeError, TypeError, ValueError) as err:
            return f"ray.{module}.{cls}.{name} is not there ({err})"
        if found != params:
            return f"{cls}.{name}({', '.join(found)}) is not ({', '.join(params)})"
    return None


def _keep_idle(controller, queue: TrialQueue, count: int) -> None:
    cache = controller._actor_cache
    cache.increase_max(queue.resources, count - queue.extra)
    queue.extra = count


@contextmanager
def warm_actors() -> Iterator[bool]:
    """While it lasts, the Tune experiments fed by a `TrialQueue` keep idle trial actors (torch imported, data
    cached) between the driver's batches; yields whether it could.

    Tune sizes its cache of idle actors by the trials staged at that moment and evicts the rest at every step.
    Between two cycles nothing is staged for a moment (the next cycle waits for the selection), so Tune kept one
    actor and the next cycle started cold ones: on a 2-core machine that cost more than the trials. No public
    option changes this, so one private method, `TuneController._cleanup_cached_actors`, is wrapped: it still
    runs, with the cache allowed `TrialQueue.idle_wanted()` extra idle actors (the most trials the driver wanted
    at once within the last KEEP_IDLE_S seconds, less its trials in flight), so idle actors beyond what the
    driver recently asked for are released and a cluster can scale down while a run drains.

    The same hook lets the actors grow when the driver's demand does. Tune hands a freed, cached actor to a
    pending trial and *removes* the actor that trial had already started (`_maybe_reuse_cached_actor`): while
    trials are shorter than an actor's start, no new actor ever came up, and a run whose first batch was 4 stayed at
    4 actors on 8 slots (measured: at most 4 running, trainings waiting 91 % of the time, 75 actors started and
    removed). Wrapped, a cached actor goes only to a pending trial whose own actor holds no resources yet (a
    request, cancelled for free); an actor already starting is let start, so the actors grow to the slots.

    Other experiments in the process see the originals; the wrappers are removed when the last experiment using
    them ends. On a Ray whose internals differ (`warm_hook_missing`) they are not applied: plain `reuse_actors`,
    slower.
    """
    global _warned
    from ray.tune.execution.tune_controller import TuneController

    if (why := warm_hook_missing()) is not None:
        if not _warned:
            _warned = True
            warnings.warn(f"oracle-search: the warm-actor hook does not fit Ray {ray.__version__}: {why}; using "
                          "plain reuse_actors, so trial actors restart between cycles", RuntimeWarning, stacklevel=3)
        yield False
        return
    with _warm_lock:
        if _warm["users"] == 0:
            original = _warm["original"] = TuneController._cleanup_cached_actors

            def cleanup(self, force_all: bool = False):  # the original's parameters (see WARM_HOOK)
                queue = _queue_of(self)
                if queue is None or queue.resources is None or not hasattr(self, "_actor_cache"):
                    return original(self, force_all=force_all)
                _keep_idle(self, queue, 0 if force_all else queue.idle_wanted())
                try:
                    return original(self, force_all=force_all)
                finally:
                    # Until the next step, let the cache take every actor that finishes; the step trims it.
                    _keep_idle(self, queue, 0 if force_all else queue.actors_wanted())

            reuse_original = _warm["reuse"] = TuneController._maybe_reuse_cached_actor

            def reuse(self, trial):  # the original's parameters (see WARM_HOOK)
                # Read defensively: private attributes; where one is missing, Tune's own rule.
                own = getattr(self, "_trial_to_actor", {}).get(trial)
                live = getattr(getattr(self, "_actor_manager", None), "_live_actors_to_ray_actors_resources", ())
                if (own is not None and own in live and trial not in getattr(self, "_resetting_trials", ())
                        and _queue_of(self) is not None):
                    return False  # its own actor holds resources and is starting: keep it (the docstring)
                return reuse_original(self, trial)

            TuneController._cleanup_cached_actors = cleanup
            TuneController._maybe_reuse_cached_actor = reuse
        _warm["users"] += 1
    try:
        yield True
    finally:
        with _warm_lock:
            _warm["users"] -= 1
            if _warm["users"] == 0:
                TuneController._cleanup_cached_actors = _warm["original"]
                TuneController._maybe_reuse_cached_actor = _warm["reuse"]
