"""Eager vs torch.compile(model) for the default's training step and evaluation, one thread, CPU time (a one-off check:
python benchmarks/results/speed-2026-11-28/compile_step.py [auto|fp32]; the first compiled pass includes compiling)."""
import dataclasses, time, sys
import torch
from trainables.presets import PRESETS
from trainables.cycle import train_step, make_optimizer, accuracy, resolve_device
from trainables.plugins import build_model, load_data
from trainables.pruning import MaskedWeights, full_masks
from trainables.precision import resolve_precision

torch.set_num_threads(1)
prec = sys.argv[1] if len(sys.argv) > 1 else "auto"
spec = PRESETS["mnist1d-mlp"].spec
device = resolve_device("cpu")
spec = dataclasses.replace(spec, precision=resolve_precision(prec, device))
data = load_data(spec).to(device)
print("precision", spec.precision, "train", data.size("train"), "val", data.size("val"))

def bench(compiled: bool, steps=300):
    torch.manual_seed(0)
    model = build_model(spec.model, data.input_shape, data.num_classes)
    fwd = torch.compile(model) if compiled else model
    opt = make_optimizer(spec.optimizer, model.parameters(), 0.1)
    masked = MaskedWeights(model, full_masks(model))
    g = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    batches = list(data.batches("train", spec.batch_size, g))
    for x, y in batches[:5]:
        train_step(fwd, opt, masked, x, y, spec, device)
    warm = time.perf_counter() - t0
    t = time.thread_time(); n = 0
    while n < steps:
        for x, y in batches:
            train_step(fwd, opt, masked, x, y, spec, device); n += 1
            if n == steps: break
    step = (time.thread_time() - t) / steps
    accuracy(fwd, data, "val", spec, device)
    t = time.thread_time()
    for _ in range(3):
        accuracy(fwd, data, "val", spec, device)
    ev = (time.thread_time() - t) / 3
    return warm, step, ev

for compiled in (False, True, False, True):
    warm, step, ev = bench(compiled)
    print(f"compiled={compiled}: warm-up {warm:.1f} s, step {step*1e3:.3f} ms, eval {ev*1e3:.1f} ms, "
          f"epoch {55*step+ev:.3f} s")
