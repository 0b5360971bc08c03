"""Local search on a schedule of single passes: move passes within their device's order while
the span (then the sum of the devices' spans) shrinks and every device stays within its cap.

The moves are aimed at idle time: where a device waits before a pass, either pull a later pass
of that device into the gap, or move the pass it waits for earlier on its own device. Moves are
ranked by a compact re-timing of the orders (the same ASAP rule as `evaluate()`); the returned
schedule is judged by `evaluate()` and is never worse than the one given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from ..instance import Instance, within_cap
from ..passes import dependencies, memory_delta, neighbours, stage_lag
from ..schedule import Schedule, evaluate

Pass = tuple[int, int, str]
_EPS = 1e-9
WINDOW = 10  # how far (in positions) a pass may move in one step
# Re-timings allowed per run, in pass-steps (re-timings x passes), and at most MAX_RETIMES:
# a bound on the time spent that is the same on every machine (about 400 re-timings, a second,
# at p=8, m=32 on two chunks; none from OFF_ABOVE passes, where one re-timing costs too much).
BUDGET = 600_000
MAX_RETIMES = 400
CRITICAL_DEPTH = 40  # passes followed back along the chain that made a pass late
OFF_ABOVE = 20_000


@dataclass(frozen=True)
class _Compiled:
    """The passes of a schedule as integers with their duration, dependency, lag and memory."""

    passes: tuple[Pass, ...]
    duration: tuple[float, ...]
    dep: tuple[int, ...]  # the one pass each pass waits for (-1: none)
    lag: tuple[float, ...]
    delta: tuple[float, ...]
    caps: tuple[float, ...]
    static: tuple[float, ...]
    sink: tuple[bool, ...]  # nothing waits for it (a W, or a B of a chain's first stage)


def _compile(instance: Instance, orders: Sequence[Sequence[Pass]]) -> tuple[_Compiled, list[list[int]]]:
    passes = [q for order in orders for q in order]
    index = {q: i for i, q in enumerate(passes)}
    links = neighbours(instance)
    prev = links[0]
    dep, lag = [], []
    for q in passes:
        d = next(iter(dependencies(instance, q, links)), None)  # a single pass waits for one
        dep.append(index[d] if d is not None else -1)
        lag.append(stage_lag(instance, d[0], q[0]) if d is not None else 0.0)
    caps = tuple(instance.cap) if instance.cap is not None else (math.inf,) * instance.devices
    compiled = _Compiled(tuple(passes), tuple(instance.cost(s, k) for s, _, k in passes),
                         tuple(dep), tuple(lag), tuple(memory_delta(instance, q) for q in passes),
                         caps, tuple(instance.static_memory),
                         tuple(k == "W" or (k == "B" and s not in prev) for s, _, k in passes))
    int_orders, at = [], 0
    for order in orders:
        int_orders.append(list(range(at, at + len(order))))
        at += len(order)
    return compiled, int_orders


def _retime(c: _Compiled, orders: list[list[int]]):
    """ASAP start of every pass (None: the orders deadlock) and per device (first start, end)."""
    n = len(c.passes)
    end = [-1.0] * n
    dur, dep, lag = c.duration, c.dep, c.lag
    p = len(orders)
    pos = [0] * p
    free = [0.0] * p
    first = [0.0] * p
    todo = n
    progress = True
    while todo and progress:
        progress = False
        for d in range(p):
            order = orders[d]
            i, t = pos[d], free[d]
            size = len(order)
            start = i
            while i < size:
                q = order[i]
                k = dep[q]
                if k >= 0:
                    e = end[k]
                    if e < 0:
                        break
                    e += lag[q]
                    if e > t:
                        t = e
                if i == 0:
                    first[d] = t
                t += dur[q]
                end[q] = t
                i += 1
            if i != start:
                progress = True
                todo -= i - start
                pos[d], free[d] = i, t
    if todo:
        return None
    return end, [(first[d], free[d]) for d in range(p)]


def _score(end: list[float], spans) -> tuple[float, float, float]:
    """Span first; then the devices' spans and every pass's end, so that moves which bring
    work earlier without shortening the span yet still count as progress."""
    lengths = [b - a for a, b in spans if b > a]
    return (max(lengths, default=0.0), sum(lengths), sum(end))


def _better(a, b) -> bool:
    for x, y in zip(a, b):
        if x < y - _EPS * max(1.0, abs(y)):
            return True
        if x > y + _EPS * max(1.0, abs(y)):
            return False
    return False


def _fits(c: _Compiled, d: int, order: list[int]) -> bool:
    level = c.static[d]
    cap = c.caps[d]
    for q in order:
        level += c.delta[q]
        if level > cap and not within_cap(level, cap):
            return False
    return True


def _moved(order: list[int], i: int, j: int) -> list[int]:
    """The order with the pass at position i moved to position j."""
    new = order[:]
    q = new.pop(i)
    new.insert(j, q)
    return new


def _candidates(c: _Compiled, orders: list[list[int]], end: list[float], spans):
    """(device, from, to) moves aimed at the idle gaps, the longest devices' gaps first."""
    where = {}
    for d, order in enumerate(orders):
        for i, q in enumerate(order):
            where[q] = (d, i)
    ranked = sorted(range(len(orders)), key=lambda d: spans[d][0] - spans[d][1])
    for d in ranked:
        order = orders[d]
        gaps = []
        for i in range(1, len(order)):
            q = order[i]
            start = end[q] - c.duration[q]
            idle = start - end[order[i - 1]]
            if idle > _EPS:
                gaps.append((idle, i))
        gaps.sort(reverse=True)
        for _, i in gaps:
            k = c.dep[order[i]]
            yield from _critical_swaps(c, orders, end, where, k)
            if k >= 0:
                d2, i2 = where[k]
                for j in range(i2 - 1, max(-1, i2 - 1 - WINDOW), -1):
                    yield d2, i2, j  # bring the awaited pass earlier on its device
            for j in range(i - 1, max(-1, i - 1 - WINDOW), -1):
                if c.sink[order[j]]:
                    yield d, j, i - 1  # defer an earlier W into the gap: what precedes it moves up
            for j in range(i + 1, min(len(order), i + 1 + WINDOW)):
                yield d, j, i  # fill the gap with a later pass of this device


def _critical_swaps(c: _Compiled, orders, end, where, x: int):
    """Along the chain of passes that made `x` late: wherever a pass waited for the pass before
    it on its device (not for its input), move that blocker after it (a W a little further)."""
    for _ in range(CRITICAL_DEPTH):
        if x < 0:
            return
        d, i = where[x]
        start = end[x] - c.duration[x]
        if i > 0 and end[orders[d][i - 1]] >= start - _EPS:
            size = len(orders[d])
            yield d, i - 1, i
            if c.sink[orders[d][i - 1]]:
                for j in range(i + 1, min(size, i + 4)):
                    yield d, i - 1, j
            x = orders[d][i - 1]
        else:
            x = c.dep[x]


class Allowance:
    """Re-timings left to several searches that share one bound (mutable on purpose)."""

    def __init__(self, retimes: int) -> None:
        self.left = retimes


def improve_orders(instance: Instance, orders: Sequence[Sequence[Pass]],
                   budget: int = BUDGET, allowance: Allowance | None = None) -> list[list[Pass]]:
    """Per-device orders of single passes, locally improved within the instance's cap (the
    orders given must be valid and fit it)."""
    c, current = _compile(instance, orders)
    n = max(1, len(c.passes))
    evals = min(MAX_RETIMES, budget // n) if n <= OFF_ABOVE else 0
    if allowance is not None:
        evals = min(evals, allowance.left)
        allowance.left -= evals  # returned below, less what was used
    timed = _retime(c, current)
    if timed is None:
        return [list(o) for o in orders]
    end, spans = timed
    best = _score(end, spans)
    while evals > 0:
        improved = False
        for d, i, j in _candidates(c, current, end, spans):
            if evals <= 0:
                break
            order = _moved(current[d], i, j)
            if not _fits(c, d, order):
                continue
            trial = current[:]
            trial[d] = order
            evals -= 1
            timed = _retime(c, trial)
            if timed is None:
                continue
            score = _score(*timed)
            if _better(score, best):
                current, best = trial, score
                end, spans = timed
                improved = True
                break
        if not improved:
            break
    if allowance is not None:
        allowance.left += evals
    return [[c.passes[q] for q in order] for order in current]


def improve(instance: Instance, schedule: Schedule, budget: int = BUDGET,
            allowance: Allowance | None = None,
            span_of: Callable[[Schedule], float] | None = None) -> Schedule:
    """`schedule` improved by local search, judged by evaluate(): never a longer span, never over
    the cap. Schedules with blocks (several passes in one item) are returned as they are.
    `span_of`: the evaluate() span of a schedule, inf over the cap (default: evaluate() it),
    for a caller that has judged some schedules already."""
    if instance.num_passes > OFF_ABOVE or any(len(item) != 1 for order in schedule.orders
                                              for item in order):
        return schedule  # too large to search here (evaluate() alone would double the time)
    span_of = span_of or (lambda s: _span_within_cap(instance, s))
    before = span_of(schedule)
    orders = improve_orders(instance, [[item[0] for item in order] for order in schedule.orders],
                            budget, allowance)
    candidate = Schedule(tuple(tuple((q,) for q in order) for order in orders), schedule.method)
    return candidate if span_of(candidate) < before else schedule


def _span_within_cap(instance: Instance, schedule: Schedule) -> float:
    timeline = evaluate(instance, schedule)
    return timeline.span if timeline.fits_cap else math.inf
