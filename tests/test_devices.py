"""Pricing a GPU this machine does not have (`--dry-run --price-on NAME`, oracle_search.devices): the table's
lookup, its figures against the raw measurements they come from, the refusals at the edge, and the dry run priced
from the table."""
from __future__ import annotations

import dataclasses
import datetime
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from oracle_search import devices
from oracle_search.cli import main
from trainables.presets import PRESETS
from trainables.spec import Resources, SpecError

ROOT = Path(__file__).resolve().parents[1]
RESNET = PRESETS["resnet20-cifar10"].spec
HEAVY = ("torch", "ray", "pandas")


def on_gpus(spec, share: float):
    return dataclasses.replace(spec, resources=dataclasses.replace(spec.resources, gpus_per_trial=share))


def test_lookup_finds_each_entry_by_preset_and_device_in_any_case():
    for (preset, device), entry in devices.TABLE.items():
        assert devices.lookup(preset, device.upper()) is entry
        assert entry.preset == preset and entry.single.seconds_per_epoch > 0
    assert {d for _, d in devices.TABLE} >= {"h100", "h200"}


@pytest.mark.parametrize("preset, device, says", [
    ("resnet20-cifar10", "a100", "unknown device 'a100'"),
    ("mnist1d-mlp", "h100", "no measured figure for mnist1d-mlp on 'h100'"),
])
def test_lookup_refuses_what_it_does_not_know_naming_the_option_and_what_is_known(preset, device, says):
    with pytest.raises(SpecError) as err:
        devices.lookup(preset, device)
    assert err.value.field == "price-on" and says in str(err.value)
    for (p, d) in devices.TABLE:
        assert p in str(err.value) and d in str(err.value)


def test_each_entry_names_its_section_of_measured_md_and_raw_outputs_that_exist():
    measured = (ROOT / "docs" / "measured.md").read_text()
    for entry in devices.TABLE.values():
        assert f"## {entry.section}" in measured, entry.section
        assert entry.raw and all((ROOT / path).is_file() for path in entry.raw), entry.raw
        datetime.date.fromisoformat(entry.date)
        assert entry.torch and "stale once" in entry.stale_when


def _separate_ms(path: Path, model: str) -> float:
    """fused_throughput.py's separate step (ms) for `model` in one run (each K row repeats it)."""
    rows = {line.split()[3] for line in path.read_text().splitlines() if line.startswith(model + " ")}
    assert len(rows) == 1, rows
    return float(rows.pop())


def test_the_h100_resnet20_figures_follow_from_the_raw_outputs():
    """The fused figure is the probe's own line; the single figure is the median separate eager step x the epoch's
    352 steps, plus the probe's evaluation."""
    results = ROOT / "benchmarks" / "results"
    probe = (results / "h100-gpu-graphs-2026-11-27" / "run2" / "4_estimate.txt").read_text()
    per_epoch, evaluation = re.search(r"seconds per epoch: ([\d.]+) .* one evaluation (\d+) ms", probe).groups()
    entry = devices.lookup("resnet20-cifar10", "h100")
    assert entry.fused.seconds_per_epoch == float(per_epoch)
    steps = [_separate_ms(path, "resnet20") for path in (
        results / "h100-gpu-check-2026-11-26" / "run1" / "2_fused_throughput.txt",
        results / "h100-gpu-check-2026-11-26" / "run2" / "2_fused_throughput.txt",
        results / "h100-gpu-graphs-2026-11-27" / "run1" / "2_fused_throughput.txt")]
    expected = -(-45_000 // 128) * statistics.median(steps) / 1e3 + float(evaluation) / 1e3
    assert entry.single.seconds_per_epoch == pytest.approx(expected, rel=1e-3)


def test_the_h200_resnet20_figure_is_the_median_separate_step_of_its_runs():
    rows = [line.split() for run in ("run1", "run3")
            for line in (ROOT / "benchmarks" / "results" / f"h200-fused-throughput-{run}.txt").read_text().splitlines()
            if line.startswith("resnet20 ")]
    per_second = statistics.median(float(r[2]) for r in rows)
    entry = devices.lookup("resnet20-cifar10", "h200")
    steps = 352 * 128 / per_second
    assert entry.single.seconds_per_epoch - steps == pytest.approx(0.169, abs=1e-3)  # + the H100 probe's evaluation
    assert entry.fused is None


def test_price_takes_the_fused_figure_where_the_oracle_fuses_and_says_what_it_priced():
    h100 = devices.lookup("resnet20-cifar10", "h100")
    fused = devices.price(on_gpus(RESNET, 0.5), "h100", fuse=4)
    assert fused.seconds_per_epoch == h100.fused.seconds_per_epoch
    assert "NVIDIA H100" in fused.priced and "a candidate's share of a fused trial" in fused.priced
    assert h100.date in fused.priced and h100.section in fused.priced and "not rescaled" not in fused.source
    assert f"a training alone takes {h100.single.seconds_per_epoch:.4g} s an epoch" in fused.source
    alone = devices.price(RESNET, "h100", fuse=0)  # CPU trials: the default fuses nothing
    assert alone.seconds_per_epoch == h100.single.seconds_per_epoch and "a training alone" in alone.priced
    packed = devices.price(on_gpus(RESNET, 0.25), "h100", fuse=4)
    assert "4 trials a GPU, not measured and not rescaled" in packed.source
    h200 = devices.price(on_gpus(RESNET, 1), "h200", fuse=4)
    assert h200.seconds_per_epoch == devices.lookup("resnet20-cifar10", "h200").single.seconds_per_epoch
    assert "an upper bound for the fused phases" in h200.priced


def test_a_figure_past_its_age_is_flagged_stale():
    entry = devices.lookup("resnet20-cifar10", "h100")
    measured = datetime.date.fromisoformat(entry.date)
    fresh = devices.price(RESNET, "h100", 0, today=measured + datetime.timedelta(days=devices.STALE_DAYS))
    old = devices.price(RESNET, "h100", 0, today=measured + datetime.timedelta(days=devices.STALE_DAYS + 1))
    assert "STALE" not in fresh.priced and old.priced.endswith(f"; STALE: measured {devices.STALE_DAYS + 1} days ago")
    assert f"after {devices.STALE_DAYS} days" in old.source and old.seconds_per_epoch == fresh.seconds_per_epoch


@pytest.mark.parametrize("change", [{"model": "vgg19_bn"}, {"batch_size": 64}, {"precision": "fp32"}])
def test_a_spec_other_than_the_measured_preset_is_refused(change):
    with pytest.raises(SpecError) as err:
        devices.price(dataclasses.replace(RESNET, **change), "h100", 0)
    assert err.value.field == "price-on" and "--seconds-per-epoch" in str(err.value)


def _cli(tmp_path: Path, argv: list[str]) -> tuple[str, str, str]:
    """`main(argv)` in a fresh interpreter: its exit code and which heavy modules it loaded, then stderr."""
    code = ("import sys\nfrom oracle_search.cli import main\nrc = main(%r)\n"
            "print(rc, sorted(m for m in %r if m in sys.modules))\n") % (argv, HEAVY)
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    rc, heavy = done.stdout.strip().splitlines()[-1].split(" ", 1)
    return rc, heavy, done.stderr


@pytest.mark.parametrize("extra, says", [
    (["--dry-run", "--price-on", "a100"], "price-on: unknown device 'a100'; known: h100: "),
    (["--dry-run", "--price-on", "h100", "--seconds-per-epoch", "3"], "price-on: give --price-on NAME or "),
    (["--price-on", "h100", "--out", "run"], "price-on: only with --dry-run"),
    (["--dry-run", "--price-on", "h100", "--model", "vgg19_bn"], "price-on: h100's figure is resnet20-cifar10's"),
])
def test_the_command_line_refuses_in_one_line_before_torch_loads(tmp_path, extra, says):
    rc, heavy, err = _cli(tmp_path, ["compare", "--preset", "resnet20-cifar10", *extra])
    assert (rc, heavy) == ("2", "[]"), err[-2000:]
    assert err.count("\n") == 1 and err.startswith(f"oracle-search: error: {says}"), err
    assert not (tmp_path / "run").exists()


def test_an_unknown_preset_on_a_known_device_is_refused_too(tmp_path):
    rc, heavy, err = _cli(tmp_path, ["oracle", "--dry-run", "--price-on", "h100"])  # the default preset
    assert (rc, heavy) == ("2", "[]") and "no measured figure for mnist1d-mlp on 'h100'" in err


def _dry_run(capsys, argv: list[str]) -> list[str]:
    assert main(argv) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("share, figure", [(None, "single"), ("0.5", "fused")])
def test_the_dry_run_prices_the_named_gpu_as_the_table_says(capsys, share, figure):
    """The dry run with --price-on prints what it priced first, then the wall and its bound; the wall is the one the
    same dry run gives with the table's figure passed as --seconds-per-epoch."""
    argv = ["oracle", "--preset", "resnet20-cifar10", "--cycles", "1", "--dry-run", "--slots", "4",
            *(["--gpus-per-trial", share] if share else [])]
    entry = devices.lookup("resnet20-cifar10", "h100")
    seconds = getattr(entry, figure).seconds_per_epoch
    named = _dry_run(capsys, [*argv, "--price-on", "h100"])
    given = _dry_run(capsys, [*argv, "--seconds-per-epoch", repr(seconds)])
    assert named[0].startswith("oracle --dry-run: resnet20-cifar10")
    assert named[1].startswith(f"priced: an {entry.gpu} (--price-on h100), {seconds:.4g} s an epoch")
    assert given[1] == f"priced: a given figure, --seconds-per-epoch {seconds:g}"
    assert named[2].startswith("wall: ") and named[2] == given[2]
    assert named[3].startswith("bounded by ") and named[3] == given[3]
    assert named[4:] == [line.replace("(given)", f"({named_source(named)})") for line in given[4:]]


def named_source(lines: list[str]) -> str:
    """The source the named dry run printed for its seconds per epoch."""
    line = next(x for x in lines if x.startswith("seconds per epoch: "))
    return line.split(" (", 1)[1].removesuffix(")")


def test_without_a_figure_the_dry_run_says_it_priced_this_machines_cpu_by_name(capsys):
    """The probe's priced line names the CPU it timed (Linux: /proc/cpuinfo's model name)."""
    lines = _dry_run(capsys, ["oracle", "--preset", "tiny", "--dry-run"])
    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
             if line.startswith("model name")]
    assert lines[1].startswith("priced: this machine's CPU, ") and ", timed (cpu, " in lines[1]
    if names:
        assert lines[1].startswith(f"priced: this machine's CPU, {names[0]}, timed")
    assert lines[2].startswith("wall: ") and lines[3].startswith("bounded by ")
