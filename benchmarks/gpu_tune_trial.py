"""One real Ray Tune trial on the GPU: `cycle_trainable` for one cycle of a small CIFAR-shaped synthetic setup
(ResNet-20 on a fake CIFAR-10 folder in torchvision's format) with `{"gpu": 1}`, then one fused trial of K
candidates likewise. Checks that Ray handed each trial a GPU (`ray.get_gpu_ids()` inside is non-empty) and
that the network trained on `cuda` (the rows' `device`). Exit 0 when both hold, 1 otherwise.

--cpu: the degraded check on a machine without CUDA: Ray advertises one fake GPU, so the trial still gets a
GPU id, and the rows must say `cpu` (trial_device falls back when CUDA is absent).
--smoke: the smallest --cpu run (K = 2, 10 images per file), to check that the script runs
(tests/test_benchmarks.py).
Usage (repo root): python benchmarks/gpu_tune_trial.py [--cpu] [--k 4] [--per-file 100] [--smoke]
"""
from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a bare checkout, nothing installed

from trainables.checkpoints import load_checkpoint  # noqa: E402
from trainables.spec import ExperimentSpec  # noqa: E402


def write_fake_cifar10(root: Path, per_batch: int = 100) -> None:
    """torchvision's on-disk CIFAR-10 layout (pickled dicts of uint8 rows), random images."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
                 b"labels": rng.integers(0, 10, per_batch).tolist()}
        (folder / name).write_bytes(pickle.dumps(batch))


def fail(message: str) -> None:
    print(f"FAILED: {message}")
    raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="no CUDA here: a fake Ray GPU, rows on the CPU")
    parser.add_argument("--k", type=int, default=4, help="candidates in the fused trial")
    parser.add_argument("--per-file", type=int, default=100, help="images per fake CIFAR-10 file (6 files)")
    parser.add_argument("--smoke", action="store_true", help="the smallest --cpu run (K = 2, 10 images per "
                        "file): does it run?")
    args = parser.parse_args()
    if args.smoke:
        args.cpu, args.k, args.per_file = True, 2, 10

    import ray
    from ray import tune

    from trainables.tune_adapter import cycle_trainable, fused_cycle_trainable, fused_rows

    want_device = "cpu" if args.cpu else "cuda"
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        write_fake_cifar10(root / "data", args.per_file)
        spec = ExperimentSpec(preset="gpu-tune-trial", model="resnet20", dataset="cifar10",
                              data_dir=str(root / "data"), epochs=1, batch_size=128, cycles=1)
        # --cpu: one fake GPU so the trial is still scheduled on a GPU resource; else the machine's own.
        ray.init(address="local", num_cpus=2, num_gpus=1 if args.cpu else None, include_dashboard=False)
        try:
            trials = {
                "cycle": (cycle_trainable, {"spec": spec, "cycle": 0, "max_lr": 0.05, "seed": 0,
                                            "start_checkpoint": None, "key": "gpu-check"}),
                "fused": (fused_cycle_trainable, {"spec": spec, "cycle": 0, "seed": 0, "start_checkpoint": None,
                                                  "max_lrs": [0.01 * 2 ** i for i in range(args.k)],
                                                  "keys": [f"gpu-check-{i}" for i in range(args.k)]}),
            }
            for name, (trainable, config) in trials.items():
                tuner = tune.Tuner(tune.with_resources(trainable, {"cpu": 1, "gpu": 1}), param_space=config,
                                   run_config=tune.RunConfig(storage_path=str(root / "tune"), name=name, verbose=0))
                [result] = list(tuner.fit())
                if result.error is not None:
                    fail(f"{name} trial: {result.error}")
                m = result.metrics
                rows = fused_rows(m) if name == "fused" else [m]
                if not m["gpu_ids"]:
                    fail(f"{name} trial: ray.get_gpu_ids() was empty inside the trial")
                devices = sorted({r["device"].split(":")[0] for r in rows})
                if devices != [want_device]:
                    fail(f"{name} trial trained on {devices}, expected {want_device}")
                for r in rows:
                    folder = Path(result.checkpoint.path) / r.get("checkpoint_subdir", "")
                    if load_checkpoint(folder)["metrics"]["max_lr"] != r["max_lr"]:
                        fail(f"{name} trial: checkpoint {folder} does not hold max_lr {r['max_lr']}")
                summary = ", ".join(f"max_lr {r['max_lr']:g}: val {r['val_acc']:.1f} % in {r['seconds']:.1f} s"
                                    for r in rows)
                print(f"{name} trial ok: gpu_ids {m['gpu_ids']}, device {rows[0]['device']}; {summary}", flush=True)
        finally:
            ray.shutdown()


if __name__ == "__main__":
    main()
