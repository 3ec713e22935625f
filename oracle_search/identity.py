"""What a training is: the engine's unit of work (`Training`) and its identity as text. Two trainings with the same
identity train the same network the same way: the training fingerprint of the spec
(`ExperimentSpec.training_fingerprint`), the cycle, the seed, the cycle's peak LR and the hash of the checkpoint it
starts from ("" for a first cycle). `trainings.training_id` names a trial's; `retention` reads the ledger's; `rebuild`
makes a ledger row's training again (`restore.Starts`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from trainables.schedules import SiloParams, cycle_peak
from trainables.spec import ExperimentSpec


@dataclass(frozen=True)
class Training:
    """The engine's unit of work: one cycle to train (a Tune trial runs one, or several fused). Named apart from
    Tune's and Optuna's trials, which are other things."""
    key: str  # unique within a run directory; names the trial in the ledger
    spec: ExperimentSpec
    cycle: int
    max_lr: float | None
    seed: int
    start_checkpoint: str | None
    tags: dict[str, Any] = field(default_factory=dict)  # extra results-table fields: method, stage, ...
    # The scheduler's order, not the training's identity: the trainings still behind it in its line's plan (the
    # length of the chain it holds up). Free slots take the highest first (ties: Tune's queue in the order handed
    # over, the simulated engine by identity, so that a simulation repeats).
    priority: float = 0.0

    def config(self) -> dict[str, Any]:
        return {"spec": self.spec, "cycle": self.cycle, "max_lr": self.max_lr, "seed": self.seed,
                "start_checkpoint": self.start_checkpoint, "key": self.key}


def grid_key(value: float) -> str:
    return f"{value:.6g}"


def training(fingerprint: str, cycle: int, seed: int, peak: float, start_hash: str) -> str:
    return f"{fingerprint}-c{cycle}-s{seed}-lr{grid_key(peak)}-from{start_hash}"


def started_from(identity: str) -> str:
    """The hash of the checkpoint a training with this identity starts from ("" for a first cycle)."""
    return identity.rsplit("-from", 1)[1] if "-from" in identity else ""


def rebuild(row: dict, spec: ExperimentSpec, rows: list[dict], gone: Callable[[str], bool],
            not_tags: Iterable[str]) -> tuple[Training | None, str]:
    """The `Training` that made the ledger row `row` under the run's `spec`, from the row's fields (its schedule,
    SILO's parameters, cycle, seed, max_lr) and its start's row among `rows` (one whose checkpoint is not `gone`
    where there is one), checked against its recorded identity; or None and why not. Its tags are the row's fields
    but `not_tags` (what a training reports and the engine adds), and `retrained`."""
    schedule = row.get("schedule") or spec.schedule.name
    silo = (SiloParams(epsilon=row["epsilon"], delta=row["delta"], q=int(row["q"]), beta=row["beta"])
            if schedule == "silo" else spec.schedule.silo)
    spec = spec.with_schedule(name=schedule, silo=silo)
    start_hash = started_from(row.get("training") or "")
    start = None
    if start_hash:
        found = [r for r in rows if r.get("checkpoint_hash") == start_hash and r.get("checkpoint")]
        if not found:
            return None, f"no row of the ledger holds its start, hash {start_hash[:10]}"
        start = next((r for r in found if not gone(r["checkpoint"])), found[0])["checkpoint"]
    max_lr = None if schedule == "silo" else row["max_lr"]
    made = training(spec.training_fingerprint(), row["cycle"], row["seed"],
                    cycle_peak(spec.schedule, row["cycle"], spec.rate, max_lr), start_hash)
    if made != row.get("training"):
        return None, f"its recorded training {row.get('training')} is not the one its fields describe"
    skip = set(not_tags)
    tags = {k: v for k, v in row.items() if k not in skip}
    return Training(key=row["key"], spec=spec, cycle=row["cycle"], max_lr=max_lr, seed=row["seed"],
                    start_checkpoint=start, tags=tags | {"retrained": True}), ""
