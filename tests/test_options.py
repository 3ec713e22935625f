"""oracle_search.options: the typed options, what a results folder records of them, and a resume's check."""
from __future__ import annotations

import dataclasses
import json

import pytest

from oracle_search import cli
from oracle_search.fitter import SearchSpace
from oracle_search.options import (MAY_CHANGE, OPTIONS_FILE, CompareOptions, FitOptions, OracleOptions,
                                   check_resume, record, recorded, recorded_oracle)
from trainables.spec import SpecError


def test_a_folder_records_every_section_and_reads_the_oracles_back(tmp_path):
    options = CompareOptions(oracle=OracleOptions(seeds=2, mode="exhaustive", bracket=False),
                             fit=FitOptions(trials=5, space=SearchSpace((0.01, 0.1), (0.0, 0.2))), eval_seeds=4)
    record(tmp_path, options.sections())
    found = recorded(tmp_path)
    assert set(found) == {"oracle", "fit", "compare"}
    assert found["fit"]["space"]["epsilon"] == [0.01, 0.1] and found["compare"]["eval_seeds"] == 4
    assert recorded_oracle(tmp_path) == options.oracle
    assert recorded(tmp_path / "new") == {} and recorded_oracle(tmp_path / "new") is None


def test_a_resume_may_change_only_what_adds_work_or_says_where(tmp_path):
    first = CompareOptions(oracle=OracleOptions(refine=0), fit=FitOptions(trials=3))
    record(tmp_path, first.sections())
    grown = CompareOptions(oracle=OracleOptions(refine=3, fuse=4), fit=FitOptions(trials=8, storage="sqlite:///x"),
                           margin=1.0, replicates=5)
    record(tmp_path, grown.sections())  # accepted, and recorded
    assert recorded(tmp_path)["oracle"]["refine"] == 3 and recorded(tmp_path)["compare"]["margin"] == 1.0
    assert MAY_CHANGE["oracle"] == {"refine", "fuse"}


@pytest.mark.parametrize("change, flag", [
    ({"oracle": OracleOptions(seeds=2)}, "tuning-seeds"),
    ({"oracle": OracleOptions(mode="exhaustive")}, "oracle"),
    ({"oracle": OracleOptions(bracket=False)}, "no-bracket"),
    ({"fit": FitOptions(seeds=2)}, "fit-seeds"),
    ({"fit": FitOptions(target_cycle=1)}, "target-cycle"),
    ({"fit": FitOptions(space=SearchSpace((0.01, 0.1), (0.0, 0.2)))}, "epsilon-range"),
    ({"compare": CompareOptions(eval_seeds=4).sections()["compare"]}, "eval-seeds"),
])
def test_a_resume_that_changes_the_search_is_refused_naming_the_option(tmp_path, change, flag):
    record(tmp_path, CompareOptions().sections())
    before = (tmp_path / OPTIONS_FILE).read_text()
    with pytest.raises(SpecError) as err:
        record(tmp_path, change)
    assert err.value.field == flag and "a resume keeps the options" in str(err.value)
    assert (tmp_path / OPTIONS_FILE).read_text() == before  # nothing written


def test_a_study_storage_password_never_reaches_the_folder(tmp_path):
    record(tmp_path, {"fit": FitOptions(storage="postgresql://me:hunter2@db/optuna")})
    text = (tmp_path / OPTIONS_FILE).read_text()
    assert "hunter2" not in text and json.loads(text)["fit"]["storage"].startswith("postgresql://me:")
    check_resume(tmp_path, {"fit": FitOptions(storage="postgresql://me:other@db/optuna")})  # where, not what


def test_each_field_names_a_flag_that_compare_takes(capsys):
    with pytest.raises(SystemExit):
        cli.main(["compare", "--help"])
    help_text = capsys.readouterr().out
    for cls in (OracleOptions, FitOptions, CompareOptions):
        for f in dataclasses.fields(cls):
            if "flag" in f.metadata:
                assert f"--{f.metadata['flag']} " in help_text, (cls.__name__, f.name)


@pytest.mark.slow
@pytest.mark.e2e
def test_resuming_the_shared_compare_with_other_seeds_exits_2_and_writes_nothing(tiny_compare, capsys):
    out = tiny_compare.out
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    argv = [a for a in tiny_compare.argv]
    argv[argv.index("--tuning-seeds") + 1] = "3"
    assert cli.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("oracle-search: error: tuning-seeds: ") and "oracle.seeds = 2" in err[0]
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
