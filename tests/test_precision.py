"""Precision follows the device: the resolution rule, its autocast, its recording in spec.json and every row."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from oracle_search.cli import build_parser, main, spec_from_args
from oracle_search.config import parse_args
from oracle_search.pipeline import prepare_out, resolve_precision as resolve_for_run
from trainables import precision
from trainables.presets import PRESETS
from trainables.spec import ExperimentSpec, SpecError

SPR_FLAGS = frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})  # e.g. Sapphire Rapids
ZEN2_FLAGS = frozenset({"avx", "avx2", "fma", "f16c"})  # an AVX2-only EPYC: no AVX-512 at all
ICELAKE_FLAGS = frozenset({"avx2", "avx512f", "avx512bw", "avx512_vnni"})  # AVX-512 without its bf16 part


@pytest.mark.parametrize("device_type,capability,flags,expected", [
    ("cuda", (9, 0), frozenset(), "bf16"),  # H100
    ("cuda", (8, 0), frozenset(), "bf16"),  # A100: the boundary is inclusive
    ("cuda", (7, 5), frozenset(), "fp16"),  # T4
    ("cuda", (7, 0), frozenset(), "fp16"),  # V100
    ("cpu", None, SPR_FLAGS, "bf16"),
    ("cpu", None, frozenset({"avx2", "avx512_bf16"}), "bf16"),  # either flag suffices
    ("cpu", None, frozenset({"avx2", "amx_bf16"}), "bf16"),
    ("cpu", None, ZEN2_FLAGS, "fp32"),
    ("cpu", None, ICELAKE_FLAGS, "fp32"),
    ("cpu", None, frozenset(), "fp32"),  # unknown CPU (no /proc/cpuinfo)
    ("mps", None, SPR_FLAGS, "fp32"),  # any other device
])
def test_native_precision_rule(device_type, capability, flags, expected):
    assert precision.native_precision(device_type, cuda_capability=capability, cpu_flags=flags) == expected


def test_cpu_flags_come_from_cpuinfo_or_the_override(monkeypatch):
    precision.cpu_flags.cache_clear()
    monkeypatch.setenv(precision.CPU_FLAGS_ENV, "avx2, fma")
    assert precision.cpu_flags() == {"avx2", "fma"}
    assert precision.resolve_precision("auto", torch.device("cpu")) == "fp32"
    assert precision.resolve_precision("bf16", torch.device("cpu")) == "bf16"  # explicit wins over the rule
    precision.cpu_flags.cache_clear()
    monkeypatch.delenv(precision.CPU_FLAGS_ENV)
    with open("/proc/cpuinfo") as f:
        line = next(line for line in f if line.startswith("flags"))
    assert precision.cpu_flags() == set(line.split(":", 1)[1].split())
    precision.cpu_flags.cache_clear()


@pytest.mark.parametrize("name,dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32)])
def test_autocast_runs_the_forward_pass_in_the_precision(name, dtype):
    layer = torch.nn.Linear(4, 3)
    with precision.autocast(torch.device("cpu"), name):
        out = layer(torch.randn(2, 4))
    assert out.dtype == dtype and layer.weight.dtype == torch.float32
    assert (precision.grad_scaler(torch.device("cpu"), name) is not None) == (name == "fp16")


def test_fp16_trains_with_a_scaler_and_records_its_precision(tmp_path):
    from trainables.cycle import run_cycle

    spec = dataclasses.replace(PRESETS["tiny"].spec, device="cpu", precision="fp16", epochs=2)
    result = run_cycle(spec, cycle=0, max_lr=0.05, seed=0)
    assert result.precision == "fp16" and not result.diverged and result.val_acc > 0


def test_spec_precision_is_validated_and_old_amp_still_loads():
    with pytest.raises(SpecError, match="precision"):
        ExperimentSpec(precision="int8")
    base = ExperimentSpec().to_dict()
    base.pop("precision")
    assert ExperimentSpec.from_dict(base | {"amp": True}).precision == "bf16"
    assert ExperimentSpec.from_dict(base | {"amp": False}).precision == "fp32"
    assert ExperimentSpec.from_dict(base).precision == "auto"


def test_the_command_line_takes_precision_and_no_amp_is_fp32(tmp_path):
    parse = lambda *a: spec_from_args(parse_args(build_parser(), ["oracle", "--out", "x", *a]))  # noqa: E731
    assert parse().precision == "auto"
    assert parse("--no-amp").precision == "fp32"
    assert parse("--precision", "fp16").precision == "fp16"
    (tmp_path / "old.toml").write_text("amp = false\n")  # an experiment file written before `precision`
    assert parse("--config", str(tmp_path / "old.toml")).precision == "fp32"
    (tmp_path / "new.toml").write_text('precision = "bf16"\n')
    assert parse("--config", str(tmp_path / "new.toml")).precision == "bf16"


def test_a_bad_precision_is_exit_2_naming_the_option(capsys):
    assert main(["cycle", "--max-lr", "0.1", "--cycle", "0", "--out", "x", "--precision", "fp8"]) == 2
    assert "precision" in capsys.readouterr().err


def test_cycle_json_prints_the_precision_used(tmp_path, capsys, monkeypatch):
    precision.cpu_flags.cache_clear()
    monkeypatch.setenv(precision.CPU_FLAGS_ENV, "avx2")  # an AVX2-only CPU: auto must train in fp32
    try:
        assert main(["cycle", "--preset", "tiny", "--max-lr", "0.1", "--cycle", "0", "--epochs", "1",
                     "--out", str(tmp_path), "--json"]) == 0
    finally:
        precision.cpu_flags.cache_clear()
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["precision"] == "fp32"


def test_a_run_resolves_auto_once_and_a_resumed_run_keeps_it(tmp_path, ray_local):
    spec = dataclasses.replace(PRESETS["tiny"].spec, device="cpu")
    out = tmp_path / "run"
    resolved = resolve_for_run(spec, out, None)  # asks a worker with one trial's resources
    assert resolved.precision == precision.resolve_precision("auto", torch.device("cpu"))
    prepare_out(out, resolved)
    assert json.loads((out / "spec.json").read_text())["precision"] == resolved.precision
    # Resuming on the same folder keeps the recorded precision, even where this machine would answer otherwise.
    recorded = dataclasses.replace(resolved, precision="fp16")
    prepare_out(out, recorded)
    assert resolve_for_run(spec, out, None).precision == "fp16"
    assert resolve_for_run(dataclasses.replace(spec, precision="fp32"), out, None).precision == "fp32"
    # Another experiment in the folder is still refused.
    with pytest.raises(SpecError, match="out"):
        prepare_out(out, dataclasses.replace(recorded, epochs=recorded.epochs + 1))


@pytest.mark.slow  # a Ray task in a worker of its own environment: seconds
def test_the_probe_asks_the_worker_not_the_driver(ray_local):
    from oracle_search.engine import probe_precision

    spec = dataclasses.replace(PRESETS["tiny"].spec, device="cpu")
    # The worker is told it is an AVX2-only CPU; the driver's own flags (whatever they are) must not matter.
    assert probe_precision(spec, None, env={precision.CPU_FLAGS_ENV: "avx2 fma"}) == "fp32"
    assert probe_precision(spec, None, env={precision.CPU_FLAGS_ENV: "avx2 avx512_bf16"}) == "bf16"
