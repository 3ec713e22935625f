"""Drivers side by side: each line of work in a thread of its own on one engine, blocking on its own trainings only,
so while one waits for a decision the engine trains the others' ready trainings. Replicates run this way
(`pipeline.compare`), and so do the phases of one study (`study.run_study`)."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class Line:
    """One line of work: its value, or the error that ended it."""

    name: str
    value: Any = None
    error: BaseException | None = None


def side_by_side(work: dict[str, Callable[[], Any]], engine) -> dict[str, Line]:
    """Run each of `work` in a thread on `engine` (an `engine.Engine`) and wait for all of them; returns each one's
    `Line`. An error in one does not stop the others (the trainings they finish are kept). An interrupt of the
    calling thread (Ctrl-C) stops the engine's trials (the lines' waits then end with RunFailed), waits a little
    for the lines and re-raises."""
    lines = {name: Line(name) for name in work}
    left, count = [len(work)], threading.Lock()
    group = engine.lines_started(len(work))

    def run(line: Line, job: Callable[[], Any]) -> None:
        engine.line_begun(group)
        try:
            line.value = job()
        except BaseException as err:  # given back to the caller, after every line ended
            line.error = err
        finally:
            with count:
                left[0] -= 1
                engine.line_ended(group, last=left[0] == 0)

    threads = [threading.Thread(target=run, args=(lines[name], job), name=name, daemon=True)
               for name, job in work.items()]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.5)  # short joins: Ctrl-C reaches this thread
    except BaseException:
        engine.close(abort=True)
        for thread in threads:
            thread.join(timeout=30)
        raise
    return lines


def first_error(lines: dict[str, Line]) -> None:
    """Raise the first line's error, in the order the lines were given."""
    for line in lines.values():
        if line.error is not None:
            raise line.error
