"""Shared fixtures. Datasets use the real on-disk cache, so MNIST-1D is generated once per machine.

Ray costs seconds to start, so a test run starts it twice at most: one local Ray (`ray_local`, 2 CPUs) and one
fake two-node cluster (`two_nodes`), each living until the run ends. Both are `ray.cluster_utils.Cluster`s, so
their processes belong to the fixture, not to this process's connection: a test that needs the other one (or a
fresh connection, so that a Runner's runtime environment applies) only disconnects (`join`), and no test shuts
either down. Only the node-loss test builds a cluster of its own (`make_cluster`), since it kills a node.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
# A test holding one of these starts or joins a Ray (`fitted`: test_fitter's study, `local_ray`: test_security's).
RAY_FIXTURES = {"_local_cluster", "_two_node_cluster", "make_cluster", "fitted", "local_ray"}
E2E_FIXTURES = {"tiny_compare", "replicated"}  # a whole command run end to end (a compare, R compares)


def pytest_collection_modifyitems(items) -> None:
    """The lanes say what a test costs: `ray` (it starts or joins a real Ray), `e2e` (a whole command end to end,
    on Ray), besides `slow` (minutes); the rest are pure CPU, simulations included (`-m "slow and not ray"`)."""
    for item in items:
        held = set(getattr(item, "fixturenames", ()))
        if held & RAY_FIXTURES:
            item.add_marker(pytest.mark.ray)
        if held & E2E_FIXTURES or item.get_closest_marker("e2e"):
            item.add_marker(pytest.mark.e2e)
_LOCAL: dict[str, str] = {}  # the local Ray's address, once a test has started it


def join(address: str) -> None:
    """Connect this process to the Ray at `address`, dropping a connection to another one. `ray.shutdown()` here only
    disconnects: the cluster's processes belong to its `Cluster` object. (Ray 2.60 applies only the first py_modules
    environment a process joins a cluster with: tests that ship user code share one copy of it, test_example.py.)"""
    import ray

    if ray.is_initialized():
        if ray.get_runtime_context().gcs_address == address:
            return
        ray.shutdown()
    ray.init(address=address, logging_level="WARNING", log_to_driver=False)


@pytest.fixture(scope="session")
def _local_cluster() -> Iterator:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    _LOCAL["address"] = cluster.address
    yield cluster
    _LOCAL.clear()
    import ray

    ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="session")
def ray_local(_local_cluster) -> str:
    """The run's one local Ray (2 CPUs), connected; its address. A subprocess driver joins it through `ray_env`."""
    join(_local_cluster.address)
    return _local_cluster.address


def ray_env(address: str, **extra: str) -> dict[str, str]:
    """The environment for a subprocess driver that should join the Ray at `address` instead of starting its own
    (Ray's own convention: RAY_ADDRESS names the cluster a driver runs in)."""
    return dict(os.environ, RAY_ADDRESS=address, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), **extra)


@pytest.fixture(autouse=True)
def _back_to_the_local_ray() -> Iterator[None]:
    """After a test that connected elsewhere, reconnect to the local Ray if the run has started it, so a later
    test never trains on a leftover cluster nor starts a second Ray."""
    yield
    if _LOCAL:
        join(_LOCAL["address"])


@dataclass(frozen=True)
class TwoNodes:
    """The shared fake two-node cluster: a head that runs nothing, two workers of 2 CPUs and 1 fake GPU each."""
    address: str
    nodes: frozenset[str]


@pytest.fixture(scope="session")
def _two_node_cluster() -> Iterator[TwoNodes]:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "num_gpus": 0,
                                                            "include_dashboard": False})
    nodes = frozenset(cluster.add_node(num_cpus=2, num_gpus=1).node_id for _ in range(2))
    cluster.wait_for_nodes()
    yield TwoNodes(cluster.address, nodes)
    import ray

    ray.shutdown()
    cluster.shutdown()


@pytest.fixture
def two_nodes(_two_node_cluster) -> TwoNodes:
    """The shared two-node cluster, connected for this test (a fresh connection, so a Runner's runtime
    environment applies); the local Ray is reconnected afterwards."""
    import ray

    if ray.is_initialized():
        ray.shutdown()  # a disconnect: both clusters' processes stay up
    return _two_node_cluster


@pytest.fixture
def make_cluster() -> Iterator:
    """`make_cluster(head_cpus)`: a fake multi-node Ray cluster of the test's own (ray.cluster_utils), shut down
    after it. Only for a test that must change the cluster itself (kill a node); others take `two_nodes`."""
    import ray
    from ray.cluster_utils import Cluster

    made = []

    def make(head_cpus: int) -> Cluster:
        if ray.is_initialized():
            ray.shutdown()  # a disconnect: the Runner joins whatever Ray this process is connected to
        made.append(Cluster(initialize_head=True, head_node_args={"num_cpus": head_cpus}))
        return made[-1]

    yield make
    if made and ray.is_initialized() and ray.get_runtime_context().gcs_address in {c.address for c in made}:
        ray.shutdown()
    for cluster in made:
        cluster.shutdown()


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One torch thread, as a 1-CPU trial runs, so results do not depend on this machine's core count.
    $ORACLE_SEARCH_TEST_THREADS overrides it, to run the float64 equivalence tests (test_fused.py) on another
    thread count, whose parallel reductions sum in another order."""
    from trainables.cycle import torch_threads

    with torch_threads(int(os.environ.get("ORACLE_SEARCH_TEST_THREADS", "1"))):
        yield


def flip_middle_byte(path: Path) -> None:
    """Corrupt a file as a bad disk or copy would (flipping it again restores it)."""
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    path.write_bytes(bytes(blob))


def cli(argv: list[str]) -> int:
    """Run the command line in this process, as the console script would: its exit status (argparse's exit 2
    included)."""
    from oracle_search.cli import main

    try:
        return main(argv)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else 1


# --- one `compare` on the tiny preset for every end-to-end assertion ---------------------------------------------

TINY_COMPARE = ["compare", "--preset", "tiny", "--trials", "3", "--tuning-seeds", "2", "--eval-seeds", "2", "--refine", "1",
                "--replicates", "1"]


@dataclass(frozen=True)
class CompareRun:
    """The shared run: `argv` (without --out) ran in `out`; its first driver was SIGKILLed once it printed
    `killed_at`, with `before_kill` (ledger file -> trial_id) finished; a second driver, in this process, resumed it
    and ended with `code`, printing `stdout`."""
    out: Path
    argv: list[str]
    killed_at: str
    before_kill: dict[str, str]
    code: int
    stdout: str


def run_until(args: list[str], marker: str, env: dict[str, str]) -> None:
    """Start a CLI subprocess in its own session and SIGKILL its process group once it prints `marker`."""
    import signal
    import subprocess

    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        for line in proc.stdout:
            if marker in line:
                os.killpg(proc.pid, signal.SIGKILL)
                break
        else:
            raise AssertionError(f"never printed {marker!r}")
    finally:
        proc.wait(timeout=60)


@pytest.fixture(scope="session")
def tiny_compare(ray_local, tmp_path_factory) -> CompareRun:
    """`compare` on the tiny preset: a driver joined to the local Ray, SIGKILLed at stage 2/4 (the Oracle's cycle 0
    decided, SILO and the baselines' tuning starting beside its later cycles), then the same command run again in
    this process, which must resume it."""
    import contextlib
    import io
    import json
    import sys

    out = tmp_path_factory.mktemp("compare") / "cmp"
    marker = "== 2/4"
    run_until([sys.executable, "-m", "oracle_search.cli", *TINY_COMPARE, "--out", str(out)], marker,
              ray_env(ray_local))
    before = {p.name: json.loads(p.read_text())["trial_id"] for p in (out / "ledger").glob("*.json")}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = cli([*TINY_COMPARE, "--out", str(out)])
    return CompareRun(out, list(TINY_COMPARE), marker, before, code, printed.getvalue())


def pytest_runtest_logreport(report) -> None:
    """With ORACLE_SEARCH_TEST_TIMES=FILE, each test phase's wall time is appended to FILE as it ends (tab-separated:
    node id, phase, seconds, outcome), so a run that is stopped or killed still says where its time went; pytest's own
    --durations prints only at the end."""
    path = os.environ.get("ORACLE_SEARCH_TEST_TIMES")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{report.nodeid}\t{report.when}\t{report.duration:.2f}\t{report.outcome}\n")
