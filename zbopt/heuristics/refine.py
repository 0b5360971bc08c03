"""The improvement step that ends the multi-chunk zero-bubble heuristics (v-greedy,
interleaved-zb): the greedy's schedule and copies of it with the passes nothing waits for
re-placed (sink_placement.py, a few thresholds) are judged by evaluate(); the best few go through
the local search (local_search.py) and the shortest within the cap wins, never longer than the
schedule given.
"""

from __future__ import annotations

from typing import Callable, Iterable

from ..instance import Instance
from ..schedule import Schedule, evaluate
from . import _engine, local_search
from ._search import best_of
from .sink_placement import place_sinks

THRESHOLDS = (0.5, 0.75, 1.0)  # sink placements tried (waits, in multiples of the sink's time)
SEARCHED = 2  # candidates that go through the local search, the shortest first
SINK_LIMIT = 6_000  # passes from which sink placement is skipped (its simulation grows fastest)
ROUNDS = 2
FINALISTS = 2  # greedy outcomes (best estimates) refined besides the one best_of() picks
# re-timings of every local search of one refine_best(), in pass-steps (re-timings x passes):
# about 650 at p=8, m=32, so the step costs a few seconds there whatever the candidates
TOTAL = 1_000_000
MOST = 600  # and at most this many re-timings, which keeps small instances (tests, fuzzing) quick


def refine(instance: Instance, schedule: Schedule,
           allowance: local_search.Allowance | None = None) -> Schedule:
    """`schedule` or a shorter one within the instance's cap (schedules with blocks, and those
    of more than local_search.OFF_ABOVE passes, are returned as they are)."""
    if instance.num_passes > local_search.OFF_ABOVE or any(
            len(item) != 1 for order in schedule.orders for item in order):
        return schedule
    span = evaluate(instance, schedule).span
    best, best_span = schedule, span
    # two rounds: sink placements of the greedy's schedule, then of the best one found
    for _ in range(ROUNDS):
        judged = _judged(instance, [best] + _sink_placements(instance, best))
        improved = False
        for candidate_span, _, candidate in judged[:SEARCHED]:
            searched = local_search.improve(instance, candidate, allowance=allowance)
            if searched is not candidate:
                candidate_span = evaluate(instance, searched).span
            if candidate_span < best_span:
                best, best_span, improved = searched, candidate_span, True
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


def _judged(instance: Instance, candidates: list[Schedule]) -> list[tuple[float, int, Schedule]]:
    """Distinct candidates within the cap, shortest first (evaluate() spans)."""
    judged = []
    for candidate in dict.fromkeys(candidates):
        timeline = evaluate(instance, candidate)
        if timeline.fits_cap:
            judged.append((timeline.span, len(judged), candidate))
    return sorted(judged, key=lambda x: x[:2])


def refine_best(instance: Instance, candidates: Iterable[Callable[[], _engine.Outcome | None]],
                method: str, needed: Callable[[], str]) -> Schedule:
    """best_of() over the greedy's candidates, refined; below local_search.OFF_ABOVE passes the
    next FINALISTS by the simulator's estimate are refined too (a longer start often refines to
    a shorter schedule), and the shortest within the cap wins."""
    outcomes = [outcome for make in candidates if (outcome := make()) is not None]
    best = best_of(instance, [lambda o=o: o for o in outcomes], method, needed)
    if instance.num_passes > local_search.OFF_ABOVE:
        return best
    ranked = sorted(dict((o.orders, o.estimate) for o in outcomes).items(), key=lambda kv: kv[1])
    pool = [best] + [Schedule(tuple(tuple((q,) for q in order) for order in orders), method)
                     for orders, _ in ranked[:FINALISTS]]
    allowance = local_search.Allowance(min(MOST, TOTAL // max(1, instance.num_passes)))
    judged = []
    for start in dict.fromkeys(pool):
        refined = refine(instance, start, allowance)
        timeline = evaluate(instance, refined)
        if timeline.fits_cap:
            judged.append((timeline.span, len(judged), refined))
    return min(judged, key=lambda x: x[:2])[2]
