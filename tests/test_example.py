"""examples/custom_cnn: its model and dataset by import path, from its experiment file, through `oracle` and
`compare` on one machine, and through Ray's runtime environment on a two-node cluster (ray.cluster_utils)."""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import ray
from ray import cloudpickle
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from oracle_search.config import base_spec, load
from oracle_search.engine import Progress, Runner, Training
from trainables.spec import Resources

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import this test module

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "custom_cnn"
QUICK = ["--cycles", "1", "--epochs", "1", "--grid", "0.1,0.4", "--refine", "0"]


def test_the_example_file_names_the_example_by_import_path():
    spec = base_spec("tiny", load(EXAMPLE / "experiment.toml").spec)
    assert (spec.model, spec.dataset) == ("examples.custom_cnn.model:small_cnn", "examples.custom_cnn.data:bars")


def cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "oracle_search.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_oracle_then_compare_run_the_example_from_its_experiment_file(tmp_path):
    out = tmp_path / "custom-cnn"
    config = str(EXAMPLE / "experiment.toml")
    oracle = cli("oracle", "--config", config, "--out", str(out), *QUICK)
    assert oracle.returncode == 0, oracle.stderr[-3000:]
    stored = json.loads((out / "spec.json").read_text())
    assert stored["model"] == "examples.custom_cnn.model:small_cnn" and stored["weights"] == "rewind"
    sources = json.loads((out / "sources.json").read_text())
    assert sources["model"]["sha256"] == hashlib.sha256((EXAMPLE / "model.py").read_bytes()).hexdigest()
    assert sources["dataset"]["sha256"] == hashlib.sha256((EXAMPLE / "data.py").read_bytes()).hexdigest()
    oracle_rows = {p.name for p in (out / "ledger").glob("oracle-*.json")}
    assert len(oracle_rows) == 4  # 2 max_lr x 2 cycles; cycle 1 chained from the import-path model's checkpoint

    compare = cli("compare", "--config", config, "--out", str(out), *QUICK, "--trials", "1")
    assert compare.returncode == 0, compare.stderr[-3000:]
    rows = pd.read_parquet(out / "results.parquet")
    assert {"oracle", "constant", "cosine"} <= set(rows["method"])
    assert {p.name for p in (out / "ledger").glob("oracle-*.json")} == oracle_rows  # the Oracle was reused
    density = rows[(rows["method"] == "oracle") & (rows["cycle"] == 1)]["density"]
    assert density.round(1).eq(64.0).all()  # the file's rate 0.36, pruned on the custom CNN's weights
    assert (out / "report.md").exists()


def _where(module: str) -> str:
    import importlib

    return importlib.import_module(module).__file__


@pytest.mark.slow
def test_the_users_module_reaches_the_workers_of_a_two_node_cluster(make_cluster, tmp_path, monkeypatch):
    """The example, copied outside the repository under a fresh name: only the driver can import it from there,
    so the workers on both nodes must get it through the runtime environment's py_modules."""
    package = tmp_path / "code" / "custom_cnn_shipped"
    shutil.copytree(EXAMPLE, package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    spec = dataclasses.replace(
        base_spec("tiny", load(EXAMPLE / "experiment.toml").spec), cycles=1, epochs=2,
        model="custom_cnn_shipped.model:small_cnn", dataset="custom_cnn_shipped.data:bars",
        resources=Resources(cpus_per_trial=1, storage_path=str(tmp_path / "shared")))

    cluster = make_cluster(0)
    nodes = {cluster.add_node(num_cpus=1).node_id, cluster.add_node(num_cpus=1).node_id}
    trial = lambda cycle, lr, start: Training(key=f"c{cycle}-lr{lr}", spec=spec, cycle=cycle, max_lr=lr, seed=0,
                                           start_checkpoint=start)
    with Runner(out=tmp_path / "out", spec=spec, experiment="shipped", address=cluster.address,
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
    assert not any(w.startswith(str(tmp_path)) for w in where)  # not the driver's copy...
    assert all("runtime_resources" in w for w in where)  # ...but the one Ray shipped


@pytest.mark.slow
def test_the_example_runs_through_the_python_api(tmp_path):
    """`examples/custom_cnn/run.py`: compare by import path through `from oracle_search import ...`, returning the
    results table and the report's path."""
    out = tmp_path / "api"
    done = subprocess.run([sys.executable, "-m", "examples.custom_cnn.run", str(out), "--quick"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"report: {out / 'report.html'}" in done.stdout
    rows = pd.read_parquet(out / "results.parquet")
    assert {"oracle", "silo_paper", "silo_fit", "warmup"} <= set(rows["method"])
    spec = json.loads((out / "spec.json").read_text())
    assert spec["model"] == "examples.custom_cnn.model:small_cnn" and spec["dataset"] == "examples.custom_cnn.data:bars"
    assert set(rows[rows["stage"] == "final"]["seed"]) == {1000, 1001}


def test_the_python_api_exports_the_pipeline():
    import oracle_search
    from oracle_search import pipeline

    assert oracle_search.compare is pipeline.compare and oracle_search.report is pipeline.report
    assert {"ExperimentSpec", "compare", "oracle", "fit_silo", "baselines", "report"} <= set(oracle_search.__all__)
    with pytest.raises(AttributeError):
        oracle_search.no_such_name


@pytest.mark.slow
def test_compare_through_the_python_api_on_a_two_node_cluster(make_cluster, tmp_path, monkeypatch):
    """The whole comparison, by import path, through `oracle_search.compare`, on two worker nodes that can import
    the user's package only through the runtime environment Ray ships."""
    import oracle_search
    from oracle_search import CompareOptions, FitOptions, OracleOptions

    package = tmp_path / "code" / "custom_cnn_api"
    shutil.copytree(EXAMPLE, package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    spec = dataclasses.replace(
        base_spec("tiny", load(EXAMPLE / "experiment.toml").spec), cycles=1, epochs=1, grid=(0.1, 0.4),
        model="custom_cnn_api.model:small_cnn", dataset="custom_cnn_api.data:bars",
        resources=Resources(cpus_per_trial=1, storage_path=str(tmp_path / "shared")))
    cluster = make_cluster(0)
    nodes = {cluster.add_node(num_cpus=1).node_id, cluster.add_node(num_cpus=1).node_id}
    options = CompareOptions(oracle=OracleOptions(seeds=1, refine=0), fit=FitOptions(trials=1), eval_seeds=2)
    result = oracle_search.compare(spec, tmp_path / "out", options, address=cluster.address)
    rows = result.results
    assert {"oracle", "silo_paper", "silo_fit", "constant", "cosine"} <= set(rows["method"])
    assert set(rows.loc[~rows["reused"], "node_id"]) == nodes  # both nodes trained the user's model
    assert result.report.exists() and (tmp_path / "out" / "report.md").exists()
