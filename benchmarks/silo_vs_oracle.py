"""SILO vs Oracle cost and accuracy from one comparison: each SILO variant's trainings and epochs over the
Oracle's, and every method's last-cycle test accuracy (mean ± 95 % half-width over its seeds). Run by hand:
`python benchmarks/silo_vs_oracle.py [--preset mnist1d-mlp] [--out DIR]`.

Reuses a finished comparison in --out (e.g. the main job's runs/mnist1d-mlp) and trains only what is missing,
through the same pipeline the command line uses (compare's defaults).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from analysis.tables import accuracy_stats, cost_table
from analysis.select import final_rows
from oracle_search.pipeline import CompareOptions, compare
from trainables.presets import PRESETS
from trainables.plugins import check_names


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="mnist1d-mlp", choices=sorted(PRESETS))
    p.add_argument("--out", help="results folder (default: a temporary one)")
    args = p.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="silo-vs-oracle-"))
    started = time.perf_counter()
    rows = compare(check_names(PRESETS[args.preset].spec), out, CompareOptions()).results
    cost = cost_table(rows).data.set_index("method")
    print(f"\npreset {args.preset}, results in {out} ({time.perf_counter() - started:.0f} s)")
    for method in ("silo_paper", "silo_fit"):
        if method in cost.index:
            share = cost.loc[method] / cost.loc["oracle"]
            print(f"{method}: {cost.loc[method, 'trainings']:.0f} trainings, {cost.loc[method, 'epochs']:.0f} epochs; "
                  f"epochs / Oracle's = {share['epochs']:.2f}, device-hours / Oracle's = {share['device_hours']:.2f}")
    last = int(rows["cycle"].max())
    for method in cost.index:
        stats = accuracy_stats(final_rows(rows, method))
        if last in stats.index:
            s = stats.loc[last]
            print(f"  {method:11} last-cycle test accuracy {s['mean']:.2f} ± {s['ci95']:.2f} (n={int(s['n_seeds'])})")


if __name__ == "__main__":
    main()
