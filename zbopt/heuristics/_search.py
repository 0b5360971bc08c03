"""Shared by the greedy heuristics: resolving the cap, running a grid, judging with evaluate()."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Sequence

from ..errors import ZboptError
from ..instance import Instance, cap_spec_fits_some_instance, shown
from ..schedule import Schedule, evaluate
from . import _engine

# Candidates are ranked by the simulator's estimate and only the best few are judged by
# evaluate(): evaluate() is the slow part on large instances (p=32, m=256), and the estimate
# is exact for orders the simulator produced (tests check that), so this only saves time.
FINALISTS = 3
LARGE = 20_000  # passes from which the best estimate is returned as is (see best_of)

_UNSET = object()


def check_cap_param(method: str, value: Any) -> None:
    """A memory_cap parameter must be a cap some instance could take (registry's checks)."""
    if not cap_spec_fits_some_instance(value):
        raise ZboptError(f"{method}: memory_cap {shown(value)} is not a cap: give a positive "
                         f"number in the instance's memory unit, a list of them (one per "
                         f"device), a multiple of p such as '1p', or None for no cap")


CAP_CHECK = {"memory_cap": check_cap_param}


def capped_instance(instance: Instance, memory_cap: Any, method: str) -> Instance:
    """The instance with the cap the method schedules for (`_UNSET`: the instance's own)."""
    if memory_cap is _UNSET:
        return instance
    try:
        return instance.with_cap(memory_cap)
    except ZboptError as err:
        raise ZboptError(f"{method}: no schedule fits memory_cap {memory_cap!r}: {err}") from None


def derived_cap(caps: Sequence[float]) -> list[float] | None:
    """A per-device cap a method works out from the instance (a share of 1F1B's activation
    memory, raised to the least that fits), ready for Instance.with_cap. It is 0 only on a
    device that holds nothing at all (no static memory, m_b = 0 on its stages), where any cap
    binds nothing and Instance refuses a 0: that device gets the largest of the others, and
    when every device's is 0 there is no cap (None): it binds nothing, as zb-1p's "1p" (a cap
    of 0 there) binds nothing."""
    top = max(caps)
    if top <= 0:
        return None
    return [c if c > 0 else top for c in caps]


def best_of(instance: Instance, candidates: Iterable[Callable[[], _engine.Outcome | None]],
            method: str, needed: Callable[[], str], enough: float = -math.inf) -> Schedule:
    """The candidate with the smallest evaluate() span among those within the instance's cap.

    The FINALISTS best simulator estimates are evaluated; from LARGE passes on, the best
    estimate is returned as is. `candidates` are thunks returning an Outcome (None: that grid
    point failed); `needed` explains, when none fits, which cap would be needed. Candidates
    stop once one's estimate reaches `enough` (a lower bound: nothing after it is shorter).
    """
    keep = FINALISTS if instance.num_passes < LARGE else 1
    return chosen(instance, simulated(candidates, keep, enough), keep, method, needed)


def simulated(candidates: Iterable[Callable[[], _engine.Outcome | None]], keep: int,
              enough: float = -math.inf) -> dict[tuple, float]:
    """The candidates' distinct orders and their estimates, in the order they came. A
    candidate whose estimate must exceed the `keep`-th best so far can never be among the
    `keep` best, so its simulation stops as soon as that is certain (_engine.bounded): the
    `keep` best are those of running every candidate to its end. Candidates stop once one's
    estimate reaches `enough`."""
    outcomes: dict[tuple, float] = {}
    cutoff = math.inf
    for make in candidates:
        with _engine.bounded(cutoff):
            outcome = make()
        if outcome is not None and outcome.orders not in outcomes:
            outcomes[outcome.orders] = outcome.estimate
            if len(outcomes) >= keep:
                cutoff = sorted(outcomes.values())[keep - 1]
            if outcome.estimate <= enough:
                break
    return outcomes


def chosen(instance: Instance, outcomes: dict[tuple, float], count: int, method: str,
           needed: Callable[[], str]) -> Schedule:
    """Of the `count` best estimates (the first of equal ones), the one with the smallest
    evaluate() span within the cap; from LARGE passes on, the best estimate as is."""
    if not outcomes:
        raise ZboptError(f"{method}: no schedule of this method fits the memory cap "
                         f"{_describe(instance.cap)}; {needed()}")
    ranked = sorted(outcomes.items(), key=lambda kv: kv[1])[:count]
    if instance.num_passes >= LARGE:
        # One finalist, nothing left to compare: whoever uses the schedule judges it with
        # evaluate() (compare, the CLI), and a second evaluate() here would double the time.
        return _schedule(ranked[0][0], method)
    best: tuple[float, Schedule] | None = None
    for orders, _ in ranked:
        schedule = _schedule(orders, method)
        timeline = evaluate(instance, schedule)
        if not timeline.fits_cap:
            continue  # cannot happen for simulator output; evaluate() has the last word
        if best is None or timeline.span < best[0]:
            best = (timeline.span, schedule)
    if best is None:
        raise ZboptError(f"{method}: no schedule of this method fits the memory cap "
                         f"{_describe(instance.cap)}; {needed()}")
    return best[1]


def _schedule(orders, method: str) -> Schedule:
    return Schedule(tuple(tuple((q,) for q in order) for order in orders), method)


def _describe(caps: Sequence[float] | None) -> str:
    if caps is None:
        return "(unlimited)"
    caps = list(caps)
    return f"{caps[0]:g}" if len(set(caps)) == 1 else "[" + ", ".join(f"{c:g}" for c in caps) + "]"
