"""Hand-made Oracle rows for the analysis tests: a chain per seed, as the results table holds one."""
from __future__ import annotations

from typing import Mapping, Sequence


def oracle_rows(cycles: Mapping[int, tuple[float, Mapping[float, Mapping[int, float] | Sequence[float]]]],
                diverged=frozenset()) -> list[dict]:
    """Oracle rows: per cycle (the value chained forward, {max_lr: {seed: val_acc}} or {max_lr: [val_acc of seeds
    0, 1, ...]}); a seed's cycle-m rows start from its selected cycle-(m−1) checkpoint. `diverged` holds
    (cycle, max_lr, seed)."""
    rows = []
    for cycle, (chosen, accs) in sorted(cycles.items()):
        for lr, per_seed in accs.items():
            seeds = per_seed.items() if isinstance(per_seed, Mapping) else enumerate(per_seed)
            for seed, acc in seeds:
                rows.append({"experiment": "t", "method": "oracle", "stage": "grid", "seed": seed, "cycle": cycle,
                             "density": 100 * 0.8**cycle, "max_lr": lr, "val_acc": acc, "test_acc": acc - 2,
                             "selected": lr == chosen, "diverged": (cycle, lr, seed) in diverged,
                             "checkpoint_hash": f"s{seed}c{cycle}lr{lr}",
                             "start_hash": f"s{seed}c{cycle - 1}lr{cycles[cycle - 1][0]}" if cycle else ""})
    return rows
