"""Every script in benchmarks/ runs its smallest configuration (`--smoke`) and ends with its result line, so a
change elsewhere cannot break a benchmark unseen. Numbers are not checked, only the last line's format (and, where
a benchmark checks something itself, that check)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

N = r"\d+\.\d\d"  # a number printed with two decimals
# The last line of each benchmark's output; a new script in benchmarks/ fails here until it has an entry.
LAST_LINE = {
    "committed_verdicts.py": r"committed_verdicts: \d+ comparisons over \d+ run\(s\)",
    "cpu_amp.py": rf"MLP training step, one thread, batch 128: float32 {N} ms, bf16 autocast {N} ms; "
                  rf"fp32 / bf16 = {N}",
    "delta_search.py": r"delta_search: the same δ as the earlier rule on \d+ of \d+ runs, within the run's bracket on "
                       r"\d+ of \d+; chains \d+ against \d+ \(\d+ %\)",
    "eval_batch.py": rf"eval_batch: 512 / chosen \(\d+\) = {N}",
    "eval_noise.py": rf"evaluation share of the variance = {N}: (above a quarter: enlarge the validation set|"
                     r"at most a quarter: keep it)",
    "fused_throughput.py": rf"resnet20 +2 native +{N} +{N} +\d+ +\d+ +{N}  {N}-{N} \| {N}-{N}",
    "job_walls.py": rf"job_walls: side by side {N}, one after another {N}",
    "loader_throughput.py": r"loader_throughput: data img/s tensor=\d+ w0=\d+ w1=\d+ \| train img/s tensor=\d+ "
                            r"w0=\d+ w1=\d+",
    "gpu_tune_trial.py": r"fused trial ok: gpu_ids \[[^]]+\], device cpu; max_lr 0\.01: val \d+\.\d % in \d+\.\d s, "
                         r"max_lr 0\.02: val \d+\.\d % in \d+\.\d s",
    "oracle_overhead.py": r"load average now \d+\.\d",
    "racing_error.py": r'\{"divergence:shipped": \{"rule_value": [0-9.e-]+, "rule_race": .*"races": 10\}\}',
    "sequential_fwer.py": r'\{"benchmark": "sequential_fwer", "sims": 200, "seed": 61, "cells": \[.*\], "seconds": .*\}',
    "silo_vs_oracle.py": rf"  [a-z_]+ +last-cycle test accuracy {N} ± {N} \(n=\d+\)",
    "step_efficiency.py": rf"step / matmul = {N}",
    "train_throughput.py": rf"resnet20 +\d+ +\d+ +{N}",
}
# What a benchmark checks itself, or a line that must be there besides the last one.
ALSO = {
    "oracle_overhead.py": r"selected trials that differ between the two: 0 of 2",  # Ray and one process agree
    "step_efficiency.py": r"fp32, pruned \(cycle >= 1\): step median",  # the pruned network's line
    "gpu_tune_trial.py": r"cycle trial ok: gpu_ids \[[^]]+\], device cpu",
}
RAY_SCRIPTS = {"gpu_tune_trial.py", "oracle_overhead.py", "silo_vs_oracle.py"}  # they start or join a Ray
SCRIPTS = [pytest.param(p.name, marks=[pytest.mark.ray] if p.name in RAY_SCRIPTS else [])
           for p in sorted((ROOT / "benchmarks").glob("*.py"))]


@pytest.mark.slow  # 2-3 minutes in all on 2 cores
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_runs_its_smoke_configuration(script, request, tmp_path):
    args = [sys.executable, str(ROOT / "benchmarks" / script), "--smoke"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.pop("RAY_ADDRESS", None)
    if script in ("oracle_overhead.py", "silo_vs_oracle.py"):
        # join the run's local Ray (conftest): its start-up is not what is tested here
        env["RAY_ADDRESS"] = request.getfixturevalue("ray_local")
    if script == "silo_vs_oracle.py":  # the suite's tiny comparison, copied: the smoke run resumes it, trains nothing
        shutil.copytree(request.getfixturevalue("tiny_compare").out, tmp_path / "cmp")
        args += ["--out", str(tmp_path / "cmp")]
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.rstrip("\n").splitlines()
    assert lines and re.fullmatch(LAST_LINE[script], lines[-1]), lines[-5:]
    if script in ALSO:
        assert re.search(ALSO[script], done.stdout), done.stdout[-3000:]
    if script == "silo_vs_oracle.py":  # resumed: no training beyond the copied ledger's
        assert sorted(p.name for p in (tmp_path / "cmp" / "ledger").iterdir()) == sorted(
            p.name for p in (request.getfixturevalue("tiny_compare").out / "ledger").iterdir())
