# The Oracle on 64 slots: the dry run's simulation (--slots 64, each training the run's mean measured seconds of a
# finished training) against `replay --slots 64` (each training its own row's seconds), on the default's exhaustive
# runs in benchmarks/results/. Run from the repository root: bash benchmarks/results/plan-2026-11-28/walls.sh
set -e
scratch=$(mktemp -d)  # the dry run writes nothing; replay writes its report here
for r in benchmarks/results/oracle-exhaustive-2026-11-26/seed0 benchmarks/results/oracle-exhaustive-2026-11-26/seed100 \
         benchmarks/results/compare-exhaustive-seed0-2026-11-26 benchmarks/results/compare-2026-11-27/exhaustive-seed0 \
         benchmarks/results/compare-2026-11-27/exhaustive-seed100 benchmarks/results/racing-told-2026-11-27/exhaustive-seed0; do
  spe=$(.venv/bin/python -c "
import json; from pathlib import Path
from oracle_search.schema import read_results
t = read_results(Path('$r')); o = t[(t.method == 'oracle') & ~t.diverged]
print(round(o.seconds.mean() / json.load(open('$r/spec.json'))['epochs'], 5))")
  cmd=compare; case $r in *oracle-exh*) cmd=oracle;; esac
  echo "== $r ($cmd, seconds per epoch $spe)"
  extra=(); [ $cmd = compare ] && extra=(--replicates 1)
  .venv/bin/python -m oracle_search.cli $cmd --config $r/spec.json "${extra[@]}" --dry-run --slots 64 \
    --seconds-per-epoch $spe --out "$scratch/x" | grep "the Oracle on"
  .venv/bin/python -m oracle_search.cli replay $r --slots 64 --out "$scratch/replay" | grep "slot(s)"
done
