"""Input is checked once, at the edge, the same way for the command line and the Python API."""
from __future__ import annotations

import dataclasses
import sys
import textwrap

import pytest

from oracle_search import fitter, pipeline
from oracle_search.cli import build_parser, main, spec_from_args
from oracle_search.config import parse_args
from oracle_search.options import check_with_spec
from trainables import plugins
from trainables.presets import PRESETS
from trainables.spec import SpecError

TINY = PRESETS["tiny"].spec


@pytest.mark.parametrize("flag", [["--trials", "3"], ["--refine", "1"], ["--no-bracket"], ["--fuse", "2"],
                                  ["--epsilon-range", "0.1:0.2"]])
def test_baselines_refuses_the_flags_it_does_not_use(flag, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["baselines", "--preset", "tiny", *flag, "--out", str(out)]) == 2
    assert flag[0] in capsys.readouterr().err
    assert not out.exists()


def test_looking_for_a_finished_fit_creates_no_study(tmp_path):
    assert fitter.existing_study(tmp_path, TINY, None, [0], TINY.cycles) is None
    assert list(tmp_path.iterdir()) == []  # no journal file was made
    made = fitter.open_study(tmp_path, TINY, None, [0], TINY.cycles)
    found = fitter.existing_study(tmp_path, TINY, None, [0], TINY.cycles)
    assert found is not None and found.study_name == made.study_name
    assert fitter.existing_study(tmp_path, TINY, None, [1], TINY.cycles) is None  # another study's name


@pytest.mark.parametrize("target,ok", [(None, True), (0, True), (TINY.cycles, True), (TINY.cycles + 1, False)])
def test_the_target_cycle_is_checked_where_the_spec_and_the_options_meet(target, ok):
    """`check_with_spec`, the one check of the target against the spec's cycles (the command line's and the Python
    API drivers'); `target` is then trusted."""
    options = pipeline.FitOptions(target_cycle=target)
    for command, given in (("fit-silo", options), ("compare", pipeline.CompareOptions(fit=options))):
        if ok:
            check_with_spec(command, TINY, given)
            assert options.target(TINY) == (TINY.cycles if target is None else target)
        else:
            with pytest.raises(SpecError, match="target-cycle"):
                check_with_spec(command, TINY, given)


def test_a_negative_target_cycle_or_a_bad_search_space_fails_on_construction():
    with pytest.raises(SpecError, match="target-cycle"):
        pipeline.FitOptions(target_cycle=-1)
    bad = fitter.SearchSpace(epsilon=(0.2, 0.1), delta=(0.0, 1.0))
    with pytest.raises(SpecError, match="epsilon-range"):
        pipeline.FitOptions(space=bad)


def test_compare_through_the_api_refuses_a_target_beyond_the_cycles_before_writing(tmp_path):
    out = tmp_path / "out"
    options = pipeline.CompareOptions(fit=pipeline.FitOptions(target_cycle=TINY.cycles + 1))
    with pytest.raises(SpecError, match="target-cycle"):
        pipeline.compare(TINY, out, options)
    assert not out.exists()


def test_paths_given_on_the_command_line_are_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = parse_args(build_parser(), ["oracle", "--preset", "tiny", "--out", "x", "--data-dir", "data",
                                       "--storage-path", "tune-store"])
    spec = spec_from_args(args)
    assert spec.data_dir == str(tmp_path / "data")
    assert spec.resources.storage_path == str(tmp_path / "tune-store")
    uri = parse_args(build_parser(), ["oracle", "--preset", "tiny", "--out", "x", "--storage-path", "s3://b/p"])
    assert spec_from_args(uri).resources.storage_path == "s3://b/p"  # a URI is left as it is


def test_a_users_dataset_function_receives_the_real_spec(tmp_path, monkeypatch):
    (tmp_path / "seen_spec_data.py").write_text(textwrap.dedent("""
        import torch
        from trainables.data import TensorData

        SEEN = []

        def data(spec):
            SEEN.append(spec)
            x = {s: torch.randn(8, 4) for s in ("train", "val", "test")}
            y = {s: torch.arange(8) % 2 for s in ("train", "val", "test")}
            return TensorData(x, y, 2)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = dataclasses.replace(TINY, dataset="seen_spec_data:data", epochs=7, batch_size=3)
    plugins.load_data(spec)
    seen = sys.modules["seen_spec_data"].SEEN
    assert seen == [spec]  # every field, not a stand-in with the data fields alone
    plugins.load_data(dataclasses.replace(spec, epochs=9))  # same data fields: loaded once per process
    assert len(seen) == 1
