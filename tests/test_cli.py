"""The command line: SILO rows of the paper's Oracle tables, the cycle command's row, and bad input -> exit 2."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import flip_middle_byte
from oracle_search.cli import build_parser, main, spec_from_args
from oracle_search.config import parse_args
from oracle_search.schema import write_results
from trainables.checkpoints import STATE_FILE, load_checkpoint

ROW_KEYS = {"experiment", "method", "schedule", "seed", "cycle", "density", "max_lr", "val_acc", "test_acc",
            "best_epoch", "epochs", "seconds", "device", "grad_std", "act_std", "diverged", "selected", "trial_id",
            "checkpoint", "epsilon", "delta", "q", "beta"}


def strict_json(text: str):
    """Parse as RFC 8259 JSON: NaN and Infinity are not JSON."""
    def reject(constant: str):
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=reject)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def silo_curve(capsys, epsilon: float, delta: float, q: int = 1, beta: float = 5.0, cycles: int = 13) -> list[dict]:
    code, out, _ = run(capsys, "silo-curve", "--epsilon", str(epsilon), "--delta", str(delta), "--q", str(q),
                       "--beta", str(beta), "--rate", "0.2", "--cycles", str(cycles), "--json")
    assert code == 0
    return strict_json(out)


def nearest_cycle(rows: list[dict], lam: float) -> dict:
    return min(rows, key=lambda r: abs(r["density"] - lam))


# (lambda, SILO max_lr in hundredths as printed) from the paper's two Oracle tables.
VGG19 = [(100, "4"), (51.3, "4.32"), (32.9, "9.2"), (21.1, "9.9"), (5.72, "9.99")]
RESNET20 = [(100, "3"), (51.3, "3.2"), (41.1, "4.7"), (32.9, "6.4"), (21.1, "6.9")]


@pytest.mark.parametrize("epsilon, delta, table", [(0.04, 0.06, VGG19), (0.03, 0.04, RESNET20)],
                         ids=["vgg19", "resnet20"])
def test_silo_curve_reproduces_the_papers_silo_rows(capsys, epsilon, delta, table):
    rows = silo_curve(capsys, epsilon, delta)
    assert [r["cycle"] for r in rows] == list(range(14))
    for lam, printed in table:
        row = nearest_cycle(rows, lam)
        assert row["density"] == pytest.approx(100 * 0.8 ** row["cycle"])
        computed = 100 * row["max_lr"]  # in hundredths, as the tables are
        decimals = len(printed.split(".")[1]) if "." in printed else 0
        # The paper rounds inconsistently (9.17 -> 9.2 but 9.966 -> 9.9 and 6.978 -> 6.9), so allow one unit
        # of the last printed digit rather than exact rounding.
        assert abs(computed - float(printed)) <= 10 ** -decimals + 1e-9, (lam, computed, printed)


def test_silo_curve_exact_algorithm_1_values(capsys):
    rows = silo_curve(capsys, 0.04, 0.06, q=2, cycles=4)
    assert [r["max_lr"] for r in rows[:3]] == [0.04, 0.04, 0.04]  # m <= q: epsilon exactly
    # By hand, m = 3, q = 2: gamma = 1 - 0.8 = 0.2, gamma / (1 - gamma) = 1/4, (1/4)^-5 = 1024,
    # so max_lr = 0.04 + 0.06 / 1025.
    assert rows[3]["max_lr"] == pytest.approx(0.04 + 0.06 / 1025, rel=1e-12)
    # m = 4, q = 2: gamma = 0.36, ratio 9/16, (9/16)^-5 = 1048576 / 59049.
    assert rows[4]["max_lr"] == pytest.approx(0.04 + 0.06 * 59049 / 1107625, rel=1e-12)


def test_silo_curve_table(capsys):
    code, out, _ = run(capsys, "silo-curve", "--epsilon", "0.04", "--delta", "0.06", "--q", "1", "--beta", "5",
                       "--rate", "0.2", "--cycles", "3")
    assert code == 0
    assert out.splitlines()[-1].split() == ["3", "51.20", "0.04320"]


def test_presets_lists_the_embedded_ones(capsys):
    code, out, _ = run(capsys, "presets")
    assert code == 0
    names = {line.split()[0] for line in out.splitlines() if line and not line.startswith(" ")}
    assert {"mnist1d-mlp", "digits-mlp", "tiny"} <= names


@pytest.mark.slow  # a real training of several seconds: the fast lane stays under a minute
def test_cycle_json_row_and_chain(capsys, tmp_path):
    code, out, err = run(capsys, "cycle", "--preset", "tiny", "--max-lr", "0.1", "--cycle", "0",
                         "--out", str(tmp_path / "run"), "--json")
    assert code == 0, err
    assert len(out.strip().splitlines()) == 1
    row = strict_json(out)
    assert isinstance(row, dict) and ROW_KEYS <= row.keys()
    assert row["cycle"] == 0 and row["density"] == 100.0 and row["max_lr"] == 0.1 and row["selected"] is True
    assert Path(row["checkpoint"]).is_dir() and Path(row["checkpoint"]).parent == tmp_path / "run"
    assert load_checkpoint(row["checkpoint"])["cycle"] == 0

    code, out, err = run(capsys, "cycle", "--preset", "tiny", "--max-lr", "0.1", "--cycle", "1",
                         "--start", row["checkpoint"], "--out", str(tmp_path / "run"), "--json")
    assert code == 0, err
    chained = strict_json(out)
    assert chained["density"] == pytest.approx(80.0, abs=0.1) and Path(chained["checkpoint"]).is_dir()
    assert row["method"] == row["schedule"] == "warmup" and row["epsilon"] is None  # not SILO: no curve


def test_cycle_runs_on_the_threads_a_trial_of_the_spec_gets(capsys, tmp_path, monkeypatch):
    """A trial runs torch on its whole CPUs (tune_adapter), so `cycle` does too: 1 thread by default, 2 with
    --cpus-per-trial 2; this process's own setting comes back afterwards."""
    import torch

    import trainables.cycle

    seen, real = [], trainables.cycle.run_cycle
    monkeypatch.setattr(trainables.cycle, "run_cycle", lambda *a, **k: seen.append(torch.get_num_threads())
                        or real(*a, **k))
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        for extra in ([], ["--cpus-per-trial", "2"]):
            code, _, err = run(capsys, "cycle", "--preset", "tiny", "--epochs", "1", "--max-lr", "0.1", "--cycle",
                               "0", "--out", str(tmp_path / "run"), *extra)
            assert code == 0, err
            assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
    assert seen == [1, 2]


@pytest.mark.slow  # a real training of several seconds: the fast lane stays under a minute
def test_cycle_json_silo_row_carries_its_curve(capsys, tmp_path):
    code, out, err = run(capsys, "cycle", "--preset", "tiny", "--schedule", "silo", "--max-lr", "0.3",
                         "--cycle", "0", "--out", str(tmp_path / "run"), "--json")
    assert code == 0, err
    row = strict_json(out)
    assert row["method"] == "silo" and (row["epsilon"], row["delta"], row["q"], row["beta"]) == (0.05, 0.1, 1, 5.0)
    assert row["max_lr"] == 0.05  # cycle 0 <= q: epsilon, whatever --max-lr says


@pytest.fixture(scope="module")
def corrupt_start(tmp_path_factory) -> str:
    """A real cycle-0 checkpoint written by `cycle`, with one byte of its state flipped."""
    out = tmp_path_factory.mktemp("start")
    assert main(["cycle", "--preset", "tiny", "--max-lr", "0.1", "--cycle", "0", "--out", str(out)]) == 0
    (ckpt,) = [p for p in out.iterdir() if p.is_dir()]
    flip_middle_byte(ckpt / STATE_FILE)
    return str(ckpt)


CYCLE = ["cycle", "--preset", "tiny", "--cycle", "0", "--max-lr", "0.1"]
SILO = ["silo-curve", "--epsilon", "0.04", "--delta", "0.06", "--q", "1", "--beta", "5", "--rate", "0.2",
        "--cycles", "5"]


def replace(argv: list[str], option: str, value: str) -> list[str]:
    i = argv.index(option)
    return argv[:i + 1] + [value] + argv[i + 2:]


BAD_INPUTS = {  # id: (argv without --out, text the message must name)
    "max-lr-zero": (replace(CYCLE, "--max-lr", "0"), "max-lr"),
    "max-lr-negative": (replace(CYCLE, "--max-lr", "-0.1"), "max-lr"),
    "epochs-zero": (CYCLE + ["--epochs", "0"], "epochs"),
    "rate-above-one": (CYCLE + ["--rate", "1.5"], "rate"),
    "silo-q-negative": (replace(SILO, "--q", "-1"), "q"),
    "silo-beta-zero": (replace(SILO, "--beta", "0"), "beta"),
    "unknown-model": (CYCLE + ["--model", "transformer9000"], "model"),
    "unknown-pruner": (CYCLE + ["--pruner", "snip"], "pruner"),
    "unknown-dataset": (CYCLE + ["--dataset", "mnist"], "dataset"),
    "unknown-schedule": (CYCLE + ["--schedule", "step"], "--schedule"),
    "unknown-optimizer": (CYCLE + ["--optimizer", "lbfgs"], "optimizer"),
    "cifar-missing-folder": (CYCLE + ["--dataset", "cifar10", "--data-dir", "/nonexistent/cifar"], "data-dir"),
    "cycle-1-without-start": (replace(CYCLE, "--cycle", "1"), "start"),
    "cycle-beyond-cycles": (replace(CYCLE, "--cycle", "7"), "cycle"),
    "start-missing": (replace(CYCLE, "--cycle", "1") + ["--start", "/nonexistent/ckpt"], "start"),
    "unknown-preset": (replace(CYCLE, "--preset", "alexnet-mnist"), "preset"),
    "max-lr-not-a-number": (replace(CYCLE, "--max-lr", "fast"), "--max-lr"),
    "oracle-grid-negative": (["oracle", "--preset", "tiny", "--grid", "0.1,-0.2"], "grid"),
    "oracle-grid-log-reversed": (["oracle", "--preset", "tiny", "--grid", "log:1:0.01:4"], "grid"),
    "oracle-grid-garbage": (["oracle", "--preset", "tiny", "--grid", "lots"], "grid"),
    "oracle-seeds-zero": (["oracle", "--preset", "tiny", "--tuning-seeds", "0"], "seeds"),
    "oracle-unknown-preset": (["oracle", "--preset", "nope"], "preset"),
    "oracle-schedule-silo": (["oracle", "--preset", "tiny", "--schedule", "silo"], "schedule"),
    "compare-schedule-silo": (["compare", "--preset", "tiny", "--schedule", "silo"], "schedule"),
    "digits-num-samples-too-many": (CYCLE + ["--dataset", "digits", "--num-samples", "5000"], "num-samples"),
}


@pytest.mark.parametrize("argv, field", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_exits_2_naming_the_field_and_writes_nothing(capsys, tmp_path, argv, field):
    out = tmp_path / "out"
    code, stdout, err = run(capsys, *argv, *(["--out", str(out)] if argv[0] != "silo-curve" else []))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("oracle-search: error: "), err
    assert field in lines[0]
    assert stdout == "" and not out.exists()


def test_corrupt_start_exits_2_naming_start_and_the_file(capsys, tmp_path, corrupt_start):
    out = tmp_path / "out"
    code, stdout, err = run(capsys, *replace(CYCLE, "--cycle", "1"), "--start", corrupt_start, "--out", str(out))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("oracle-search: error: start: "), err
    assert str(Path(corrupt_start) / STATE_FILE) in lines[0]
    assert stdout == "" and not out.exists()


def test_start_from_another_experiment_exits_2(capsys, tmp_path):
    first = tmp_path / "first"
    assert main([*CYCLE, "--out", str(first)]) == 0
    (ckpt,) = [p for p in first.iterdir() if p.is_dir()]
    out = tmp_path / "out"
    code, _, err = run(capsys, *replace(CYCLE, "--cycle", "1"), "--rate", "0.5", "--start", str(ckpt),
                       "--out", str(out))
    assert code == 2 and err.startswith("oracle-search: error: start: ") and "different experiment" in err
    assert not out.exists()


def test_report_without_results_exits_2(capsys, tmp_path):
    code, _, err = run(capsys, "report", str(tmp_path))
    assert code == 2 and "RUN" in err and not (tmp_path / "report.md").exists()


def test_storage_path_defaults_to_the_clusters_variable(monkeypatch):
    monkeypatch.setenv("ORACLE_SEARCH_STORAGE", "s3://bucket/oracle-search")
    parse = lambda *a: spec_from_args(build_parser().parse_args(["oracle", "--out", "x", *a]))  # noqa: E731
    assert parse().resources.storage_path == "s3://bucket/oracle-search"
    assert parse("--storage-path", "/shared/tune").resources.storage_path == "/shared/tune"  # the option wins
    monkeypatch.delenv("ORACLE_SEARCH_STORAGE")
    assert parse().resources.storage_path is None


@pytest.fixture
def results_dir(tmp_path, capsys) -> Path:
    """A results folder holding the real row of one trained cycle, written by the results writer."""
    code, out, err = run(capsys, *CYCLE, "--out", str(tmp_path / "ckpt"), "--json")
    assert code == 0, err
    row = strict_json(out) | {"key": "single", "gpu_ids": []}
    write_results(tmp_path, [row])
    return tmp_path


def test_report_renders_a_valid_table(capsys, results_dir):
    code, out, err = run(capsys, "report", str(results_dir))
    assert code == 0, err
    assert (results_dir / "report.md").exists()


def test_report_on_a_table_missing_a_column_exits_2_naming_it(capsys, results_dir):
    table = results_dir / "results.parquet"
    import pandas as pd

    pd.read_parquet(table).drop(columns=["val_acc"]).to_parquet(table)
    code, out, err = run(capsys, "report", str(results_dir))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "val_acc" in lines[0] and str(table) in lines[0], err
    assert not (results_dir / "report.md").exists()


def test_report_on_a_corrupt_parquet_exits_2_naming_the_file(capsys, results_dir):
    table = results_dir / "results.parquet"
    table.write_bytes(table.read_bytes()[: len(table.read_bytes()) // 2])
    code, out, err = run(capsys, "report", str(results_dir))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("oracle-search: error: RUN: "), err
    assert str(table) in lines[0]
    assert not (results_dir / "report.md").exists()


# Refused before anything loads (issue 52): checks that need no torch, Ray or data run before either is imported.
REFUSED_AT_ONCE = {  # id: (argv without --out, text the one line must name)
    "compare-one-tuning-seed": (["compare", "--tuning-seeds", "1"], "tuning-seeds"),
    "compare-one-seed-by-its-old-name": (["compare", "--seeds", "1"], "tuning-seeds"),
    "compare-rate": (["compare", "--rate", "1.5"], "rate"),
    "compare-margin": (["compare", "--margin", "-1"], "margin"),
    "compare-replicates": (["compare", "--replicates", "0"], "replicates"),
    "compare-target-cycle": (["compare", "--target-cycle", "99"], "target-cycle"),
    "compare-lin-grid": (["compare", "--grid", "lin:0.1:0.05:0.01"], "--grid"),
    "compare-one-value-grid": (["compare", "--preset", "tiny", "--grid", "0.1"], "--grid"),
    "oracle-one-value-grid": (["oracle", "--preset", "tiny", "--grid", "0.1"], "--grid"),
    "compare-epsilon-range": (["compare", "--epsilon-range", "0.2:0.1"], "epsilon-range"),
    "compare-dry-run-slots": (["compare", "--dry-run", "--slots", "0"], "slots"),
    "fit-silo-no-trial": (["fit-silo", "--trials", "0"], "trials"),
    "oracle-seconds-per-epoch": (["oracle", "--dry-run", "--seconds-per-epoch", "-1"], "seconds-per-epoch"),
    "cycle-max-lr": (["cycle", "--cycle", "0", "--max-lr", "0"], "max-lr"),
    "report-margin": (["report", "RUN", "--margin", "-1"], "margin"),
    "replay-slots": (["replay", "RUN", "--slots", "0"], "slots"),
}
HEAVY = {"torch", "ray", "optuna", "scipy"}


@pytest.mark.parametrize("argv, name", REFUSED_AT_ONCE.values(), ids=REFUSED_AT_ONCE.keys())
def test_bad_values_are_refused_before_torch_or_ray_load(tmp_path, argv, name):
    """A process of its own, under `python -X importtime` (one line per module imported, on stderr): exit 2, one
    line naming the option, none of torch, Ray, Optuna or scipy imported, and nothing written (the working folder
    and --out stay empty)."""
    argv = [str(tmp_path / "run") if a == "RUN" else a for a in argv]
    done, said, imported = cli_with_importtime(tmp_path, *argv, "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(said) == 1 and said[0].startswith("oracle-search: error: ") and name in said[0], said
    assert not imported & HEAVY, sorted(imported & HEAVY)
    assert done.stdout == "" and list(tmp_path.iterdir()) == []


def cli_with_importtime(cwd: Path, *argv: str) -> tuple[subprocess.CompletedProcess, list[str], set[str]]:
    """The command line in a process of its own under `python -X importtime`: the finished process, the lines it
    said on stderr (the import lines left out) and the top-level modules it imported."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]),
                                                      os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "oracle_search.cli", *argv],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    lines = done.stderr.splitlines()
    said = [line for line in lines if not line.startswith("import time:")]
    imported = {line.split("|")[-1].strip().split(".")[0] for line in lines if line.startswith("import time:")}
    return done, said, imported


BAD_OUT = {  # id: --out, relative to the working folder, which holds one file, `afile`
    "under-proc": "/proc/oracle-search-out",  # /proc takes no new folder, not even root's
    "a-file": "afile",
    "under-a-file": "afile/run",
}


@pytest.mark.parametrize("command", ["compare", "oracle", "fit-silo", "baselines"])
@pytest.mark.parametrize("out", BAD_OUT.values(), ids=BAD_OUT.keys())
def test_an_out_that_cannot_be_a_folder_is_refused_before_torch_or_ray_load(tmp_path, command, out):
    """Issue 62: `--out /proc/x` was a 35-line traceback after 16 s, `--out afile` one line after 15 s (both once
    torch and Ray had loaded). Now: exit 2, one line naming --out, nothing heavy imported, nothing made."""
    if out.startswith("/proc") and not Path("/proc/self").is_dir():
        pytest.skip("no /proc here")
    (tmp_path / "afile").write_text("a file\n")
    done, said, imported = cli_with_importtime(tmp_path, command, "--preset", "tiny", "--out", out)
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(said) == 1 and said[0].startswith("oracle-search: error: out: ") and "--out" in said[0], said
    assert not imported & HEAVY, sorted(imported & HEAVY)
    assert done.stdout == "" and [p.name for p in tmp_path.iterdir()] == ["afile"]
    assert (tmp_path / "afile").read_text() == "a file\n" and not Path("/proc/oracle-search-out").exists()


def test_the_lock_refuses_an_out_it_cannot_make_in_one_line():
    """The Python API's drivers take the lock without the command line's check: a SpecError naming out, not a
    FileNotFoundError."""
    from oracle_search.lock import acquire
    from trainables.spec import SpecError

    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc here")
    with pytest.raises(SpecError, match="cannot be written") as found:
        acquire(Path("/proc/oracle-search-out"), "compare")
    assert found.value.field == "out"


@pytest.mark.parametrize("command", ["compare", "oracle"])
def test_a_dry_run_needs_no_out_and_writes_nothing(tmp_path, capsys, monkeypatch, command):
    """Issue 62: the README's `compare --dry-run` failed with `the following arguments are required: --out`. A dry
    run writes nothing, so it needs no --out: it prints the plan and the estimate, and the folder stays empty."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, command, "--preset", "tiny", "--precision", "fp32", "--seconds-per-epoch", "0.01",
                         "--dry-run")
    assert code == 0, err
    assert out.startswith(f"{command} --dry-run: tiny, ") and "seconds per epoch: 0.01 (given)" in out
    assert "\nestimate: " in out and "\ntotal " in out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["compare", "oracle", "fit-silo", "baselines"])
def test_a_run_still_needs_out(tmp_path, capsys, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, command, "--preset", "tiny")
    assert code == 2 and out == "" and list(tmp_path.iterdir()) == []
    assert err == "oracle-search: error: the following arguments are required: --out\n"


HELP_HEAVY = HEAVY | {"pandas", "matplotlib", "torchvision"}


def test_every_help_imports_none_of_the_heavy_libraries(tmp_path):
    """`--help`, and each command's: one process, every help printed (exit 0), and none of torch, Ray, Optuna,
    scipy, pandas, matplotlib or torchvision imported (the command line imports the project's heavy modules inside
    the functions that need them, each saying so: tests/test_packages.py)."""
    commands = sorted(build_parser()._subparsers._group_actions[0].choices)
    code = ("import sys\nfrom oracle_search.cli import main\n"
            f"for argv in [[], *[[c] for c in {commands!r}]]:\n"
            "    try:\n        main([*argv, '--help'])\n    except SystemExit as done:\n"
            "        assert done.code == 0, (argv, done.code)\n"
            f"print(sorted(m for m in {sorted(HELP_HEAVY)!r} if m in sys.modules))\n")
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]),
                                                      os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(commands) >= 10 and done.stdout.count("usage: oracle-search") == len(commands) + 1
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout.strip().splitlines()[-1]
