"""Checkpoints: a directory holding one tensors-only file plus its content hash, written atomically.

Read with `torch.load(weights_only=True)` (no pickled code runs) after the hash is checked, so a truncated or
altered file is a clear error naming it, never a silently wrong chain.
"""
from __future__ import annotations

import hashlib
import io
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from trainables.errors import CheckpointError  # noqa: F401  (re-exported)

STATE_FILE = "state.pt"
HASH_FILE = "state.sha256"


def save_checkpoint(directory: str | Path, payload: dict[str, Any]) -> str:
    """Write `payload` (tensors, numbers, strings, nested dicts) to `directory`; returns its content hash."""
    directory = Path(directory)
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    blob = buffer.getvalue()
    digest = hashlib.sha256(blob).hexdigest()
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.tmp-"))
    (tmp / STATE_FILE).write_bytes(blob)
    (tmp / HASH_FILE).write_text(digest + "\n")
    if directory.exists():  # an earlier, interrupted attempt at the same trial
        shutil.rmtree(directory)
    os.replace(tmp, directory)
    return digest


def checkpoint_hash(directory: str | Path) -> str:
    """The recorded content hash of a checkpoint (its fingerprint), without loading it."""
    return (Path(directory) / HASH_FILE).read_text().strip()


def verify_checkpoint(directory: str | Path) -> bytes:
    """The checkpoint's file, after checking it against its recorded hash; CheckpointError naming the path if
    anything is off."""
    directory = Path(directory)
    state, recorded = directory / STATE_FILE, directory / HASH_FILE
    if not state.is_file() or not recorded.is_file():
        raise CheckpointError(f"checkpoint {directory}: not a checkpoint directory (needs {STATE_FILE} and {HASH_FILE})")
    blob = state.read_bytes()
    if hashlib.sha256(blob).hexdigest() != recorded.read_text().strip():
        raise CheckpointError(f"checkpoint {state}: content hash mismatch (truncated or altered file)")
    return blob


def load_checkpoint(directory: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load and verify a checkpoint directory; raises CheckpointError naming the path if anything is off."""
    state, blob = Path(directory) / STATE_FILE, verify_checkpoint(directory)
    try:
        return torch.load(io.BytesIO(blob), map_location=map_location, weights_only=True)
    except Exception as err:  # a file whose hash matches but that torch cannot read was written wrongly
        raise CheckpointError(f"checkpoint {state}: unreadable ({err})") from err
