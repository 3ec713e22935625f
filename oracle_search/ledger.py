"""The ledger: one small JSON file per finished trial under DIR/ledger/, written at once. It is what makes every
driver resumable: a rerun skips every trial already in it, so a killed or interrupted driver never retrains one."""
from __future__ import annotations

import json
import os
from pathlib import Path

from trainables.atomic import atomic_write_json
from trainables.spec import NUMERICS, SpecError


class Ledger:
    def __init__(self, out: Path):
        self.dir = out / "ledger"
        self.dir.mkdir(parents=True, exist_ok=True)
        self._check_numerics()

    def _check_numerics(self) -> None:
        """Rows are reused by key, so a ledger written under older arithmetic (`trainables.spec.NUMERICS`) is
        refused rather than mixed with new trainings; a new ledger records the version it is written under."""
        stamp = self.dir / "numerics"
        if stamp.exists():
            version = int(stamp.read_text())
        elif any(self.dir.glob("*.json")):
            version = 1  # written before the version was recorded
        else:
            stamp.write_text(str(NUMERICS))
            return
        if version != NUMERICS:
            raise SpecError("out", f"{self.dir.parent} holds trainings made with an older version's arithmetic "
                            f"(numerics {version}, now {NUMERICS}); use a new --out")

    def _path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def get(self, key: str) -> dict | None:
        path = self._path(key)
        return json.loads(path.read_text()) if path.exists() else None

    def refuse(self, key: str) -> Path:
        """Move the row under `key` out of the ledger, into ledger/refused/ (kept for inspection, never read
        back as a row); returns where it went."""
        target = self.dir / "refused" / f"{key}.json"
        target.parent.mkdir(exist_ok=True)
        n = 1
        while target.exists():
            n += 1
            target = target.with_name(f"{key}.{n}.json")
        os.replace(self._path(key), target)
        return target

    def record(self, row: dict) -> None:
        atomic_write_json(self._path(row["key"]), row)

    def rows(self) -> list[dict]:
        return [json.loads(p.read_text()) for p in sorted(self.dir.glob("*.json"))]
