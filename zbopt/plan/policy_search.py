"""A search over the greedy's choices, device by device, for one split (contiguous placement).

zb-greedy tries a fixed grid of policies in which every device fills its waits with W the same
way and the in-flight limits follow a few rules. Under caps that hold few micro-batches the best
schedule often needs a different W rule on the bottleneck device than on the others, or one
device holding fewer micro-batches than its memory allows; those points are off the grid. This
module starts from the grid's best point and mutates one to three coordinates at a time (a
device's W rule, a stage's in-flight limit by one, B first or F first), keeping a mutation when
the span does not grow (sideways moves let it cross plateaus); a climb that stalls restarts from
the grid's next point or from a kick of the best found. The simulator's estimate ranks
candidates (it is exact for the orders it produces); the result is judged by evaluate().
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import replace
from typing import Optional

from ..heuristics._engine import Outcome, Policy, Topology, simulate
from ..heuristics.zb_greedy import W_FILLS, budgeted, grid, wave_policies
from ..instance import Instance
from ..result import Result
from ..schedule import Schedule, evaluate
from .memory_bound import held_counts

SUFFIX = "+policy-search"
STARTS = 3  # climbs from the grid's best points, then from kicks of the best found
KICK = 5  # coordinates a kick changes
STALL = 200  # evaluations without a shorter schedule that end a climb
STALE_CLIMBS = 3  # climbs in a row without a new best that end the search


def _limits(instance: Instance) -> tuple[int, ...]:
    """Per stage, the most micro-batches its device's cap lets it hold (m without a cap)."""
    return tuple(max(1, k) for k in held_counts(instance))


def _normalised(policy: Policy, instance: Instance) -> Policy:
    """The same policy with a W rule per device and a limit per stage (so each can mutate)."""
    p = instance.devices
    fill = policy.w_fill if isinstance(policy.w_fill, tuple) else (policy.w_fill,) * p
    limits = _limits(instance)
    inflight = policy.inflight or limits
    return replace(policy, w_fill=tuple(fill),
                   inflight=tuple(max(1, min(a, b)) for a, b in zip(inflight, limits)))


def _mutate(policy: Policy, limits: tuple[int, ...], rng: random.Random,
            moves: int) -> Policy:
    fill, inflight, b_first = list(policy.w_fill), list(policy.inflight), policy.b_first
    p = len(fill)
    for _ in range(moves):
        c = rng.randrange(2 * p + 1)
        if c < p:
            fill[c] = rng.choice(W_FILLS)
        elif c < 2 * p:
            d = c - p
            inflight[d] = max(1, min(limits[d], inflight[d] + rng.choice((-1, 1))))
        else:
            b_first = not b_first
    return replace(policy, w_fill=tuple(fill), inflight=tuple(inflight), b_first=b_first)


def search(result: Result, deadline: float, seed: int = 0) -> Optional[Result]:
    """A shorter schedule than `result`'s within its cap, from greedy policies tuned per device
    until `deadline` (perf_counter) or until STALE_CLIMBS climbs in a row found nothing
    shorter; None if none was found."""
    instance = result.instance
    if instance.placement != "contiguous" or instance.overlap or result.timeline is None:
        return None
    began = time.perf_counter()
    top = Topology(instance)
    limits = _limits(instance)

    def estimate(policy: Policy, cutoff: float) -> tuple[float, Optional[Outcome]]:
        outcome = simulate(instance, policy, top, bound=cutoff)
        return (math.inf, None) if outcome is None else (outcome.estimate, outcome)

    starts = []
    for policy in wave_policies(instance) + budgeted(grid(instance), instance.num_passes):
        if time.perf_counter() >= deadline:
            break
        value, outcome = estimate(policy, math.inf)
        if outcome is not None:
            starts.append((value, _normalised(policy, instance), outcome))
    if not starts:
        return None
    starts.sort(key=lambda x: x[0])
    best_value, best_policy, best_outcome = starts[0]
    rng = random.Random(seed)
    climbs = stale = 0
    while time.perf_counter() < deadline and stale < STALE_CLIMBS:
        # climb from the grid's next best point, then from kicks of the best found
        if climbs < min(STARTS, len(starts)):
            value, current, _ = starts[climbs]
        else:
            current = _mutate(best_policy, limits, rng, KICK)
            value, _ = estimate(current, math.inf)
        climbs += 1
        improved, still = False, 0
        while still < STALL and time.perf_counter() < deadline:
            candidate = _mutate(current, limits, rng, rng.choice((1, 1, 2, 3)))
            # a sideways move (same estimate) is kept too; a worse one is cut short
            found, outcome = estimate(candidate, value * (1 + 1e-12))
            still += 1
            if found <= value:
                if found < value:
                    still = 0
                value, current = found, candidate
                if found < best_value:
                    best_value, best_policy, best_outcome, improved = found, candidate, outcome, True
        stale = 0 if improved else stale + 1
    method = "zb-greedy" + SUFFIX
    schedule = Schedule(tuple(tuple((q,) for q in order) for order in best_outcome.orders), method)
    timeline = evaluate(instance, schedule)
    if not timeline.fits_cap or timeline.span >= result.span * (1 - 1e-9):
        return None
    return replace(result, method=method, kind="heuristic", status="heuristic",
                   timeline=timeline, runtime=result.runtime + time.perf_counter() - began)
