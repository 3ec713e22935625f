"""Experiment files (--config, TOML or a run's spec.json): flags override them, --print-config writes the resolved
experiment and reads back to the same spec, unknown keys and bad values exit 2 naming them."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from oracle_search import config
from oracle_search.config import tomllib  # tomli on Python 3.10
from oracle_search.cli import build_parser, main, spec_from_args
from oracle_search.options import OracleOptions, from_args
from oracle_search.pipeline import prepare_out
from trainables.presets import PRESETS
from trainables.schedules import SiloParams
from trainables.spec import ExperimentSpec, Resources

EXPERIMENT = """
preset = "tiny"
pruner = "layer_magnitude"
epochs = 3
rate = 0.3
grid = [0.05, 0.2]
amp = false

[optimizer]
momentum = 0          # an integer where a float is meant: widened
weight_decay = 5e-4

[schedule]
name = "cosine"
drops = [0.5]

[schedule.silo]
epsilon = 0.07
q = 2

[resources]
cpus_per_trial = 1

[options]
seeds = 2
refine = 1
trials = 5
study_storage = "journal.log"
"""


def write(tmp_path: Path, text: str, name: str = "exp.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def resolved(argv: list[str]):
    args = config.parse_args(build_parser(), argv)
    return args, spec_from_args(args)


def test_the_file_gives_spec_fields_and_options_over_the_preset(tmp_path):
    args, spec = resolved(["compare", "--config", str(write(tmp_path, EXPERIMENT)), "--out", "x"])
    tiny = PRESETS["tiny"].spec
    assert spec == dataclasses.replace(
        tiny, pruner="layer_magnitude", epochs=3, rate=0.3, grid=(0.05, 0.2), precision="fp32",
        optimizer=dataclasses.replace(tiny.optimizer, momentum=0.0, weight_decay=5e-4),
        schedule=dataclasses.replace(tiny.schedule, name="cosine", drops=(0.5,),
                                     silo=SiloParams(0.07, tiny.schedule.silo.delta, 2, tiny.schedule.silo.beta)),
        resources=Resources(cpus_per_trial=1.0))
    assert type(spec.optimizer.momentum) is float
    assert (from_args(args, "oracle").seeds, from_args(args, "oracle").refine) == (2, 1)  # flat, by the flags' names
    assert (from_args(args, "fit").trials, from_args(args, "fit").storage) == (5, "journal.log")


def test_the_options_tables_are_keyed_by_field_name_and_flat_flag_names_still_read(tmp_path):
    nested = write(tmp_path, '[options]\neval_seeds = 4\n[options.oracle]\nseeds = 2\nbracket = false\n'
                   'mode = "exhaustive"\n[options.fit]\nseeds = 2\ntrials = 0\n', "nested.toml")
    flat = write(tmp_path, '[options]\neval_seeds = 4\nseeds = 2\nno_bracket = true\noracle = "exhaustive"\n'
                 'fit_seeds = 2\ntrials = 0\n', "flat.toml")
    for path in (nested, flat):
        args, _ = resolved(["compare", "--config", str(path), "--out", "x", "--replicates", "1"])
        assert from_args(args, "oracle") == OracleOptions(seeds=2, bracket=False, mode="exhaustive"), path.name
        assert (from_args(args, "fit").seeds, from_args(args, "fit").trials) == (2, 0), path.name
        assert from_args(args, "compare", oracle=from_args(args, "oracle"), fit=from_args(args, "fit"),
                       silo_fit=False).eval_seeds == 4
    args, _ = resolved(["compare", "--config", str(nested), "--out", "x"])
    assert from_args(args, "oracle").bracket is False  # no flag given: the file's value
    bad = write(tmp_path, '[options.oracle]\nbracket = "no"\n', "bad.toml")
    assert main(["compare", "--config", str(bad), "--out", "x"]) == 2


def test_flags_override_the_file(tmp_path):
    path = str(write(tmp_path, EXPERIMENT))
    args, spec = resolved(["compare", "--config", path, "--out", "x", "--epochs", "7", "--tuning-seeds", "4",
                           "--schedule", "warmup", "--grid", "0.1,0.3", "--cpus-per-trial", "2", "--preset",
                           "digits-mlp"])
    assert (spec.epochs, spec.schedule.name, spec.grid, spec.resources.cpus_per_trial) == (7, "warmup", (0.1, 0.3), 2)
    assert spec.schedule.drops == (0.5,) and spec.pruner == "layer_magnitude"  # the file's, under the flags
    assert spec.dataset == "digits" and spec.preset == "digits-mlp"  # --preset changes the base under the file
    assert from_args(args, "oracle").seeds == 4 and from_args(args, "fit").trials == 5


def test_print_config_round_trip_is_exact(tmp_path, capsys):
    path = write(tmp_path, EXPERIMENT)
    assert main(["compare", "--config", str(path), "--out", str(tmp_path / "out"), "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert not (tmp_path / "out").exists()  # printing runs nothing
    again = write(tmp_path, printed, "resolved.toml")
    assert main(["compare", "--config", str(again), "--print-config"]) == 0
    assert capsys.readouterr().out == printed
    _, first = resolved(["compare", "--config", str(path), "--out", "x"])
    _, second = resolved(["compare", "--config", str(again)])
    assert first == second
    options = tomllib.loads(printed)["options"]
    assert options["out"] == str(tmp_path / "out") and options["fit"]["trials"] == 5
    assert options["oracle"]["refine"] == 1 and options["oracle"]["bracket"] is True  # by field name


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_prints_and_reads_back_unchanged(preset, tmp_path):
    spec = PRESETS[preset].spec
    path = write(tmp_path, config.dump(spec))
    assert config.base_spec(preset, config.load(path).spec) == spec


def test_a_runs_spec_json_reproduces_the_run(tmp_path, capsys):
    """spec.json (written by every run) loads as an experiment file; its printed TOML loads to the same spec."""
    spec = dataclasses.replace(PRESETS["digits-mlp"].spec, epochs=11, grid=(0.1 / 3, 0.7), num_samples=500,
                               resources=Resources(max_concurrent=3, storage_path="/shared/tune"))
    prepare_out(tmp_path / "run", spec)
    saved = tmp_path / "run" / "spec.json"
    _, from_json = resolved(["oracle", "--config", str(saved), "--out", "x"])
    assert from_json == spec
    assert main(["oracle", "--config", str(saved), "--print-config"]) == 0
    toml = write(tmp_path, capsys.readouterr().out)
    _, from_toml = resolved(["oracle", "--config", str(toml), "--out", "x"])
    assert from_toml == spec and from_toml.grid[0] == 0.1 / 3  # floats exactly, not rounded


def test_a_complete_spec_of_an_experiment_named_outside_the_presets_loads(tmp_path):
    spec = ExperimentSpec(preset="my-experiment", dataset="synthetic", epochs=2)
    path = write(tmp_path, json.dumps(spec.to_dict()), "spec.json")
    assert resolved(["oracle", "--config", str(path), "--out", "x"])[1] == spec
    partial = write(tmp_path, 'preset = "my-experiment"\nepochs = 2\n')
    assert main(["oracle", "--config", str(partial), "--out", str(tmp_path / "out")]) == 2


def test_options_fill_required_ones_and_a_cycle_runs_from_the_file(tmp_path, capsys):
    out = tmp_path / "cycle-out"
    path = write(tmp_path, f'preset = "tiny"\nepochs = 2\n[options]\nmax_lr = 0.1\ncycle = 0\nout = "{out}"\n'
                           "json = true\n")
    assert main(["cycle", "--config", str(path)]) == 0
    row = json.loads(capsys.readouterr().out)
    assert (row["epochs"], row["max_lr"], row["cycle"]) == (2, 0.1, 0) and Path(row["checkpoint"]).parent == out


@pytest.mark.parametrize("text, names", [
    ("bogus = 1\n", "bogus: unknown key"),
    ("[schedule]\nwarmpu = 0.1\n", "schedule.warmpu: unknown key"),
    ("[schedule.silo]\ngamma = 1.0\n", "schedule.silo.gamma: unknown key"),
    ("[options]\nseedz = 2\n", "options.seedz: unknown command option"),
    ("[options]\nepochs = 2\n", "options.epochs: unknown command option"),  # a spec field belongs at the top
    ("epochs = \"three\"\n", "epochs: expected int"),
    ("grid = 0.1\n", "grid: must be a list"),
    ("[options]\njson = 1\n", "options.json: must be true or false"),
    ("rate = 2.0\n", "rate: must lie in (0, 1)"),
    ("epochs = [\n", "config: "),
    ('preset = "no-such-preset"\n', "preset: unknown 'no-such-preset'"),
])
def test_bad_files_exit_2_naming_the_key_and_write_nothing(tmp_path, capsys, text, names):
    out = tmp_path / "out"
    # `cycle`, not a cluster command: were a case accepted, it would train one cycle here, not start a run.
    argv = ["cycle", "--config", str(write(tmp_path, text)), "--max-lr", "0.1", "--cycle", "0", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("oracle-search: error: ") and names in err and "\n" not in err
    assert not out.exists()


def test_an_option_of_the_wrong_type_fails_as_the_flag_would(tmp_path, capsys):
    path = write(tmp_path, '[options]\nseeds = "two"\n')
    assert main(["oracle", "--config", str(path), "--out", str(tmp_path / "out"), "--print-config"]) == 2
    assert "argument --tuning-seeds: invalid int value: 'two'" in capsys.readouterr().err
    assert main(["oracle", "--config", str(path), "--tuning-seeds", "2", "--print-config"]) == 0  # the flag wins
    listed = write(tmp_path, '[options]\ncallback = ["no-such-tracker"]\n')  # a repeatable option: a list
    assert main(["oracle", "--config", str(listed), "--print-config"]) == 2
    assert "options.callback: unknown 'no-such-tracker'" in capsys.readouterr().err


def test_print_config_prints_no_password(tmp_path, capsys):
    url = "postgresql+psycopg2://optuna:s3cr3t-pw@db.internal:5432/optuna"
    assert main(["fit-silo", "--preset", "tiny", "--study-storage", url, "--storage-path",
                 "s3://bucket/x?secret_key=s3cr3t-key", "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert "s3cr3t" not in printed and "optuna:***@db.internal" in printed and "secret_key=***" in printed


def test_a_missing_or_foreign_file_exits_2(tmp_path, capsys):
    assert main(["oracle", "--config", str(tmp_path / "nope.toml"), "--out", "x"]) == 2
    assert "config: cannot read" in capsys.readouterr().err
    assert main(["oracle", "--config", str(write(tmp_path, "a: 1", "exp.yaml")), "--out", "x"]) == 2
    assert "config: " in capsys.readouterr().err
