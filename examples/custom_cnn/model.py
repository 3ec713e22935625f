"""A small CNN, used by import path: `--model examples.custom_cnn.model:small_cnn`.

A model builder takes the dataset's input shape (channels, height, width) and its number of classes. Hidden
nonlinearities are `nn.ReLU` modules, so the §3.1 activation statistics can hook them; every Conv and Linear
weight is pruned.
"""
from __future__ import annotations

from torch import nn


def small_cnn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    channels = input_shape[0]
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
        nn.Flatten(), nn.Linear(32 * 4, num_classes))
