"""One-off (2026-11-28): does fusing K max_lr candidates of the default's MLP (trainables.fused, HFTA's layout: one
baddbmm per layer) make a CPU training step cheaper per candidate? The default's §3.1 MLP (40-256-256-256-10),
batch 128, one thread, SGD with momentum as the preset has it; the separate step is run_cycle's `train_step`, the
fused one run_fused_cycle's. Median of 5 timings of 300 steps after 30 untimed.

Usage (repo root): python benchmarks/results/speed-2026-11-28/fused_mlp.py [auto|fp32]"""
import dataclasses
import itertools
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from trainables.cycle import make_optimizer, train_step  # noqa: E402
from trainables.fused import Fused, FusedOptimizer, step_function  # noqa: E402
from trainables.models import MODELS  # noqa: E402
from trainables.presets import PRESETS  # noqa: E402
from trainables.pruning import MaskedWeights, full_masks  # noqa: E402

torch.set_num_threads(1)
precision = sys.argv[1] if len(sys.argv) > 1 else "auto"
spec = dataclasses.replace(PRESETS["mnist1d-mlp"].spec, precision=precision)
cpu = torch.device("cpu")
model = MODELS[spec.model]((40,), 10)
g = torch.Generator().manual_seed(0)
batches = [(torch.randn(128, 40, generator=g), torch.randint(0, 10, (128,), generator=g)) for _ in range(8)]


def seconds_per_step(step, steps: int = 300, repeats: int = 5) -> float:
    cycle = itertools.cycle(batches)
    for x, y in itertools.islice(cycle, 30):
        step(x, y)
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        for x, y in itertools.islice(cycle, steps):
            step(x, y)
        timings.append((time.perf_counter() - start) / steps)
    return statistics.median(timings)


net = MODELS[spec.model]((40,), 10)
net.load_state_dict(model.state_dict())
masked = MaskedWeights(net, full_masks(net))
optimizer = make_optimizer(spec.optimizer, net.parameters(), 0.05)
net.train()
separate = seconds_per_step(lambda x, y: train_step(net, optimizer, masked, x, y, spec, cpu))
print(f"precision {precision}: separate step {separate * 1e3:.3f} ms")
for k in (1, 2, 4, 8, 16):
    fused = Fused.replicate(model, k)
    fused.train()
    masks = {n: m.to(cpu, fused.params[n].dtype) for n, m in full_masks(model).items()}
    step = step_function(fused, FusedOptimizer(spec.optimizer, fused.params), masks, spec, cpu)
    lr = torch.tensor([0.01 * (i + 1) for i in range(k)])
    per = seconds_per_step(lambda x, y: step(x, y, lr)) / k
    print(f"K={k}: {per * 1e3:.3f} ms per candidate, separate / fused per candidate {separate / per:.2f}")
