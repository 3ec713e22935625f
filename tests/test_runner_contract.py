"""The Runner and its executor meet only through the contract (`oracle_search.executor.Executor`): read from the
Runner's source, it calls the executor's contract methods and nothing else (no shared condition, no dictionaries
read behind the executor's back), it is short, and both executors implement the whole contract. Plain source and
class checks: no Ray, nothing trained."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

from conftest import ROOT
from oracle_search import executor, runner
from oracle_search.engine import Engine
from oracle_search.simulate_job import SimEngine

RUNNER = ROOT / "oracle_search" / "runner.py"


def _runner_class(source: str) -> ast.ClassDef:
    return next(node for node in ast.parse(source).body if isinstance(node, ast.ClassDef) and node.name == "Runner")


def _is_executor(node: ast.AST, aliases: set[str]) -> bool:
    """`self.executor`, or a local name bound to it."""
    if isinstance(node, ast.Attribute) and node.attr == "executor":
        return isinstance(node.value, ast.Name) and node.value.id == "self"
    return isinstance(node, ast.Name) and node.id in aliases


def executor_reads(source: str) -> list[tuple[int, str]]:
    """Every use of the Runner's executor in `source`'s class Runner that is not one of the contract's methods:
    (line, what), e.g. an attribute read (`self.executor.finished`), or the executor handed on whole (whoever gets
    it could read anything). A local name bound to `self.executor` counts as the executor."""
    cls = _runner_class(source)
    aliases = {target.id for node in ast.walk(cls) if isinstance(node, ast.Assign)
               and _is_executor(node.value, set()) for target in node.targets if isinstance(target, ast.Name)}
    parents = {child: node for node in ast.walk(cls) for child in ast.iter_child_nodes(node)}
    bad = []
    for node in ast.walk(cls):
        if not _is_executor(node, aliases) or isinstance(getattr(node, "ctx", None), ast.Store):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            if parent.attr not in executor.CONTRACT:
                bad.append((parent.lineno, parent.attr))
        elif not (isinstance(parent, ast.Assign) and parent.value is node) and not (
                isinstance(parent, ast.AnnAssign) and parent.target is node):
            bad.append((node.lineno, "the executor itself, handed on"))
    return bad


def test_the_runner_calls_only_the_contracts_methods_of_its_executor():
    source = RUNNER.read_text()
    assert executor_reads(source) == []
    # It does call them (the check is not vacuous on today's Runner): every one the hand-over needs.
    called = {node.attr for node in ast.walk(_runner_class(source))
              if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
              and node.value.attr == "executor"}
    assert {"submit", "rows", "failures", "wait", "alive", "failure", "in_flight"} <= called <= executor.CONTRACT


def test_the_check_names_what_the_runner_would_read_outside_the_contract():
    """The same check on a Runner that reads the executor's state as it used to: each read is named, with an alias
    and with the executor handed on whole."""
    source = '''
class Runner:
    def _wait(self, started):
        with self.executor.cond:
            rows = self.executor.finished
        ex = self.executor
        ex.news
        ex.wait(0)
        peek(self.executor)
'''
    assert sorted(what for _, what in executor_reads(source)) == ["cond", "finished", "news",
                                                                  "the executor itself, handed on"]


def test_the_runner_is_at_most_150_lines():
    cls = _runner_class(RUNNER.read_text())
    assert cls.end_lineno - cls.lineno + 1 <= 150


def test_the_contract_is_a_few_methods_and_both_executors_implement_every_one():
    assert executor.CONTRACT and all(inspect.isfunction(getattr(executor.Executor, name)) for name in executor.CONTRACT)
    for implementation in (Engine, SimEngine):
        for name in executor.CONTRACT:
            method = getattr(implementation, name, None)
            assert inspect.isfunction(method), (implementation.__name__, name)
            want = list(inspect.signature(getattr(executor.Executor, name)).parameters)
            assert list(inspect.signature(method).parameters) == want, (implementation.__name__, name)


def test_the_runner_is_set_up_in_one_place():
    """`open_runners` is the one place a Runner is made (the Engine's own, the compare's replicates and the simulated
    job all go through it): no other module of the package calls `Runner(`."""
    package = ROOT / "oracle_search"
    makers = [path.name for path in package.glob("*.py")
              if any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Runner"
                     for node in ast.walk(ast.parse(path.read_text())))]
    assert makers == ["runner.py"]
    calls = [node for node in ast.walk(ast.parse(RUNNER.read_text()))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Runner"]
    assert len(calls) == 1 and Path(inspect.getsourcefile(runner.open_runners)) == RUNNER
