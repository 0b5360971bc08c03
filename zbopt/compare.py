"""Run every applicable method on an instance, each judged by evaluate(), as Results.

With `jobs` > 1 the methods of a large instance run in that many worker processes (forked, so
they share this process's imports and hash seed and compute exactly what it would); the rows
come back in the order the methods were named.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from typing import Callable, Iterable, Optional

from .errors import ZboptError
from .instance import Instance
from .registry import methods, run
from .result import Result

# Below this many passes every method takes milliseconds, and starting workers would cost more
# than they save.
PARALLEL_FROM = 10_000


def run_method(name: str, instance: Instance, **params) -> Result:
    """One registered method (see zbopt.registry.run)."""
    return run(name, instance, **params)


def available_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def compare(instance: Instance, methods_: Iterable[str] | None = None, chunks: int = 0,
            objective: str = "span", jobs: int = 1,
            progress: Optional[Callable[[str], None]] = None) -> list[Result]:
    """Every schedule generator (or the ones named) on `instance`, as Results.

    `chunks` re-places a contiguous instance with that many chunks for the interleaved
    methods (default: each method's own). Solvers run only when named. `jobs`: worker
    processes for an instance of PARALLEL_FROM passes or more (where the platform can fork).
    `progress` is told, in a line, what is running.
    """
    registry = methods("schedule")
    names = list(methods_) if methods_ is not None else list(registry)
    if any(n not in registry for n in names):  # a solver named: only then import the solvers
        registry = methods()
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise ZboptError(f"unknown method(s) {', '.join(unknown)}: choose from "
                         f"{', '.join(sorted(registry))}")
    tasks = []
    for name in names:
        target = instance
        if chunks and instance.placement == "contiguous" \
                and registry[name].placement == "interleaved" and registry[name].kind != "solver":
            target = instance.with_placement("interleaved", chunks)
        tasks.append((name, target, objective))
    if jobs > 1 and len(tasks) > 1 and instance.num_passes >= PARALLEL_FROM and _can_fork() \
            and all(registry[name].kind != "solver" for name in names):
        # the searching heuristics are the long ones: started first, they do not end up alone
        order = sorted(range(len(tasks)), key=lambda i: registry[names[i]].kind != "heuristic")
        return _in_workers(tasks, order, jobs, progress)
    rows = []
    for i, (name, target, _) in enumerate(tasks):
        if progress is not None:
            progress(f"compare: {name} ({i + 1}/{len(tasks)})")
        rows.append(run(name, target, objective=objective))
    return rows


def _can_fork() -> bool:
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def _run_task(task: tuple[int, str, Instance, str]) -> tuple[int, Result]:
    i, name, target, objective = task
    return i, run(name, target, objective=objective)


def _ignore_interrupt() -> None:
    # Ctrl-C is the parent's to handle: it stops the workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _in_workers(tasks: list[tuple[str, Instance, str]], order: list[int], jobs: int,
                progress: Optional[Callable[[str], None]]) -> list[Result]:
    rows: list[Optional[Result]] = [None] * len(tasks)
    sys.stdout.flush()  # a forked worker must not write this process's buffered output again
    sys.stderr.flush()
    pool = multiprocessing.get_context("fork").Pool(min(jobs, len(tasks)), _ignore_interrupt)
    try:
        if progress is not None:
            progress(f"compare: {len(tasks)} methods in {min(jobs, len(tasks))} processes")
        work = [(i, *tasks[i]) for i in order]
        for finished, (i, row) in enumerate(pool.imap_unordered(_run_task, work), 1):
            rows[i] = row
            if progress is not None:
                progress(f"compare: {finished}/{len(tasks)} methods done "
                         f"({row.method}: {row.runtime:.1f} s)")
        pool.close()
    finally:
        pool.terminate()  # after an error or an interrupt, stops the workers at once
        pool.join()
    return rows  # type: ignore[return-value]


def best_of(results: Iterable[Result], objective: str = "span",
            placement: Optional[str] = None) -> Optional[Result]:
    """The result with the best objective among those that fit the cap (on `placement`)."""
    best: Optional[Result] = None
    for r in results:
        if not r.fits() or (placement is not None and r.placement != placement):
            continue
        if best is None or r.timeline.objective(objective) < best.timeline.objective(objective):
            best = r
    return best


def best_schedule(instance: Instance, objective: str = "span",
                  placement_only: bool = True) -> Optional[Result]:
    """The best generator result that fits the cap, among methods on the instance's own
    placement (with placement_only: a solver warm start needs the same passes)."""
    return best_of(compare(instance, objective=objective), objective,
                   instance.placement if placement_only else None)
