"""Where trials run: joining or starting Ray, how many trials fit at once (`trial_slots`), whether they run on this
machine, and the precision a worker's device runs natively (`probe_precision`)."""
from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from pathlib import Path

import ray

from trainables.cycle import resolve_device
from trainables.precision import resolve_precision
from trainables.sources import runtime_env
from trainables.spec import ExperimentSpec, SpecError

AUTOSCALER_CONFIG = Path.home() / "ray_bootstrap_config.yaml"


def cluster_address(address: str | None) -> str | None:
    """`--address`, else the cluster this process runs in: Ray sets RAY_ADDRESS for every job's driver."""
    return address or os.environ.get("RAY_ADDRESS") or None


def connect(address: str | None, runtime_env: dict | None = None) -> None:
    """Join the cluster at `address` (or RAY_ADDRESS), or start a local Ray sized to this machine with its
    dashboard off; `runtime_env` ships the user's own modules (trainables.sources.runtime_env) to every worker."""
    # Read by Tune in this process at fit time, so set them even when the caller already started Ray.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0: no status tables
    if ray.is_initialized():
        return
    address = cluster_address(address)
    in_main = threading.current_thread() is threading.main_thread()
    sigterm = signal.getsignal(signal.SIGTERM) if in_main else None
    try:
        if address:
            ray.init(address=address, runtime_env=runtime_env, logging_level="WARNING", log_to_driver=False)
            return
        here = local_resources()
        # address="local": never join a stale cluster that a leftover ray_current_cluster file names.
        ray.init(address="local", num_cpus=here["CPU"], num_gpus=here["GPU"],
                 include_dashboard=False, runtime_env=runtime_env, logging_level="WARNING", log_to_driver=False)
    finally:
        if callable(sigterm):  # ray.init swaps in its own SIGTERM handler (sys.exit); keep the caller's
            signal.signal(signal.SIGTERM, sigterm)


# Tune lets a searcher keep only one trial pending by default, which serialises trial starts; the user's value wins.
PENDING = "TUNE_MAX_PENDING_TRIALS_PG"
USER_PENDING = os.environ.get(PENDING)


def allow_pending(slots: int) -> None:
    """Let Tune keep a trial pending per slot (read by Tune when an experiment starts). Fewer, and a trial shorter
    than an actor's start never gets an actor of its own: Tune hands it to the first actor that frees up, so a run
    stayed at as many actors as it had pending trials (measured: 2 of 4 slots with half a CPU per trial)."""
    os.environ[PENDING] = USER_PENDING or str(max(2, slots))


def local_resources() -> dict[str, int]:
    """What the local Ray `connect` starts holds: this machine's CPUs and GPUs."""
    import torch

    return {"CPU": os.cpu_count() or 1, "GPU": torch.cuda.device_count()}


def trial_slots(spec: ExperimentSpec, address: str | None, per: int = 1) -> int:
    """How many groups of `per` trials run at once (at least 1), for the Runner and the estimate alike:
    --max-concurrent when given (the user's word, even beyond the present cluster: an autoscaler adds nodes), else
    as many as fit the Ray's CPUs and GPUs: a cluster's at its largest (its present size, or what its autoscaler
    may grow it to), the Ray this process is connected to, or, before a local Ray starts, the one `connect` would
    start (`local_resources`, so the estimate of a local run starts no Ray)."""
    res = spec.resources
    if res.max_concurrent:
        return max(1, res.max_concurrent // per)
    if cluster_address(address) or ray.is_initialized():
        connect(address, runtime_env(spec))
        total = dict(ray.cluster_resources())
        for resource, amount in ((autoscaler_ceiling() if cluster_address(address) else None) or {}).items():
            total[resource] = max(total.get(resource, 0), amount)
    else:
        total = local_resources()
    n = int(total.get("CPU", 0) // res.cpus_per_trial)
    if res.gpus_per_trial > 0:
        n = min(n, int(total.get("GPU", 0) // res.gpus_per_trial))
    return max(1, n // per)


def trials_run_here(spec: ExperimentSpec, address: str | None) -> bool:
    """Whether every trial runs on this machine: no cluster named (a local Ray), or the named cluster is one node,
    this machine's, with no autoscaler to add others (`ray start --head` on one box, or inside a Ray job there).
    Then the probes of precision and time run here, not in Ray tasks whose new worker processes cost more than
    they do."""
    if not cluster_address(address):
        return True
    if (address or "").startswith("ray://") or autoscaler_ceiling() is not None:
        return False
    connect(address, runtime_env(spec))
    here = ray.get_runtime_context().get_node_id()
    return [node["NodeID"] for node in ray.nodes() if node["Alive"]] == [here]


def local_trial_device(spec: ExperimentSpec) -> str:
    """The device a trial on this machine's local Ray gets: a GPU when it asks for one and there is one (Ray
    hides the GPUs from a trial that asked for none), else the CPU."""
    import torch

    return "cuda" if spec.resources.gpus_per_trial > 0 and spec.device != "cpu" and torch.cuda.is_available() else "cpu"


def probe_precision(spec: ExperimentSpec, address: str | None, env: dict[str, str] | None = None) -> str:
    """What `precision = "auto"` means for this experiment: asked of a worker that holds one trial's resources,
    since the driver may run on a head node without the trials' GPU or CPU kind. `env`: extra environment
    variables for that worker (tests name other CPU flags with it)."""
    connect(address, runtime_env(spec))

    @ray.remote
    def native(device: str) -> str:
        return resolve_precision("auto", resolve_device(device))

    res = spec.resources
    task = native.options(num_cpus=res.cpus_per_trial, num_gpus=res.gpus_per_trial,
                          runtime_env={"env_vars": env} if env else None)
    return ray.get(task.remote(spec.device))


def autoscaler_ceiling(path: Path | None = None) -> dict[str, float] | None:
    """The most resources the autoscaler may grow the cluster to (head plus every worker type at its
    max_workers), from the config `ray up` leaves on the head; None without one."""
    path = path or AUTOSCALER_CONFIG
    if not path.is_file():
        return None
    import yaml

    config = yaml.safe_load(path.read_text()) or {}
    cap, head = config.get("max_workers"), config.get("head_node_type")
    total: Counter[str] = Counter()
    for name, node in (config.get("available_node_types") or {}).items():
        count = 1 if name == head else min(node.get("max_workers", cap or 0), cap if cap is not None else 1 << 30)
        for resource, amount in (node.get("resources") or {}).items():
            total[resource] += count * amount
    return dict(total) or None
