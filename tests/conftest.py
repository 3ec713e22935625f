"""Shared fixtures. Datasets use the real on-disk cache, so MNIST-1D is generated once per machine."""
from __future__ import annotations

from typing import Iterator

import pytest


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """A fresh local Ray instance with 2 CPUs for the whole session (never a stale cluster's address)."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()
