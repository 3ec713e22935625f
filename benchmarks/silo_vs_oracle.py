"""SILO vs Oracle cost and accuracy from one comparison: each SILO variant's trainings and epochs over the
Oracle's, and every method's last-cycle test accuracy (mean ± 95 % half-width over its seeds). Run by hand:
`python benchmarks/silo_vs_oracle.py [--preset mnist1d-mlp] [--out DIR]`.

Reuses a finished comparison in --out (e.g. the main job's runs/mnist1d-mlp) and trains only what is missing,
through the same pipeline the command line uses (compare's defaults).

`--smoke`: the smallest comparison, the tiny preset with the test suite's options (tests/conftest.py's
TINY_COMPARE: 2 tuning seeds, 1 refinement round, 3 silo_fit trials, 2 evaluation seeds), to check that the script
runs (tests/test_benchmarks.py, on a copy of the suite's own tiny comparison, so nothing trains); its numbers mean
nothing.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from analysis.tables import accuracy_stats, cost_table
from oracle_search.compared import final_rows
from oracle_search.pipeline import CompareOptions, FitOptions, OracleOptions, compare
from trainables.presets import PRESETS
from trainables.plugins import check_names


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="mnist1d-mlp", choices=sorted(PRESETS))
    p.add_argument("--out", help="results folder (default: a temporary one)")
    p.add_argument("--smoke", action="store_true", help="the smallest comparison (tiny preset): does it run?")
    args = p.parse_args()
    options = CompareOptions(replicates=1)  # one study: this benchmark compares its methods' costs
    if args.smoke:
        args.preset = "tiny"
        options = CompareOptions(oracle=OracleOptions(seeds=2, refine=1), fit=FitOptions(trials=3), eval_seeds=2,
                                 replicates=1)
    out = Path(args.out or tempfile.mkdtemp(prefix="silo-vs-oracle-"))
    started = time.perf_counter()
    rows = compare(check_names(PRESETS[args.preset].spec), out, options).results
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
