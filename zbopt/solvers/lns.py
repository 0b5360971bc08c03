"""Large-neighbourhood search with CP-SAT around an incumbent schedule.

The full CP-SAT model (backends/cpsat.py) runs first for a share of the time: it proves the
bound and may improve the warm start. On a capped contiguous pipeline the ordered model
(zbopt.solvers.ordered: the same in-order problem, stated with literals) runs there instead,
for most of the time: CP-SAT finds short schedules in it far faster (ORDERED_SHARE).
Then, until the time limit, one neighbourhood at a time
is re-optimised: a window of micro-batches, a group of neighbouring devices, or a window of
time is freed; every other pass keeps its place in its device's order (its start may still
move), stated as precedences between consecutive fixed passes, and the incumbent is the hint.
Around a window of time, the passes that end before it keep their start times too, at the price
of not moving them: the sub-model is much smaller (interleaved p=8, m=32 at 1p: the tail window
reached in 14 s the span it took 26 s to reach unpinned).
The first neighbourhoods sweep back from the end of the span: the passes starting in its last
SWEEP window, then in windows further back (each pins the passes before it), one after the
other; a gain sends the sweep back to the tail. A whole sweep without a gain hands over to as
many random neighbourhoods, and then the sweep starts again from the tail (a window that ran out
of time may still gain in a new search), until every window was solved to optimality without a
gain; from then on random neighbourhoods, until one gains. On tight caps the drain is
where the greedy warm starts lose most, and the tail alone stalls: interleaved p=8, m=32 at 1p,
from the policy search's 1,580,759, 40 s of the tail and the head in turn reached 1,571,547
(three seeds), where a window ending before the tail let the tail gain again. solve() there,
60 s, from the policy search's grid before its sequenced points: a median of 1,570,921 in ten
runs, five of them within 1% of the bound, 1,567,363 at best (before, the tail and the head in
turn, with 40% of the limit for the policy search and 30% for the full model: a median of
1,575,084.5 in six runs, 1,572,650 at best); 300 s: 1,563,468 (before: 1,567,129.5). With the
sequenced points (docs/model.md) the same sweep gives what results/solver.md's spread shows.
Each sub-model is the full model plus those precedences, so what it finds is a valid schedule
of the whole instance; a better one becomes the incumbent. Neighbourhoods grow after a
sub-model is solved to optimality and shrink after one runs out of time.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Optional

from ortools.sat.python import cp_model

from .. import signals
from ..instance import Instance
from ..passes import Pass
from . import interruptible, ordered
from .backends.cpsat import Incumbents, ModelParts, add_hint, build_parts
from .orders import device_orders
from .protocol import BackendRequest, BackendResult

# share of the time limit the full model gets before the neighbourhoods (its bound is the
# proof); at most this many seconds, so long limits leave most of the time to the search
FULL_SHARE = 0.3
FULL_MAX = 20.0
# from PRESOLVE_PASSES passes on, the full model gets this share: there its search is slow and
# its bound weak (interleaved p=8, m=32 at 1p, 1,536 passes: 12 s of it took 1,580,759 to
# 1,579,626, where the neighbourhoods gain that much every few seconds, and its bound stayed
# below zbopt.bounds')
LARGE_FULL_SHARE = 0.05
# where the ordered model (zbopt.solvers.ordered) states the instance, its search gets this
# share of the time instead, without FULL_MAX, with CP-SAT's presolve off and its linear
# relaxation at level 2, and no solution callback (scratch runs on a quiet machine: the split
# of ordered's module doc, two workers for 20 s from the policy search's 4,262,643:
# 4,119,320-4,124,943 in three runs; presolve on and the default level: 4,147,096-4,159,778,
# presolve's probing taking 2-4 s a round; with a callback on every improving schedule,
# 4,122,493-4,143,135 in five runs, a median of 4,132,623, against 4,119,320-4,134,730 and a
# median of 4,119,886 in five without)
ORDERED_SHARE = 0.8
ORDERED_LINEARIZATION = 2
# a sub-model's time limit, and the free passes of the first neighbourhood
STEP_SECONDS = 3.0
FIRST_FREE = 300
MIN_FREE, MAX_FREE = 40, 4000
# CP-SAT's presolve of a sub-model takes seconds from about this many passes on (then it only
# searches from the hint), unless the sub-model pins the passes before its window, where
# presolve pays (interleaved p=8, m=32, 1p: the tail and the head in turn from a 1,573,976.5
# incumbent reached 1,570,598 with presolve and 1,572,188 without, in 32 s)
PRESOLVE_PASSES = 1000
# the first neighbourhoods: windows of the span as (start, end) shares of it, from the tail
# back, each for at most SWEEP_SECONDS (interleaved p=8, m=32 at 1p, 40 s from the policy
# search's schedule, one sweep then random neighbourhoods: 3-s steps reached 1,569,599 to
# 1,573,976.5 in four runs, 2-s steps 1,571,547 to 1,574,498 in three, 4-s steps 1,570,349 to
# 1,573,976.5 in three; narrower windows (a fifth of the span) did worse in two)
SWEEP = ((0.7, math.inf), (0.45, 0.8), (0.2, 0.55))
SWEEP_SECONDS = 3.0
# a gain of less than this share of the span does not send the sweep back to the tail (moving a
# device's first pass by a unit of time is a gain too)
SWEEP_GAIN = 1e-4
# CP-SAT's own neighbourhoods that gain on these models are its scheduling ones: on the tail
# window above, its graph and random ones, local search and feasibility pump gained nothing in
# dozens of calls each; they are left out, so the scheduling ones get the worker's time
# (solve() there, 60 s, one sweep then random neighbourhoods, five runs each: a median of
# 1,571,084.5 without them, 1,573,976.5 with them)
SUBSOLVERS = ("default_lp", "scheduling_intervals_lns", "scheduling_precedences_lns",
              "scheduling_time_window_lns", "scheduling_resource_windows_lns")


@dataclass
class _State:
    starts: dict[Pass, int]
    value: int
    bound: Optional[int]
    status: str = "feasible"


def _objective(instance: Instance, starts: dict[Pass, int], cost: dict[Pass, int],
               objective: str) -> int:
    ends = [0] * instance.devices
    firsts = [math.inf] * instance.devices
    for q, t in starts.items():
        d = instance.device_of(q[0])
        ends[d] = max(ends[d], t + cost[q])
        firsts[d] = min(firsts[d], t)
    if objective == "makespan":
        return int(max(ends))
    return int(max(e - f for e, f in zip(ends, firsts) if f < math.inf))


def respects_symmetry(instance: Instance, starts: dict[Pass, int], cost: dict[Pass, int]) -> bool:
    """Whether passes of one kind on one stage run in micro-batch order (the model's
    symmetry breaking), so the schedule is a solution of the symmetric model."""
    for s in range(instance.num_stages):
        mbs = instance.microbatches_of(s)
        for kind in "FBW":
            for a, b in zip(mbs, mbs[1:]):
                if starts[(s, b, kind)] < starts[(s, a, kind)] + cost[(s, a, kind)]:
                    return False
    return True


def _solve(parts: ModelParts, model: cp_model.CpModel, instance: Instance, objective: str,
           hint: dict[Pass, int], seconds: float, threads: int, seed: int, callback=None,
           presolve: bool = True):
    model.clear_hints()
    add_hint(model, instance, objective, hint, parts.local, parts.offset, parts.cost,
             parts.device_spans, parts.objective)
    for size, f, until in parts.holds:
        model.add_hint(size, hint[until] + parts.cost[until] - hint[f])
    solver = _solver(seconds, threads, seed)
    solver.parameters.filter_subsolvers.extend(SUBSOLVERS)
    if not presolve:
        # presolving the whole model again for each neighbourhood costs seconds
        solver.parameters.cp_model_presolve = False
    code = interruptible.solve(solver, model, callback)
    return solver, code


def _solver(seconds: float, threads: int, seed: int) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.05, seconds)
    solver.parameters.num_workers = threads
    solver.parameters.random_seed = seed
    return solver


def _neighbourhood(instance: Instance, state: _State, cost, rng: random.Random,
                   free: int) -> tuple[set[Pass], Optional[int]]:
    """A random neighbourhood of about `free` passes: micro-batches, devices or time; and,
    for a window of time, its start (passes ending by then keep their start times)."""
    passes = list(state.starts)
    kind = rng.choice(("microbatches", "devices", "time"))
    if kind == "microbatches":
        stages, mbs = rng.choice(instance.chains)
        width = max(1, round(free * len(mbs) / max(1, sum(
            len(instance.microbatches_of(s)) * 3 for s in range(instance.num_stages)))))
        first = rng.randrange(max(1, len(mbs) - width + 1))
        chosen = set(mbs[first:first + width])
        chain = set(stages)
        return {q for q in passes if q[1] in chosen and q[0] in chain}, None
    if kind == "devices":
        p = instance.devices
        width = max(1, min(p, round(free * p / len(passes))))
        first = rng.randrange(p - width + 1)
        chosen = set(range(first, first + width))
        return {q for q in passes if instance.device_of(q[0]) in chosen}, None
    first, end = _extent(state, cost)
    length = max(1, (end - first) * free / len(passes))
    t0 = rng.uniform(first, max(first, end - length))
    return _window(state, t0, t0 + length), int(t0)


def _sweep_window(state: _State, cost, at: int, sweep=SWEEP) -> tuple[set[Pass], int]:
    """The passes starting in sweep[at] of the incumbent's span, and the window's start (the
    passes ending by then keep their start times)."""
    first, end = _extent(state, cost)
    low, high = sweep[at]
    before = int(first + low * (end - first))
    return _window(state, before, first + high * (end - first)), before


def _extent(state: _State, cost) -> tuple[int, int]:
    """The incumbent's first start and last end."""
    return (min(state.starts.values()),
            max(t + cost[q] for q, t in state.starts.items()))


def _window(state: _State, t0: float, t1: float) -> set[Pass]:
    return {q for q, t in state.starts.items() if t0 <= t < t1}


def _pin(parts: ModelParts, state: _State, cost, chosen: set[Pass], before: int) -> None:
    """Passes outside `chosen` that end by `before` keep their start times."""
    for q, start in parts.start.items():
        if q not in chosen and state.starts[q] + cost[q] <= before:
            parts.model.add(start == state.starts[q])


def _precedences(pairs, hint: dict[Pass, int]) -> tuple[tuple[Pass, Pass], ...]:
    """The "precede" option as pairs of the instance's passes, checked against the hint."""
    known = set(hint)
    out = []
    for pair in pairs:
        a, b = (tuple(q) for q in pair)
        for q in (a, b):
            if q not in known:
                raise ValueError(f"precede: {q} is not a pass of the instance (stage, "
                                 f"micro-batch, kind)")
        if hint[b] < hint[a]:
            raise ValueError(f"precede: the hint starts {b} before {a}; pass a hint that "
                             f"keeps the order asked")
        out.append((a, b))
    return tuple(out)


def _sweep_options(options) -> tuple[tuple[tuple[float, float], ...], float]:
    """The "sweep" and "sweep_seconds" options, checked."""
    sweep = tuple((float(low), float(high)) for low, high in options.get("sweep", SWEEP))
    seconds = float(options.get("sweep_seconds", SWEEP_SECONDS))
    if not sweep or any(not 0 <= low < high for low, high in sweep):
        raise ValueError("sweep: give windows (start, end) with 0 <= start < end, as shares of "
                         "the span")
    if not seconds > 0:
        raise ValueError("sweep_seconds: give a positive number of seconds")
    return sweep, seconds


def _hold(parts: ModelParts, precede) -> None:
    """b starts no earlier than a, for every pair (a, b) of the "precede" option."""
    for a, b in precede:
        parts.model.add(parts.start[b] >= parts.start[a])


def solve_lns(request: BackendRequest) -> BackendResult:
    """The full CP-SAT model for a share of the time, then neighbourhoods around the best
    schedule until the time limit; the bound is the full model's.

    Options: "seed" (neighbourhood choice), "full_share" (share of the time for the full
    model; 0 skips it, and no bound is proven), "precede" (pairs (a, b) of passes: every model
    starts b no earlier than a, so the search is held to such schedules; the hint must be one,
    and no bound is reported, since the held problem's bound need not hold for the others),
    "sweep" (the sweep's windows as (start, end) shares of the span, SWEEP by default) and
    "sweep_seconds" (each window's time, SWEEP_SECONDS by default)."""
    began = time.perf_counter()
    deadline = began + float(request.time_limit)
    instance, objective = request.instance, request.objective
    threads = int(request.threads)
    seed = int(request.options.get("seed", 0))
    horizon = request.horizon
    if request.options.get("precede") and (horizon is None or request.hint is None):
        raise ValueError("precede: the search is held around a hint; pass one and a horizon")
    if horizon is None or request.hint is None:
        from .backends.cpsat import solve_cpsat  # nothing to search around: the full model
        return solve_cpsat(request)
    symmetry = request.symmetry
    cost = {q: int(instance.cost(q[0], q[2])) for q in instance.passes()}
    if symmetry and not respects_symmetry(instance, request.hint, cost):
        symmetry = False  # the incumbent must be a solution of every sub-model
    precede = _precedences(request.options.get("precede", ()), request.hint)
    sweep, sweep_seconds = _sweep_options(request.options)
    parts = build_parts(instance, objective, None, symmetry, int(horizon), lower=request.lower)
    _hold(parts, precede)
    report = request.on_progress
    state = _State(dict(request.hint), _objective(instance, request.hint, cost, objective),
                   None)
    stats = {"neighbourhoods": 0, "improved": 0, "sweep": 0, "sweep_improved": 0,
             "full_model_seconds": 0.0}

    # the full model: its bound, and often a better schedule; where the ordered model
    # (zbopt.solvers.ordered) states the instance, it instead, for a larger share
    in_order = symmetry and not precede and ordered.applies(instance)
    share = float(request.options.get(
        "full_share", ORDERED_SHARE if in_order else
        FULL_SHARE if len(cost) < PRESOLVE_PASSES else LARGE_FULL_SHARE))
    full = share * (deadline - time.perf_counter())
    if not in_order:
        full = min(FULL_MAX, full)
    callback = Incumbents(report) if report is not None else None
    t = time.perf_counter()
    code = None
    if full > 0:
        if in_order:
            whole = ordered.build(instance, objective, int(horizon), request.lower)
            ordered.add_hint(whole, state.starts, objective, instance)
            solver = _solver(full, threads, seed)
            solver.parameters.cp_model_presolve = False
            solver.parameters.cp_model_probing_level = 0
            solver.parameters.linearization_level = ORDERED_LINEARIZATION
            # no callback: one per improving schedule slowed the search (ORDERED_SHARE); its
            # best is reported when it ends
            code = interruptible.solve(solver, whole.model)
            if report is not None and code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                report(float(solver.objective_value), float(solver.best_objective_bound))
        else:
            whole = parts
            solver, code = _solve(parts, parts.model, instance, objective, state.starts, full,
                                  threads, seed, callback)
    stats["full_model_seconds"] = round(time.perf_counter() - t, 3)
    stats["ordered_model"] = in_order
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN) and not precede:
        bound = solver.best_objective_bound
        state.bound = math.ceil(bound - 1e-6) if math.isfinite(bound) else None
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        starts = {q: int(solver.value(e)) for q, e in whole.start.items()}
        # the ordered model's objective only bounds its devices' spans from above
        value = _objective(instance, starts, cost, objective) if in_order else \
            int(round(solver.objective_value))
        if value <= state.value:
            state.starts = starts
            state.value = value
    if code == cp_model.OPTIMAL and not precede:
        state.status = "optimal"
    elif code == cp_model.INFEASIBLE:
        return BackendResult("infeasible", None, None, None, "CP-SAT proved the model "
                             "infeasible", stats=stats)

    rng = random.Random(seed)
    free = min(FIRST_FREE, len(cost))
    scaled_orders = device_orders(instance, instance, state.starts)
    # the sweep: from the tail back, one window after the other, back to the tail after a
    # gain; after a whole sweep without a gain, as many random neighbourhoods, then the sweep
    # again (a window that ran out of time may still gain in a new search), until every window
    # was solved to optimality without a gain: then random neighbourhoods until one gains
    at, closed, fruitless = 0, set(), 0
    while state.status != "optimal" and deadline - time.perf_counter() > 0.3 \
            and not signals.finish_requested():  # SIGUSR1: the best schedule so far
        if state.bound is not None and state.value <= state.bound:
            state.status = "optimal"
            break
        sweeping = len(closed) < len(sweep) and fruitless < len(sweep)
        if sweeping:
            while at in closed:
                at = (at + 1) % len(sweep)
            chosen, before = _sweep_window(state, cost, at, sweep)
            step = sweep_seconds
        else:
            chosen, before = _neighbourhood(instance, state, cost, rng, free)
            step = STEP_SECONDS
        sub = build_parts(instance, objective, None, symmetry, int(horizon), scaled_orders,
                          chosen, lower=request.lower)
        _hold(sub, precede)
        if before is not None:
            _pin(sub, state, cost, chosen, before)
        step = min(step, deadline - time.perf_counter() - 0.1)
        solver, code = _solve(sub, sub.model, instance, objective, state.starts, step, threads,
                              rng.randrange(1 << 30),
                              presolve=len(cost) <= PRESOLVE_PASSES or before is not None)
        stats["neighbourhoods"] += 1
        better = gained = False
        if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            value = int(round(solver.objective_value))
            if value <= state.value:
                better = value < state.value
                gained = value <= state.value * (1 - SWEEP_GAIN)
                state.starts = {q: int(solver.value(e)) for q, e in sub.start.items()}
                state.value = value
                scaled_orders = device_orders(instance, instance, state.starts)
                if better:
                    stats["improved"] += 1
                    if report is not None:
                        report(float(value), None)
        if sweeping:
            stats["sweep"] += 1
            stats["sweep_improved"] += better
            if gained:
                at, closed, fruitless = 0, set(), 0
            else:
                if code == cp_model.OPTIMAL:
                    closed.add(at)
                at, fruitless = (at + 1) % len(sweep), fruitless + 1
            continue
        if gained:
            at, closed, fruitless = 0, set(), 0
        elif fruitless:
            fruitless = (fruitless + 1) % (2 * len(sweep))  # back to the sweep after a round
        # a neighbourhood solved to optimality is too easy: grow; one out of time: shrink
        if code == cp_model.OPTIMAL:
            free = min(MAX_FREE, len(cost), int(free * 1.3) + 1)
        elif code in (cp_model.FEASIBLE, cp_model.UNKNOWN):
            free = max(MIN_FREE, int(free / 1.5))
    stats["free_passes"] = free
    stats["wall_time"] = round(time.perf_counter() - began, 3)
    bound = state.bound
    if bound is not None and bound > state.value:
        bound = state.value
    status = "optimal" if bound is not None and state.value <= bound else "feasible"
    return BackendResult(status, state.starts, float(state.value),
                         None if bound is None else float(bound),
                         f"LNS: {stats['neighbourhoods']} neighbourhoods, "
                         f"{stats['improved']} improved the schedule", stats=stats)

