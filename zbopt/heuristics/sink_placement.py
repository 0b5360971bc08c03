"""Re-place the passes nothing waits for (every W, and the B of a chain's first stage): keep each
device's order of the other passes and put these back where the device would otherwise idle, or
where memory needs them, or at the end.

Such a "sink" only trades idle time now against memory held: one run early frees memory, one
deferred fills a later wait (the drain, where every device waits for the last backward passes).
`threshold` says how long a wait must be, in multiples of the sink's duration, before a ready
sink fills it. A simulation in time decides; evaluate() judges the result.
"""

from __future__ import annotations

import heapq
import math
from typing import Sequence

from ..instance import Instance, within_cap
from ..passes import dependencies, memory_delta, neighbours, stage_lag

Pass = tuple[int, int, str]
_EPS = 1e-9
LOOKAHEAD = 4  # the device's oldest sinks, whose readiness wakes it
SCAN = 32  # the device's oldest sinks, the ones it may run next (the first ready one)


def place_sinks(instance: Instance, orders: Sequence[Sequence[Pass]],
                threshold: float | Sequence[float]) -> list[list[Pass]] | None:
    """Per-device orders with the same order of non-sink passes and the sinks re-placed (see the
    module doc; a sequence gives one threshold per device); None if a forward never fits."""
    p = instance.devices
    thresholds = [threshold] * p if isinstance(threshold, (int, float)) else list(threshold)
    links = neighbours(instance)
    prev = links[0]

    # a single pass waits for at most one other, plus the lag between their stages; looked up
    # once per pass, since the simulation asks again at every wake-up
    waits_for: dict[Pass, tuple[Pass | None, float]] = {}
    for order in orders:
        for q in order:
            k = next(iter(dependencies(instance, q, links)), None)
            waits_for[q] = (k, stage_lag(instance, k[0], q[0]) if k is not None else 0.0)

    def is_sink(q: Pass) -> bool:
        return q[2] == "W" or (q[2] == "B" and q[0] not in prev)

    skeleton = [[q for q in order if not is_sink(q)] for order in orders]
    sinks = [[q for q in order if is_sink(q)] for order in orders]
    at = [0] * p
    caps = list(instance.cap) if instance.cap is not None else [math.inf] * p
    level = list(instance.static_memory)
    end: dict[Pass, float] = {}
    free = [0.0] * p
    out: list[list[Pass]] = [[] for _ in range(p)]
    left = [len(order) for order in orders]
    waiting: dict[Pass, list[int]] = {}
    heap = [(0.0, d) for d in range(p)]
    heapq.heapify(heap)
    queued: set[tuple[float, int]] = set(heap)  # each wake-up once, or they would multiply

    def wake(t: float, d: int) -> None:
        if (t, d) not in queued:
            queued.add((t, d))
            heapq.heappush(heap, (t, d))

    def arrival(q: Pass) -> float | None:
        k, lag = waits_for[q]
        if k is None:
            return 0.0
        finish = end.get(k)
        return None if finish is None else finish + lag

    def ready_sink(d: int, t: float) -> Pass | None:
        for q in sinks[d][:SCAN]:
            a = arrival(q)
            if a is not None and a <= t + _EPS:
                return q
        return None

    def run(d: int, t: float, q: Pass) -> None:
        finish = max(t, free[d]) + instance.cost(q[0], q[2])
        end[q] = free[d] = finish
        level[d] += memory_delta(instance, q)
        out[d].append(q)
        left[d] -= 1
        wake(finish, d)
        for d2, lag in waiting.pop(q, ()):
            wake(max(finish + lag, t), d2)

    def wait_for(d: int, q: Pass, t: float) -> None:
        a = arrival(q)
        if a is not None:
            if a > t + _EPS:
                wake(a, d)
        else:
            k, lag = waits_for[q]
            waiting.setdefault(k, []).append((d, lag))

    while heap:
        t, d = heapq.heappop(heap)
        queued.discard((t, d))
        if left[d] == 0 or free[d] > t + _EPS:
            continue
        t = max(t, free[d])
        sink = ready_sink(d, t)
        if at[d] == len(skeleton[d]):
            if sink is not None:
                sinks[d].remove(sink)
                run(d, t, sink)
            else:
                for x in sinks[d][:LOOKAHEAD]:
                    wait_for(d, x, t)
            continue
        q = skeleton[d][at[d]]
        if q[2] == "F" and not within_cap(level[d] + memory_delta(instance, q), caps[d]):
            if sink is not None:
                sinks[d].remove(sink)
                run(d, t, sink)  # memory for the next forward
            elif sinks[d]:
                for x in sinks[d][:LOOKAHEAD]:
                    wait_for(d, x, t)
            else:
                return None
            continue
        a = arrival(q)
        if a is not None and a <= t + _EPS:
            at[d] += 1
            run(d, t, q)
            continue
        if sink is not None:
            k, lag = waits_for[q]
            gap = a - t if a is not None else instance.cost(k[0], k[2]) + lag
            if gap >= thresholds[d] * instance.cost(sink[0], sink[2]) - _EPS:
                sinks[d].remove(sink)
                run(d, t, sink)
                continue
        wait_for(d, q, t)
        for x in sinks[d][:LOOKAHEAD]:
            wait_for(d, x, t)  # a sink that becomes ready may fill the wait
    if any(left):
        return None
    return out
