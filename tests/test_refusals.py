"""Issue 62's bad input, refused at the command line's edge: one line naming the option, exit 2, nothing written,
and neither torch nor Ray imported (each command in a process of its own, under `python -X importtime`, which
lists every module the process imported). How long each takes is measured, not asserted here (docs/measured.md).

Of the issue's five: `--out /proc/x`, `--out` a file and a one-value `--grid` are tested for every driver command
in tests/test_cli.py (`test_an_out_that_cannot_be_a_folder_is_refused_before_torch_or_ray_load`,
`test_bad_values_are_refused_before_torch_or_ray_load`); a missing `--data-dir` is tested here, and
`paper-table docs/example`, which was slow because it loaded torch and Ray to read the replicates' manifest."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = {"torch", "ray"}


def cli(cwd: Path, *argv: str) -> tuple[subprocess.CompletedProcess, list[str], set[str]]:
    """The command line in a process of its own under `python -X importtime`, in `cwd`: the finished process, the
    lines it said on stderr (the import lines left out) and the top-level modules it imported."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "oracle_search.cli", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    lines = done.stderr.splitlines()
    said = [line for line in lines if not line.startswith("import time:")]
    imported = {line.split("|")[-1].strip().split(".")[0] for line in lines if line.startswith("import time:")}
    return done, said, imported


MISSING_DATA = {  # id: argv, --out (when the command takes one) added by the test
    "compare": ["compare", "--preset", "resnet20-cifar10"],
    "oracle": ["oracle", "--preset", "resnet20-cifar10"],
    "fit-silo": ["fit-silo", "--preset", "densenet40-cifar100"],
    "baselines": ["baselines", "--preset", "resnet20-cifar10"],
    "cycle": ["cycle", "--preset", "resnet20-cifar10", "--cycle", "0", "--max-lr", "0.1"],
    "premise": ["premise", "--preset", "resnet20-cifar10"],
    "imagenet": ["compare", "--preset", "resnet50-imagenet"],
}


@pytest.mark.parametrize("argv", MISSING_DATA.values(), ids=MISSING_DATA.keys())
@pytest.mark.parametrize("data_dir", ["nonexistent", "afile"])
def test_a_data_dir_that_is_not_a_folder_is_refused_before_torch_or_ray_load(tmp_path, argv, data_dir):
    """Issue 62: `--data-dir /nonexistent` with a CIFAR preset said so after 13.5 s, once torch and Ray had loaded."""
    (tmp_path / "afile").write_text("a file\n")
    done, said, imported = cli(tmp_path, *argv, "--data-dir", data_dir, "--out", "run")
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(said) == 1 and said[0].startswith("oracle-search: error: data-dir: "), said
    assert str(tmp_path / data_dir) in said[0]
    assert ("does not exist" if data_dir == "nonexistent" else "is a file") in said[0]
    assert not imported & HEAVY, sorted(imported & HEAVY)
    assert done.stdout == "" and [p.name for p in tmp_path.iterdir()] == ["afile"]  # no --out, no probe folder


def test_a_dry_run_that_would_time_missing_data_is_refused_with_the_way_to_price_it_without(tmp_path):
    """A dry run reads --data-dir only to time a few steps on it: refused before torch, saying how to price without
    the data; with --seconds-per-epoch nothing is read, so a folder of the cluster's that this machine lacks is
    fine (tests/test_docs_commands.py runs such dry runs)."""
    done, said, imported = cli(tmp_path, "compare", "--preset", "resnet20-cifar10", "--data-dir", "/nonexistent",
                               "--dry-run")
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(said) == 1 and said[0].startswith("oracle-search: error: data-dir: /nonexistent does not exist"), said
    assert "leave out --data-dir" in said[0] and "--seconds-per-epoch" in said[0]
    assert not imported & HEAVY, sorted(imported & HEAVY)
    assert done.stdout == "" and list(tmp_path.iterdir()) == []


def test_mnist1d_may_name_a_data_dir_it_will_make(tmp_path):
    """Only datasets read from files of a known layout are checked: MNIST-1D caches its generated data in
    --data-dir and makes the folder, so a new one is no error (here `--print-config` resolves it and stops)."""
    done, said, _ = cli(tmp_path, "compare", "--data-dir", "new-cache", "--print-config")
    assert done.returncode == 0, said
    assert f'data_dir = "{tmp_path / "new-cache"}"' in done.stdout


def test_paper_table_on_the_committed_example_loads_neither_torch_nor_ray(tmp_path):
    """Issue 62: `paper-table docs/example` took 13.7 s, most of it importing torch and Ray (the replicates'
    manifest was read through oracle_search.replicates, which imports the engine), and the report's figures (the
    check for runs given by hand as replicates; a replicates folder's are one study by construction). It reads
    tables: pandas and scipy only, and prints the table over the three replicates."""
    done, said, imported = cli(tmp_path, "paper-table", str(ROOT / "docs" / "example"))
    assert done.returncode == 0, said
    assert not imported & (HEAVY | {"matplotlib", "optuna"}), sorted(imported & (HEAVY | {"matplotlib", "optuna"}))
    assert "mean ± sample std over replicates (n = 3" in done.stdout.splitlines()[0], done.stdout[:500]
    assert done.stdout.count("\n| ") >= 5 and " ± " in done.stdout  # a row per method, mean ± std cells
    assert list(tmp_path.iterdir()) == []
