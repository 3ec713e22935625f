"""Which arithmetic a device runs natively, and the autocast context and gradient scaler for it.

`auto` resolves to what the device computes fast, because emulated bf16 is no bargain: on a CPU without
avx512_bf16 or AMX, bf16 autocast made the §3.1 MLP's training 8.1x slower than float32 (docs/design.md). The
pipeline resolves `auto` once per experiment on a worker with a trial's resources (`cluster.probe_precision`) and
records the answer in the spec, so every row of a run says which arithmetic made it."""
from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
NATIVE_BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
# Tests (and a user who knows better) name the CPU flags instead of /proc/cpuinfo: e.g. "avx2" or "avx512_bf16".
CPU_FLAGS_ENV = "ORACLE_SEARCH_CPU_FLAGS"


def native_precision(device_type: str, *, cuda_capability: tuple[int, int] | None = None,
                     cpu_flags: frozenset[str] = frozenset()) -> str:
    """The rule: bf16 on CUDA capability >= 8.0, fp16 (with a gradient scaler) on older CUDA GPUs, bf16 on CPUs
    with avx512_bf16 or amx_bf16, fp32 everywhere else."""
    if device_type == "cuda":
        return "bf16" if cuda_capability is not None and cuda_capability >= (8, 0) else "fp16"
    if device_type == "cpu" and cpu_flags & NATIVE_BF16_CPU_FLAGS:
        return "bf16"
    return "fp32"


@functools.cache
def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags (Linux's /proc/cpuinfo, or $ORACLE_SEARCH_CPU_FLAGS); empty when unknown."""
    override = os.environ.get(CPU_FLAGS_ENV)
    if override is not None:
        return frozenset(override.replace(",", " ").split())
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def resolve_precision(requested: str, device: torch.device) -> str:
    """`requested` itself, or for `auto` the device's native precision."""
    if requested != "auto":
        return requested
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    return native_precision(device.type, cuda_capability=capability, cpu_flags=cpu_flags())


def autocast(device: torch.device, precision: str):
    """Autocast of the forward pass in `precision`; weights, their updates and the loss stay float32."""
    if precision not in DTYPES:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[precision])


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler | None:
    """fp16's gradient scaler (small gradients underflow in fp16); None for the other precisions."""
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None
