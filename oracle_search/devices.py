"""Pricing a GPU this machine does not have (`--dry-run --price-on NAME`): a table of seconds per training epoch
measured on named GPUs, per preset, each figure with where it was measured (the section of docs/measured.md, the
date, the torch version), how it follows from what was measured, and when it is stale.

Two figures per entry, as the estimate takes them (`estimate.estimate`'s seconds per epoch, one number for every
training of the plan, as its own probe gives it):
- `fused`: one max_lr candidate's share of an epoch of a fused trial (`--fuse`, by default on GPUs), replayed from a
  CUDA graph: what the probe times where the Oracle fuses;
- `single`: an epoch of one training alone in its trial (no fusion): what the probe times where nothing fuses.
A plan that fuses is priced at `fused` where one was measured, else at `single` (an upper bound for the fused
phases, said so). Each figure says what ran at once on the GPU where it was measured; a plan that packs trials
otherwise (`--gpus-per-trial`) is not rescaled: the line says so.

Nothing here imports torch or Ray: the command line looks the figure up at its edge, before anything loads."""
from __future__ import annotations

import datetime
from dataclasses import dataclass

from oracle_search.fusion import fusable, fuse_size
from trainables.presets import PRESETS
from trainables.spec import ExperimentSpec, SpecError

OPTION = "price-on"
STALE_DAYS = 90  # past this age a figure is flagged stale whatever else changed: torch, drivers and the code move
# Re-measure on the GPU: `bash scripts/gpu_check.sh` (stage 2: fused_throughput's steps; stage 4: the dry run's
# probe beside a real cycle), then update the entry from its raw outputs.
REMEASURE = "scripts/gpu_check.sh stages 2 and 4"
CIFAR_STEPS = 352  # an epoch's steps: 45,000 training images / batch 128 (the CIFAR presets' split and batch)
STALE_CODE = ("the training step changes (trainables/cycle.py's train_step, trainables/fused.py's fused and graphed "
              "step, the data's batches), or the run uses another torch or CUDA")


@dataclass(frozen=True)
class Figure:
    """Seconds per epoch, how they follow from what was measured, and what ran at once on the GPU then."""

    seconds_per_epoch: float
    how: str
    packing: str  # what ran at once on the GPU, in words
    gpus_per_trial: float = 1.0  # the GPU share a trial had then


@dataclass(frozen=True)
class Measured:
    """One preset on one GPU: its figures, and where and when they were measured."""

    preset: str
    device: str  # the name --price-on takes
    gpu: str  # the GPU's own name, as nvidia-smi gives it
    single: Figure
    fused: Figure | None
    section: str  # docs/measured.md's section
    date: str  # ISO date of the measurement
    torch: str
    raw: tuple[str, ...]  # the raw outputs, in this repository
    precision: str = "bf16"

    @property
    def stale_when(self) -> str:
        return f"stale once {STALE_CODE}, or after {STALE_DAYS} days; re-measure with {REMEASURE}"

    def age_days(self, today: datetime.date | None = None) -> int:
        return ((today or datetime.date.today()) - datetime.date.fromisoformat(self.date)).days


_H100_GRAPHS = ("On a GPU: the fused step from a CUDA graph, cuDNN's search, a 1/10-length ResNet-20 cycle (H100, "
                "2026-11-27)")
_H100_CHECK = "On a GPU: Ray Tune trials, a full `compare`, fused throughput (one NVIDIA H100 80GB HBM3)"
_H100 = "NVIDIA H100 80GB HBM3"
# The H200's figures are named in _H100_CHECK's note on "the H200 figures of an earlier round": their fused column
# timed the vmap path ResNet-20 and VGG-19 no longer take; their separate column, one model's eager step, is the
# step an unfused training still takes.
_H200_RAW = ("benchmarks/results/h200-fused-throughput-run1.txt", "benchmarks/results/h200-fused-throughput-run3.txt")
_H200 = "NVIDIA H200"
# The ResNet-20 evaluation of 5,000 validation images, one candidate's share, timed by the H100 probe (run 2): the
# only evaluation timed on a GPU. A single training's is taken as the same (not timed alone).
_EVAL = 0.169

TABLE: dict[tuple[str, str], Measured] = {(m.preset, m.device): m for m in (
    Measured(
        "resnet20-cifar10", "h100", _H100,
        single=Figure(
            CIFAR_STEPS * 8.79e-3 + _EVAL,
            f"the separate eager step of one ResNet-20, 8.79 ms (median of the three measured: 8.07 and 8.79 ms on "
            f"2026-11-26, 10.09 ms on 2026-11-27; fused_throughput.py, batch 128, bf16) x {CIFAR_STEPS} steps an "
            f"epoch + {_EVAL * 1e3:.0f} ms of evaluation (the probe's, below)",
            "one training alone on the GPU"),
        fused=Figure(
            0.7883,
            "the dry run's own probe on the H100 (its line: 100 graphed steps of 1.76 ms a candidate x 352 + one "
            "evaluation of 169 ms a candidate), 8 ResNet-20 candidates fused; the real fused trials of the same "
            "cycle, alone on the GPU, took 0.41-0.53 s a candidate-epoch (4_cycle_rows.csv)",
            "2 trials sharing the GPU (--gpus-per-trial 0.5), 8 candidates fused, cuDNN's search on", 0.5),
        section=_H100_GRAPHS, date="2026-11-27", torch="2.11.0+cu130",
        raw=("benchmarks/results/h100-gpu-graphs-2026-11-27/run2/4_estimate.txt",
             "benchmarks/results/h100-gpu-graphs-2026-11-27/run2/4_cycle_rows.csv",
             "benchmarks/results/h100-gpu-graphs-2026-11-27/run1/2_fused_throughput.txt",
             "benchmarks/results/h100-gpu-check-2026-11-26/run1/2_fused_throughput.txt",
             "benchmarks/results/h100-gpu-check-2026-11-26/run2/2_fused_throughput.txt")),
    Measured(
        "vgg19-cifar10", "h100", _H100,
        single=Figure(
            CIFAR_STEPS * 7.32e-3,
            f"the separate eager step of one VGG-19-BN, 7.32 ms (median of 7.01, 7.32 and 9.28 ms; "
            f"fused_throughput.py, batch 128, bf16) x {CIFAR_STEPS} steps; no VGG-19 evaluation was timed on a GPU "
            f"(ResNet-20's was 18 % of its fused epoch): left out",
            "one training alone on the GPU"),
        fused=Figure(
            CIFAR_STEPS * 17.67e-3 / 8,
            f"the graphed fused step of 8 VGG-19-BN candidates, 17.67 ms (2.21 ms a candidate; fused_throughput.py "
            f"--graphs, median of 3 repeats) x {CIFAR_STEPS} steps; evaluation left out, as above",
            "one trial alone on the GPU, 8 candidates fused"),
        section=_H100_GRAPHS, date="2026-11-27", torch="2.11.0+cu130",
        raw=("benchmarks/results/h100-gpu-graphs-2026-11-27/run1/2_fused_throughput.txt",
             "benchmarks/results/h100-gpu-check-2026-11-26/run1/2_fused_throughput.txt",
             "benchmarks/results/h100-gpu-check-2026-11-26/run2/2_fused_throughput.txt")),
    Measured(
        "resnet20-cifar10", "h200", _H200,
        single=Figure(
            CIFAR_STEPS * 128 / 13_853 + _EVAL,
            f"the separate eager step of one ResNet-20 at 13,853 images/s (the median of the 8 measured, 11,823-"
            f"15,282; batch 128, bf16): 9.24 ms x {CIFAR_STEPS} steps + {_EVAL * 1e3:.0f} ms of evaluation "
            f"(the H100 probe's: none was timed on an H200)",
            "one training alone on the GPU"),
        fused=None,  # the H200's fused figures are of the vmap path ResNet-20 no longer takes
        section=_H100_CHECK, date="2026-11-26", torch="2.11.0+cu130", raw=_H200_RAW),
    Measured(
        "vgg19-cifar10", "h200", _H200,
        single=Figure(
            CIFAR_STEPS * 128 / 16_081,
            f"the separate eager step of one VGG-19-BN at 16,081 images/s (the median of the 4 measured, 15,250-"
            f"16,980; batch 128, bf16): 7.96 ms x {CIFAR_STEPS} steps; evaluation left out (none timed)",
            "one training alone on the GPU"),
        fused=None,
        section=_H100_CHECK, date="2026-11-26", torch="2.11.0+cu130", raw=_H200_RAW),
)}


def known() -> str:
    """What the table prices, in words: each device with its presets."""
    devices: dict[str, list[str]] = {}
    for preset, device in TABLE:
        devices.setdefault(device, []).append(preset)
    return "; ".join(f"{d}: {', '.join(sorted(p))}" for d, p in sorted(devices.items()))


def lookup(preset: str, device: str) -> Measured:
    """The entry for `preset` on `device` (case-insensitive); one line naming --price-on and what is known, else."""
    found = TABLE.get((preset, device.lower()))
    if found is None:
        what = (f"no measured figure for {preset} on {device!r}" if device.lower() in {d for _, d in TABLE}
                else f"unknown device {device!r}")
        raise SpecError(OPTION, f"{what}; known: {known()}; or give --seconds-per-epoch S")
    return found


def fuses(spec: ExperimentSpec, fuse: int) -> bool:
    """Whether the plan's Oracle trains fused trials (`estimate.candidates_per_trial` > 1)."""
    return fusable(spec, min(spec.grid)) and fuse_size(spec, fuse) > 1


@dataclass(frozen=True)
class Priced:
    """The seconds per epoch a dry run prices at, what it priced (`priced`, the dry run's first line: the GPU, the
    figure and where it was measured) and how the figure follows from the measurement (`source`, the estimate's)."""

    seconds_per_epoch: float
    priced: str
    source: str


def price(spec: ExperimentSpec, device: str, fuse: int, today: datetime.date | None = None) -> Priced:
    """`spec`'s seconds per epoch on `device` from the table (`lookup`), for a plan whose Oracle fuses `fuse`
    candidates a trial (`fusion.fuse_size`). Refused (SpecError on --price-on) where the spec is not the preset the
    figure was measured for: another model, dataset, batch or precision."""
    m = lookup(spec.preset, device)
    base = PRESETS[spec.preset].spec
    changed = [f"--{name.replace('_', '-')} {getattr(spec, name)}" for name in ("model", "dataset", "batch_size")
               if getattr(spec, name) != getattr(base, name)]
    if spec.precision not in ("auto", m.precision):
        changed.append(f"--precision {spec.precision}")
    if changed:
        raise SpecError(OPTION, f"{device}'s figure is {spec.preset}'s as measured ({m.precision}); this run "
                                f"changes it ({', '.join(changed)}): give --seconds-per-epoch S")
    fused = fuses(spec, fuse)
    figure = m.fused if fused and m.fused is not None else m.single
    kind = ("a candidate's share of a fused trial" if figure is m.fused else
            "a training alone; no fused figure measured on this GPU: an upper bound for the fused phases" if fused
            else "a training alone")
    trials = spec.resources.gpus_per_trial
    packed = (f"this plan: {1 / trials:g} trials a GPU, not measured and not rescaled" if trials and
              trials != figure.gpus_per_trial else "")
    # The estimate takes one figure for every phase, as its probe does: where the Oracle fuses, silo_paper, silo_fit
    # and the final chains (one training a trial) are priced at a candidate's share too. Said, with this GPU's figure
    # for a training alone, so that the reader can weigh it.
    alone = (f"; the phases that train one training a trial are priced at it too, as the dry run's probe prices "
             f"them, though a training alone takes {m.single.seconds_per_epoch:.4g} s an epoch here"
             if figure is m.fused else "")
    age = m.age_days(today)
    stale = f"; STALE: measured {age} days ago" if age > STALE_DAYS else ""
    return Priced(figure.seconds_per_epoch,
                  f"an {m.gpu} (--price-on {m.device}), {figure.seconds_per_epoch:.4g} s an epoch, {kind}: "
                  f"docs/measured.md, \"{m.section}\" ({m.date}, torch {m.torch}){stale}",
                  f"--price-on {m.device}: measured with {figure.packing}{'; ' + packed if packed else ''}{alone}; "
                  f"{figure.how}; raw: {', '.join(m.raw)}; {m.stale_when}")
