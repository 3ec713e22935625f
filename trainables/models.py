"""Networks by name. A new model is one builder `(input_shape, num_classes) -> nn.Module` plus a registry entry.

Every hidden nonlinearity is an `nn.ReLU` module (not `F.relu`), so the §3.1 activation statistics can hook it.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn



def mlp(input_shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...] = (256, 256, 256)) -> nn.Module:
    """The paper's §3.1 MLP: three hidden layers of 256 with ReLU."""
    layers: list[nn.Module] = [nn.Flatten()]
    width = math.prod(input_shape)
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


class BasicBlock(nn.Module):
    """ResNet basic block; a 1x1 projection shortcut when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu1(self.bn1(self.conv1(x)))
        return self.relu2(self.bn2(self.conv2(out)) + self.shortcut(x))


class CifarResNet(nn.Module):
    """He et al. 2016's CIFAR ResNet (6n+2 layers, widths 16/32/64)."""

    def __init__(self, depth: int, num_classes: int, in_channels: int = 3):
        super().__init__()
        n = (depth - 2) // 6
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        blocks, cin = [], 16
        for i, width in enumerate((16, 32, 64)):
            for j in range(n):
                blocks.append(BasicBlock(cin, width, 2 if (i > 0 and j == 0) else 1))
                cin = width
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


def resnet20(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return CifarResNet(20, num_classes, in_channels=input_shape[0])


VGG19_LAYOUT = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512)


def vgg19_bn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """CIFAR VGG-19 with BatchNorm (OpenLTH/Frankle layout: global average pool, one linear head)."""
    layers: list[nn.Module] = []
    cin = input_shape[0]
    for v in VGG19_LAYOUT:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(cin, int(v), 3, padding=1, bias=False), nn.BatchNorm2d(int(v)), nn.ReLU()]
            cin = int(v)
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    return nn.Sequential(*layers)


class DenseLayer(nn.Module):
    """BN-ReLU-3x3 conv producing `growth` new channels, concatenated onto the input."""

    def __init__(self, cin: int, growth: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(cin)
        self.relu = nn.ReLU()
        self.conv = nn.Conv2d(cin, growth, 3, 1, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.conv(self.relu(self.bn(x)))], 1)


def densenet40(input_shape: tuple[int, ...], num_classes: int, growth: int = 12) -> nn.Module:
    """Huang et al. 2017's DenseNet-40 for CIFAR: 3 dense blocks of 12 layers, k=12, no bottleneck or compression."""
    layers: list[nn.Module] = [nn.Conv2d(input_shape[0], 16, 3, 1, 1, bias=False)]
    width = 16
    for block in range(3):
        for _ in range(12):
            layers.append(DenseLayer(width, growth))
            width += growth
        if block < 2:
            layers += [nn.BatchNorm2d(width), nn.ReLU(), nn.Conv2d(width, width, 1, bias=False), nn.AvgPool2d(2)]
    layers += [nn.BatchNorm2d(width), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, num_classes)]
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand, 3x3 depthwise, 1x1 linear projection; identity skip when shapes allow."""

    def __init__(self, cin: int, cout: int, expansion: int, stride: int):
        super().__init__()
        hidden = cin * expansion
        self.block = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden), nn.ReLU(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return x + out if self.residual else out


# (expansion, out channels, repeats, stride); CIFAR variant: stride 1 in the stem and the second stage.
MOBILENETV2_LAYOUT = ((1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                      (6, 320, 1, 1))


def mobilenetv2(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Sandler et al. 2018's MobileNetV2 (width 1.0) for 32x32 inputs; ReLU instead of ReLU6 (hookable, §3.1)."""
    layers: list[nn.Module] = [nn.Conv2d(input_shape[0], 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU()]
    cin = 32
    for expansion, cout, repeats, stride in MOBILENETV2_LAYOUT:
        for i in range(repeats):
            layers.append(InvertedResidual(cin, cout, expansion, stride if i == 0 else 1))
            cin = cout
    layers += [nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU(),
               nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, num_classes)]
    return nn.Sequential(*layers)


def alexnet(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The common CIFAR AlexNet: AlexNet's five convs (64-192-384-256-256), no BatchNorm, one linear head.

    The paper names AlexNet without a layout (Appendix Table 8 only says: no BatchNorm); this is the widely used
    32x32 adaptation (bearpaw/pytorch-classification), about 2.5M weights.
    """
    return nn.Sequential(
        nn.Conv2d(input_shape[0], 64, 11, 4, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, num_classes))


def resnet50(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """torchvision's ImageNet ResNet-50, randomly initialised (nothing is downloaded)."""
    from torchvision.models import resnet50 as tv_resnet50

    return tv_resnet50(weights=None, num_classes=num_classes)


def vit_b16(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """torchvision's ViT-B/16 at the input's own resolution (a multiple of 16), randomly initialised.

    Its MLP nonlinearity is GELU, so the §3.1 ReLU activation statistics see nothing in it.
    """
    from torchvision.models import vit_b_16

    return vit_b_16(weights=None, image_size=input_shape[-1], num_classes=num_classes)


ModelBuilder = Callable[[tuple[int, ...], int], nn.Module]

MODELS: dict[str, ModelBuilder] = {
    "mlp": mlp,
    "resnet20": resnet20,
    "vgg19_bn": vgg19_bn,
    "densenet40": densenet40,
    "mobilenetv2": mobilenetv2,
    "alexnet": alexnet,
    "resnet50": resnet50,
    "vit_b16": vit_b16,
}
