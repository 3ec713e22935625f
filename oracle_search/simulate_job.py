"""The one simulator: a command on a virtual clock, run by its own drivers (`compare`: `study.run_study` for every
replicate, its lines side by side; `oracle`: `oracle.oracle_cycles`) on a simulated engine with N slots, each
training answered by the dry run's one stated accuracy model (`simulate.AccuracyModel`) and lasting its epochs × the
seconds per epoch × a lognormal factor (`simulate.SPREAD`).
It gives the job's wall time on N slots and, beside it, the longest chain of dependent trainings in the same run:
what the wall time would be with a slot for every training that is ready; and each replicate's ledger, from which
the estimate counts its typical trainings (`estimate.typical`).

**The clock** moves only when every line of work waits on the engine (`SimEngine`): a driver's thread that hands
over trainings and waits (the executor's own `wait`: `executor.Executor`), or waits on another line's event, stops
counting; when none counts, the trainings
queued so far take free slots (in the order handed over), and the earliest running one finishes: its row lands
in its folder's ledger as a real one would, and the lines waiting on the engine go on.

**One line at a time**: the lines that count run in turn, not at once (`SimEngine.turn`): once every line that
counts waits for its turn, the one whose path sorts first ("replicate-1/oracle" before "replicate-1/silo_paper")
runs until it waits on the engine or ends. Decisions take no time on the clock, so this changes no time; it fixes
which of two lines hands over a training both need at one instant (the first owns it: its row, its key, and the
checkpoint hash the next cycles' identities carry), which the threads' interleaving decided before, so the same
job ran differently from run to run.

**A chain of dependent trainings**: a training handed over by a line depends on every training of that line that
had finished before (the driver decided from their rows), and a line started once another's event was set (the
Oracle's cycle 0) on what that line had seen. A chain's length is the sum of its trainings' seconds, queueing
left out, so the longest one is the least wall time any number of slots could give this run's decisions.

The model is stated, not measured on the run (`simulate.AccuracyModel`): a parabola in ln(peak) around an optimum
that rises from the grid's geometric centre at cycle 0 to `simulate.DRIFT` times it at the last cycle (as the
committed runs' b does), with the Oracle runs' noise, the same for every schedule. It drives the same searches the
run does; their counts are typical, not this model's truth about any network."""
from __future__ import annotations

import dataclasses
import hashlib
import heapq
import io
import math
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import optuna

from oracle_search.executor import ROW_METRICS, Trials
from oracle_search.identity import Training
from oracle_search.runner import open_runners
from oracle_search.progress import Progress
from oracle_search.replicates import replicate_dir
from oracle_search.schema import unused_finals
from oracle_search.seeds import replicate_spec
from oracle_search.side_by_side import first_error, side_by_side
from oracle_search.simulate import AccuracyModel, centre
from oracle_search.plan import StudyPlan, oracle_search
from oracle_search.oracle import oracle_cycles
from oracle_search.study import run_study
from trainables.schedules import cycle_peak
from trainables.timestamps import duration
from trainables.spec import ExperimentSpec


def _draw(key: str) -> np.random.Generator:
    """A generator seeded by the training's identity: the same training gets the same row in any order."""
    return np.random.default_rng(int(hashlib.sha256(key.encode()).hexdigest()[:16], 16))


@dataclass(frozen=True)
class Model:
    """A simulated training's row: its accuracy from the dry run's one accuracy model (`simulate.AccuracyModel`,
    its optimum rising over the cycles), its duration the epochs × `seconds_per_epoch` × the model's spread."""

    seconds_per_epoch: float
    accuracy: AccuracyModel = AccuracyModel()

    def row(self, t: Training) -> dict:
        spec, model = t.spec, self.accuracy
        peak = cycle_peak(spec.schedule, t.cycle, spec.rate, t.max_lr)
        optimum = model.optimum(centre(list(spec.grid)), t.cycle, spec.cycles)
        rng = _draw(t.tags.get("training") or t.key)
        val = model.accuracy(math.log(peak / optimum), rng)
        seconds = self.seconds_per_epoch * spec.epochs * model.factor(rng)
        digest = hashlib.sha256(t.key.encode()).hexdigest()[:10]
        # A simulated checkpoint is named by its training's key (`SimEngine`), so a start's hash is its key's digest:
        # without it no chain reaches past cycle 0 (`schema.oracle_chain`), and neither the completions nor the
        # held-out references would be simulated.
        start = hashlib.sha256(Path(t.start_checkpoint).name.encode()).hexdigest()[:10] if t.start_checkpoint else ""
        return {"cycle": t.cycle, "seed": t.seed, "max_lr": peak, "density": 100.0 * (1 - spec.rate) ** t.cycle,
                "val_acc": val, "test_acc": val, "best_epoch": spec.epochs, "epochs": spec.epochs,
                "seconds": seconds, "device": "simulated", "precision": "fp32",
                "diverged": model.diverges(peak, optimum), "grad_std": 0.0, "act_std": 0.0,
                "grad_hist": "", "act_hist": "", "checkpoint_hash": digest, "start_hash": start, "started": "",
                "finished": "", "gpu_ids": "", "node_id": "simulated"}


class _Event:
    """`Engine.event` on the clock: a thread waiting for it does not count until another line sets it."""

    def __init__(self, sim: "SimEngine"):
        self.sim, self.flag, self.waiters, self.chain = sim, False, 0, 0.0

    def set(self) -> None:
        sim = self.sim
        with sim.lock:
            self.flag = True
            self.chain = max(self.chain, sim.chain_of())
            sim.runnable += self.waiters
            self.waiters = 0
            sim.cond.notify_all()

    def is_set(self) -> bool:
        return self.flag

    def wait(self, timeout: float | None = None) -> bool:
        sim = self.sim
        with sim.lock:
            if not self.flag:
                self.waiters += 1
                sim.stop_counting()
                while not self.flag and not sim.stuck:
                    sim.cond.wait()
            sim.take_turn()
            sim.see(self.chain)
        return self.flag


@dataclass
class _Group:
    """Lines started together (`side_by_side`): the thread waiting for them, the chain it had seen, and the longest
    one its lines have seen."""

    parent: int
    chain: float
    path: str = ""  # the line that started them ("replicate-2"), "" for the job itself
    seen: float = 0.0


class SimEngine(Trials):
    """The executor on a virtual clock with `slots` slots (`executor.Executor`; module docstring). Made in the
    thread that then drives it (it counts as the one line running). Nothing fails, so nothing is retried."""

    def __init__(self, model: Model, slots: int):
        self.lock = threading.RLock()  # every wait below is on `cond`, made on it
        super().__init__(threading.Condition(self.lock))
        self.model, self.width = model, slots
        self.now = 0.0
        self.generation = 0  # clock moves so far: a `wait` ends at the next one
        self.runnable = 1  # lines not waiting (the thread that made the engine is the first)
        self.waiting = 0  # threads waiting in `wait`
        self.stuck = False  # every line waits and nothing runs: the lines' waits end (Runner.run raises)
        # The lines that count run one at a time (module docstring): the thread whose turn it is (None: nobody's;
        # the thread that made the engine runs alone until it starts lines), and the threads that count and wait
        # for their turn -> their line's path, the order of turns
        self.turn: int | None = None
        self.turns: dict[int, str] = {}
        # handed over, waiting for a slot: (training, chain, thread), taken by (−priority, training identity), not
        # by the moment of the hand-over (which line hands over first at one instant is the order of their turns):
        # the same job runs the same way every time
        self.queue: list[tuple[Training, float, int]] = []
        # a heap of (end, order, training, row, chain end, the thread that handed it over)
        self.running: list[tuple[float, int, Training, dict, float, int]] = []
        self.order = 0
        self.chains: dict[int, float] = {}  # thread id -> the longest chain its line has seen
        self.longest = 0.0
        self.trainings = 0
        self.busy = 0.0  # the finished trainings' seconds
        self.dependents: dict[str, set[int]] = {}  # training key -> the other lines waiting on it (twins)
        self.paths: dict[int, str] = {}  # thread id -> its line's path ("replicate-2/silo_paper")
        self.ends: dict[str, float] = {}  # line path -> when it ended, on the clock

    # --- the lines ---------------------------------------------------------------------------------------------

    def chain_of(self) -> float:
        return self.chains.get(threading.get_ident(), 0.0)

    def see(self, chain: float) -> None:
        me = threading.get_ident()
        self.chains[me] = max(self.chains.get(me, 0.0), chain)

    def event(self) -> _Event:
        return _Event(self)

    def lines_started(self, n: int) -> "_Group":
        with self.lock:
            self.runnable += n - 1  # the caller waits for them: its count passes to them, and its turn
            me = threading.get_ident()
            self._end_turn()
            return _Group(me, self.chain_of(), self.paths.get(me, ""))

    def line_begun(self, group: "_Group") -> None:
        with self.lock:
            self.chains[threading.get_ident()] = group.chain
            name = threading.current_thread().name
            self.paths[threading.get_ident()] = f"{group.path}/{name}" if group.path else name
            self.take_turn()

    def line_ended(self, group: "_Group", last: bool) -> None:
        with self.lock:
            group.seen = max(group.seen, self.chain_of())
            self.ends[self.paths.get(threading.get_ident(), "")] = self.now
            if last:  # the caller goes on, having seen what all its lines saw; its turn
                self.chains[group.parent] = max(self.chains.get(group.parent, 0.0), group.seen)
                self.turn = group.parent
            else:
                self.runnable -= 1
                self._end_turn()
                self._move()
                self._give_turn()

    def stop_counting(self) -> None:
        """The calling thread waits (holding `lock`): once no line counts, move the clock; else the next line's
        turn."""
        self.runnable -= 1
        self._end_turn()
        self._move()
        self._give_turn()

    def take_turn(self) -> None:
        """The calling thread counts (holding `lock`): wait until it is its turn (module docstring)."""
        me = threading.get_ident()
        if self.turn == me:
            return
        self.turns[me] = self.paths.get(me, "")
        self._give_turn()
        while self.turn != me and not self.stuck:
            self.cond.wait()
        self.turns.pop(me, None)

    def _end_turn(self) -> None:
        if self.turn == threading.get_ident():
            self.turn = None

    def _give_turn(self) -> None:
        """Once nobody's turn runs and every line that counts waits for its turn: the first by path."""
        if self.turn is None and self.turns and len(self.turns) >= self.runnable:
            self.turn = min(self.turns, key=lambda thread: self.turns[thread])
            self.cond.notify_all()

    # --- the engine's side -------------------------------------------------------------------------------------

    def wait(self, seen: int | None = None, timeout: float = 1.0) -> int:
        """The clock's wait: while the count is `seen`, the calling line stops counting until the clock next moves
        (a training lands; `_move`), or every line waits and nothing runs (`stuck`). The timeout is ignored:
        nothing happens in real time."""
        with self.lock:
            if seen is not None and self.news == seen:
                generation = self.generation
                self.waiting += 1
                self.stop_counting()
                while self.generation == generation and not self.stuck:
                    self.cond.wait()
                self.take_turn()
            return self.news

    def alive(self) -> bool:
        return not self.stuck

    def slots(self, per: int = 1) -> int:
        return max(1, self.width // per)

    def close(self, abort: bool = False) -> None:
        return None

    def _queue(self, configs: list[dict]) -> None:
        with self.lock:
            me = threading.get_ident()
            self.queue += [(self._owner[config["key"]][1], self.chains.get(me, 0.0), me) for config in configs]

    def prioritise(self, key: str, priority: float) -> None:
        """Also: the calling line waits on `key` (a twin), so its chain goes on from that training's."""
        with self.lock:
            self.dependents.setdefault(key, set()).add(threading.get_ident())
            seen = self.chain_of()  # the training depends on what this line has seen too
            for i, (training, chain, thread) in enumerate(self.queue):
                if training.key == key:
                    self.queue[i] = (dataclasses.replace(training, priority=max(priority, training.priority)),
                                     max(chain, seen), thread)
            for i, (end, order, training, row, chain, thread) in enumerate(self.running):
                if training.key == key:  # the heap's order is the end's: unchanged
                    self.running[i] = (end, order, training, row, max(chain, seen + row["seconds"]), thread)

    def _move(self) -> None:
        """While no line counts: start what the free slots take, then finish the earliest training; wake the
        lines waiting on the engine."""
        while self.runnable <= 0:
            while self.queue and len(self.running) < self.width:
                # the highest priority first (`Training.priority`), then by identity (the queue's docstring)
                first = min(range(len(self.queue)), key=lambda i: (-self.queue[i][0].priority,
                                                                   self.queue[i][0].tags.get("training", ""),
                                                                   self.queue[i][0].key))
                training, chain, thread = self.queue.pop(first)
                row = self.model.row(training)
                self.order += 1
                heapq.heappush(self.running, (self.now + row["seconds"], self.order, training, row,
                                              chain + row["seconds"], thread))
            if not self.running:
                self.stuck = True
                self.cond.notify_all()
                return
            end, _, training, row, chain, submitter = heapq.heappop(self.running)
            self.now = end
            self.longest = max(self.longest, chain)
            self.trainings += 1
            self.busy += row["seconds"]
            self._land(training, row)
            for thread in {submitter} | self.dependents.pop(training.key, set()):
                self.chains[thread] = max(self.chains.get(thread, 0.0), chain)
            self.generation += 1
            self.runnable += self.waiting
            self.waiting = 0
            self.cond.notify_all()

    def _land(self, training: Training, metrics: dict) -> None:
        owner = self._owner[training.key][0]
        row = {k: metrics.get(k) for k in ROW_METRICS} | training.tags
        row |= {"experiment": owner.experiment, "key": training.key, "trial_id": f"sim{self.order}",
                "queued": "", "checkpoint": str(owner.out / "simulated" / training.key)}
        owner.landed(row)
        self.finished[training.key] = row
        self.news += 1


@dataclass(frozen=True)
class JobWalls:
    """A simulated job: its wall time on the slots, its longest chain of dependent trainings, its trainings and
    their seconds, and when each line of work ended (`SimEngine.ends`)."""

    slots: int
    wall: float
    longest_chain: float
    trainings: int
    busy: float = 0.0  # the trainings' seconds, summed
    ends: dict[str, float] = field(default_factory=dict)
    waste: int = 0  # speculative trainings never used: final runs started for a δ that did not win (`wasted`)

    @property
    def training(self) -> float:
        """T: a mean training's seconds, the unit the plan's depth is counted in."""
        return self.busy / self.trainings if self.trainings else 0.0

    @property
    def work(self) -> float:
        """The least wall time the work alone allows: every training's seconds spread evenly on the slots."""
        return self.busy / self.slots

    def bound(self) -> str:
        """What bounds the wall, in words: the chain when it is most of the wall, else the work, else neither."""
        chain, work = self.longest_chain >= 0.8 * self.wall, self.work >= 0.8 * self.wall
        if chain and work:
            return ("bounded by the work and the chain together: more slots would shorten it, at most to the "
                    "chain's length")
        if chain:
            return "bounded by the chain of dependent trainings: more slots will not shorten it"
        if work:
            return "bounded by the work: more slots would shorten it"
        return "bounded by neither alone: trainings of the chain waited for slots"

    def setter(self) -> str | None:
        """The line of work that ended last (the deepest, a replicate's line rather than the replicate)."""
        if not self.ends:
            return None
        return max(self.ends, key=lambda path: (round(self.ends[path], 6), path.count("/")))

    def replicate_ends(self) -> dict[str, float]:
        return {path: end for path, end in sorted(self.ends.items()) if "/" not in path
                and path.startswith("replicate-")}

    def line(self) -> str:
        T = self.training
        in_t = (lambda x: f"{x / T:.0f} T") if T else (lambda x: "")
        text = (f"the whole job on {self.slots} slots, simulated (the drivers' own code on the accuracy model, each "
                f"study's lines side by side): {duration(self.wall)} for {self.trainings:,} trainings "
                f"(T, a mean training, {duration(T)}: the wall is {in_t(self.wall)}); {self.bound()}. The longest "
                f"chain of dependent trainings: {duration(self.longest_chain)} ({in_t(self.longest_chain)}); the "
                f"work alone: {duration(self.work)} ({in_t(self.work)})")
        ends = self.replicate_ends()
        if len(ends) > 1:
            text += "; the replicates end at " + ", ".join(f"{path.split('-')[-1]}: {in_t(end)}"
                                                         for path, end in ends.items())
        if (last := self.setter()) is not None:
            text += f"; the last to end: {last}"
        if self.trainings:
            text += (f"; speculative waste: {self.waste:,} trainings ({self.waste / self.trainings:.0%}: final runs "
                     f"started for a δ that did not win)")
        return text


@dataclass(frozen=True)
class Simulation:
    """A command simulated: the job's walls, and each replicate's ledger rows (replicate 1 first): what each of
    its trainings was for (method, stage), as the real run's table would say."""

    walls: JobWalls
    ledgers: list[list[dict]]


# What each command runs on a Runner's folder, as `pipeline` runs it: the study (`compare`), the Oracle alone; each
# on the plan built, as `pipeline` builds it, from the replicate's spec and the options.
DRIVERS = {"compare": run_study, "oracle": oracle_cycles}
PLANS = {"compare": StudyPlan.of, "oracle": oracle_search}


def simulate(command: str, spec: ExperimentSpec, options, slots: int, seconds_per_epoch: float,
             model: Model | None = None, study=None) -> Simulation:
    """`command` ("compare" or "oracle") with its `options` on `slots` simulated slots, in a temporary folder: a
    compare's replicates side by side as `pipeline.compare` runs them, the Oracle alone as `pipeline.oracle` does.
    Trains nothing. `study`: what runs each replicate on its plan (`PLANS`; default the command's driver,
    `DRIVERS`; a benchmark passes another order of the same phases)."""
    study, plan_of = study or DRIVERS[command], PLANS[command]
    model = model or Model(seconds_per_epoch)
    replicates = 1
    if command == "compare":
        # silo_fit's simulated study lives in the temporary folder, never in the run's --study-storage
        options = dataclasses.replace(options, fit=dataclasses.replace(options.fit, storage=None))
        replicates = options.replicates
    spec = dataclasses.replace(spec, resources=dataclasses.replace(spec.resources, keep_checkpoints="all"))
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the simulated study's "created" lines are not news
    try:
        return _simulate(spec, lambda s: plan_of(s, options), replicates, slots, model, study)
    finally:
        optuna.logging.set_verbosity(verbosity)


def simulate_compare(spec: ExperimentSpec, options, slots: int, seconds_per_epoch: float,
                     model: Model | None = None, study=None) -> JobWalls:
    """`compare`'s walls on `slots` simulated slots (`simulate`)."""
    return simulate("compare", spec, options, slots, seconds_per_epoch, model, study).walls


def _simulate(spec: ExperimentSpec, plan_of, R: int, slots: int, model: Model, study) -> Simulation:
    with tempfile.TemporaryDirectory(prefix="oracle-search-sim-") as tmp:
        engine = SimEngine(model, slots)
        folders = {r: (replicate_dir(Path(tmp), r), replicate_spec(spec, r) if R > 1 else spec)
                   for r in range(1, R + 1)}
        runners = open_runners(engine, folders, Progress(io.StringIO()))
        studies = side_by_side({f"replicate-{r}": lambda runner=runner: study(runner, plan_of(runner.spec))
                                for r, runner in runners.items()}, engine)
        first_error(studies)
        ledgers = [runner.ledger.rows() for runner in runners.values()]
        waste = sum(map(wasted, ledgers))
        walls = JobWalls(slots, engine.now, engine.longest, engine.trainings, engine.busy, dict(engine.ends), waste)
        return Simulation(walls, ledgers)


def wasted(rows: list[dict]) -> int:
    """The speculative trainings a folder's ledger holds and nothing reads (`schema.unused_finals`)."""
    return len(unused_finals(rows))
