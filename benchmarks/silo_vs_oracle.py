"""SILO fitter vs Oracle cost: for one spec, the fitter's total epochs over the Oracle's, and both last-cycle
test accuracies. Run by hand: `python benchmarks/silo_vs_oracle.py [--preset mnist1d-mlp] [--out DIR]`.

Reuses a finished run in --out (e.g. the main job's runs/mnist1d-mlp) and trains only what is missing; pass
the options that run used (compare's defaults are the defaults here).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd

from oracle_search.cli import main as cli


def summarize(rows: pd.DataFrame) -> dict[str, float]:
    oracle = rows[rows["method"] == "oracle"]
    fit = rows[(rows["method"] == "silo") & (rows["stage"] == "fit")]
    last = int(oracle["cycle"].max())
    oracle_last = oracle[oracle["selected"] & (oracle["cycle"] == last)]["test_acc"].mean()
    complete = fit[~fit["pruned"] & (fit["cycle"] == last)]
    best_trial = complete.sort_values("val_acc", ascending=False)["study_trial"].iloc[0]
    silo_last = complete[complete["study_trial"] == best_trial]["test_acc"].mean()
    return {"oracle_epochs": float(oracle["epochs"].sum()), "fit_epochs": float(fit["epochs"].sum()),
            "oracle_trainings": len(oracle), "fit_trainings": len(fit), "oracle_test": oracle_last,
            "silo_test": silo_last, "last_cycle": last}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--preset", default="mnist1d-mlp")
    p.add_argument("--trials", type=int, default=8, help="fitter trials (compare's default)")
    p.add_argument("--refine", type=int, default=3, help="Oracle refinement values (compare's default)")
    p.add_argument("--out", help="results folder (default: a temporary one)")
    args = p.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="silo-vs-oracle-"))
    started = time.perf_counter()
    assert cli(["oracle", "--preset", args.preset, "--refine", str(args.refine), "--out", str(out)]) == 0
    assert cli(["fit-silo", "--preset", args.preset, "--trials", str(args.trials), "--out", str(out)]) == 0
    s = summarize(pd.read_parquet(out / "results.parquet"))
    print(f"\npreset {args.preset}, {args.trials} fitter trials, results in {out} ({time.perf_counter() - started:.0f}s)")
    print(f"trainings: Oracle {s['oracle_trainings']}, SILO fitter {s['fit_trainings']}")
    print(f"epochs:    Oracle {s['oracle_epochs']:.0f}, SILO fitter {s['fit_epochs']:.0f}, "
          f"ratio fitter/Oracle = {s['fit_epochs'] / s['oracle_epochs']:.2f}")
    print(f"last-cycle ({s['last_cycle']}) test accuracy: Oracle {s['oracle_test']:.2f} %, "
          f"best SILO fit {s['silo_test']:.2f} %")


if __name__ == "__main__":
    main()
