"""The improvement step that ends the multi-chunk zero-bubble heuristics (v-greedy,
interleaved-zb): the greedy's schedule and copies of it with the passes nothing waits for
re-placed (sink_placement.py, a few thresholds) are judged by evaluate(); the best few go through
the local search (local_search.py) and the shortest within the cap wins, never longer than the
schedule given.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

from ..instance import Instance
from ..schedule import Schedule, evaluate
from . import _engine, _search, local_search
from .sink_placement import place_sinks

THRESHOLDS = (0.5, 0.75, 1.0)  # sink placements tried (waits, in multiples of the sink's time)
SEARCHED = 2  # candidates that go through the local search, the shortest first
SINK_LIMIT = 6_000  # passes from which sink placement is skipped (its simulation grows fastest)
ROUNDS = 2
FINALISTS = 2  # greedy outcomes (best estimates) refined besides the one _search.chosen() picks ...
# ... on instances of fewer than FEW passes: above, the best start alone refined to the best
# schedule on 23 of 24 random V and interleaved instances at p=12-16, m=48-64 (the other lost
# 0.26%)
FEW = 4_000
# re-timings of every local search of one refine_best(), in pass-steps (re-timings x passes):
# about 650 at p=8, m=32, so the step costs a few seconds there whatever the candidates; from
# FEW passes on, TOTAL_LARGE (at p=16, m=64, 400,000 instead of 1,000,000 lost at most 0.033%
# on 20 random V and interleaved instances, and kept the explorer's redraw short)
TOTAL = 1_000_000
TOTAL_LARGE = 400_000
MOST = 600  # and at most this many re-timings, which keeps small instances (tests, fuzzing) quick


class _Judge:
    """evaluate() spans of schedules within the cap (inf: over it), each schedule judged once:
    the same schedule comes back through several steps, and evaluate() is the costly part."""

    def __init__(self, instance: Instance):
        self.instance = instance
        self.known: dict[Schedule, float] = {}

    def __call__(self, schedule: Schedule) -> float:
        span = self.known.get(schedule)
        if span is None:
            timeline = evaluate(self.instance, schedule)
            span = self.known[schedule] = timeline.span if timeline.fits_cap else math.inf
        return span


def refine(instance: Instance, schedule: Schedule,
           allowance: local_search.Allowance | None = None, judge: _Judge | None = None) -> Schedule:
    """`schedule` or a shorter one within the instance's cap (schedules with blocks, and those
    of more than local_search.OFF_ABOVE passes, are returned as they are)."""
    if instance.num_passes > local_search.OFF_ABOVE or any(
            len(item) != 1 for order in schedule.orders for item in order):
        return schedule
    judge = judge or _Judge(instance)
    best, best_span = schedule, judge(schedule)
    # two rounds: sink placements of the greedy's schedule, then of the best one found
    for _ in range(ROUNDS):
        judged = _judged(judge, [best] + _sink_placements(instance, best))
        improved = False
        for candidate_span, _, candidate in judged[:SEARCHED]:
            candidate = local_search.improve(instance, candidate, allowance=allowance,
                                             span_of=judge)
            candidate_span = judge(candidate)
            if candidate_span < best_span:
                best, best_span, improved = candidate, candidate_span, True
        if not improved:
            break
    return best


def _sink_placements(instance: Instance, schedule: Schedule) -> list[Schedule]:
    if instance.num_passes > SINK_LIMIT:
        return []
    orders = [[item[0] for item in order] for order in schedule.orders]
    out = []
    for threshold in THRESHOLDS:
        placed = place_sinks(instance, orders, threshold)
        if placed is not None:
            out.append(Schedule(tuple(tuple((q,) for q in order) for order in placed),
                                schedule.method))
    return out


def _judged(judge: _Judge, candidates: list[Schedule]) -> list[tuple[float, int, Schedule]]:
    """Distinct candidates within the cap, shortest first (evaluate() spans)."""
    judged = []
    for candidate in dict.fromkeys(candidates):
        span = judge(candidate)
        if span < math.inf:
            judged.append((span, len(judged), candidate))
    return sorted(judged, key=lambda x: x[:2])


def refine_best(instance: Instance, candidates: Iterable[Callable[[], _engine.Outcome | None]],
                method: str, needed: Callable[[], str], share: float = 1.0,
                judge: _Judge | None = None) -> Schedule:
    """The best of the greedy's candidates (as _search.best_of() picks it), refined; below FEW
    passes the next FINALISTS by the simulator's estimate are refined too (a longer start often
    refines to a shorter schedule there), and the shortest within the cap wins. `share`: the
    part of the local search's re-timings this call may use (a caller refining several pools
    splits them, so its total stays that of one call). `judge`: the spans known so far (a caller
    that compares this call's result with others reads them there instead of evaluating again)."""
    finalists = FINALISTS if instance.num_passes < FEW else 0
    outcomes = _search.simulated(candidates, 1 + finalists)
    best = _search.chosen(instance, outcomes, 1 + finalists, method, needed)
    if instance.num_passes > local_search.OFF_ABOVE:
        return best
    ranked = sorted(outcomes.items(), key=lambda kv: kv[1])
    pool = [best] + [_search._schedule(orders, method) for orders, _ in ranked[:finalists]]
    total = TOTAL if instance.num_passes < FEW else TOTAL_LARGE
    allowance = local_search.Allowance(
        max(1, int(share * min(MOST, total // max(1, instance.num_passes)))))
    judge = judge or _Judge(instance)
    judged = []
    for start in dict.fromkeys(pool):
        refined = refine(instance, start, allowance, judge)
        span = judge(refined)
        if span < math.inf:
            judged.append((span, len(judged), refined))
    return min(judged, key=lambda x: x[:2])[2]
