"""The paper's six setups (Appendix Tables 13-18, the landscape tables "Experimental Results for More Values of λ").

The tables give iterations; specs take epochs and fractions of a cycle, so each recipe is converted here:
epochs = iterations · batch / training images, warmup end and drops = their iteration / total iterations. SILO's
(ε, δ) come from the table's SILO row, with q = 1 and β = 5 (paper §5). Every preset runs 13 pruning cycles at
p = 0.2 (λ down to 5.5 %, the tables' last column is labelled 5.72) and searches max_lr on a log grid over the
paper's range 1e-4 .. 1e-1 (§5 (3)). `data_dir` is left to `--data-dir`.
"""
from __future__ import annotations

from trainables.schedules import ScheduleSpec, SiloParams
from trainables.shapes import SHAPES
from trainables.spec import ExperimentSpec, OptimizerSpec, Preset

CIFAR_TRAIN = SHAPES["cifar10"].splits(0.1)["train"]  # 45,000: CIFAR's 50,000 less a 10 % validation split
IMAGENET_TRAIN = SHAPES["imagenet"].splits(0.01)["train"]  # 1,268,355: ImageNet-1k's 1,281,167 less 1 %
GRID = tuple(float(f"{10 ** (-4 + 3 * i / 7):.3g}") for i in range(8))  # 1e-4 .. 1e-1, 8 log-spaced values


def recipe(preset: str, model: str, dataset: str, pruner: str, *, iters: int, batch: int, train_images: int,
           warmup: float, drops: tuple[float, ...], epsilon: float, delta: float, val_fraction: float,
           **extra) -> ExperimentSpec:
    """A spec from a table's iteration counts (warmup and drops in iterations, as the tables give them)."""
    return ExperimentSpec(
        preset=preset, model=model, dataset=dataset, pruner=pruner, rate=0.2, cycles=13,
        epochs=round(iters * batch / train_images), batch_size=batch, val_fraction=val_fraction,
        schedule=ScheduleSpec("warmup", warmup=warmup / iters, drops=tuple(d / iters for d in drops),
                              silo=SiloParams(epsilon, delta, 1, 5.0)),
        grid=GRID, **extra)


def cifar(preset: str, model: str, dataset: str, pruner: str, batch: int = 128, **kw) -> ExperimentSpec:
    return recipe(preset, model, dataset, pruner, batch=batch, train_images=CIFAR_TRAIN, val_fraction=0.1, **kw)


PAPER_PRESETS: dict[str, Preset] = {
    "resnet20-cifar10": Preset(
        # LR-warmup (3e-2, 20K, 20K, 25K): the table's first drop coincides with the end of warmup.
        cifar("resnet20-cifar10", "resnet20", "cifar10", "global_magnitude", iters=63_000,
              warmup=20_000, drops=(20_000, 25_000), epsilon=3e-2, delta=4e-2),
        "paper Table 13 (Appendix): ResNet-20 / CIFAR-10, global magnitude; 63K iters, batch 128, SGD"),
    "vgg19-cifar10": Preset(
        cifar("vgg19-cifar10", "vgg19_bn", "cifar10", "global_gradient", iters=63_000,
              warmup=10_000, drops=(32_000, 48_000), epsilon=4e-2, delta=6e-2),
        "paper Table 14 (Appendix): VGG-19 / CIFAR-10, global gradient; 63K iters, batch 128, SGD"),
    "densenet40-cifar100": Preset(
        cifar("densenet40-cifar100", "densenet40", "cifar100", "lamp", iters=117_000,
              warmup=58_000, drops=(58_000, 92_000), epsilon=7e-2, delta=5e-2),
        "paper Table 15 (Appendix): DenseNet-40 / CIFAR-100, LAMP; 117K iters, batch 128, SGD"),
    "mobilenetv2-cifar100": Preset(
        # The SILO row's last drop reads 92K, past the 78K iterations; the LR-warmup row's 62K is used.
        # The paper names no LAP mode: `lap` is the reference's default (the same rate in every layer), and on
        # this BatchNorm network it carries the BatchNorm factors, as the reference runs its BN networks (lap_bn).
        cifar("mobilenetv2-cifar100", "mobilenetv2", "cifar100", "lap", iters=78_000,
              warmup=23_000, drops=(23_000, 46_000, 62_000), epsilon=5e-2, delta=5e-2),
        "paper Table 16 (Appendix): MobileNetV2 / CIFAR-100, LAP per layer with BatchNorm factors (the reference's "
        "lap_bn; the paper names no mode); 78K iters, batch 128, SGD"),
    "resnet50-imagenet": Preset(
        recipe("resnet50-imagenet", "resnet50", "imagenet", "imp", iters=70_000, batch=128,
               train_images=IMAGENET_TRAIN, val_fraction=0.01, warmup=4_000, drops=(23_000, 46_000, 62_000),
               epsilon=5e-2, delta=5e-2, weights="rewind", rewind_epoch=6),
        "paper Table 17 (Appendix): ResNet-50 / ImageNet, IMP rewinding to epoch 6; 70K iters, batch 128, SGD"),
    "vit-b16-cifar10": Preset(
        cifar("vit-b16-cifar10", "vit_b16", "cifar10", "imp", iters=2_000, batch=1024, warmup=300,
              drops=(500, 900, 1_300), epsilon=1e-4, delta=3e-4, weights="rewind", rewind_epoch=6,
              optimizer=OptimizerSpec("adam")),
        "paper Table 18 (Appendix): ViT-B/16 / CIFAR-10, IMP rewinding to epoch 6; 2K iters, batch 1024, Adam "
        "(trained from scratch at 32 px: no pretrained weights)"),
}
