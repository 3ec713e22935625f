"""The arrows between the packages and between the modules (docs/design.md, "The house"), read from the source with
an AST walk of every import, at module level and inside functions alike: no module imports, through any chain, a
module that imports it back."""
from __future__ import annotations

import ast
import io
import re
import tokenize
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


# --- function-local imports of the project's own modules ---------------------------------------------------------

# Where a module imports one of the project's own modules inside a function, and not at the top, a comment on that
# import, or on the lines directly above it (one comment may head a block of consecutive imports), says why: most
# often that --help imports the module and the other one imports torch, Ray or pandas.
# The lead's files not yet done (issue 50); the lead empties this.
PRAGMA = re.compile(r"\b(noqa(:\s*[A-Z0-9, ]+)?|type:\s*ignore(\[[^]]*\])?)")


def _comment_lines(source: str) -> set[int]:
    """The lines holding a comment that says something: not only a pragma (# noqa, # type: ignore)."""
    said = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and re.search(r"[A-Za-z]", PRAGMA.sub("", token.string.lstrip("#"))):
            said.add(token.start[0])
    return said


def uncommented_local_imports(source: str) -> list[int]:
    """The lines of the function-local imports of the project's own modules in `source` that no comment explains:
    none on the import's own lines, on the first line of the block of consecutive imports it ends, or on the
    comment lines directly above that block."""
    tree = ast.parse(source)
    comments = _comment_lines(source)
    lines = source.splitlines()
    # Each statement's predecessor in its own block of statements (the body, orelse, finalbody or a handler's).
    before: dict[ast.stmt, ast.stmt] = {}
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                before.update(zip(block[1:], block[:-1]))
    local: dict[int, ast.stmt] = {}
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = ["." if node.level else node.module or ""]
                else:
                    continue
                if any(n == "." or n.split(".")[0] in PACKAGES for n in names):
                    local[node.lineno] = node
    found = []
    for line, node in sorted(local.items()):
        head = node
        while (prev := before.get(head)) is not None and isinstance(prev, (ast.Import, ast.ImportFrom)) \
                and prev.end_lineno == head.lineno - 1:
            head = prev
        said = set(range(node.lineno, node.end_lineno + 1)) | set(range(head.lineno, head.end_lineno + 1))
        above = head.lineno - 1
        while above >= 1 and lines[above - 1].strip().startswith("#"):
            said.add(above)
            above -= 1
        if not said & comments:
            found.append(line)
    return found


def uncommented(root: Path = ROOT) -> list[str]:
    """FILE:LINE of every function-local import of a project module in the three packages with no comment."""
    return [f"{path.relative_to(root).as_posix()}:{line}"
            for package in PACKAGES for path in sorted((root / package).glob("*.py"))
            for line in uncommented_local_imports(path.read_text())]


def test_every_function_local_import_of_the_project_says_why():
    assert uncommented() == []


def test_the_comment_check_reads_lines_and_blocks():
    source = '''import trainables.spec

def bare():
    from oracle_search import pipeline
    return pipeline

def pragma_only():
    from oracle_search.schema import REQUIRED  # noqa: F401
    import json  # not the project's: no reason needed

def explained():
    # pandas: not at the top
    from oracle_search.schema import REQUIRED
    from analysis.files import check_results

    x = "# not a comment"
    from trainables.cycle import run_cycle
    from trainables.plugins import check_names  # torch: after the checks
    if x:
        from analysis import render  # pandas
        from analysis.report import write_report
    return REQUIRED, check_results, run_cycle, check_names, render, write_report
'''
    lines = source.splitlines()
    assert [lines[n - 1].strip() for n in uncommented_local_imports(source)] == [
        "from oracle_search import pipeline", "from oracle_search.schema import REQUIRED  # noqa: F401",
        "from trainables.cycle import run_cycle"]


def test_the_comment_check_finds_an_import_made_on_purpose(tmp_path):
    """A copy of the three packages with one function-local import added without a comment: the check names it."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        for path in (ROOT / package).glob("*.py"):
            (tmp_path / package / path.name).write_text(path.read_text())
    assert uncommented(tmp_path) == []
    target = tmp_path / "oracle_search" / "statistics.py"
    text = target.read_text()
    target.write_text(text + "\n\ndef _late():\n    from oracle_search.schema import REQUIRED\n    return REQUIRED\n")
    assert uncommented(tmp_path) == [f"oracle_search/statistics.py:{len(text.splitlines()) + 4}"]
