"""Files written whole or not at all: a temporary file in the same folder, then os.replace. A reader never sees
half a file, and a failed write leaves neither the file nor its temporary."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable


def atomic_write(path: Path, write: Callable[[BinaryIO], Any]) -> Path:
    """Create or replace `path` with what `write` writes to the open (binary) file it is given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def atomic_write_bytes(path: Path, data: bytes | str) -> Path:
    return atomic_write(path, lambda f: f.write(data.encode() if isinstance(data, str) else data))


def atomic_write_json(path: Path, obj: Any) -> Path:
    return atomic_write_bytes(path, json.dumps(obj, indent=1, sort_keys=True, default=str))
