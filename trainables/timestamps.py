"""Wall-clock timestamps of the results table (`started`, `finished`): UTC, ISO 8601, milliseconds, a trailing 'Z'."""
from __future__ import annotations

from datetime import datetime, timezone


def utc_now() -> str:
    """Now, as "2026-11-27T11:41:03.123Z" (pandas reads it back with `pd.to_datetime(..., utc=True)`)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
