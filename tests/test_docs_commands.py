"""Every shell command the README and docs/*.md show runs as written (issue 62), or as one named transformation of
it, or is listed here with the reason it cannot run on this machine.

What counts as a command:
- in a fenced block (no language, or bash/sh/shell/console): each line (backslash continuations joined) whose first
  word is a program (`PROGRAM`); other lines of such blocks are output or diagrams;
- in a sentence: a code span that starts with this project's own command (`oracle-search`, `bash scripts/`,
  `bash benchmarks/`, `python benchmarks/`). Other tools' spans in prose are fragments (`ray up`, `ray stop`).

Each command is covered by the first rule of `RULES` that matches it, and a command no rule covers fails
`test_every_command_is_covered_by_a_rule`: a new command in the docs needs a rule, never a silent skip. Besides,
every `oracle-search` command, whatever its rule, must name a subcommand and flags that command has (in this
process, from the parser: cheap).

The rules, in the order they are tried (each one's `why` says why it runs what it runs):
- `other-tool`: not run (Ray's launcher and job CLI, AWS, pip, PostgreSQL set-up: a cloud account, a cluster).
- `quoted-in-docs`: not run, a command quoted in a sentence of docs/*.md (mostly measured.md's record of what made a
  figure: minutes to hours of training or benchmarking, some on GPUs, often with placeholders or parts the sentence
  gives); its subcommand and flags are checked, and a script it names exists and takes the flags given.
- `mention`: not run, the command's bare name in a README sentence.
- `cluster-run`: not run (`--address auto`, s3:// storage, a PostgreSQL `$URL`); its flags are checked.
- `placeholder`: not run, a synopsis or a sentence's command with placeholders (DIR, RUN, N, [..], a|b); its flags
  are checked. `COMMAND --help` is run for every subcommand (`every-help`).
- `browser`: not run (it installs Chromium with apt); tests/test_browser.py runs the script.
- `set-up-and-test`: `bash scripts/test.sh [-m EXPR] [--durations=N]` runs as `--collect-only -q [-m EXPR]`: the
  suite takes over 30 minutes and this test is part of it; set-up, the marker expression and every test module's
  imports are what the command can get wrong first. pytest's report options (`--durations`) change only what is
  printed after a run, so they are dropped.
- `main-job-dry-run`: `bash scripts/main.sh [ARGS]` runs as `bash scripts/main.sh [ARGS] --dry-run
  --seconds-per-epoch 0.25`: the main job trains for 30-60 minutes; its dry run (main.sh passes its arguments to
  `compare`) prints the same plan and writes nothing.
- `training-run-dry-run`: a `compare` or `oracle` that trains runs with `--dry-run --seconds-per-epoch 0.25` (its
  plan and estimate, nothing written); a run on GPUs (`--gpus-per-trial`) with `--dry-run --price-on h100`
  instead, as the README prices it (its `--data-dir`, absent here, is kept: a priced dry run reads no data).
- `light`: runs as written in seconds (`presets`, `--help`, `paper-table docs/example`, `status runs/mnist1d-mlp`
  with runs/mnist1d-mlp, what the main job writes, read from the committed example, docs/example, one such folder).
- `dry-run-as-written`: a dry run already, as written. `set-up`: scripts/setup.sh, as written.
No rule runs whatever is left: a command none of these covers fails the coverage test.

Why `--seconds-per-epoch` in the dry runs: without it a dry run times a few steps of one trial on a Ray it starts
here (tens of seconds of start-up, on a machine whose Ray tests must queue one at a time); the figure changes the
estimate's numbers, not whether the command runs. The user's own modules (`mypkg.nets:small_cnn`, ...) are the
worked example's (examples/custom_cnn: model.py as mypkg/nets.py, data.py, losses.py), put on PYTHONPATH as mypkg.

A command runs once per distinct argv, a dry run once per plan (`plan_of`: another `--seed` or `--out` prices the
same plan, so of measured.md's three main.sh lines two run). The dry runs, set-up and collection take minutes
(about 8 on 2 busy cores): `slow`. The rest (a few `--help`s, `presets`, `paper-table`,
`status`, the rule coverage and the flag check) is the fast lane's.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from oracle_search.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent  # .venv/bin: oracle-search, python
EXAMPLE = "docs/example"
SECONDS_PER_EPOCH = "0.25"  # any positive figure: it scales the estimate, it does not change what runs

# A fenced block's line is a command when its first word is one of these (or a path to one, or VAR=value).
PROGRAM = re.compile(r"(?:[\w./-]*/)?(?:oracle-search|bash|python3?|pip|ray|aws|kubectl|export|sudo|cd|ls|source|"
                     r"tensorboard|optuna-dashboard|pytest|flock|git|curl|docker|helm|mkdir|cp|rm|chmod|nohup)$"
                     r"|[A-Z_]+=.*")
OURS = re.compile(r"(?:\.venv/bin/)?oracle-search(?=\s|$)|bash (?:scripts|benchmarks)/|python benchmarks/")
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"(?<!`)`((?:[^`\n]|\n(?!\s*\n))+?)`(?!`)")  # a code span, across one line break at most


@dataclass(frozen=True)
class Command:
    doc: str  # the file, relative to the repository
    line: int
    text: str  # continuations joined, a trailing comment dropped
    inline: bool  # a code span in a sentence (else a fenced block's line)

    @property
    def words(self) -> list[str]:
        try:
            return shlex.split(self.text, comments=True)
        except ValueError:  # an unbalanced quote in a synopsis
            return self.text.split()

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


def scan(text: str) -> tuple[str, bool]:
    """`text` without its trailing shell comment (a `#` starting a word outside quotes), and whether its quotes
    are closed (an apostrophe in a comment is no quote)."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip(), True
    return text, quote is None


def complete(text: str) -> bool:
    return scan(text)[1]


def commands() -> list[Command]:
    found = []
    for path in DOCS:
        text, doc = path.read_text(), str(path.relative_to(ROOT))
        for block in FENCE.finditer(text):
            if block.group(1) not in ("", "bash", "sh", "shell", "console"):
                continue
            first = text.count("\n", 0, block.start(2)) + 1
            pending, start = "", 0
            for i, line in enumerate([*block.group(2).splitlines(), None]):
                if line is None:  # the block's end: a command still open (an unclosed quote) is one all the same
                    line, pending = "", pending.rstrip("\\ ")
                    if not pending:
                        break
                if not pending:
                    start = first + i
                pending += line.rstrip()
                if pending.endswith("\\"):
                    pending = pending[:-1].rstrip() + " "
                    continue
                if line and not complete(pending):  # a quoted argument over several lines (docs/cluster.md's JSON)
                    pending += " "
                    continue
                cmd, pending = Command(doc, start, " ".join(scan(pending)[0].split()), False), ""
                if cmd.words and PROGRAM.fullmatch(cmd.words[0]):
                    found.append(cmd)
        prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)  # the lines keep their numbers
        for span in SPAN.finditer(prose):
            said = " ".join(span.group(1).split())
            if OURS.match(said):
                found.append(Command(doc, prose.count("\n", 0, span.start()) + 1, said, True))
    return found


# --- the rules -----------------------------------------------------------------------------------------------------

def oracle_argv(cmd: Command) -> list[str] | None:
    """The words from `oracle-search` on (a command may call it inside another: `ray job submit -- ...`)."""
    words = cmd.words
    for i, w in enumerate(words):
        if w.endswith("oracle-search") or w == "$(command -v oracle-search)":  # docs/cluster.md's job demo
            return words[i:]
    return None


PLACEHOLDER = re.compile(r"^(?:[A-Z]{1,8}|\.\.\.|\.\.\.fp32)$|[\[\]|]|^\.\.\.|:\.\.\.")


def has_placeholders(cmd: Command) -> bool:
    return any(PLACEHOLDER.search(w) for w in cmd.words[1:]) or "..." in cmd.text


def trains(argv: list[str]) -> bool:
    return len(argv) > 1 and argv[1] in ("compare", "oracle", "fit-silo", "baselines") and not {
        "--dry-run", "--help", "-h", "--print-config"} & set(argv)


SHELL = re.compile(r"&&|\|\||[|><;]|\$\(")  # a line for the shell, not one program's argv


def argv_of(text: str) -> list[str]:
    """`text` as it runs: through bash where it has shell syntax, else as one program's words; `oracle-search` and
    `python` are this environment's (PATH has them first too)."""
    if SHELL.search(text):
        return ["bash", "-c", text]
    words = shlex.split(text, comments=True)
    if words[0] in ("oracle-search", ".venv/bin/oracle-search"):
        words[0] = str(BIN / "oracle-search")
    elif words[0] == "python":
        words[0] = sys.executable
    return words


def as_written(cmd: Command) -> list[str]:
    # `status runs/mnist1d-mlp`: the folder the main job writes; the committed example is one such folder.
    return argv_of(cmd.text.replace("status runs/mnist1d-mlp", f"status {EXAMPLE}"))


def dry_run(cmd: Command) -> list[str]:
    words = as_written(cmd)
    if "--gpus-per-trial" in words:
        return [*words, "--dry-run", "--price-on", "h100"]
    return [*words, "--dry-run", "--seconds-per-epoch", SECONDS_PER_EPOCH]


def collect_only(cmd: Command) -> list[str]:
    words, kept = cmd.words[2:], []
    while words:
        w = words.pop(0)
        if w == "-m":
            kept += [w, words.pop(0)]
        elif not w.startswith("--durations"):
            raise AssertionError(f"{cmd}: a test.sh argument this rule does not know: {w}")
    return ["bash", "scripts/test.sh", "--collect-only", "-q", *kept]


@dataclass(frozen=True)
class Rule:
    name: str
    why: str
    matches: Callable[[Command], bool]
    argv: Callable[[Command], list[str]] | None  # what runs; None: nothing runs (the flags are still checked)
    slow: bool = True


LIGHT = re.compile(r"(?:\.venv/bin/)?oracle-search (?:presets|--help|paper-table docs/example|status runs/mnist1d-mlp)$")
RULES = [
    Rule("other-tool", "another tool's command (Ray's cluster launcher and job CLI, AWS, pip, kubectl, PostgreSQL "
         "set-up): a cloud account, a cluster or the network; docs/cluster.md's local job demo is "
         "tests/test_jobs.py's", lambda c: not OURS.match(c.text), None),
    Rule("quoted-in-docs", "a command quoted in a sentence of docs/*.md: mostly measured.md's record of what made a "
         "figure (minutes to hours of training or benchmarking, some on GPUs), often with placeholders or with "
         "parts the sentence gives; its subcommand and flags are checked, and a script it names exists and takes "
         "them (`test_every_script_the_docs_name_exists_and_takes_the_flags_given`)",
         lambda c: c.inline and c.doc != "README.md", None),
    Rule("mention", "the command's name in a sentence, nothing to run (`oracle-search`, `.venv/bin/oracle-search`)",
         lambda c: c.inline and len(c.words) == 1, None),
    Rule("cluster-run", "needs a Ray cluster (--address auto), S3 or a PostgreSQL study storage",
         lambda c: "--address" in c.words or "s3://" in c.text or "$URL" in c.text, None),
    Rule("every-help", "`oracle-search COMMAND --help`: every subcommand's help (`test_every_subcommands_help`)",
         lambda c: c.words[1:] == ["COMMAND", "--help"], None),
    Rule("placeholder", "a synopsis or a sentence's command, with placeholders (DIR, RUN, N, [..], a|b, ...)",
         has_placeholders, None),
    Rule("browser", "installs Debian's chromium with apt when none is on PATH and drives it; "
         "tests/test_browser.py runs it on a report", lambda c: c.text.startswith("bash scripts/render_report.sh"),
         None),
    Rule("set-up-and-test", "the suite itself: set up, then collected with the marker expression given",
         lambda c: c.text.startswith("bash scripts/test.sh"), collect_only),
    Rule("main-job-dry-run", "the main job's plan and estimate (main.sh passes its arguments to compare)",
         lambda c: c.text.startswith("bash scripts/main.sh") and "--dry-run" not in c.words,
         lambda c: [*c.words, "--dry-run", "--seconds-per-epoch", SECONDS_PER_EPOCH]),
    Rule("training-run-dry-run", "a run that trains: its dry run (on GPUs: priced on the H100)",
         lambda c: trains(oracle_argv(c) or []), dry_run),
    Rule("light", "runs as written, in a second or a few", lambda c: bool(LIGHT.match(c.text)), as_written,
         slow=False),
    Rule("dry-run-as-written", "a dry run already: it trains and writes nothing", lambda c: "--dry-run" in c.words,
         as_written),
    Rule("set-up", "set-up creates or reuses .venv (skipped where it would install packages)",
         lambda c: c.text.startswith("bash scripts/setup.sh"), as_written),
]


def rule_of(cmd: Command) -> Rule | None:
    return next((r for r in RULES if r.matches(cmd)), None)


# --- the tests -----------------------------------------------------------------------------------------------------

def test_every_command_is_covered_by_a_rule():
    """The extraction finds the commands it should (a known one from each file), and each is covered by a rule;
    a rule that covers nothing is stale."""
    found = commands()
    texts = {c.text for c in found}
    for known in ("bash scripts/main.sh", "bash scripts/test.sh", "oracle-search presets",
                  "oracle-search paper-table docs/example", "ray up cluster.yaml",
                  "bash scripts/main.sh --seed 0 --out runs/seed0-R3", "oracle-search replay RUN --out DIR [--slots N]"):
        assert known in texts, known
    uncovered = [str(c) for c in found if rule_of(c) is None]
    assert not uncovered, "commands no rule covers (add a rule, with its reason):\n" + "\n".join(uncovered)
    used = {rule_of(c).name for c in found}
    assert used == {r.name for r in RULES}, {r.name for r in RULES} - used


SUBCOMMANDS = build_parser()._subparsers._group_actions[0].choices
FLAG = re.compile(r"^\[*(--[a-z][\w-]*)")


@pytest.mark.parametrize("cmd", [c for c in commands() if oracle_argv(c)], ids=str)
def test_every_oracle_search_command_names_a_subcommand_and_flags_it_has(cmd):
    argv = oracle_argv(cmd)
    sub = next((w for w in argv[1:] if not w.startswith("-")), None)
    if sub in (None, "COMMAND", "..."):  # `oracle-search --help`, `oracle-search COMMAND --help`, `oracle-search ...`
        parsers = list(SUBCOMMANDS.values()) if sub == "COMMAND" else []
    else:
        assert sub in SUBCOMMANDS, f"{cmd}: no subcommand {sub!r}"
        parsers = [SUBCOMMANDS[sub]]
    for word in argv[1:]:
        if (flag := FLAG.match(word)) and parsers:
            flag = flag.group(1)
            missing = [p.prog for p in parsers if flag not in p._option_string_actions]
            assert not missing, f"{cmd}: {', '.join(missing)} has no {flag}"


def environment(tmp_path: Path) -> dict[str, str]:
    """PATH with this environment's commands first (the docs call `oracle-search` bare, after `source
    .venv/bin/activate`); the user's own modules as mypkg, made from examples/custom_cnn."""
    mypkg = tmp_path / "site" / "mypkg"
    mypkg.mkdir(parents=True)
    (mypkg / "__init__.py").write_text("")
    for name, source in (("nets", "model"), ("data", "data"), ("losses", "losses")):
        shutil.copyfile(ROOT / "examples" / "custom_cnn" / f"{source}.py", mypkg / f"{name}.py")
    path = os.pathsep.join(filter(None, [str(tmp_path / "site"), str(ROOT), os.environ.get("PYTHONPATH")]))
    return os.environ | {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": path,
                         "VIRTUAL_ENV": str(BIN.parent)}


def set_up() -> bool:
    """Whether scripts/setup.sh would find the environment set up for this pyproject.toml (else it installs)."""
    stamp = ROOT / ".venv" / ".oracle-search-installed"
    want = subprocess.run("sha256sum pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16", shell=True,
                          cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return stamp.is_file() and stamp.read_text().strip() == want


def outs(argv: list[str]) -> list[Path]:
    return [ROOT / argv[i + 1] for i, w in enumerate(argv[:-1]) if w == "--out"]


def plan_of(argv: list[str]) -> tuple[str, ...]:
    """What a dry run prices: its words but the base seed and --out (another seed or folder, the same plan)."""
    dropped = {i + 1 for i, w in enumerate(argv) if w in ("--seed", "--base-seed", "--out")}
    return tuple(w for i, w in enumerate(argv) if w not in ("--seed", "--base-seed", "--out") and i not in dropped)


def runnable() -> list:
    """(command, argv) for every command a rule runs, once per distinct argv (a dry run: once per plan, `plan_of`),
    each in its lane."""
    seen, params = set(), []
    for cmd in commands():
        rule = rule_of(cmd)
        if rule.argv is None:
            continue
        if rule.name == "every-help":
            continue
        argv = rule.argv(cmd)
        key = plan_of(argv) if "--dry-run" in argv else tuple(argv)
        if key in seen:
            continue
        seen.add(key)
        params.append(pytest.param(cmd, argv, id=f"{rule.name}: {cmd}",
                                   marks=[pytest.mark.slow] if rule.slow else []))
    return params


@pytest.mark.parametrize("cmd, argv", runnable())
def test_the_docs_command_runs(cmd, argv, tmp_path):
    if "scripts/main.sh" in argv[:3] or "scripts/test.sh" in argv[:3] or "scripts/setup.sh" in " ".join(argv):
        if not set_up():
            pytest.skip("scripts/setup.sh would install packages here (the environment predates pyproject.toml)")
    before = {p: p.exists() for p in outs(argv)}
    done = subprocess.run(argv, cwd=ROOT, env=environment(tmp_path), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{cmd}\nran: {shlex.join(argv)}\n{done.stderr[-3000:]}"
    for out, existed in before.items():  # a dry run writes nothing, not even its --out
        assert existed or not out.exists(), f"{shlex.join(argv)} made {out}"


@pytest.mark.parametrize("sub", sorted(SUBCOMMANDS))
def test_every_subcommands_help(sub, tmp_path):
    """`oracle-search COMMAND --help` (README), for every COMMAND."""
    done = subprocess.run([str(BIN / "oracle-search"), sub, "--help"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.startswith(f"usage: oracle-search {sub}"), done.stderr[-2000:]


SCRIPT = re.compile(r"^(?:\./)?((?:scripts|benchmarks)/[\w./-]+\.(?:sh|py))$")


@pytest.mark.parametrize("cmd", [c for c in commands() if any(SCRIPT.match(w) for w in c.words)], ids=str)
def test_every_script_the_docs_name_exists_and_takes_the_flags_given(cmd):
    """Cheap, without running it: the script is there, and each flag the docs give it appears in its source
    (a script that hands its arguments on, "$@", to compare or pytest: those are the commands' flags, checked by
    running them above)."""
    words = cmd.words
    at = next(i for i, w in enumerate(words) if SCRIPT.match(w))
    path = ROOT / SCRIPT.match(words[at]).group(1)
    assert path.is_file(), f"{cmd}: no {path.relative_to(ROOT)}"
    source = path.read_text()
    if '"$@"' in source:
        return
    for word in words[at + 1:]:
        if word in ("&&", "||", "|", ";"):
            break
        if (flag := FLAG.match(word)) and flag.group(1) != "--help":
            assert flag.group(1) in source, f"{cmd}: {path.relative_to(ROOT)} takes no {flag.group(1)}"
