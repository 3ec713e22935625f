"""The command line's flags: made one way, from typed fields; renamed ones kept as aliases; the grid's syntax."""
from __future__ import annotations

import argparse
import typing

import pytest

from oracle_search.cli import build_parser, main
from oracle_search.flags import flagged
from oracle_search.options import SECTIONS
from trainables.grids import parse_grid
from trainables.schedules import SiloParams
from trainables.spec import ExperimentSpec, SpecError

# The flags written by hand, each because it is not one field (cli.py says why beside each).
BY_HAND = {"-h", "--help", "--preset", "--no-amp", "--address", "--callback", "--config", "--print-config",
           "--density-target", "--batches",  # premise's own
           "--epsilon-range", "--delta-range", "--q-range", "--beta-range", "--dry-run", "--seconds-per-epoch",
           "--price-on", "--slots", "--out", "--max-lr", "--cycle", "--start", "--json",
           "--densities", "--latex"}  # paper-table's own inputs: no spec or options field


def _field_flags() -> dict[str, typing.Any]:
    """Every flag (and earlier name) a field names -> that field's type."""
    found = {}
    for cls in (ExperimentSpec, SiloParams, *SECTIONS.values()):
        for f in flagged(cls, nested=cls is not SECTIONS["compare"]).values():
            if not f.field.metadata["by_hand"]:
                for name in (f.flag, *f.field.metadata["aliases"]):
                    found[f"--{name}"] = f.hint
    return found


def _commands() -> dict[str, argparse.ArgumentParser]:
    return next(a.choices for a in build_parser()._actions if isinstance(a.choices, dict))


def test_every_flag_is_made_from_a_field_or_is_one_of_the_few_written_by_hand():
    fields = _field_flags()
    assert not set(fields) & BY_HAND
    for name, parser in _commands().items():
        for action in parser._actions:
            for option in action.option_strings:
                if option.startswith("--no-") and isinstance(action, argparse.BooleanOptionalAction):
                    option = "--" + option[5:]  # --no-cuda-graphs: the other half of the field's flag
                assert option in fields or option in BY_HAND, (name, option)
                hint = fields.get(option)
                if hint in (int, float):  # the flag converts to the field's own type
                    assert action.type("3") == hint("3"), (name, option)


def test_an_earlier_flag_name_still_works_and_says_in_one_line_what_replaced_it(capsys):
    assert main(["compare", "--preset", "tiny", "--seed", "5", "--seeds", "2", "--out", "x", "--print-config"]) == 0
    out, err = capsys.readouterr()
    assert "\nseed = 5\n" in out and "[options.oracle]\n" in out and "\nseeds = 2\n" in out.split("[options.oracle]")[1]
    assert err.splitlines() == ["oracle-search: --seed is now --base-seed; the old name still works",
                                "oracle-search: --seeds is now --tuning-seeds; the old name still works"]
    assert main(["compare", "--preset", "tiny", "--base-seed", "5", "--tuning-seeds", "2", "--out", "x",
                 "--print-config"]) == 0
    new_out, new_err = capsys.readouterr()
    assert new_out == out and new_err == ""


def test_a_refusal_given_an_earlier_flag_name_stays_one_line_and_names_the_new_flag(capsys, tmp_path):
    out = tmp_path / "out"
    assert main(["compare", "--preset", "tiny", "--seeds", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("oracle-search: error: tuning-seeds: must be an integer >= 2")
    assert err[0].endswith("(--seeds is now --tuning-seeds)") and not out.exists()


@pytest.mark.parametrize("text, values", [
    ("lin:0.002:0.01:0.002", (0.002, 0.004, 0.006, 0.008, 0.01)),  # the paper's interval edges' spacing
    ("lin:0.1:0.35:0.1", (0.1, 0.2, 0.3)),  # HI off the step: the last value below it
    ("lin:1:2:0.5", (1.0, 1.5, 2.0)),
    ("log:0.01:1:3", (0.01, 0.1, 1.0)),
    ("0.3,0.1", (0.3, 0.1)),
])
def test_a_grid_parses_as_a_list_a_log_range_or_a_linear_range(text, values):
    assert parse_grid(text) == values


@pytest.mark.parametrize("text", ["lin:0.1:0.05:0.01", "lin:0:1:0.1", "lin:0.1:1:0", "lin:0.1:1:-0.1", "lin:0.1:1",
                                  "lin:0.1:1:x", "lin:0.1:0.2:0.5", "lin:1e-6:1:1e-9", "lin:0.1:inf:0.1",
                                  "lin:0.1:1:0.1:9"])
def test_a_bad_linear_grid_is_refused_naming_the_grid(text, tmp_path, capsys):
    with pytest.raises(SpecError, match="grid"):
        parse_grid(text)
    out = tmp_path / "out"
    assert main(["oracle", "--preset", "tiny", "--grid", text, "--out", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("oracle-search: error: argument --grid: ") and "lin:LO:HI:STEP" in err[0]
    assert not out.exists()


def test_a_linear_grid_reaches_the_spec(capsys):
    assert main(["oracle", "--preset", "tiny", "--grid", "lin:0.02:0.1:0.02", "--out", "x", "--print-config"]) == 0
    assert "\ngrid = [\n    0.02,\n    0.04,\n    0.06,\n    0.08,\n    0.1,\n]\n" in capsys.readouterr().out
