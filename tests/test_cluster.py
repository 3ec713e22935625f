"""cluster.yaml against Ray's own schema and security expectations; trials packed onto fake GPUs and spread over
the nodes of a fake multi-node cluster (`ray.cluster_utils.Cluster`, CUDA absent)."""
from __future__ import annotations

import dataclasses
import io
import ipaddress
import json
import re
import sys
import time
from pathlib import Path
from typing import Callable

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10, which pyproject claims: the backport it installs there
    import tomli as tomllib

import pytest
import ray
import yaml
from packaging.requirements import Requirement
from ray import cloudpickle

from oracle_search.engine import Progress
from oracle_search.racing import OracleSearch

from oracle_search.identity import Training

from oracle_search.engine import own_runner
from oracle_search.oracle import run_oracle
from trainables.presets import PRESETS
from trainables.spec import Resources
from trainables.tune_adapter import cycle_trainable

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import this test module

ROOT = Path(__file__).resolve().parent.parent
TINY = PRESETS["tiny"].spec
RAY_PORTS = (6379, 8265, 10001, 8076)  # GCS, dashboard, client server, object manager


# --- cluster.yaml ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load((ROOT / "cluster.yaml").read_text())


def test_cluster_yaml_matches_rays_schema(config):
    import jsonschema
    from ray.autoscaler._private.util import prepare_config, validate_config

    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    jsonschema.validate(config, schema)
    validate_config(prepare_config(config))  # what `ray up` runs before it touches AWS


def test_cluster_yaml_has_a_cpu_head_and_autoscaling_spot_gpu_workers(config):
    assert config["provider"]["type"] == "aws"
    head = config["available_node_types"][config["head_node_type"]]
    assert head["resources"] == {"CPU": 0}  # the head runs the driver, never a trial
    assert "MarketType" not in json.dumps(head)  # on-demand: the results folder lives there
    (name, worker), = [(k, v) for k, v in config["available_node_types"].items() if k != config["head_node_type"]]
    assert worker["node_config"]["InstanceType"].startswith("g5.")
    assert (worker["min_workers"], worker["max_workers"]) == (0, 8)
    assert worker["node_config"]["InstanceMarketOptions"]["MarketType"] == "spot"


def test_cluster_yaml_installs_the_tested_stack_and_names_shared_storage(config):
    setup = "\n".join(config["setup_commands"])
    assert "torch==2.14.1 torchvision==0.29.1" in setup
    # one Ray for the head and every worker, inside the range the project declares (not pinned to this machine's)
    (pinned,) = re.findall(r"ray\[default,tune\]==([0-9.]+)", setup)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (requirement,) = [Requirement(r) for r in project["dependencies"] if Requirement(r).name == "ray"]
    assert requirement.specifier.contains(pinned), (pinned, str(requirement.specifier))
    assert setup.index("torch==2.14.1") < setup.index("-e ~/oracle-search")
    assert config["file_mounts"]["/home/ubuntu/oracle-search"] == "."
    assert "s3://" in setup and "ORACLE_SEARCH_STORAGE=s3://" in setup


def test_cluster_yaml_installs_the_postgres_extra(config):
    setup = "\n".join(config["setup_commands"])
    assert '-e ~/oracle-search"[postgres]"' in setup  # quoted: an unquoted [postgres] is a shell glob


def test_the_head_has_its_own_least_privilege_profile(config):
    head = config["available_node_types"]["head"]["node_config"]
    worker = config["available_node_types"]["gpu_worker"]["node_config"]
    assert head["IamInstanceProfile"]["Arn"].endswith(":instance-profile/oracle-search-head")
    assert head["IamInstanceProfile"] != worker["IamInstanceProfile"]
    policy = json.loads((ROOT / "docs" / "iam-head-policy.json").read_text())
    grants = [(a, st["Resource"]) for st in policy["Statement"] if st["Effect"] == "Allow"
              for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])]
    assert not [a for a, _ in grants if a == "*" or a.endswith(":*")]  # no service-wide grant
    assert {a.split(":")[0] for a, _ in grants} == {"ec2", "iam", "s3"}
    assert [r for a, r in grants if a == "iam:PassRole"] == ["arn:aws:iam::YOUR-ACCOUNT-ID:role/oracle-search-s3"]
    assert all(r != "*" for a, r in grants if a.startswith("s3:"))
    terminate = next(st for st in policy["Statement"] if st["Action"] == "ec2:TerminateInstances")
    assert terminate["Condition"]["StringEquals"] == {"ec2:ResourceTag/ray-cluster-name": config["cluster_name"]}


def _open_to_the_world(rule: dict) -> bool:
    ranges = [r["CidrIp"] for r in rule.get("IpRanges", [])] + [r["CidrIpv6"] for r in rule.get("Ipv6Ranges", [])]
    return any(ipaddress.ip_network(c).prefixlen == 0 for c in ranges)


def _covers_ray_port(rule: dict) -> bool:
    if rule.get("IpProtocol") in ("-1", -1):
        return True
    return any(rule.get("FromPort", 0) <= port <= rule.get("ToPort", 65535) for port in RAY_PORTS)


def test_cluster_yaml_keeps_ray_off_the_internet(config):
    rules = config["provider"]["security_group"]["IpPermissions"]
    assert not [r for r in rules if _open_to_the_world(r) and _covers_ray_port(r)]
    head_start = " ".join(config["head_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in head_start and "0.0.0.0" not in head_start
    for start in (head_start, " ".join(config["worker_start_ray_commands"])):
        assert "RAY_AUTH_MODE=token" in start
    assert config["file_mounts"]["/home/ubuntu/.ray/auth_token"] == "~/.ray/auth_token"


def test_the_rule_checks_catch_an_open_dashboard():
    assert _open_to_the_world({"IpRanges": [{"CidrIp": "0.0.0.0/0"}]})
    assert _open_to_the_world({"Ipv6Ranges": [{"CidrIpv6": "::/0"}]})
    assert not _open_to_the_world({"IpRanges": [{"CidrIp": "203.0.113.7/32"}]})
    assert _covers_ray_port({"IpProtocol": "tcp", "FromPort": 8000, "ToPort": 9000})
    assert not _covers_ray_port({"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22})


# --- fake GPUs and nodes -----------------------------------------------------------------------------------------

def together(log_dir: Path, wait_for: int, timeout: float = 60.0) -> Callable[[dict], None]:
    """A trainable that waits (up to `timeout`) until `wait_for` trials have started, so they run side by side,
    then trains; it logs each trial's GPU ids, node and start/end times."""

    def trainable(config: dict) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / f"{config['key']}.started").touch()
        deadline = time.monotonic() + timeout
        while len(list(log_dir.glob("*.started"))) < wait_for and time.monotonic() < deadline:
            time.sleep(0.05)
        start = time.time()
        gpus = [str(g) for g in ray.get_gpu_ids()]
        node = ray.get_runtime_context().get_node_id()
        time.sleep(2.0)  # hold the GPU long enough for the others to be seen alongside
        (log_dir / f"{config['key']}.json").write_text(json.dumps(
            {"key": config["key"], "gpus": gpus, "node": node, "start": start, "end": time.time()}))
        cycle_trainable(config)

    return trainable


def spans(log_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(log_dir.glob("*.json"))]


def at(moment: float, logged: list[dict]) -> list[dict]:
    """The logged trials running at `moment`."""
    return [s for s in logged if s["start"] <= moment < s["end"]]


def cycle0_trials(spec, n: int) -> list[Training]:
    return [Training(key=f"t{i}", spec=spec, cycle=0, max_lr=0.1, seed=i, start_checkpoint=None,
                  tags={"method": "test", "stage": "grid"}) for i in range(n)]


@pytest.mark.slow
@pytest.mark.parametrize("gpus_per_trial, side_by_side", [(1.0, 2), (0.5, 4)])
def test_trials_pack_onto_the_gpus_ray_assigns(two_nodes, tmp_path, gpus_per_trial, side_by_side):
    """Two nodes with one fake GPU each (conftest's shared cluster): whole GPUs hold one trial, halves two."""
    spec = dataclasses.replace(TINY, resources=Resources(cpus_per_trial=1, gpus_per_trial=gpus_per_trial))
    log = tmp_path / "log"
    with own_runner(out=tmp_path / "out", spec=spec, experiment="gpus", address=two_nodes.address,
                    trainable=together(log, side_by_side), progress=Progress(io.StringIO())) as runner:
        rows = runner.run(cycle0_trials(spec, 4))

    assert sorted(rows) == ["t0", "t1", "t2", "t3"]
    assert all(r["device"] == "cpu" for r in rows.values())  # CUDA is absent: the fake GPUs fall back to the CPU
    assert all(r["gpu_ids"] == ["0"] for r in rows.values())  # each node's one GPU
    logged = spans(log)
    assert {s["key"]: s["gpus"] for s in logged} == {k: r["gpu_ids"] for k, r in rows.items()}
    assert max(len(at(s["start"], logged)) for s in logged) == side_by_side  # as many at once as the GPUs hold
    gpu = lambda s: (s["node"], tuple(s["gpus"]))  # noqa: E731  (a GPU is named by its node and id)
    for s in logged:
        same_gpu = [o for o in at(s["start"], logged) if gpu(o) == gpu(s)]
        assert len(same_gpu) <= round(1 / gpus_per_trial)  # 1: never shared; 0.5: at most two per GPU
    if gpus_per_trial < 1:  # four trials at once on two GPUs: some do share
        assert any(len([o for o in at(s["start"], logged) if gpu(o) == gpu(s)]) == 2 for s in logged)


@pytest.mark.slow
def test_oracle_spreads_over_two_nodes_and_chains_through_shared_storage(two_nodes, tmp_path):
    shared = tmp_path / "shared"
    # 1.5 CPUs a trial on nodes of 2 CPUs: two trials side by side must use both nodes, each on one torch thread
    # (a trial's whole CPUs), since the fake nodes share this machine's 2 cores
    spec = dataclasses.replace(TINY, cycles=1, grid=(0.03, 0.1, 0.3),
                               resources=Resources(cpus_per_trial=1.5, storage_path=str(shared)))
    with own_runner(out=tmp_path / "out", spec=spec, experiment="nodes", address=two_nodes.address,
                    trainable=together(tmp_path / "log", 2), progress=Progress(io.StringIO())) as runner:
        outcomes = run_oracle(runner, OracleSearch(spec.grid, (0,), 0, False, "exhaustive"))
        rows = runner.ledger.rows()

    assert len(rows) == 6
    assert {r["node_id"] for r in rows} == two_nodes.nodes  # both worker nodes trained trials
    assert all(r["checkpoint"].startswith(str(shared)) for r in rows)
    cycle0, cycle1 = (o.selected[0] for o in outcomes)
    assert cycle0["checkpoint_hash"]
    assert {r["start_hash"] for r in rows if r["cycle"] == 1} == {cycle0["checkpoint_hash"]}
    assert cycle1["density"] == pytest.approx(80.0, abs=0.1)  # one cycle pruned 20 %
