"""A search over the greedy's choices, device by device and stage by stage (contiguous,
interleaved and V placements).

zb-greedy, interleaved-zb and v-greedy each try a fixed grid of policies in which every device
fills its waits with W the same way and the in-flight limits follow a few rules. Under caps
that hold few micro-batches the best schedule often needs a different W rule on the bottleneck
device than on the others, or one stage holding fewer micro-batches than its memory allows;
those points are off the grid. This module starts from the grid's best points and mutates one
to three coordinates at a time (a device's W rule, a stage's in-flight limit by one, B first or
F first; on several chunks per device also which chunk goes first and how much room a started
micro-batch reserves), keeping a mutation when the span does not grow (sideways moves let it
cross plateaus); a climb that stalls restarts from the grid's next point or from a kick of the
best found. On interleaved placements the grid also holds interleaved_zb.sequenced(), points
whose forwards follow a fixed order of micro-batch groups (kept while the other coordinates
mutate). The simulator's estimate ranks candidates (it is exact for the orders it produces);
the result is judged by evaluate(). On several chunks per device (V, interleaved) the best
schedule found then goes through the improvement step its base heuristic ends with (refine.py:
passes nothing waits for re-placed, then a local search), in the last tenth of the time given.

Users: `zbopt plan` (zbopt.plan.search) on its most promising splits, and `solve` on
interleaved and V instances, where the grid's best is furthest from the bound, before the
backend's search (zbopt.solvers.api).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import replace
from typing import Optional

from .. import bounds, signals
from ..instance import Instance
from ..result import Result
from ..schedule import Schedule, Timeline, evaluate
from . import interleaved_zb, local_search, v_greedy, zb_greedy
from ._engine import Outcome, Policy, Topology, simulate
from .refine import refine
from .zb_greedy import W_FILLS, budgeted

SUFFIX = "+policy-search"
STARTS = 3  # climbs from the grid's best points, then from kicks of the best found
KICK = 5  # coordinates a kick changes
STALL = 200  # evaluations without a shorter schedule that end a climb
STALE_CLIMBS = 3  # climbs in a row without a new best that end the search
# per device on several chunks per device (one value for all on contiguous, as it always was)
CHUNK_FLAGS = ("b_first", "late_chunk_first", "reserve_all")
# the heuristic whose grid the search starts from, per placement
BASES = {"contiguous": "zb-greedy", "interleaved": "interleaved-zb", "v": "v-greedy"}
# On several chunks per device the best policy's schedule then goes through the improvement step
# its base heuristic ends with (refine.py), in this share of the search's time: on the paper's
# models placed on V below 1F1B's memory it shortens the search's best by a median 2.5%, at
# most 4.6% (results/v_caps.md, 12 s searches).
REFINE_SHARE = 0.1
# local-search re-timings the step may spend per second of that share, in passes re-timed
# (about half of what this project's 2-core machine does, so the share is rarely overrun)
RETIMED_PER_SECOND = 1_000_000


def applies(instance: Instance) -> bool:
    """The greedy runs on the placement and passes never overlap."""
    return instance.placement in BASES and not instance.overlap


def _limits(instance: Instance) -> tuple[int, ...]:
    """Per stage, the most activations of it its device's cap could hold (m without a cap)."""
    return tuple(max(1, bounds.held_count(bounds.activation_capacity(instance, instance.device_of(s)),
                                          instance.m_b[s], instance.microbatches))
                 for s in range(instance.num_stages))


def _grid(instance: Instance) -> list[Policy]:
    if instance.placement == "interleaved":
        return budgeted(interleaved_zb.grid(instance), instance.num_passes) + \
            interleaved_zb.sequenced(instance)
    if instance.placement == "v":
        return budgeted(v_greedy.grid(instance), instance.num_passes)
    return zb_greedy.wave_policies(instance) + budgeted(zb_greedy.grid(instance),
                                                        instance.num_passes)


def _normalised(policy: Policy, instance: Instance, limits: tuple[int, ...],
                chunks: bool) -> Policy:
    """The same policy with a W rule per device and a limit per stage (so each can mutate);
    on several chunks per device also its flags per device."""
    p = instance.devices

    def each(value) -> tuple:
        return value if isinstance(value, tuple) else (value,) * p

    inflight = policy.inflight or limits
    fields = {"w_fill": each(policy.w_fill),
              "inflight": tuple(max(1, min(a, b)) for a, b in zip(inflight, limits))}
    if chunks:
        fields.update({name: each(getattr(policy, name)) for name in CHUNK_FLAGS})
    return replace(policy, **fields)


def _mutate(policy: Policy, limits: tuple[int, ...], rng: random.Random, moves: int,
            chunks: bool) -> Policy:
    """`moves` coordinates changed: a device's W rule, a stage's limit by one, and B first or F
    first (on several chunks per device: a device's flag of CHUNK_FLAGS)."""
    fill, inflight = list(policy.w_fill), list(policy.inflight)
    p, stages = len(fill), len(inflight)
    flags = {name: list(getattr(policy, name)) for name in CHUNK_FLAGS} if chunks else {}
    b_first = policy.b_first
    for _ in range(moves):
        c = rng.randrange(p + stages + (len(CHUNK_FLAGS) * p if chunks else 1))
        if c < p:
            fill[c] = rng.choice(W_FILLS)
        elif c < p + stages:
            s = c - p
            inflight[s] = max(1, min(limits[s], inflight[s] + rng.choice((-1, 1))))
        elif chunks:
            name, d = divmod(c - p - stages, p)
            values = flags[CHUNK_FLAGS[name]]
            values[d] = not values[d]
        else:
            b_first = not b_first
    if chunks:
        return replace(policy, w_fill=tuple(fill), inflight=tuple(inflight),
                       **{name: tuple(values) for name, values in flags.items()})
    return replace(policy, w_fill=tuple(fill), inflight=tuple(inflight), b_first=b_first)


def improve(instance: Instance, span: float, deadline: float, seed: int = 0,
            target: float = 0.0, patience: Optional[int] = STALE_CLIMBS) -> Optional[Timeline]:
    """A schedule of `instance` within its cap with a span below `span`, from greedy policies
    tuned per device and stage until `deadline` (perf_counter), until `patience` climbs in a
    row found nothing shorter (None: kicks go on until the deadline), or once the span reaches
    `target` (e.g. a lower bound); None if none was found. Its method is the placement's greedy
    with SUFFIX."""
    if not applies(instance):
        return None
    top = Topology(instance)
    limits = _limits(instance)
    chunks = instance.num_stages > instance.devices
    final, began = deadline, time.perf_counter()
    if chunks and math.isfinite(deadline):  # the share kept for the improvement step
        deadline -= REFINE_SHARE * max(0.0, deadline - began)

    def estimate(policy: Policy, cutoff: float) -> tuple[float, Optional[Outcome]]:
        outcome = simulate(instance, policy, top, bound=cutoff)
        return (math.inf, None) if outcome is None else (outcome.estimate, outcome)

    starts = []
    for policy in _grid(instance):
        if signals.past(deadline):  # its time is up, or the solver was asked to finish
            break
        value, outcome = estimate(policy, math.inf)
        if outcome is not None:
            starts.append((value, _normalised(policy, instance, limits, chunks), outcome))
    if not starts:
        return None
    starts.sort(key=lambda x: x[0])
    best_value, best_policy, best_outcome = starts[0]
    rng = random.Random(seed)
    climbs = stale = 0

    def done() -> bool:
        return signals.past(deadline) or best_value <= target

    while not done() and (patience is None or stale < patience):
        # climb from the grid's next best point, then from kicks of the best found
        if climbs < min(STARTS, len(starts)):
            value, current, _ = starts[climbs]
        else:
            current = _mutate(best_policy, limits, rng, KICK, chunks)
            value, _ = estimate(current, math.inf)
        climbs += 1
        improved, still = False, 0
        while still < STALL and not done():
            candidate = _mutate(current, limits, rng, rng.choice((1, 1, 2, 3)), chunks)
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
    method = BASES[instance.placement] + SUFFIX
    schedule = Schedule(tuple(tuple((q,) for q in order) for order in best_outcome.orders), method)
    if chunks:
        # no deadline: the step's own allowance (as its base heuristic runs it)
        allowance = None
        if math.isfinite(final):
            seconds = max(0.0, final - time.perf_counter())
            allowance = local_search.Allowance(
                int(seconds * RETIMED_PER_SECOND / max(1, instance.num_passes)))
        if allowance is None or allowance.left > 0:
            schedule = refine(instance, schedule, allowance)
    timeline = evaluate(instance, schedule)
    if not timeline.fits_cap or timeline.span >= span * (1 - 1e-9):
        return None
    return timeline


def search(result: Result, deadline: float, seed: int = 0) -> Optional[Result]:
    """A shorter schedule than `result`'s within its cap (improve() from its span), as a
    heuristic Result; None if none was found."""
    if result.timeline is None:
        return None
    began = time.perf_counter()
    timeline = improve(result.instance, result.span, deadline, seed)
    if timeline is None:
        return None
    return replace(result, method=timeline.schedule.method, kind="heuristic",
                   status="heuristic", timeline=timeline,
                   runtime=result.runtime + time.perf_counter() - began)
