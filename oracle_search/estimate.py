"""The cost before the run: how many trainings each phase of a command will run (at most, refinement rounds
included, and typically), their epochs, and the wall time they should take on the slots available.

The counts follow the drivers' rules (docs/design.md, "Which values are trained"):
- **Oracle.** Cycle 0: the G grid values. Cycle m >= 1: the bracket (the grid values within a factor 4 of the
  previous choice, plus that choice) and the dense best. Each refinement round adds at most 4 values (one per
  edge of the two intervals). Every seed trains every value.
- **silo_paper.** The first `DELTA_VALUES` δ, then up to `ROUNDS` rounds of at most 2 (one per side of the
  winner); each δ trains cycles q+1..target on every tuning seed. Cycles 0..q train at ε whatever δ is: once per
  seed, and cycles 0 and 1 are the Oracle's own trainings at its dense best (reused).
- **silo_fit.** Every Optuna trial trains cycles 0..target on each fit seed (a stopped trial trains fewer).
- **Baselines.** Each benchmark schedule's peaks on cycle 0: the grid on every tuning seed; the spec's own
  schedule is the Oracle's cycle-0 grid, reused. Final runs: every baseline and SILO variant, cycles 0..L on
  every evaluation seed.
"Typical" counts: one replicate of the command run by its own drivers (`study.run_study` for `compare`, with its
verdict's completions; `oracle.oracle_cycles` for `oracle`) on the one simulator (`simulate_job.simulate`: a
simulated engine on the run's slots, answered by the stated accuracy model of `oracle_search.simulate`), each
phase's trainings counted from the simulated ledger by method and stage (`phase_of`, `typical`). "At most" is the
exhaustive plan's closed form, whatever the model.

Trials: with fusion (`--fuse`; by default every candidate of a (seed, cycle) on GPUs) the engine trains up to `fuse`
max_lr candidates of one (seed, cycle, start) as one fused network in one Tune trial (`fusion.pack`):
each round of the Oracle's and each schedule's cycle-0 tuning on a seed is ⌈values / fuse⌉ trials. SILO (its own
max_lr), the final chains (one max_lr per chain and cycle) and fp16 (`fusion.fusable`) run one training per trial.

The wall time: typical epochs × seconds per epoch / the slots a phase can fill (`cluster.trial_slots`: Ray's CPUs
and GPUs divided by one trial's, `max_concurrent` respected, the same count the Runner runs by; never more than
the trials a phase hands out at once). Seconds per epoch (one candidate's) come from `--seconds-per-epoch`, or from
timing a few steps and one evaluation on a worker with one trial's resources (`probe_seconds_per_epoch`), of a
fused network of the grid's candidates when the Oracle fuses (its time / the candidates); where the data is absent,
on stand-in inputs of its shape, an epoch's steps counted from its published size (`trainables.standin`). With
`--slots N` the Oracle alone is simulated both ways on N slots (`oracle_walls`), and a compare is run whole, every
replicate, on the simulator (its lines side by side; that one simulation's replicates also give the typical counts,
their mean): its wall time is the typical estimate, since the phase sum counts a phase as wide as it is, not its
rounds one after another, and on many slots falls short."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from oracle_search.config import ORACLE_MODES
from oracle_search.delta import DELTA_VALUES, ROUNDS, DeltaPlan
from oracle_search.devices import Priced
from oracle_search.fusion import fusable, fuse_size
from oracle_search.options import positive_seconds
from oracle_search import sessions
from oracle_search.racing import MOST_NEW_VALUES_PER_ROUND, TuningPlan
from oracle_search.schema import BASELINES, HELD_OUT, Method, Stage
from oracle_search.simulate import SPREAD
from trainables.atomic import atomic_write_json
from trainables.timestamps import duration
from trainables.spec import ExperimentSpec, SpecError

# The report reads what this module writes (`analysis.files`), so Ray, Tune and torch load only where a plan is
# simulated (`simulate_job`), a cluster asked (`cluster`) or an epoch timed (`trainables`): imported there.
if TYPE_CHECKING:
    from oracle_search.simulate_job import JobWalls, Simulation
    from trainables.standin import StandIn

FIRST_ROUND_VALUES = 3  # a racing cycle's first round (b and its neighbours) on each seed: the Oracle's width
PROBE_STEPS = 100
# A probe on stand-in inputs (`trainables.standin`: no data) is brief, so that a dry run prices ResNet-50 on
# ImageNet in seconds even on a CPU: see `time_epoch`.
STANDIN_SECONDS = 3.0  # the timed steps (at least 2)
STANDIN_WARMUP_SECONDS = 1.0  # a CPU's warm-up (at least 1 step: oneDNN builds its kernels in the first)
STANDIN_EVAL_BATCHES = 2
STANDIN_CPU_ELEMENTS = 8 * 3 * 224 * 224  # 8 ImageNet images, CIFAR's 128 and more
MAX_PROBES = 64  # copies of the probe at once on a cluster (each holds one trial's resources)
_EPS = 1e-9
ESTIMATE_FILE = "estimate.json"  # in the results folder: written before a run, finished after it, read by the report


@dataclass(frozen=True)
class Phase:
    """One phase of a command: trainings (one per candidate max_lr, seed and cycle) at most and typically, each of
    `epochs` epochs, run as `most_trials` / `typical_trials` Tune trials (fewer than the trainings where up to
    `fuse` candidates share a fused trial), handed out in batches of at least `width` trials at once."""

    name: str
    most: int
    typical: int
    epochs: int
    width: int
    most_trials: int = -1  # -1: one trial per training
    typical_trials: int = -1
    fuse: int = 1

    def __post_init__(self) -> None:
        for which in ("most", "typical"):
            if getattr(self, f"{which}_trials") < 0:
                object.__setattr__(self, f"{which}_trials", getattr(self, which))

    @property
    def most_epochs(self) -> int:
        return self.most * self.epochs

    @property
    def typical_epochs(self) -> int:
        return self.typical * self.epochs


@dataclass(frozen=True)
class Estimate:
    """A command's plan and the wall time it should take (the content of OUT/estimate.json)."""

    command: str
    precision: str
    slots: int
    seconds_per_epoch: float
    source: str  # "given" (--seconds-per-epoch) or how it was timed
    phases: list[Phase] = field(default_factory=list)
    replicates: int = 1  # whole studies run side by side on the same slots (each phase R times, R times as wide)
    oracle_walls: dict[str, float] | None = None  # --slots: the Oracle alone simulated per mode, seconds
    job: JobWalls | None = None  # --slots, compare: the whole job simulated
    priced: str = ""  # what the seconds per epoch price, in words: this machine's CPU or GPU, a named GPU, a figure

    def seconds(self, which: str = "typical") -> float:
        """Training seconds on the slots: typical, or at most. The phases one after another, each as wide as it is;
        typical with `--slots` on a compare: the whole job simulated (`job`), which also counts each phase's
        rounds one after another and the study's lines side by side."""
        if which == "typical" and self.job:
            return self.job.wall
        R = self.replicates
        return sum(R * getattr(p, f"{which}_epochs") * self.seconds_per_epoch / min(self.slots, max(1, R * p.width))
                   for p in self.phases)

    def record(self) -> dict:
        return {"command": self.command, "precision": self.precision, "slots": self.slots,
                "seconds_per_epoch": self.seconds_per_epoch, "source": self.source,
                "priced": self.priced, "phases": [asdict(p) for p in self.phases], "replicates": self.replicates,
                "seconds": self.seconds(),
                "seconds_at_most": self.seconds("most"), "oracle_walls": self.oracle_walls,
                "job": asdict(self.job) if self.job else None}

    def lines(self) -> list[str]:
        fields = ("typical", "most", "typical_trials", "most_trials", "typical_epochs", "most_epochs")

        def row(name: str, values: list[int]) -> str:
            return f"{name:<16} " + " ".join(f"{v:>{w},}" for v, w in zip(values, (10, 10, 8, 10, 9, 10)))

        head = (f"{'phase':<16} {'trainings':>10} {'(at most)':>10} {'trials':>8} {'(at most)':>10} {'epochs':>9} "
                f"{'(at most)':>10}")
        rows = [row(p.name, [getattr(p, f) for f in fields]) for p in self.phases]
        total = row("total", [sum(getattr(p, f) for p in self.phases) for f in fields])
        fused = [p for p in self.phases if p.fuse > 1]
        note = ([f"fused: up to {max(p.fuse for p in fused)} max_lr candidates of a (seed, cycle) per trial in "
                 f"{', '.join(p.name for p in fused)} (--fuse); each other phase trains one per trial"]
                if fused else ["fused: no (one training per trial)"])
        return [*self.head(), head, *rows, total, *note,
                f"precision: {self.precision}",
                f"seconds per epoch: {self.seconds_per_epoch:.4g} ({self.source})",
                f"slots: {self.slots} trial(s) at once",
                *([f"replicates: {self.replicates} whole studies side by side on these slots (the table above is "
                   "one replicate's)"] if self.replicates > 1 else []),
                *([self.walls_line()] if self.oracle_walls else []),
                *([self.job.line()] if self.job else []),
                f"estimate: {duration(self.seconds())} of training on {self.slots} slot(s) "
                f"(at most {duration(self.seconds('most'))}), plus Ray's start"]

    def head(self) -> list[str]:
        """The dry run's first lines, one each: what it priced, the wall, and what bounds it with both figures."""
        return [f"priced: {self.priced or f'a given figure, --seconds-per-epoch {self.seconds_per_epoch:g}'}",
                f"wall: {duration(self.seconds())} of training on {self.slots} slot(s)"
                f"{' (the whole job simulated)' if self.job else ''}, plus Ray's start",
                self.bound_line()]

    def bound_line(self) -> str:
        """What bounds the wall: the work or the chain, with both figures. Without the whole job simulated (no
        --slots, fused trials, or `oracle`) the wall is the phases one after another, each as wide as the trials it
        hands out at once: bounded by the work where that is most of it, else by the phases' widths."""
        if self.job:
            job = self.job
            return (f"{job.bound()} (the work alone: {duration(job.work)}; the longest chain of dependent "
                    f"trainings: {duration(job.longest_chain)})")
        R, wall = self.replicates, self.seconds()
        work = sum(R * p.typical_epochs for p in self.phases) * self.seconds_per_epoch / self.slots
        why = ("the simulator runs one training a slot and these trials fuse (--fuse)" if any(
            p.fuse > 1 for p in self.phases) else "no --slots N was given" if self.oracle_walls is None else
            "`oracle` simulates the Oracle alone (below)")
        said = f"the work alone: {duration(work)}; the chain: not simulated, since {why}"
        if wall <= 1.25 * work:
            return f"bounded by the work: more slots would shorten it; {said}"
        narrow = [p.name for p in self.phases if R * p.width < self.slots]
        return (f"bounded by the phases' widths: {', '.join(narrow)} hand out fewer trials at once than the "
                f"{self.slots} slots, and each phase waits for the one before; {said}")

    def walls_line(self) -> str:
        walls = ", ".join(f"{mode} {duration(s)}" for mode, s in self.oracle_walls.items())
        return (f"the Oracle on {self.slots} slots alone, as `oracle` runs it (its own driver simulated on the "
                f"accuracy model, a training's seconds spread {SPREAD:.0%}){', one replicate' * (self.replicates > 1)}"
                f": {walls}")


# --- the plan: trainings per phase -------------------------------------------------------------------------------

def widest_bracket(grid: list[float], width: float = 4.0) -> int:
    """The most values `selection.bracket` can return for this grid: grid values within a factor `width` of the
    previous choice, plus that choice when it is off the grid (a refined value)."""
    grid = sorted(set(grid))
    # The count changes only where the previous choice crosses g/width or g·width: try each, and between.
    edges = sorted({g * f for g in grid for f in (1 / width, 1.0, width)})
    probes = edges + [math.sqrt(a * b) for a, b in zip(edges, edges[1:])]
    best = 0
    for p in probes:
        near = sum(1 for g in grid if p / width - _EPS <= g <= p * width + _EPS)
        off_grid = all(abs(p / g - 1) > _EPS for g in grid)
        best = max(best, near + off_grid)
    return best


def first_round_values(spec: ExperimentSpec, bracket: bool) -> tuple[int, int]:
    """The most values the Oracle's first round of a cycle trains on each seed: at cycle 0 (the grid) and at a
    later cycle (the bracket, or the whole grid, plus the dense best). Each refinement round after it trains at
    most racing.MOST_NEW_VALUES_PER_ROUND more."""
    g = len(set(spec.grid))
    return g, (min(widest_bracket(list(spec.grid)), g + 1) if bracket else g) + 1


def oracle_phase(spec: ExperimentSpec, seeds: int, refine: int, bracket: bool, fuse: int = 1,
                 typical: int | None = None) -> Phase:
    """At most: the exhaustive plan in closed form. Typically: `typical` trainings (the simulated run's, `typical`
    below; at most the most), the most where not given. `fuse`: candidates per fused trial (`fusion.fuse_size`);
    each round on a seed is ⌈its values / fuse⌉ trials, and the typical trials are the typical trainings in the
    same proportion."""
    g, later = first_round_values(spec, bracket)
    cycles, most = spec.cycles, MOST_NEW_VALUES_PER_ROUND

    def count(k: int = 1) -> int:  # k: trainings per trial
        return seeds * ((-(-g // k) + -(-most // k) * refine) + cycles * (-(-later // k) + -(-most // k) * refine))

    typical = count() if typical is None else min(typical, count())
    return Phase("oracle", count(), typical, spec.epochs, seeds * -(-(FIRST_ROUND_VALUES if refine else g) // fuse),
                 count(fuse), math.ceil(typical * count(fuse) / count()), fuse)


def silo_paper_phase(spec: ExperimentSpec, plan: DeltaPlan, typical: int | None = None) -> Phase:
    """At most: the first δ values on every seed of `plan`, then `ROUNDS` rounds of at most 2, each δ training
    cycles q+1..target, and cycles 0..q once per seed. Typically: `typical` (at most the most)."""
    seeds = len(plan.seeds)
    first = max(1, min(DELTA_VALUES, len(set(spec.grid)) - 1))  # ε + δ on the grid values above ε (or 2ε)
    refine = ROUNDS if plan.cycles_per_delta else 0
    most = seeds * (plan.shared_cycles + (first + 2 * refine) * plan.cycles_per_delta)
    return Phase("silo_paper", most, most if typical is None else min(typical, most), spec.epochs, seeds * 2)


def silo_fit_phase(spec: ExperimentSpec, trials: int, fit_seeds: int, target: int,
                   typical: int | None = None) -> Phase:
    n = trials * fit_seeds * (target + 1)
    return Phase("silo_fit", n, n if typical is None else min(typical, n), spec.epochs, max(1, trials * fit_seeds))


def baselines_phases(spec: ExperimentSpec, plan: TuningPlan, eval_seeds: int, silo_variants: int,
                     oracle_ran: bool, fuse: int = 1, typical: dict[str, int] | None = None) -> list[Phase]:
    """`fuse`: candidates per fused trial in the tuning, where each schedule's grid on a seed is one batch (the
    final chains train one max_lr per chain and cycle: nothing to fuse). `typical`: the tuning's and the finals'
    trainings typically (each at most its most), the most where not given."""
    typical = typical or {}
    tuned = [s for s in BASELINES if not (oracle_ran and s == spec.schedule.name)]  # that one is the Oracle's
    seeds, g = len(plan.seeds), len(plan.grid)
    tune, trials = len(tuned) * g * seeds, len(tuned) * -(-g // fuse) * seeds
    typical_tune = min(typical.get("baselines_tune", tune), tune)
    chains = len(BASELINES) + silo_variants + len(HELD_OUT)  # and the held-out references' (`held_out`)
    finals = chains * eval_seeds * (spec.cycles + 1)
    return [Phase("baselines_tune", tune, typical_tune, spec.epochs, max(1, trials), trials,
                  math.ceil(typical_tune * trials / tune) if tune else 0, fuse),
            Phase("finals", finals, min(typical.get("finals", finals), finals), spec.epochs, chains * eval_seeds)]


def candidates_per_trial(spec: ExperimentSpec, fuse: int) -> int:
    """How many of a (seed, cycle)'s max_lr candidates the engine fuses into one trial for this run's `--fuse`
    (`fusion.fuse_size`), 1 where it fuses none (`fusion.fusable`: fp16)."""
    return fuse_size(spec, fuse) if fusable(spec, min(spec.grid)) else 1


def phase_of(row: dict, own_schedule: str) -> str | None:
    """The phase of the estimate a ledger row's training belongs to, by its method and stage, counted as the
    closed form counts them: the Oracle's grid and refinement rows (the verdict's completions too); silo_fit's
    trials; silo_paper's δ search, its cycles 0..q at ε too (reused or not); the baselines' tuning but the
    spec's own schedule's (the Oracle's cycle 0, reused); the final runs a report reads (a final run for a δ that
    did not win is the whole job's waste, `simulate_job.wasted`)."""
    method, stage = row.get("method"), row.get("stage")
    if method == Method.ORACLE.value and stage in (Stage.GRID.value, Stage.REFINE.value):
        return "oracle"
    if method == Method.SILO_FIT.value and stage == Stage.FIT.value:
        return "silo_fit"
    if method == Method.SILO_PAPER.value and stage == Stage.TUNE.value:
        return "silo_paper"
    if method in BASELINES and method != own_schedule and stage == Stage.TUNE.value:
        return "baselines_tune"
    if stage == Stage.FINAL.value and row.get("selected"):
        return "finals"
    return None


def typical(spec: ExperimentSpec, ledgers: list[list[dict]]) -> dict[str, int]:
    """Each phase's trainings in the simulated run's ledgers (`phase_of`): one replicate's, the mean over the
    replicates simulated, rounded up. A training counts once per method, as the closed form counts it: the rows a
    method copies from its own earlier training (silo_paper's cycles 0..q at ε, the same for every δ) are one
    training; one it copies from another method's (the Oracle's, or a final chain's twin) is its own."""
    trainings: dict[str, set] = {}
    for r, rows in enumerate(ledgers):
        for row in rows:
            if (phase := phase_of(row, spec.schedule.name)) is not None:
                trainings.setdefault(phase, set()).add((r, row.get("method"), row.get("training") or row["key"]))
    return {phase: math.ceil(len(found) / len(ledgers)) for phase, found in trainings.items()}


def one_replicate(command: str, options):
    """`options` for one replicate: a compare's counts are per replicate, and the plans do not depend on R."""
    return dataclasses.replace(options, replicates=1) if command == "compare" else options


def plan(command: str, spec: ExperimentSpec, options, simulated: Simulation) -> list[Phase]:
    """The phases `command` ("oracle" or "compare") runs with `options` (pipeline.OracleOptions or
    CompareOptions), fused as the engine fuses them: one Runner, with `--fuse`, runs every phase of a command.
    Typically: the trainings of `simulated`, the command simulated on the run's slots (`simulate_job.simulate`:
    the plans widen with the slots, `OracleSearch.for_slots`)."""
    counts = typical(spec, simulated.ledgers)
    if command == "oracle":
        k = candidates_per_trial(spec, options.fuse)
        return [oracle_phase(spec, options.seeds, options.refine, options.bracket, k, counts.get("oracle", 0))]
    o, fit = options.oracle, options.fit
    k = candidates_per_trial(spec, o.fuse)
    target = fit.target(spec)
    phases = [oracle_phase(spec, o.seeds, o.refine, o.bracket, k, counts.get("oracle", 0))]
    if options.silo_fit:
        phases.append(silo_fit_phase(spec, fit.trials, fit.seeds, target, counts.get("silo_fit", 0)))
    # At most: the drivers' plans (`DeltaPlan`, `TuningPlan`) in closed form; their seeds are labels here.
    seeds = tuple(range(o.seeds))
    phases.append(silo_paper_phase(spec, DeltaPlan(min(spec.grid), tuple(spec.grid), seeds, target, mode=o.mode),
                                   counts.get("silo_paper", 0)))
    phases += baselines_phases(spec, TuningPlan(tuple(sorted(set(spec.grid))), seeds, o.mode), options.eval_seeds,
                               1 + options.silo_fit, oracle_ran=True, fuse=k,
                               typical={name: counts.get(name, 0) for name in ("baselines_tune", "finals")})
    return phases


# --- slots and the timing probe ------------------------------------------------------------------------------------

def time_epoch(spec: ExperimentSpec, steps: int = PROBE_STEPS, fuse: int = 1, standin: StandIn | None = None) -> dict:
    """Seconds of one epoch of `spec` on this process's device and threads: `steps` timed training steps (after
    10 untimed ones) scaled to the epoch's steps, plus one validation pass (CPU time on one CPU thread). A
    training shorter than `steps` is timed over its own length: the probe never costs more than one training.
    `fuse` > 1: the steps and the pass of a fused network of that many candidates (`trainables.fused`), each
    time divided by them: one candidate's share, as a fused trial spends it; replayed from a CUDA graph where the
    spec asks for one (its eager warm-up and capture fall in the untimed steps), with the trial's cuDNN setting.

    `standin`: time on its random inputs instead of the spec's data (a dry run without the data), briefly: the
    timed steps stop once they took STANDIN_SECONDS (at least 2 steps), a CPU's warm-up after
    STANDIN_WARMUP_SECONDS (at least 1 step); the validation pass is timed on STANDIN_EVAL_BATCHES probe batches
    and scaled to the split's size. On a CPU a step holds at most STANDIN_CPU_ELEMENTS input numbers, its time
    scaled per sample to the spec's batch (ResNet-50's step per sample on one thread of this 2-core Intel Xeon,
    bf16: 0.38 s at batch 8, 0.35-0.38 s at 16, 32 and 64)."""
    import torch

    # here, not at the top: torch (the module docstring's comment on imports)
    from trainables.cycle import accuracy, device_backends, make_optimizer, make_step, resolve_device
    from trainables.fused import Fused, FusedOptimizer, fused_accuracy, step_function
    from trainables.plugins import build_model, load_data
    from trainables.pruning import MaskedWeights, full_masks

    device = resolve_device(spec.device)
    device_backends(device, spec)
    data = (standin or load_data(spec)).to(device)
    torch.manual_seed(spec.seed)
    model = build_model(spec.model, data.input_shape, data.num_classes).to(device)
    generator = torch.Generator().manual_seed(spec.seed)
    if fuse > 1:
        fused = Fused.replicate(model, fuse)
        fused_optimizer = FusedOptimizer(spec.optimizer, fused.params)
        masks = {name: m.to(fused.params[name].dtype) for name, m in full_masks(model).items()}
        lrs = torch.full((fuse,), min(spec.grid), device=device)
        step = step_function(fused, fused_optimizer, masks, spec, device)

        def train(x, y):
            return step(x, y, lrs).sum()
    else:
        optimizer = make_optimizer(spec.optimizer, model.parameters(), min(spec.grid))
        # The step a training takes (`make_step`: the lean step for a plain MLP on a CPU, else autograd's), so
        # the probe times what the run will run.
        train = make_step(model, optimizer, MaskedWeights(model, full_masks(model)), spec, device)

    # On one CPU thread, that thread's CPU time: other processes on a busy machine would otherwise make it the
    # estimate of the moment (seen here: 5x at load 12 on 2 cores). Else (a GPU, several threads) the wall clock.
    clock = time.thread_time if device.type == "cpu" and torch.get_num_threads() == 1 else time.perf_counter
    cpu = device.type == "cpu"
    batch = spec.batch_size
    if standin is not None and cpu:  # ResNet-50 at 224 px: a step of 64 takes 25 s of a thread here, of 8 3 s
        batch = max(1, min(batch, STANDIN_CPU_ELEMENTS // math.prod(data.input_shape)))

    def run(n: int, budget: float = math.inf, least: int = 1) -> tuple[float, int]:
        """`n` steps, or fewer (at least `least`) once they took `budget` seconds: their time and count."""
        (fused if fuse > 1 else model).train()
        start, done = clock(), 0

        def enough() -> bool:
            return done >= n or (done >= least and clock() - start >= budget)

        while not enough():
            for x, y in data.batches("train", batch, generator):
                loss = train(x, y)
                done += 1
                if enough():
                    break
        float(loss)  # waits for the device
        return clock() - start, done

    per_epoch = math.ceil(data.size("train") / spec.batch_size)
    steps = max(1, min(steps, spec.epochs * per_epoch))
    brief = standin is not None
    # The first steps build the allocator's pools and oneDNN's kernels; on a GPU, cuDNN's choices and a CUDA
    # graph's capture too, so a GPU's warm-up is never cut short.
    run(min(10, steps), STANDIN_WARMUP_SECONDS if brief and cpu else math.inf)
    seconds, steps = run(steps, STANDIN_SECONDS if brief else math.inf, least=min(2, steps))
    step = seconds / steps / fuse * spec.batch_size / batch
    # A stand-in's pass is timed on a part of the split (its whole would cost ImageNet 12,812 forward passes)
    evaluated = data.capped("val", STANDIN_EVAL_BATCHES * batch) if brief else data
    start = clock()
    if fuse > 1:
        fused_accuracy(fused, evaluated, "val", spec, device)
    else:
        accuracy(model, evaluated, "val", spec, device)
    evaluation = (clock() - start) / fuse * data.size("val") / evaluated.size("val")
    return {"seconds_per_epoch": per_epoch * step + evaluation, "step": step, "steps": steps, "batch": batch,
            "evaluation": evaluation, "evaluated": evaluated.size("val"), "steps_per_epoch": per_epoch,
            "device": str(device), "name": device_name(device), "fuse": fuse}


def device_name(device) -> str:
    """A probe's device by its own name, for the dry run's "priced" line: the GPU's (CUDA's), else the CPU's model
    (Linux's /proc/cpuinfo, else what `platform` knows)."""
    import torch  # here, not at the top (the module docstring's comment on imports)

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def copy_gpus(copies: int, gpus_per_trial: float, gpus: int) -> list[int]:
    """The GPU each local timing copy runs on, as a local Ray places that many trials: the i-th trial's first GPU
    is GPU ⌊i · gpus_per_trial⌋ (fractional trials share one), so copies never pile onto GPU 0; at most as many
    copies as this machine's `gpus` hold."""
    fit = int(gpus // gpus_per_trial) if gpus_per_trial > 0 else 0
    return [int(i * gpus_per_trial) for i in range(max(1, min(copies, fit)))]


def probe_seconds_per_epoch(spec: ExperimentSpec, address: str | None, together: int = 1, fuse: int = 1,
                            standin: StandIn | None = None) -> dict:
    """`time_epoch` where trials run, with torch limited to one trial's CPUs, `together` copies at once: trials
    running side by side slow each other down (shared caches, memory bandwidth, clock speed: 1.27x per training
    for 2 trials on this 2-core machine's main job), so the probe runs as many at once as the run will. On a
    cluster, Ray tasks holding one trial's resources each; where every trial runs on this machine
    (cluster.trials_run_here), threads of this process (a Ray worker's start costs more than the whole probe), at
    most one per trial's share of this machine's CPUs, and on GPUs each copy on the GPU its trial would get
    (`copy_gpus`). `fuse`: time a fused network of that many candidates, `standin`: on its random inputs instead
    of the data (`time_epoch`). The answer is the copies' mean, with how many ran (`copies`)."""
    from oracle_search.cluster import local_trial_device, trials_run_here  # Ray: here, not at the top

    res, threads = spec.resources, spec.resources.threads
    if trials_run_here(spec, address):
        from trainables.cycle import torch_threads  # torch: here, not at the top
        from trainables.plugins import load_data

        copies = max(1, min(together, (os.cpu_count() or 1) // threads))
        local = dataclasses.replace(spec, device=local_trial_device(spec))
        if standin is None:
            load_data(local)  # once, before the copies start: they share load_data's cache
        if local.device != "cuda":
            def timed(_: int) -> dict:
                return time_epoch(local, fuse=fuse, standin=standin)
        else:
            import torch

            gpus = copy_gpus(copies, res.gpus_per_trial, torch.cuda.device_count())
            copies = len(gpus)

            def timed(i: int) -> dict:
                with torch.cuda.device(gpus[i]):  # the current device is per thread: resolve_device("cuda") finds it
                    return time_epoch(local, fuse=fuse, standin=standin)
        with torch_threads(threads), ThreadPoolExecutor(copies) as pool:
            return _mean(list(pool.map(timed, range(copies))))
    import ray

    from oracle_search.cluster import connect  # Ray: here, not at the top
    from trainables.sources import runtime_env

    connect(address, runtime_env(spec))

    @ray.remote
    def probe(spec: ExperimentSpec, threads: int, fuse: int, standin: StandIn | None) -> dict:
        import torch

        from oracle_search.estimate import time_epoch  # on the Ray worker, which imports it there

        torch.set_num_threads(threads)
        use_cuda = bool(ray.get_gpu_ids()) and torch.cuda.is_available()
        return time_epoch(dataclasses.replace(spec, device="cuda" if use_cuda else "cpu"), fuse=fuse,
                          standin=standin)

    task = probe.options(num_cpus=res.cpus_per_trial, num_gpus=res.gpus_per_trial)
    return _mean(ray.get([task.remote(spec, threads, fuse, standin) for _ in range(max(1, min(together, MAX_PROBES)))]))


def _mean(timed: list[dict]) -> dict:
    """The copies' mean step, evaluation and epoch, and how many copies ran."""
    mean = {k: sum(t[k] for t in timed) / len(timed) for k in ("seconds_per_epoch", "step", "evaluation")}
    return timed[0] | mean | {"copies": len(timed)}


def oracle_walls(spec: ExperimentSpec, options, slots: int, seconds_per_epoch: float,
                 simulated=None) -> dict[str, float]:
    """The Oracle alone (`options`: pipeline.OracleOptions) on `slots`, simulated with racing and with exhaustive
    search (`simulate_job.simulate`: the `oracle` command's own driver on the accuracy model). `simulated`: the
    Oracle already simulated in `options.mode` on these slots, at these seconds."""
    from oracle_search.simulate_job import simulate  # Ray, Tune, torch: here, not at the top

    def wall(mode: str) -> float:
        if simulated is not None and mode == options.mode:
            return simulated.walls.wall
        return simulate("oracle", spec, dataclasses.replace(options, mode=mode), slots, seconds_per_epoch).walls.wall
    return {mode: wall(mode) for mode in ORACLE_MODES}


def estimate(command: str, spec: ExperimentSpec, options, address: str | None,
             seconds_per_epoch: float | None = None, slots: int | None = None,
             standin: StandIn | None = None, priced: Priced | None = None) -> Estimate:
    """The plan of `command` and its wall time; `spec.precision` must be resolved already. Nothing is timed when
    `seconds_per_epoch` is given; else the probe times the data, or `standin`'s inputs where the data is absent
    (`trainables.standin.stand_in`). `slots`: plan on that many slots instead of the cluster's (the probe still runs
    as many copies at once as this cluster's trials would), and simulate on them the Oracle alone both ways
    (`oracle_walls`) and a compare whole (`simulate_job`, whose replicates' ledgers then give the typical counts;
    unfused trials only: a fused trial's candidates share one slot). `priced`: what a given `seconds_per_epoch`
    prices and where it comes from (`devices.price`: a named GPU's measured figure); default a given figure."""
    # Ray, Tune, torch: here, not at the top
    from oracle_search.cluster import trial_slots
    from oracle_search.simulate_job import simulate

    positive_seconds(seconds_per_epoch)
    here = trial_slots(spec, address)
    n = slots or here
    fuse = candidates_per_trial(spec, (options if command == "oracle" else options.oracle).fuse)
    if seconds_per_epoch is not None:
        per_epoch, source = seconds_per_epoch, priced.source if priced else "given"
        what = priced.priced if priced else f"a given figure, --seconds-per-epoch {seconds_per_epoch:g}"
    else:
        # Fused, the probe times a fused network of the grid's candidates, the Oracle's first and widest round.
        timed = min(fuse, len(set(spec.grid)))
        t = probe_seconds_per_epoch(spec, address, together=here, fuse=timed, standin=standin)
        per_epoch = t["seconds_per_epoch"]
        fused = f", {timed} candidates fused, a candidate's share" if timed > 1 else ""
        where = f"{t['device']}, {spec.resources.threads} thread(s), {t['copies']} at once{fused}"
        kind = "GPU" if t["device"].startswith("cuda") else "CPU"
        what = f"{'a worker' if address else 'this machine'}'s {kind}, {t['name']}, timed ({where})"
        if standin is None:
            source = (f"timed ({where}): {t['steps']} steps of {t['step'] * 1e3:.2f} ms x {t['steps_per_epoch']} "
                      f"+ one evaluation {t['evaluation'] * 1e3:.0f} ms")
        else:
            source = standin_source(t, spec, standin, where)
    replicates = options.replicates if command == "compare" else 1
    on_slots = slots is not None and fuse == 1
    whole = on_slots and command == "compare"  # the whole job, every replicate: its walls, and its counts
    simulated = simulate(command, spec, options if whole else one_replicate(command, options), n, per_epoch)
    phases = plan(command, spec, options, simulated)
    walls = None
    if on_slots:
        oracle = options if command == "oracle" else options.oracle
        walls = oracle_walls(spec, oracle, n, per_epoch, simulated if command == "oracle" else None)
    return Estimate(command, spec.precision, n, per_epoch, source, phases, replicates, walls,
                    simulated.walls if whole else None, what)


def write_expected(out: Path, command: str, spec: ExperimentSpec, options, address: str | None,
                   seconds_per_epoch: float | None, say) -> None:
    """OUT/estimate.json: the cost expected before the run, for the report; for replicates, the cost of R
    interleaved studies, timed once. A driver's session on OUT starts here, estimate or not (`sessions.start`:
    the run's time is summed over its first run and every resume)."""
    sessions.start(out)
    try:
        found = estimate(command, spec, options, address, seconds_per_epoch)
    except Exception as err:  # an estimate is a courtesy: the run goes on without one
        say(f"estimate: not available ({type(err).__name__}: {err})")
        return
    write(out, found)
    say(f"estimate: {found.lines()[-1].removeprefix('estimate: ')}")


def standin_source(t: dict, spec: ExperimentSpec, standin: StandIn, where: str) -> str:
    """Where a stand-in probe's seconds per epoch come from, in words: what was timed, and what is real (the
    epoch's steps, from the dataset's published size)."""
    B, b = spec.batch_size, t["batch"]
    scaled = f" (steps of {b} samples, scaled per sample to {B})" if b != B else ""
    return (f"timed on stand-in inputs of {standin.name}'s shape, {t['steps']} steps; no data read: {where}, "
            f"{'x'.join(map(str, standin.input_shape))} and {standin.num_classes} classes; a step of {B} "
            f"{t['step']:.3g} s{scaled} x {t['steps_per_epoch']:,} steps an epoch ({standin.size('train'):,} "
            f"training images / {B}) + one evaluation of {standin.size('val'):,} images {t['evaluation']:.3g} s "
            f"(timed on {t['evaluated']:,})")


def write(out: Path, found: Estimate) -> None:
    """OUT/estimate.json at the start of a real run, with the time it started (this session's: every session's
    start and end are in OUT/sessions.json, `sessions`)."""
    atomic_write_json(Path(out) / ESTIMATE_FILE, found.record() | {"started": time.time(), "finished": None})


def finish(out: Path) -> None:
    """Record when the run that wrote OUT/estimate.json ended, for the report's comparison: the session's end
    (`sessions.end`), and estimate.json's `finished` (the last session's, as before sessions were recorded)."""
    sessions.end(out)
    path = Path(out) / ESTIMATE_FILE
    if path.exists():
        record = json.loads(path.read_text())
        atomic_write_json(path, record | {"finished": time.time()})
