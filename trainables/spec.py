"""The experiment spec: one typed, frozen description of a run, validated once on construction."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from trainables.errors import SpecError  # noqa: F401  (re-exported: the spec's error)
from trainables.fields import flag
from trainables.grids import parse_grid
from trainables.schedules import SCHEDULE_NAMES, ScheduleSpec, SiloParams
from trainables.sources import spec_sources

OPTIMIZERS = ("sgd", "adam", "rmsprop")
WEIGHT_POLICIES = ("continue", "rewind", "reinit")
DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("auto", "bf16", "fp16", "fp32")  # resolved by trainables.precision


# Bumped whenever a spec field starts to mean different arithmetic. A run's ledger records it (ledger.Ledger) and
# a study's name holds it (fitter.fingerprint), so no resumed run reuses a training made under the old meaning.
# 2: `amp` autocasts on CPU too (before, on CUDA only).
NUMERICS = 2

# The fields that name a run or say where it runs, not what it computes: no fingerprint holds them, and a resumed
# run may change them. Every other field is science.
NOT_SCIENCE = ("preset", "resources", "device", "data_dir")

# Science fields added after runs were recorded, with the value every earlier run had: at that value a field is
# left out of the science, so earlier runs' fingerprints, study names and resumes stay as they were.
LATER_FIELDS = {"loss": "cross_entropy", "data_seed": 42}
# The import-path fields a chained checkpoint must agree on (the network, the data, the pruning; not the loss,
# which the training fingerprint holds).
CHAIN_KINDS = ("model", "dataset", "pruner")


@dataclass(frozen=True)
class OptimizerSpec:
    name: str = flag("sgd", "optimizer", "sgd | adam | rmsprop", dest="optimizer")
    momentum: float = 0.9  # SGD momentum; RMSProp's too
    weight_decay: float = 1e-4


KEEP_CHECKPOINTS = ("chain", "all")  # Resources.keep_checkpoints


@dataclass(frozen=True)
class Resources:
    """Where and how wide trials run; never part of the science fingerprint."""

    cpus_per_trial: float = flag(1.0, "cpus-per-trial", "CPUs per trial (fractions allowed)")
    gpus_per_trial: float = flag(0.0, "gpus-per-trial", "GPUs per trial (fractions pack trials onto one GPU)")
    max_concurrent: int = flag(0, "max-concurrent", "most trials at once (0: as many as fit)")
    storage_path: str | None = flag(None, "storage-path", "Tune storage: a shared folder or cloud URI (default: "
                                    "$ORACLE_SEARCH_STORAGE, else under --out)")
    # CUDA trials: let cuDNN time its convolution algorithms once per shape (shapes are fixed within a trial). Off
    # until a GPU has measured it faster; it may pick other algorithms, equal within float tolerance, not bitwise.
    cudnn_benchmark: bool = flag(False, "cudnn-benchmark", "CUDA trials: let cuDNN time its convolution algorithms "
                                 "per shape (off by default until a GPU has measured it faster; results equal within "
                                 "float tolerance, not bitwise)")
    # Fused CUDA trials: replay each training step from a CUDA graph (trainables.fused.GraphedStep). None (the
    # default): wherever the graphed step supports the trial (`fused.graphs_apply`: CUDA, fused SGD, natively fused
    # layers), measured never slower on an H100 and equal to the eager step within float tolerance; True: asked
    # for, refused where it cannot apply; False: never.
    cuda_graphs: bool | None = flag(None, "cuda-graphs", "fused CUDA trials: replay each training step from a CUDA "
                                    "graph, one launch instead of ~1,000 (default: on wherever it applies, CUDA "
                                    "trials fused with sgd, off without a word elsewhere; --cuda-graphs asks for it "
                                    "(refused off CUDA and with adam; rmsprop graphs only when asked), "
                                    "--no-cuda-graphs opts out; 1.03-4.8x faster on an H100, results equal within "
                                    "float tolerance)")
    # Checkpoints: "chain" deletes each once no chain, resume or completion can start from it
    # (oracle_search.retention); "all" keeps every one.
    keep_checkpoints: str = flag("chain", "keep-checkpoints", "chain (default): delete each checkpoint once no "
                                 "chain, resume or completion can start from it, keeping the Oracle's chosen chain "
                                 "and each final run's last cycle; all: keep every one (VGG-19: about 100 MB each)",
                                 choices=KEEP_CHECKPOINTS)

    @property
    def threads(self) -> int:
        return trial_threads(self.cpus_per_trial)


def trial_threads(cpus: float) -> int:
    """Torch threads for a trial holding `cpus` CPUs: its whole CPUs (a fractional share still runs one thread)."""
    return max(1, int(cpus))


@dataclass(frozen=True)
class ExperimentSpec:
    preset: str = "custom"
    model: str = flag("mlp", "model", "network: a registry name (see `presets`) or package.module:builder, a "
                      "callable (input_shape, num_classes) -> nn.Module")
    dataset: str = flag("mnist1d", "dataset", "mnist1d | digits | synthetic | cifar10 | cifar100 | imagenet, or "
                        "package.module:loader, a callable (spec) -> trainables.data.TensorData (tensors in memory) "
                        "or trainables.data.DatasetSplits (torch Datasets, streamed by a DataLoader) with its own "
                        "train/val/test split")
    data_dir: str | None = flag(None, "data-dir", "folder holding the dataset (CIFAR in torchvision's format); also "
                                "the MNIST-1D cache")
    pruner: str = flag("global_magnitude", "pruner", "pruning method, e.g. global_magnitude, or "
                       "package.module:score, a callable (model, masks, batches) -> scores (global selection) or a "
                       "trainables.pruning.Pruner")
    # or package.module:fn, (logits, targets) -> scalar tensor (trainables.plugins)
    loss: str = flag("cross_entropy", "loss", "training loss: cross_entropy (default), or package.module:fn, a "
                     "callable (logits, targets) -> scalar tensor (validation and test accuracy stay top-1)")
    rate: float = flag(0.2, "rate", "fraction of the remaining weights pruned per cycle (0, 1)")
    # False: the output layer keeps all its weights (OpenLTH's CIFAR setting)
    prune_output: bool = flag(True, "keep-output-dense", "never prune the output layer (OpenLTH's setting for its "
                              "CIFAR models)")
    cycles: int = flag(5, "cycles", "pruning cycles L after the dense one")
    epochs: int = flag(20, "epochs", "training epochs per cycle")
    batch_size: int = flag(128, "batch-size", "training batch size")
    optimizer: OptimizerSpec = OptimizerSpec()
    schedule: ScheduleSpec = ScheduleSpec()
    # after pruning: continue | rewind (to epoch rewind_epoch of cycle 0) | reinit
    weights: str = flag("continue", "weights", "after pruning: continue | rewind | reinit")
    rewind_epoch: int = flag(0, "rewind-epoch", "epoch of cycle 0 that --weights rewind returns to")
    val_fraction: float = 0.15
    test_fraction: float = 0.15  # for datasets without their own test split
    # 0: the dataset's own size (MNIST-1D: how many to generate)
    num_samples: int = flag(0, "num-samples", "dataset size (MNIST-1D: samples generated; others: training pool)")
    split_seed: int = 0  # fixes the train/val/test split for every trial
    # the generation seed of a generated dataset (MNIST-1D, synthetic); a loader that generates nothing ignores it
    data_seed: int = 42
    # The base seed: the first tuning seed (--tuning-seeds S uses seed .. seed+S-1), replicate r's + 10000 (r - 1).
    seed: int = flag(0, "base-seed", "the base seed: the first tuning seed (the evaluation seeds follow the tuning "
                     "seeds; replicate r's base seed is this + 10000 (r - 1)); `cycle`: the seed of its training",
                     aliases=("seed",))
    device: str = flag("auto", "device", "auto | cpu | cuda")
    # auto | bf16 | fp16 | fp32 (trainables.precision; a run records what auto became)
    precision: str = flag("auto", "precision", "arithmetic of the forward pass (default auto: what the trials' "
                          "device runs natively: bf16 on CUDA capability >= 8.0 and on CPUs with avx512_bf16 or AMX, "
                          "fp16 with a gradient scaler on older GPUs, fp32 elsewhere; a resumed run keeps its "
                          "recorded precision)", choices=PRECISIONS)
    channels_last: bool = True  # image models on CUDA only
    compile: bool = False  # torch.compile the model (CUDA)
    score_batches: int = 8  # batches whose gradients the gradient pruners accumulate
    grid: tuple[float, ...] = flag((0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64), "grid", "max_lr values: 0.01,0.02, "
                                   "log:LO:HI:N or lin:LO:HI:STEP (default: the preset's grid)", type=parse_grid)
    resources: Resources = field(default_factory=Resources)

    def __post_init__(self) -> None:
        validate(self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ExperimentSpec":
        d = upgrade_amp(dict(d))
        sched = dict(d.pop("schedule", {}))
        sched["silo"] = SiloParams(**sched.get("silo", {}))
        if "drops" in sched:
            sched["drops"] = tuple(sched["drops"])
        return cls(
            **{k: v for k, v in d.items() if k not in ("optimizer", "resources", "grid")},
            optimizer=OptimizerSpec(**d.get("optimizer", {})),
            resources=Resources(**d.get("resources", {})),
            schedule=ScheduleSpec(**sched),
            grid=tuple(d.get("grid", ExperimentSpec.grid)),
        )

    def chain_fingerprint(self) -> str:
        """What a chained checkpoint must agree on: the network, the data and the pruning (for an import path,
        also its module file's hash)."""
        keys = ("model", "dataset", "pruner", "rate", "prune_output", "weights", "rewind_epoch", "val_fraction",
                "test_fraction", "num_samples", "split_seed", "data_seed")
        # a later field at its earlier value stays out, so checkpoints made before it still chain
        fields = {k: getattr(self, k) for k in keys if LATER_FIELDS.get(k, object()) != getattr(self, k)}
        blob = json.dumps(fields | self._source_hashes(CHAIN_KINDS), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def science(self) -> dict[str, Any]:
        """Every field that changes what is computed (all but NOT_SCIENCE), with the import paths' file hashes."""
        d = self.to_dict()
        for name in NOT_SCIENCE:
            d.pop(name)
        for name, before in LATER_FIELDS.items():
            if d[name] == before:
                d.pop(name)
        return d | self._source_hashes()

    def training_fingerprint(self) -> str:
        """What two trainings of the same (cycle, seed, start, peak) must agree on to be identical: the science
        but the Oracle's grid, with the schedule as trained (SILO trains LR warmup at a peak its curve gives, so a
        SILO cycle at peak x is the LR-warmup cycle at x)."""
        d = self.science()
        d.pop("grid")
        if d["schedule"]["name"] == "silo":
            d["schedule"]["name"] = "warmup"
        d["schedule"].pop("silo")
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    def _source_hashes(self, kinds: tuple[str, ...] | None = None) -> dict[str, str | None]:
        """The module file hash of each import-path field, or of those of `kinds` (none for registry names: their
        fingerprints stay)."""
        sources = spec_sources(self) if kinds is None else spec_sources(self, kinds)
        return {f"{kind}_sha256": source["sha256"] for kind, source in sources.items()}

    def with_schedule(self, **changes: Any) -> "ExperimentSpec":
        return dataclasses.replace(self, schedule=dataclasses.replace(self.schedule, **changes))


def upgrade_amp(d: dict[str, Any]) -> dict[str, Any]:
    """A spec (or experiment file) written before `precision`: amp = true meant bf16 autocast, false float32."""
    if "amp" in d:
        amp = d.pop("amp")
        if not isinstance(amp, bool):
            raise SpecError("amp", f"must be true or false, got {amp!r}")
        d.setdefault("precision", "bf16" if amp else "fp32")
    return d


@dataclass(frozen=True)
class Preset:
    """A named ExperimentSpec plus where its recipe comes from."""

    spec: ExperimentSpec
    source: str


def _positive(value: float, name: str) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise SpecError(name, f"must be a positive number, got {value!r}")


def _fraction(value: float, name: str, *, closed_low: bool = False) -> None:
    ok = isinstance(value, (int, float)) and (0 <= value < 1 if closed_low else 0 < value < 1)
    if not ok:
        raise SpecError(name, f"must lie in {'[0, 1)' if closed_low else '(0, 1)'}, got {value!r}")


def _choice(value: str, allowed: tuple[str, ...] | list[str], name: str) -> None:
    if value not in allowed:
        raise SpecError(name, f"unknown {value!r}; allowed: {', '.join(allowed)}")


def validate(s: ExperimentSpec) -> None:
    """Raise SpecError naming the first invalid field (the model, dataset, pruner and loss: `plugins.check_names`)."""
    _fraction(s.rate, "rate")
    if not isinstance(s.prune_output, bool):
        raise SpecError("prune-output", f"must be true or false, got {s.prune_output!r}")
    if not isinstance(s.cycles, int) or s.cycles < 0:
        raise SpecError("cycles", f"must be an integer >= 0, got {s.cycles!r}")
    for name in ("epochs", "batch_size", "score_batches"):
        value = getattr(s, name)
        if not isinstance(value, int) or value < 1:
            raise SpecError(name.replace("_", "-"), f"must be an integer >= 1, got {value!r}")
    _choice(s.optimizer.name, OPTIMIZERS, "optimizer")
    if not 0 <= s.optimizer.momentum < 1:
        raise SpecError("momentum", f"must lie in [0, 1), got {s.optimizer.momentum!r}")
    if s.optimizer.weight_decay < 0:
        raise SpecError("weight-decay", f"must be >= 0, got {s.optimizer.weight_decay!r}")
    _validate_schedule(s.schedule)
    _choice(s.weights, WEIGHT_POLICIES, "weights")
    if not isinstance(s.rewind_epoch, int) or not 0 <= s.rewind_epoch <= s.epochs:
        raise SpecError("rewind-epoch", f"must be an integer in [0, epochs={s.epochs}], got {s.rewind_epoch!r}")
    _fraction(s.val_fraction, "val-fraction")
    _fraction(s.test_fraction, "test-fraction")
    if s.val_fraction + s.test_fraction >= 1:
        raise SpecError("val-fraction", "val-fraction + test-fraction must be < 1")
    if not isinstance(s.num_samples, int) or s.num_samples < 0:
        raise SpecError("num-samples", f"must be an integer >= 0, got {s.num_samples!r}")
    _choice(s.device, DEVICES, "device")
    _choice(s.precision, PRECISIONS, "precision")
    if not s.grid:
        raise SpecError("grid", "must hold at least one max_lr")
    for lr in s.grid:
        _positive(lr, "grid")
    r = s.resources
    if not (r.cpus_per_trial > 0):
        raise SpecError("cpus-per-trial", f"must be > 0, got {r.cpus_per_trial!r}")
    if r.gpus_per_trial < 0:
        raise SpecError("gpus-per-trial", f"must be >= 0, got {r.gpus_per_trial!r}")
    if not isinstance(r.max_concurrent, int) or r.max_concurrent < 0:
        raise SpecError("max-concurrent", f"must be an integer >= 0, got {r.max_concurrent!r}")
    _choice(r.keep_checkpoints, KEEP_CHECKPOINTS, "keep-checkpoints")
    if r.cuda_graphs and s.device != "cuda":
        raise SpecError("cuda-graphs", f"captures CUDA work: needs --device cuda, got {s.device!r}")
    if r.cuda_graphs and s.optimizer.name == "adam":
        raise SpecError("cuda-graphs", "Adam's bias correction changes every step and a graph would freeze it; "
                        "use sgd or rmsprop, or train without --cuda-graphs")


def _validate_schedule(sc: ScheduleSpec) -> None:
    _choice(sc.name, SCHEDULE_NAMES, "schedule")
    _fraction(sc.warmup, "warmup", closed_low=True)
    for d in sc.drops:
        if not 0 < d <= 1:
            raise SpecError("drops", f"each drop must lie in (0, 1], got {d!r}")
    for name in ("decay_length", "cyclical_step", "cosine_length"):
        _positive(getattr(sc, name), name.replace("_", "-"))
    _fraction(sc.cyclical_low, "cyclical-low", closed_low=True)
    validate_silo(sc.silo)


def validate_silo(p: SiloParams) -> None:
    _positive(p.epsilon, "epsilon")
    if not (math.isfinite(p.delta) and p.delta >= 0):
        raise SpecError("delta", f"must be >= 0, got {p.delta!r}")
    if not isinstance(p.q, int) or p.q < 0:
        raise SpecError("q", f"must be an integer >= 0, got {p.q!r}")
    _positive(p.beta, "beta")
