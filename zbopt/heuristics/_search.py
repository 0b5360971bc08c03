"""Shared by the greedy heuristics: resolving the cap, running a grid, judging with evaluate()."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Sequence

from ..errors import ZboptError
from ..instance import Instance
from ..schedule import Schedule, evaluate
from . import _engine

# Candidates are ranked by the simulator's estimate and only the best few are judged by
# evaluate(): evaluate() is the slow part on large instances (p=32, m=256), and the estimate
# is exact for orders the simulator produced (tests check that), so this only saves time.
FINALISTS = 3
LARGE = 20_000  # passes from which the best estimate is returned as is (see best_of)

_UNSET = object()


def capped_instance(instance: Instance, memory_cap: Any, method: str) -> Instance:
    """The instance with the cap the method schedules for (`_UNSET`: the instance's own)."""
    if memory_cap is _UNSET:
        return instance
    try:
        return instance.with_cap(memory_cap)
    except ZboptError as err:
        raise ZboptError(f"{method}: no schedule fits memory_cap {memory_cap!r}: {err}") from None


def best_of(instance: Instance, candidates: Iterable[Callable[[], _engine.Outcome | None]],
            method: str, needed: Callable[[], str], enough: float = -math.inf) -> Schedule:
    """The candidate with the smallest evaluate() span among those within the instance's cap.

    The FINALISTS best simulator estimates are evaluated; from LARGE passes on, the best
    estimate is returned as is. `candidates` are thunks returning an Outcome (None: that grid
    point failed); `needed` explains, when none fits, which cap would be needed. Candidates
    stop once one's estimate reaches `enough` (a lower bound: nothing after it is shorter).
    """
    outcomes: dict[tuple, float] = {}
    # A candidate whose estimate must exceed the k-th best so far can never be among the k
    # kept below, so its simulation stops as soon as that is certain (_engine.bounded).
    cutoff = math.inf
    for make in candidates:
        with _engine.bounded(cutoff):
            outcome = make()
        if outcome is not None and outcome.orders not in outcomes:
            outcomes[outcome.orders] = outcome.estimate
            size = sum(len(order) for order in outcome.orders)
            keep = FINALISTS if size < LARGE else 1
            if len(outcomes) >= keep:
                cutoff = sorted(outcomes.values())[keep - 1]
            if outcome.estimate <= enough:
                break
    if not outcomes:
        raise ZboptError(f"{method}: no schedule of this method fits the memory cap "
                         f"{_describe(instance.cap)}; {needed()}")
    size = sum(len(order) for order in next(iter(outcomes)))
    ranked = sorted(outcomes.items(), key=lambda kv: kv[1])[:FINALISTS if size < LARGE else 1]
    if size >= LARGE:
        # One finalist, nothing left to compare: whoever uses the schedule judges it with
        # evaluate() (compare, the CLI), and a second evaluate() here would double the time.
        orders = ranked[0][0]
        return Schedule(tuple(tuple((q,) for q in order) for order in orders), method)
    best: tuple[float, Schedule] | None = None
    for orders, _ in ranked:
        schedule = Schedule(tuple(tuple((q,) for q in order) for order in orders), method)
        timeline = evaluate(instance, schedule)
        if not timeline.fits_cap:
            continue  # cannot happen for simulator output; evaluate() has the last word
        if best is None or timeline.span < best[0]:
            best = (timeline.span, schedule)
    if best is None:
        raise ZboptError(f"{method}: no schedule of this method fits the memory cap "
                         f"{_describe(instance.cap)}; {needed()}")
    return best[1]


def _describe(caps: Sequence[float] | None) -> str:
    if caps is None:
        return "(unlimited)"
    caps = list(caps)
    return f"{caps[0]:g}" if len(set(caps)) == 1 else "[" + ", ".join(f"{c:g}" for c in caps) + "]"
