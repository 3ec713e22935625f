"""Wall-clock timestamps of the results table (`started`, `finished`): UTC, ISO 8601, milliseconds, a trailing 'Z'."""
from __future__ import annotations

from datetime import datetime, timezone


def utc_now() -> str:
    """Now, as "2026-11-27T11:41:03.123Z" (pandas reads it back with `pd.to_datetime(..., utc=True)`)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def duration(seconds: float) -> str:
    """A wall time for a person, in the unit one reads it in (the estimate's, the dry run's and the report's):
    seconds below a minute, minutes below two hours, hours below two days, then days; the seconds follow past a
    minute, for the record."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        readable = f"{seconds / 60:.1f} min"
    elif seconds < 2 * 86400:
        readable = f"{seconds / 3600:.1f} h"
    else:
        readable = f"{seconds / 86400:.1f} days"
    return f"{readable} ({seconds:,.0f} s)"
