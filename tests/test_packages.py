"""The arrows between the packages and between the modules (docs/design.md, "The house"), read from the source with
an AST walk of every import, at module level and inside functions alike: no module imports, through any chain, a
module that imports it back."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("trainables", "oracle_search", "analysis")
# The commands' floor: the library behind the command line runs studies and writes their reports, so it is the one
# place of oracle_search that imports analysis; nothing of oracle_search but the command line imports it back.
COMMANDS = {"oracle_search/pipeline.py", "oracle_search/cli.py"}


def imports(package: str, root: Path = ROOT) -> list[tuple[str, str, str]]:
    """(file, enclosing top-level function or "", imported name) for every import in `package`: a `from M import
    N` yields M and M.N (N may be a module)."""
    found = []
    for path in sorted((root / package).glob("*.py")):
        tree = ast.parse(path.read_text())
        for top in tree.body:
            where = top.name if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else ""
            for node in ast.walk(top):
                if isinstance(node, ast.Import):
                    found += [(path.relative_to(root).as_posix(), where, a.name) for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    found.append((path.relative_to(root).as_posix(), where, node.module))
                    found += [(path.relative_to(root).as_posix(), where, f"{node.module}.{a.name}")
                              for a in node.names]
    return found


def module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project's modules it imports (anywhere in the file)."""
    graph: dict[str, set[str]] = {}
    for package in PACKAGES:
        for file, _, name in imports(package, root):
            here = file.removesuffix(".py").replace("/", ".")
            parts = name.split(".")
            graph.setdefault(here, set())
            if parts[0] in PACKAGES and len(parts) >= 2 and (root / parts[0] / f"{parts[1]}.py").exists():
                target = f"{parts[0]}.{parts[1]}"
                if target != here:
                    graph[here].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle_over_the_three_packages():
    assert circles(module_graph()) == []


def test_the_circle_check_finds_a_circle_made_on_purpose(tmp_path):
    """A copy of the three packages with one arrow added back up (the statistics importing the pipeline) has a
    circle, and the check names it."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        for path in (ROOT / package).glob("*.py"):
            (tmp_path / package / path.name).write_text(path.read_text())
    target = tmp_path / "oracle_search" / "statistics.py"
    target.write_text(target.read_text() + "\n\ndef _back_up():\n    from oracle_search.pipeline import compare\n")
    found = circles(module_graph(tmp_path))
    assert any({"oracle_search.statistics", "oracle_search.pipeline"} <= set(c) for c in found), found


def test_oracle_search_imports_analysis_only_in_the_commands():
    reaching = {f for f, _, module in imports("oracle_search") if module.split(".")[0] == "analysis"}
    assert reaching <= COMMANDS, sorted(reaching - COMMANDS)
    graph = module_graph()
    importers = {m for m, targets in graph.items() if {"oracle_search.pipeline", "oracle_search.cli"} & targets}
    assert importers <= {"oracle_search.cli"}, sorted(importers)  # nothing below the commands imports them


def test_trainables_imports_neither_oracle_search_nor_analysis():
    assert [i for i in imports("trainables") if i[2].split(".")[0] in {"oracle_search", "analysis"}] == []


def test_the_walk_sees_imports_inside_functions():
    """The walk itself: the estimate's probe imports trainables.fused inside a function."""
    found = imports("oracle_search")
    assert ("oracle_search/estimate.py", "time_epoch", "trainables.fused") in found
