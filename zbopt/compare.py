"""Run every applicable method on an instance, each judged by evaluate(), as Results.

With `jobs` > 1 the methods of a large instance run in that many processes: this one and
forked workers (zbopt.forked: they compute exactly what it would); the rows come back in the
order the methods were named.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, Optional

from .bounds import check_objective
from .errors import ZboptError
from .forked import can_fork, run_forked
from .instance import Instance, require_instance
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
    require_instance(instance, "compare()")
    check_objective(objective)
    registry = methods("schedule")
    if isinstance(methods_, str):
        methods_ = [methods_]  # one method's name: that method
    names = list(methods_) if methods_ is not None else list(registry)
    odd = [n for n in names if not isinstance(n, str)]
    if odd:
        raise ZboptError(f"compare(): methods must be names such as '1f1b', got "
                         f"{type(odd[0]).__name__} {odd[0]!r}: give a list of method names")
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
    if jobs > 1 and len(tasks) > 1 and instance.num_passes >= PARALLEL_FROM and can_fork() \
            and all(registry[name].kind != "solver" for name in names):
        return _in_workers(tasks, _two_ended(tasks, registry), jobs, progress)
    rows = []
    for i, (name, target, _) in enumerate(tasks):
        if progress is not None:
            progress(f"compare: {name} ({i + 1}/{len(tasks)})")
        rows.append(run(name, target, objective=objective))
    return rows


def _two_ended(tasks: list[tuple[str, Instance, str]], registry) -> list[int]:
    """The order in which this process takes tasks from the front and the first worker from the
    back: the methods of one placement together (they share its pass table and bounds, and
    zb-greedy is zb-1p's or zb-2p's search again), the largest placement at the front and the
    next at the back, the searching heuristics (the long ones) first from either end, so that
    the two meet over short tasks."""
    groups: dict[str, list[int]] = {}
    for i, (_, target, _) in enumerate(tasks):
        groups.setdefault(target.placement, []).append(i)

    def weight(i: int) -> int:
        name, target, _ = tasks[i]
        return target.num_passes * (3 if registry[name].kind == "heuristic" else 1)

    for members in groups.values():
        members.sort(key=lambda i: registry[tasks[i][0]].kind != "heuristic")
    ranked = sorted(groups.values(), key=lambda g: -sum(map(weight, g)))
    if len(ranked) == 1:
        return ranked[0]
    return [i for g in [ranked[0]] + ranked[2:] for i in g] + ranked[1][::-1]


def _in_workers(tasks: list[tuple[str, Instance, str]], order: list[int], jobs: int,
                progress: Optional[Callable[[str], None]]) -> list[Result]:
    """The tasks of `order` shared with jobs - 1 forked workers (zbopt.forked.run_forked)."""
    rows: list[Optional[Result]] = [None] * len(tasks)
    finished = 0

    def done(i: int, row: Result) -> None:
        nonlocal finished
        rows[i] = row
        finished += 1
        if progress is not None:
            progress(f"compare: {finished}/{len(tasks)} methods done ({row.method}: "
                     f"{row.runtime:.1f} s)")

    def started(processes: int) -> None:
        if progress is not None:
            progress(f"compare: {len(tasks)} methods in {processes} processes")

    run_forked(order, lambda i: run(tasks[i][0], tasks[i][1], objective=tasks[i][2]), jobs, done,
               started)
    return rows  # type: ignore[return-value]


def best_of(results: Iterable[Result], objective: str = "span",
            placement: Optional[str] = None) -> Optional[Result]:
    """The result with the best objective among those that fit the cap (on `placement`)."""
    check_objective(objective)
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
