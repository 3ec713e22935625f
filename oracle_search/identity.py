"""A training's identity, as text: two trainings with the same identity train the same network the same way
(`trials.training_id` names a trial's; `retention` reads the ledger's). It is the training fingerprint of the spec
(`ExperimentSpec.training_fingerprint`), the cycle, the seed, the cycle's peak LR and the hash of the checkpoint it
starts from ("" for a first cycle)."""
from __future__ import annotations


def grid_key(value: float) -> str:
    return f"{value:.6g}"


def training(fingerprint: str, cycle: int, seed: int, peak: float, start_hash: str) -> str:
    return f"{fingerprint}-c{cycle}-s{seed}-lr{grid_key(peak)}-from{start_hash}"


def started_from(identity: str) -> str:
    """The hash of the checkpoint a training with this identity starts from ("" for a first cycle)."""
    return identity.rsplit("-from", 1)[1] if "-from" in identity else ""
