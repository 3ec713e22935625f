"""Every registered network runs forward and backward, with parameter counts near the published ones."""
import pytest
import torch
from torch import nn

from trainables.models import MODELS

# name: (input shape, classes, batch, reference parameter count, source of the reference)
CASES = {
    "mlp": ((40,), 10, 2, None, ""),
    "resnet20": ((3, 32, 32), 10, 2, 0.27e6, "He et al. 2016, Table 6"),
    "vgg19_bn": ((3, 32, 32), 10, 2, 20.0e6, "OpenLTH cifar_vgg_19"),
    "densenet40": ((3, 32, 32), 100, 2, 1.0e6, "Huang et al. 2017, Table 2; paper Table 15"),
    "mobilenetv2": ((3, 32, 32), 100, 2, 2.36e6, "paper Table 16"),
    "alexnet": ((3, 32, 32), 10, 2, 2.47e6, "bearpaw/pytorch-classification CIFAR AlexNet"),
    "resnet50": ((3, 64, 64), 1000, 1, 25.6e6, "torchvision; paper Table 17 (25.5M)"),
    "vit_b16": ((3, 32, 32), 10, 1, 86e6, "Dosovitskiy et al. 2021; paper Table 18"),
}
TOLERANCE = 0.10


def test_every_registered_model_is_covered():
    assert set(CASES) == set(MODELS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_backward_and_size(name):
    shape, classes, batch, reference, _ = CASES[name]
    torch.manual_seed(0)
    model = MODELS[name](shape, classes)
    out = model(torch.randn(batch, *shape))
    assert out.shape == (batch, classes)
    out.logsumexp(1).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    if reference is not None:
        count = sum(p.numel() for p in model.parameters())
        assert abs(count - reference) <= TOLERANCE * reference, f"{name}: {count} vs {reference}"


@pytest.mark.parametrize("name", ["resnet20", "vgg19_bn", "densenet40", "mobilenetv2", "alexnet", "resnet50"])
def test_relu_networks_use_relu_modules(name):
    """§3.1's activation statistics hook nn.ReLU modules; a ReLU network must have them."""
    shape, classes, *_ = CASES[name]
    assert any(isinstance(m, nn.ReLU) for m in MODELS[name](shape, classes).modules())
