"""Every pruner against a brute-force computation (Python loops and a sort) on small networks."""
import pytest
import torch
from torch import nn
from torchvision.models import VisionTransformer

from trainables.models import MODELS
from trainables.pruning import PRUNERS, density, full_masks, prunable, prune

RATE = 0.3


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU(), nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))


def convnet() -> nn.Module:
    """conv → depthwise conv → flatten → Linear: LAP's per-channel, grouped and flatten cases."""
    torch.manual_seed(1)
    return nn.Sequential(nn.Conv2d(2, 3, 2), nn.ReLU(), nn.Conv2d(3, 3, 1, groups=3), nn.ReLU(), nn.Flatten(),
                         nn.Linear(12, 2))


def data(in_features: tuple[int, ...]):
    g = torch.Generator().manual_seed(2)
    batches = [(torch.randn(6, *in_features, generator=g), torch.randint(0, 2, (6,), generator=g)) for _ in range(3)]
    return lambda: iter(batches)


def weights(model: nn.Module) -> list[list[float]]:
    return [p.detach().flatten().tolist() for p in prunable(model).values()]


# --- brute-force scores: one flat list per layer ---------------------------------------------------------------

def brute_magnitude(model, batches):
    return [[abs(w) for w in layer] for layer in weights(model)]


def brute_gradient(model, batches):
    params = list(prunable(model).values())
    total = [[0.0] * p.numel() for p in params]
    model.train()
    for x, y in batches():
        grads = torch.autograd.grad(nn.functional.cross_entropy(model(x), y), params)
        for acc, g in zip(total, grads):
            for i, v in enumerate(g.flatten().tolist()):
                acc[i] += v
    return [[abs(w * g) for w, g in zip(layer, acc)] for layer, acc in zip(weights(model), total)]


def brute_lamp(model, batches):
    out = []
    for layer in weights(model):
        sq = [w * w for w in layer]
        order = sorted(range(len(sq)), key=lambda i: (sq[i], i))
        score = [0.0] * len(sq)
        for rank, i in enumerate(order):
            tail = sum(sq[j] for j in order[rank:])
            score[i] = sq[i] / tail if tail > 0 else 0.0
        out.append(score)
    return out


def brute_lap_mlp(model, batches):
    ws = [p.detach().tolist() for p in prunable(model).values()]  # each [out][in]
    out = []
    for i, w in enumerate(ws):
        score = []
        for j in range(len(w)):
            for k in range(len(w[0])):
                s = w[j][k] ** 2
                if i > 0:
                    s *= sum(v * v for v in ws[i - 1][k])
                if i + 1 < len(ws):
                    s *= sum(ws[i + 1][o][j] ** 2 for o in range(len(ws[i + 1])))
                score.append(s)
        out.append(score)
    return out


def brute_random(model, batches):
    alive = sum(p.numel() for p in prunable(model).values())  # the tests prune from full masks
    g = torch.Generator().manual_seed(alive)
    return [torch.rand(p.shape, generator=g, dtype=torch.float64).flatten().tolist()
            for p in prunable(model).values()]


def drop_global(scores, rate):
    """Keep-flags per layer after removing round(rate · n) lowest scores over all layers (ties: position)."""
    flat = [(s, layer, i) for layer, ss in enumerate(scores) for i, s in enumerate(ss)]
    order = sorted(range(len(flat)), key=lambda n: (flat[n][0], n))
    keep = [[True] * len(ss) for ss in scores]
    for n in order[:round(rate * len(flat))]:
        keep[flat[n][1]][flat[n][2]] = False
    return keep


def drop_layer(scores, rate):
    return [drop_global([ss], rate)[0] for ss in scores]


def drop_rows(model, scores, rate):
    """Whole rows (output channels) by summed score, per layer; the output layer keeps all."""
    shapes = [p.shape for p in prunable(model).values()]
    keep = []
    for n, (ss, shape) in enumerate(zip(scores, shapes)):
        row = len(ss) // shape[0]
        if n == len(shapes) - 1:
            keep.append([True] * len(ss))
            continue
        sums = [sum(ss[r * row:(r + 1) * row]) for r in range(shape[0])]
        dropped = sorted(range(shape[0]), key=lambda r: (sums[r], r))[:round(rate * shape[0])]
        keep.append([i // row not in dropped for i in range(len(ss))])
    return keep


BRUTE = {
    "global_magnitude": lambda m, b: drop_global(brute_magnitude(m, b), RATE),
    "layer_magnitude": lambda m, b: drop_layer(brute_magnitude(m, b), RATE),
    "global_gradient": lambda m, b: drop_global(brute_gradient(m, b), RATE),
    "lamp": lambda m, b: drop_global(brute_lamp(m, b), RATE),
    "lap": lambda m, b: drop_global(brute_lap_mlp(m, b), RATE),
    "imp": lambda m, b: drop_global(brute_magnitude(m, b), RATE),
    "l1_structured": lambda m, b: drop_rows(m, brute_magnitude(m, b), RATE),
    "random": lambda m, b: drop_global(brute_random(m, b), RATE),
}


def test_every_pruner_has_a_brute_force_check():
    assert set(BRUTE) == set(PRUNERS)


@pytest.mark.parametrize("method", sorted(BRUTE))
def test_matches_brute_force(method):
    model, batches = mlp(), data((4,))
    expected = BRUTE[method](model, batches)
    masks = prune(model, full_masks(model), RATE, method, batches)
    assert [m.flatten().tolist() for m in masks.values()] == expected
    for p, m in zip(prunable(model).values(), masks.values()):
        assert torch.all(p[~m] == 0)


def test_lap_conv_depthwise_and_flatten():
    model = convnet()
    w0, w1, w2 = (p.detach().double() for p in prunable(model).values())  # (3,2,2,2), (3,1,1,1), (2,12)
    s0 = [w0[j, k, h, v] ** 2 * w1[j, 0, 0, 0] ** 2  # depthwise: channel j feeds only output j
          for j in range(3) for k in range(2) for h in range(2) for v in range(2)]
    s1 = [w1[j, 0, 0, 0] ** 2 * (w0[j] ** 2).sum() * sum(w2[o, 4 * j + s] ** 2 for o in range(2) for s in range(4))
          for j in range(3)]  # flatten: channel j is Linear inputs 4j .. 4j+3
    s2 = [w2[o, i] ** 2 * w1[i // 4, 0, 0, 0] ** 2 for o in range(2) for i in range(12)]
    expected = drop_global([[float(v) for v in s] for s in (s0, s1, s2)], RATE)
    masks = prune(model, full_masks(model), RATE, "lap", data((2, 3, 3)))
    assert [m.flatten().tolist() for m in masks.values()] == expected


def test_structured_zeroes_whole_channels():
    model = MODELS["resnet20"]((3, 32, 32), 10)
    masks = full_masks(model)
    for cycle in range(2):
        before = {n: int(m.flatten(1).any(1).sum()) for n, m in masks.items()}
        masks = prune(model, masks, 0.2, "l1_structured", data((3, 32, 32)))
        for n, m in list(masks.items())[:-1]:
            rows = m.flatten(1)
            assert torch.all(rows.all(1) | ~rows.any(1)), "a channel is either whole or gone"
            assert int(rows.any(1).sum()) == before[n] - round(0.2 * before[n])
        assert masks["head.2.weight"].all()
    assert 0 < density(masks) < 100


def test_twice_removes_rate_of_the_remaining():
    model = mlp()
    total = sum(p.numel() for p in prunable(model).values())  # 12 + 15 + 10 = 37
    masks = prune(model, full_masks(model), 0.2, "global_magnitude", data((4,)))
    first = total - round(0.2 * total)
    assert sum(int(m.sum()) for m in masks.values()) == first
    masks = prune(model, masks, 0.2, "global_magnitude", data((4,)))
    second = first - round(0.2 * first)
    assert sum(int(m.sum()) for m in masks.values()) == second
    assert density(masks) == 100.0 * second / total


@pytest.mark.parametrize("method", sorted(PRUNERS))
def test_biases_and_batchnorm_untouched(method):
    model = mlp()
    before = {n: p.detach().clone() for n, p in model.named_parameters() if n not in prunable(model)}
    prune(model, full_masks(model), RATE, method, data((4,)))
    for n, p in model.named_parameters():
        if n in before:
            assert torch.equal(p, before[n]), n


def test_random_is_deterministic_given_the_masks():
    a, b = mlp(), mlp()
    with torch.no_grad():
        for p in prunable(b).values():
            p.mul_(-3.0)  # other weights, same masks: the same draw
    ma = prune(a, full_masks(a), RATE, "random", data((4,)))
    mb = prune(b, full_masks(b), RATE, "random", data((4,)))
    assert all(torch.equal(ma[n], mb[n]) for n in ma)
    again = prune(a, ma, RATE, "random", data((4,)))
    assert not all(torch.equal(again[n], ma[n]) for n in ma)


def tiny_vit() -> nn.Module:
    torch.manual_seed(3)
    return VisionTransformer(image_size=32, patch_size=16, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16,
                             num_classes=3)


def test_attention_projection_is_prunable():
    names = list(prunable(tiny_vit()))
    assert "encoder.layers.encoder_layer_0.self_attention.in_proj_weight" in names


@pytest.mark.parametrize("method", sorted(PRUNERS))
@pytest.mark.parametrize("name", ["resnet20", "densenet40", "mobilenetv2", "alexnet", "tiny_vit"])
def test_every_pruner_runs_on_real_networks(method, name):
    model = tiny_vit() if name == "tiny_vit" else MODELS[name]((3, 32, 32), 10)
    masks = prune(model, full_masks(model), 0.2, method, data((3, 32, 32)))
    assert 75 < density(masks) < 85  # structured: the output layer and rounding keep a little more
    x = torch.randn(2, 3, 32, 32)
    assert torch.isfinite(model.eval()(x)).all()


@pytest.mark.parametrize("method", ["global_magnitude", "layer_magnitude", "l1_structured"])
def test_ties_go_by_position(method):
    model = mlp()
    with torch.no_grad():
        for p in prunable(model).values():
            p.copy_((p * 4).round() / 4)  # few distinct values: many ties
    expected = BRUTE[method](model, data((4,)))
    masks = prune(model, full_masks(model), RATE, method, data((4,)))
    assert [m.flatten().tolist() for m in masks.values()] == expected
