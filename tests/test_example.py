"""examples/custom_cnn: its model and dataset by import path, from its experiment file, through `oracle` and
`compare` on one machine, and through Ray's runtime environment on a two-node cluster (ray.cluster_utils)."""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
import ray
from ray import cloudpickle
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from oracle_search.config import base_spec, load
from oracle_search.engine import Progress
from oracle_search.identity import Training
from oracle_search.engine import own_runner
from conftest import cli
from trainables.spec import Resources

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import this test module

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "custom_cnn"
QUICK = ["--cycles", "1", "--epochs", "1", "--grid", "0.1,0.4", "--refine", "0"]  # `compare` adds --replicates 1
ORACLE_QUICK = [*QUICK, "--tuning-seeds", "1"]  # the Oracle alone needs 1 seed (the file's 2 are compare's least)
# 1.5 of a node's 2 CPUs: one trial a node, so both nodes train, on one torch thread each (a trial runs on its whole
# CPUs): the fake nodes share this machine's 2 cores, where two 2-thread trials made the API's compare 54 s, not 20 s.
ONE_A_NODE = 1.5


def test_the_example_file_names_the_example_by_import_path():
    spec = base_spec("tiny", load(EXAMPLE / "experiment.toml").spec)
    assert (spec.model, spec.dataset) == ("examples.custom_cnn.model:small_cnn", "examples.custom_cnn.data:bars")


@pytest.mark.slow
def test_oracle_then_compare_run_the_example_from_its_experiment_file(ray_local, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # the file names the example by import path from the repository root
    out = tmp_path / "custom-cnn"
    config = str(EXAMPLE / "experiment.toml")
    # the file's 2 tuning seeds: the compare below resumes this folder, and a resume keeps the search's options
    assert cli(["oracle", "--config", config, "--out", str(out), *QUICK]) == 0, capsys.readouterr().err[-3000:]
    stored = json.loads((out / "spec.json").read_text())
    assert stored["model"] == "examples.custom_cnn.model:small_cnn" and stored["weights"] == "rewind"
    sources = json.loads((out / "sources.json").read_text())
    assert sources["model"]["sha256"] == hashlib.sha256((EXAMPLE / "model.py").read_bytes()).hexdigest()
    assert sources["dataset"]["sha256"] == hashlib.sha256((EXAMPLE / "data.py").read_bytes()).hexdigest()
    oracle_rows = {p.name for p in (out / "ledger").glob("oracle-*.json")}
    assert len(oracle_rows) == 8  # 2 max_lr x 2 cycles x 2 seeds; cycle 1 chained from the model's checkpoint

    assert cli(["compare", "--config", config, "--out", str(out), *QUICK, "--trials", "1", "--replicates", "1"]) == 0, \
        capsys.readouterr().err[-3000:]
    rows = pd.read_parquet(out / "results.parquet")
    assert {"oracle", "constant", "cosine"} <= set(rows["method"])
    assert {p.name for p in (out / "ledger").glob("oracle-*.json")} == oracle_rows  # the Oracle was reused
    density = rows[(rows["method"] == "oracle") & (rows["cycle"] == 1)]["density"]
    assert density.round(1).eq(64.0).all()  # the file's rate 0.36, pruned on the custom CNN's weights
    assert (out / "report.md").exists()


def _where(module: str) -> str:
    import importlib

    return importlib.import_module(module).__file__


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> Path:
    """The example copied outside the repository under a fresh name, `custom_cnn_shipped`: only the driver can
    import it from there (the folder returned, for sys.path). One copy for both tests: a process that joined a
    cluster with one py_modules environment does not get another one applied when it joins again (Ray 2.60)."""
    code = tmp_path_factory.mktemp("code")
    shutil.copytree(EXAMPLE, code / "custom_cnn_shipped", ignore=shutil.ignore_patterns("__pycache__"))
    (code / "custom_cnn_shipped" / "__init__.py").write_text("")
    return code


@pytest.mark.slow
def test_the_users_module_reaches_the_workers_of_a_two_node_cluster(two_nodes, shipped, tmp_path, monkeypatch):
    """The workers on both nodes must get the user's package through the runtime environment's py_modules."""
    monkeypatch.syspath_prepend(str(shipped))
    spec = dataclasses.replace(
        base_spec("tiny", load(EXAMPLE / "experiment.toml").spec), cycles=1, epochs=2,
        model="custom_cnn_shipped.model:small_cnn", dataset="custom_cnn_shipped.data:bars",
        resources=Resources(cpus_per_trial=ONE_A_NODE, storage_path=str(tmp_path / "shared")))

    nodes = two_nodes.nodes
    trial = lambda cycle, lr, start: Training(key=f"c{cycle}-lr{lr}", spec=spec, cycle=cycle, max_lr=lr, seed=0,
                                           start_checkpoint=start)
    with own_runner(out=tmp_path / "out", spec=spec, experiment="shipped", address=two_nodes.address,
                    progress=Progress(io.StringIO())) as runner:
        first = runner.run([trial(0, lr, None) for lr in (0.05, 0.1, 0.2, 0.4)])
        best = max(first.values(), key=lambda r: r["val_acc"])
        second = runner.run([trial(1, lr, best["checkpoint"]) for lr in (0.1, 0.4)])
    on = lambda node: NodeAffinitySchedulingStrategy(node, soft=False)
    task = ray.remote(_where)  # the same job, so the same runtime environment as the trials
    where = ray.get([task.options(num_cpus=0, scheduling_strategy=on(n)).remote("custom_cnn_shipped") for n in nodes],
                    timeout=120)

    assert {r["node_id"] for r in first.values()} == nodes  # both nodes imported the user's code
    assert all(r["start_hash"] == best["checkpoint_hash"] for r in second.values())  # the chain's fingerprint held
    assert all(r["density"] == pytest.approx(64.0, abs=0.1) for r in second.values())
    assert not any(w.startswith(str(shipped)) for w in where)  # not the driver's copy...
    assert all("runtime_resources" in w for w in where)  # ...but the one Ray shipped


@pytest.mark.slow
def test_oracle_trains_the_examples_dataset_and_loss_on_both_nodes_of_a_two_node_cluster(two_nodes, shipped, tmp_path,
                                                                                          monkeypatch, capsys):
    """`oracle` on the example's Dataset form (a per-sample transform, streamed by a DataLoader: two CPUs a trial, so
    one loader worker) and its label-smoothing loss, both by import path, on two worker nodes that can import them
    only through the runtime environment Ray ships."""
    monkeypatch.syspath_prepend(str(shipped))
    out = tmp_path / "dataset-loss"
    code = cli(["oracle", "--config", str(EXAMPLE / "experiment.toml"), "--model", "custom_cnn_shipped.model:small_cnn",
                "--dataset", "custom_cnn_shipped.data:bars_dataset",
                "--loss", "custom_cnn_shipped.losses:label_smoothing",
                "--address", two_nodes.address, "--cpus-per-trial", "2", "--storage-path", str(tmp_path / "shared"),
                "--out", str(out), *ORACLE_QUICK])
    assert code == 0, capsys.readouterr().err[-3000:]
    rows = pd.read_parquet(out / "results.parquet")
    assert len(rows) == 4 and set(rows["node_id"]) == two_nodes.nodes  # 2 max_lr x 2 cycles, on both nodes
    assert rows["density"].round(1).tolist().count(64.0) == 2  # cycle 1 chained and pruned
    sources = json.loads((out / "sources.json").read_text())
    for kind, file in (("dataset", "data.py"), ("loss", "losses.py")):
        shipped_file = shipped / "custom_cnn_shipped" / file
        assert sources[kind]["sha256"] == hashlib.sha256(shipped_file.read_bytes()).hexdigest()
    assert json.loads((out / "spec.json").read_text())["loss"] == "custom_cnn_shipped.losses:label_smoothing"


def test_the_python_api_exports_the_pipeline():
    import oracle_search
    from oracle_search import pipeline

    assert oracle_search.compare is pipeline.compare and oracle_search.report is pipeline.report
    assert {"ExperimentSpec", "compare", "oracle", "fit_silo", "baselines", "report"} <= set(oracle_search.__all__)
    with pytest.raises(AttributeError):
        oracle_search.no_such_name


@pytest.mark.slow
def test_the_examples_python_api_runs_compare_on_a_two_node_cluster(two_nodes, shipped, tmp_path, monkeypatch,
                                                                   capsys):
    """`examples/custom_cnn/run.py` (compare by import path through `from oracle_search import ...`, printing the
    report's path), its quick mode on two worker nodes that can import the user's package only through the runtime
    environment Ray ships: the copied example's own run.py, its spec pointed at the copy."""
    import importlib

    monkeypatch.syspath_prepend(str(shipped))
    run = importlib.import_module("custom_cnn_shipped.run")
    experiment = run.experiment
    monkeypatch.setattr(run, "experiment", lambda **changes: experiment(**changes | dict(
        model="custom_cnn_shipped.model:small_cnn", dataset="custom_cnn_shipped.data:bars", grid=(0.1, 0.4),
        resources=Resources(cpus_per_trial=ONE_A_NODE, storage_path=str(tmp_path / "shared")))))
    monkeypatch.setenv("RAY_ADDRESS", two_nodes.address)  # as inside a Ray job: run.py names no cluster
    out = tmp_path / "api"
    run.main(str(out), quick=True)

    assert f"report: {out / 'report.html'}" in capsys.readouterr().out
    rows = pd.read_parquet(out / "results.parquet")
    assert {"oracle", "silo_paper", "silo_fit", "warmup", "constant", "cosine"} <= set(rows["method"])
    assert set(rows.loc[~rows["reused"], "node_id"]) == two_nodes.nodes  # both nodes trained the user's model
    spec = json.loads((out / "spec.json").read_text())
    assert spec["model"] == "custom_cnn_shipped.model:small_cnn" and spec["dataset"] == "custom_cnn_shipped.data:bars"
    assert set(rows[rows["stage"] == "final"]["seed"]) == {1000, 1001}
    assert (out / "report.md").exists()
