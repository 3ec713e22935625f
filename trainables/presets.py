"""Named experiment specs. A preset is an ExperimentSpec plus where its recipe comes from."""
from __future__ import annotations

from trainables.paper_presets import PAPER_PRESETS
from trainables.schedules import ScheduleSpec, SiloParams
from trainables.spec import ExperimentSpec, Preset


# The embedded default. Weights rewind to their initial values after pruning (lottery-ticket style): with
# continued weights every max_lr lands within a few points, while with rewinding the best max_lr visibly moves
# up as the network is pruned (DESIGN.md, measured here). The grid doubles from 0.01 far enough to see that.
# p = 0.36 = 1 - 0.8^2 prunes two of the paper's p = 0.2 cycles at once, so six cycles reach the paper's
# densities 64, 40.9, 26.2, 16.8, 10.7, 6.9 % within a CPU demo's budget.
# 30,000 generated samples: 7,000 to train (as before), 20,000 to validate, 3,000 to test. With 1,500 validation
# samples, evaluation noise was 70 % of the variance of two seeds' accuracy difference (sd 1.11 points); with
# 20,000 that sd is 0.35 (benchmarks/eval_noise.py, README "Power"), for about a third more time per training.
MNIST1D_MLP = ExperimentSpec(
    preset="mnist1d-mlp", model="mlp", dataset="mnist1d", pruner="global_magnitude", rate=0.36, cycles=6,
    epochs=20, batch_size=128, weights="rewind", rewind_epoch=0,
    num_samples=30_000, val_fraction=0.666667, test_fraction=0.1,
    schedule=ScheduleSpec("warmup", warmup=0.1, drops=(0.6, 0.8), silo=SiloParams(0.1, 0.4, 1, 5.0)),
    grid=(0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28),
)

DIGITS_MLP = ExperimentSpec(
    preset="digits-mlp", model="mlp", dataset="digits", pruner="global_magnitude", rate=0.2, cycles=3,
    epochs=30, batch_size=128, weights="continue",
    schedule=ScheduleSpec("warmup", warmup=0.1, drops=(0.6, 0.8), silo=SiloParams(0.05, 0.1, 1, 5.0)),
    grid=(0.02, 0.05, 0.1, 0.2),
)

TINY = ExperimentSpec(
    preset="tiny", model="mlp", dataset="synthetic", pruner="global_magnitude", rate=0.2, cycles=2,
    epochs=4, batch_size=64, weights="continue",
    schedule=ScheduleSpec("warmup", warmup=0.1, drops=(0.6, 0.8), silo=SiloParams(0.05, 0.1, 1, 5.0)),
    grid=(0.03, 0.1, 0.3),
)

PRESETS: dict[str, Preset] = {
    "mnist1d-mlp": Preset(MNIST1D_MLP, "embedded default: MNIST-1D (Greydanus 2020), paper §3.1 MLP, LR warmup"),
    "digits-mlp": Preset(DIGITS_MLP, "embedded, fast: scikit-learn digits, paper §3.1 MLP (for tests; saturates)"),
    "tiny": Preset(TINY, "test preset: synthetic Gaussian clusters, 4 epochs"),
}
PRESETS.update(PAPER_PRESETS)  # the paper's six setups

DEFAULT_PRESET = "mnist1d-mlp"
