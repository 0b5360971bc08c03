"""The sweep's progress bar on stderr, with an ETA built from what the remaining jobs are.

A sweep runs jobs instance-major, so cheap family jobs finish first and a rate measured on them
says nothing about the solver jobs still queued. `Eta` estimates each remaining job from jobs
of the same method (label) that finished: their median wall time; a solver job is bounded by
its time limit, which also stands in until one has finished; every estimate is bounded by
the spec's job_timeout (a job is killed at it). While some remaining method has neither, the
ETA is shown as unknown rather than guessed.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import sys
import time
from collections import Counter, defaultdict
from typing import Any, Callable, Iterator, Optional, Sequence

from ..progress import Progress, _isatty
from .spec import Job

PLAIN_EVERY = 5.0  # seconds between two progress lines when stderr is not a terminal


class Eta:
    """Remaining wall seconds of a sweep over `workers` parallel workers (None: unknown)."""

    def __init__(self, jobs: Sequence[Job], workers: int,
                 job_timeout: Optional[float] = None) -> None:
        self.workers = max(1, workers)
        self.left: Counter[str] = Counter(job.method.label for job in jobs)
        self.limit: dict[str, float] = {}
        for job in jobs:
            limit = dict(job.method.params).get("time_limit")
            if job.method.kind == "solver" and limit:
                self.limit[job.method.label] = float(limit)
        # no job runs past the timeout (its worker is killed): it bounds every estimate
        self.timeout = math.inf if job_timeout is None else float(job_timeout)
        self.times: dict[str, list[float]] = defaultdict(list)

    def done(self, job: Job, runtime: Optional[float]) -> None:
        self.left[job.method.label] -= 1
        if runtime is not None:
            self.times[job.method.label].append(float(runtime))

    def expected(self, label: str) -> Optional[float]:
        """Wall seconds one more job of `label` is expected to take."""
        seen = self.times.get(label)
        limit = min(self.limit.get(label, math.inf), self.timeout)
        if seen:
            return min(statistics.median(seen), limit)
        return limit if label in self.limit else None

    def seconds(self) -> Optional[float]:
        total = 0.0
        for label, count in self.left.items():
            if count <= 0:
                continue
            each = self.expected(label)
            if each is None:
                return None
            total += count * each
        return total / self.workers


def describe(seconds: Optional[float]) -> str:
    if seconds is None:
        return "ETA unknown (no job of some method has finished yet)"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"ETA ~{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else \
        f"ETA ~{rest // 60}:{rest % 60:02d}"


@contextlib.contextmanager
def progress_bar(enabled: bool, jobs: Sequence[Job], workers: int, name: str,
                 job_timeout: Optional[float] = None
                 ) -> Iterator[Callable[[Job, dict[str, Any]], None]]:
    """Yields `advance(job, record)`; a bar with the honest ETA on stderr when enabled."""
    eta = Eta(jobs, workers, job_timeout)
    if not enabled or not jobs:
        yield lambda job, record: eta.done(job, record.get("runtime"))
        return
    if not _isatty(sys.stderr):  # rich redraws a bar only on a terminal: plain lines instead
        with _plain_lines(eta, len(jobs), name) as advance:
            yield advance
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
    from rich.text import Text

    class EtaColumn(ProgressColumn):
        def render(self, task) -> Text:
            left = task.fields.get("eta")
            since = time.monotonic() - task.fields.get("at", time.monotonic())
            return Text(describe(None if left is None else max(0.0, left - since)))

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), EtaColumn())
    # on stderr: stdout stays clean for the summary (and for pipes)
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(name, total=len(jobs), eta=eta.seconds(), at=time.monotonic())

        def advance(job: Job, record: dict[str, Any]) -> None:
            eta.done(job, record.get("runtime"))
            bar.update(task, advance=1, eta=eta.seconds(), at=time.monotonic())
        yield advance


@contextlib.contextmanager
def _plain_lines(eta: Eta, total: int, name: str
                 ) -> Iterator[Callable[[Job, dict[str, Any]], None]]:
    """Off a terminal (--progress into a pipe or a file): a line "done/total, ETA [elapsed]"
    after the first job, then at most every PLAIN_EVERY seconds, and after the last job."""
    shown = Progress(True, sys.stderr)
    state = {"done": 0, "at": None}

    def advance(job: Job, record: dict[str, Any]) -> None:
        eta.done(job, record.get("runtime"))
        state["done"] += 1
        now = time.monotonic()
        if state["at"] is None or now - state["at"] >= PLAIN_EVERY or state["done"] == total:
            state["at"] = now
            shown.update(f"{name}: {state['done']}/{total} jobs, {describe(eta.seconds())}")
    with shown:
        yield advance
