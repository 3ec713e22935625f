"""Shared fixtures. Datasets use the real on-disk cache, so MNIST-1D is generated once per machine."""
from __future__ import annotations

from typing import Iterator

import pytest


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """A fresh local Ray instance with 2 CPUs for the whole session (never a stale cluster's address)."""
    import ray

    ray.shutdown()  # an earlier test's in-process CLI run may have left its own local Ray connected
    ray.init(address="local", num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


@pytest.fixture
def make_cluster() -> Iterator:
    """`make_cluster(head_cpus)`: a fake multi-node Ray cluster (ray.cluster_utils), shut down after the test."""
    import ray
    from ray.cluster_utils import Cluster

    made = []

    def make(head_cpus: int) -> Cluster:
        ray.shutdown()  # the Runner joins whatever Ray this process is connected to
        made.append(Cluster(initialize_head=True, head_node_args={"num_cpus": head_cpus}))
        return made[-1]

    yield make
    ray.shutdown()
    for cluster in made:
        cluster.shutdown()


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One torch thread, as a 1-CPU trial runs, so results do not depend on this machine's core count."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
