"""The arrows between the packages (docs/design.md, "Packages and the arrows between them"), read from the source
with an AST walk of every import, at module level and inside functions alike."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The commands that analyse a finished table (report, replay) and compare's step right before its analysis (the
# racing Oracle's completion of the values the verdict needs) are the places the library reaches into analysis.
REPORT_COMMAND = {("oracle_search/pipeline.py", "report"), ("oracle_search/cli.py", "cmd_report"),
                  ("oracle_search/pipeline.py", "_complete_for_verdict"), ("oracle_search/cli.py", "cmd_replay")}


def imports(package: str) -> list[tuple[str, str, str]]:
    """(file, enclosing top-level function or "", imported module) for every import in `package`."""
    found = []
    for path in sorted((ROOT / package).glob("*.py")):
        tree = ast.parse(path.read_text())
        for top in tree.body:
            where = top.name if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else ""
            for node in ast.walk(top):
                if isinstance(node, ast.Import):
                    found += [(path.relative_to(ROOT).as_posix(), where, a.name) for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    found.append((path.relative_to(ROOT).as_posix(), where, node.module))
    return found


def test_oracle_search_imports_analysis_only_in_the_report_command():
    reaching = {(f, where) for f, where, module in imports("oracle_search") if module.split(".")[0] == "analysis"}
    assert reaching <= REPORT_COMMAND, sorted(reaching - REPORT_COMMAND)


def test_trainables_imports_neither_oracle_search_nor_analysis():
    assert [i for i in imports("trainables") if i[2].split(".")[0] in {"oracle_search", "analysis"}] == []


def test_the_walk_sees_imports_inside_functions():
    """The walk itself: the estimate's probe imports trainables.fused inside a function, the report command
    analysis.report."""
    found = imports("oracle_search")
    assert ("oracle_search/estimate.py", "time_epoch", "trainables.fused") in found
    assert ("oracle_search/pipeline.py", "report", "analysis.report") in found
