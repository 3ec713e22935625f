"""The default's shape: how much of the spread of a replicate's advantage is evaluation-seed noise, and what fewer
evaluation seeds per replicate would buy per training. From the two 3-replicate main jobs of 2026-11-27 (base seeds
0 and 300: six independent replicates). Per (schedule, versus): the between-replicate variance of the advantage,
the within-replicate part (each replicate's standard error², from its 95 % t interval on n = 3 evaluation seeds),
and the rest, the noise of the choices (dense choice, δ, b). With E evaluation seeds a replicate's variance is
choice + within × 3 / E; its cost 330 + 47 E trainings (the finals are 7 schedules × 7 cycles × E of the 471).
Run from the repository root: python benchmarks/results/speed-2026-11-28/shape.py"""
import pandas as pd
from scipy import stats

frames = [pd.read_csv(f"benchmarks/results/replicates-2026-11-27/{job}/replicates.csv")
          for job in ("seed0-R3", "seed300-R3")]
t = pd.concat(frames)
t["se"] = (t.ci_hi - t.ci_lo) / 2 / stats.t.ppf(0.975, t.n - 1)
rows = []
for (schedule, versus), g in t.groupby(["schedule", "versus"]):
    between, within = g.advantage.var(ddof=1), (g.se ** 2).mean()
    rows.append({"schedule": schedule, "versus": versus, "replicates": len(g), "between": between,
                 "within (E=3)": within, "choices": between - within, "within share": within / between})
r = pd.DataFrame(rows)
print(r.round(3).to_string(index=False))
print(f"median within share: {r['within share'].median():.2f}")
for E in (2, 3):
    var = r["choices"].clip(lower=0) + r["within (E=3)"] * 3 / E
    cost = 330 + 47 * E
    print(f"E = {E}: {cost} trainings per replicate, median variance per replicate {var.median():.2f}, "
          f"variance x trainings {(var * cost).median():.0f}")
