"""Precision follows the device: the resolution rule, its autocast, its recording in spec.json and every row."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from oracle_search.cli import build_parser, main, spec_from_args
from oracle_search.config import parse_args
from oracle_search.pipeline import prepare_out, resolve_run_precision
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


def test_fp16_trains_with_a_scaler_and_records_its_precision(monkeypatch):
    """The scaler acts: a step whose gradient is inf changes no weight and halves the scale (GradScaler's backoff);
    the next, finite step trains. And run_cycle in fp16 steps through such a scaler at every step."""
    from trainables import cycle
    from trainables.plugins import load_data
    from trainables.pruning import MaskedWeights

    cpu = torch.device("cpu")
    spec = dataclasses.replace(PRESETS["tiny"].spec, device="cpu", precision="fp16")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = precision.grad_scaler(cpu, "fp16")
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    poison = model.weight.register_hook(lambda grad: grad * float("inf"))  # an overflowed gradient
    before, scale = model.weight.detach().clone(), scaler.get_scale()
    cycle.train_step(model, optimizer, MaskedWeights(model, {}), x, y, spec, cpu, scaler)
    assert torch.equal(model.weight, before) and scaler.get_scale() == scale / 2  # skipped, and the scale dropped
    poison.remove()
    cycle.train_step(model, optimizer, MaskedWeights(model, {}), x, y, spec, cpu, scaler)
    assert not torch.equal(model.weight, before) and torch.isfinite(model.weight).all()

    made = []  # run_cycle's own scaler, kept to look at after the cycle
    monkeypatch.setattr(cycle, "grad_scaler", lambda *a: made.append(precision.grad_scaler(*a)) or made[-1])
    spec = dataclasses.replace(spec, epochs=2)
    result = cycle.run_cycle(spec, cycle=0, max_lr=0.05, seed=0)
    assert result.precision == "fp16" and not result.diverged and result.val_acc > 0
    steps = spec.epochs * -(-load_data(spec).size("train") // spec.batch_size)
    assert made and made[0].state_dict()["_growth_tracker"] == steps  # updated at every step, none skipped


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


def cpu_told(monkeypatch, flags: str) -> None:
    """This process's CPU flags, as $ORACLE_SEARCH_CPU_FLAGS tells them (the cache read anew)."""
    monkeypatch.setenv(precision.CPU_FLAGS_ENV, flags)
    precision.cpu_flags.cache_clear()


@pytest.fixture
def flags_restored():
    yield
    precision.cpu_flags.cache_clear()


def test_a_run_resolves_auto_once_and_a_resumed_run_keeps_it(tmp_path, monkeypatch, flags_restored):
    """Trials of a local run run here: auto is what this CPU runs natively, asked once; a resumed run keeps what
    spec.json recorded, even after the CPU it runs on answers otherwise."""
    spec = dataclasses.replace(PRESETS["tiny"].spec, device="cpu")
    out = tmp_path / "run"
    cpu_told(monkeypatch, "avx2 avx512_bf16")
    resolved = resolve_run_precision(spec, out, None)
    assert resolved.precision == "bf16"
    prepare_out(out, resolved)
    assert json.loads((out / "spec.json").read_text())["precision"] == "bf16"
    cpu_told(monkeypatch, "avx2")  # now an AVX2-only CPU: a new run would be fp32
    assert resolve_run_precision(spec, tmp_path / "new", None).precision == "fp32"
    assert resolve_run_precision(spec, out, None).precision == "bf16"
    recorded = dataclasses.replace(resolved, precision="fp16")
    prepare_out(out, recorded)
    assert resolve_run_precision(spec, out, None).precision == "fp16"
    assert resolve_run_precision(dataclasses.replace(spec, precision="fp32"), out, None).precision == "fp32"
    # Another experiment in the folder is still refused.
    with pytest.raises(SpecError, match="out"):
        prepare_out(out, dataclasses.replace(recorded, epochs=recorded.epochs + 1))


@pytest.mark.slow  # a Ray task on the shared two-node cluster: seconds
def test_on_a_cluster_a_run_takes_the_precision_of_a_worker_told_another_cpu(two_nodes, tmp_path, monkeypatch,
                                                                              flags_restored):
    """The driver is told a CPU with native bf16; the cluster's workers, through the job's environment, an AVX2-only
    CPU (fp32). The run's precision is the workers' answer. (On a CPU with native bf16, such as the EPYC these tests
    were written on, a worker not told would answer bf16: the driver's answer.)"""
    import ray

    cpu_told(monkeypatch, "avx2 avx512_bf16")
    ray.init(address=two_nodes.address, logging_level="WARNING", log_to_driver=False,
             runtime_env={"env_vars": {precision.CPU_FLAGS_ENV: "avx2 fma"}})
    spec = dataclasses.replace(PRESETS["tiny"].spec, device="cpu")
    assert precision.resolve_precision("auto", torch.device("cpu")) == "bf16"  # what the driver would answer
    assert resolve_run_precision(spec, tmp_path / "run", two_nodes.address).precision == "fp32"


def test_fp16_is_refused_in_the_fused_path_before_training():
    """run_fused_cycle resolves the precision, then refuses fp16 in one line naming the option (its step has no
    gradient scaler); nothing trains."""
    from trainables.fused import run_fused_cycle

    spec = dataclasses.replace(PRESETS["tiny"].spec, device="cpu", precision="fp16")
    with pytest.raises(SpecError, match=r"^precision: fp16 is never fused") as err:
        run_fused_cycle(spec, cycle=0, max_lrs=[0.05, 0.1], seed=0)
    assert "\n" not in str(err.value)
    run_fused_cycle(dataclasses.replace(spec, precision="fp32", epochs=1), cycle=0, max_lrs=[0.05, 0.1], seed=0)


@pytest.mark.slow  # a Ray task in a worker of its own environment: seconds
def test_the_probe_asks_the_worker_not_the_driver(ray_local):
    from oracle_search.cluster import probe_precision

    spec = dataclasses.replace(PRESETS["tiny"].spec, device="cpu")
    # The worker is told it is an AVX2-only CPU; the driver's own flags (whatever they are) must not matter.
    assert probe_precision(spec, None, env={precision.CPU_FLAGS_ENV: "avx2 fma"}) == "fp32"
    assert probe_precision(spec, None, env={precision.CPU_FLAGS_ENV: "avx2 avx512_bf16"}) == "bf16"
