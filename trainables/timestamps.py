"""Wall-clock timestamps of the results table (`started`, `finished`): UTC, ISO 8601, milliseconds, a trailing 'Z'."""
from __future__ import annotations

from datetime import datetime, timezone


def utc_now() -> str:
    """Now, as "2026-11-27T11:41:03.123Z" (pandas reads it back with `pd.to_datetime(..., utc=True)`)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def duration(seconds: float) -> str:
    """A wall time for a person: seconds, and minutes past one (the estimate's, the dry run's and the report's)."""
    return f"{seconds:,.0f} s ({seconds / 60:.1f} min)" if seconds >= 60 else f"{seconds:.1f} s"
