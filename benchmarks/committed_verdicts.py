"""Every committed run of the embedded default, read by today's verdict: each SILO variant against each comparison
of the family (`analysis.regret.FAMILY`) that the run's rows allow, end to end on its evaluation seeds. Runs made
before the held-out references existed (2026-12-02) have no final chains of the Oracle's schedule, not adapting or
the best constant: only their benchmark rows are defined. Runs made before each replicate drew its own split
(2026-12-02) share one split and one MNIST-1D generation seed across replicates.

Usage (repo root): python benchmarks/committed_verdicts.py [RUN ...]   (default: the committed runs below)
A RUN is a replicated folder (replicates.json) or one run folder; prints one markdown table, then a count.
Trains nothing. `--smoke`: one committed run (tests/test_benchmarks.py)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a bare checkout, nothing installed

from analysis.regret import analyse  # noqa: E402
from analysis.replicates import aggregate, comparisons  # noqa: E402
from analysis.verdict_sentences import VERSUS  # noqa: E402
from oracle_search.schema import read_results, results_frame  # noqa: E402

COMMITTED = ["docs/example", "benchmarks/results/replicates-2026-11-27/seed0-R3",
             "benchmarks/results/replicates-2026-11-27/seed300-R3",
             "benchmarks/results/compare-2026-11-27/racing-seed0",
             "benchmarks/results/compare-2026-11-27/exhaustive-seed0",
             "benchmarks/results/compare-2026-11-27/exhaustive-seed100"]
MARGIN_PER_CYCLE = 0.5


def folders(run: Path) -> dict[int, Path]:
    manifest = run / "replicates.json"
    if manifest.exists():
        names = json.loads(manifest.read_text())["folders"]
        return {i + 1: run / name for i, name in enumerate(names)}
    return {1: run}


def verdict(run: Path):
    per = {}
    for r, folder in folders(run).items():
        if (folder / "results.parquet").exists() or (folder / "results.csv").exists():
            per[r] = comparisons(analyse(results_frame(read_results(folder).to_dict("records")), MARGIN_PER_CYCLE))
    return aggregate(per, MARGIN_PER_CYCLE) if per else (None, None)


def main(runs: list[str]) -> None:
    rows = 0
    print("| run | R | SILO | compared with | per replicate | mean [95 % t] | label |")
    print("|---|---|---|---|---|---|---|")
    for name in runs:
        over, each = verdict(ROOT / name)
        if over is None:
            print(f"| {name} | 0 | – | – | no results table committed | – | – |")
            continue
        for _, row in over.iterrows():
            values = each[(each["schedule"] == row["schedule"]) & (each["versus"] == row["versus"])]["advantage"]
            cells = ", ".join(f"{v:+.2f}" for v in values)
            interval = (f"{row['advantage']:+.2f} [{row['ci_lo']:+.2f}, {row['ci_hi']:+.2f}]"
                        if row["replicates"] >= 2 else f"{row['advantage']:+.2f}")
            held = "" if row["holm"] is None or str(row["holm"]) in ("<NA>", "nan") else f" (Holm: {row['holm']})"
            print(f"| {name} | {row['replicates']} | {row['schedule']} | {VERSUS.get(row['versus'], row['versus'])} "
                  f"| {cells} | {interval} | {row['verdict']}{held} |")
            rows += 1
    print(f"committed_verdicts: {rows} comparisons over {len(runs)} run(s)")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(COMMITTED[1:2] if args == ["--smoke"] else args or COMMITTED)
