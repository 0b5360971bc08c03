"""CP-SAT backend: one interval per pass, no-overlap per device, memory as a reservoir.

The instance handed in has integer costs and memory (solve() scales them). The model:
- a fixed-size interval per pass; NoOverlap per device;
- precedences start(b) >= end(a) + lag for every dependency (comm across devices);
- memory per device: F adds m_b at its start, B frees m_b - m_w at its end, W frees m_w at
  its end, level within [0, cap - static] (a reservoir, written as a cumulative of holding
  intervals). Exact, because a device runs one pass at a time, so "ended before t" is
  "earlier in the device's order" as evaluate() counts it;
- symmetry breaking (switchable): passes of one kind on one stage run in micro-batch order;
- redundant constraints that help the search: the in-flight limits the cap implies on a
  device with one stage (F(s, i) waits for B(s, i - k) and for enough W), the per-device span
  bounds of zbopt.bounds, overlapping windows of neighbouring devices, and the objective
  bounded below by the best lower bound;
- a complete hint (every start) from the warm start; workers = threads.
"""

from __future__ import annotations

import math
import time
from typing import Optional

from ortools.sat.python import cp_model

from .. import bounds
from ..dag import Pass, dependencies, lag
from ..instance import Instance
from .backend import BackendResult

_STATUS = {
    cp_model.OPTIMAL: "optimal",
    cp_model.FEASIBLE: "feasible",
    cp_model.INFEASIBLE: "infeasible",
    cp_model.UNKNOWN: "unknown",
    cp_model.MODEL_INVALID: "unknown",
}


def _integral(instance: Instance) -> None:
    values = [*instance.t_f, *instance.t_b, *instance.t_w, instance.comm,
              *instance.m_b, *instance.m_w, *instance.static_memory, *(instance.cap or ())]
    if any(float(x) != int(x) for x in values):
        raise ValueError("solve_cpsat needs integer costs and memory: scale the instance first "
                         "(zbopt.solvers.solve does)")


def time_window(instance: Instance, objective: str, horizon: int) -> int:
    """Latest end time any schedule with objective <= horizon needs.

    Makespan: the horizon itself. Span: the pass windows of two devices holding neighbouring
    stages overlap (F(s+1, j) follows F(s, j), B(s+1, j) precedes B(s, j)), so once time is
    shifted to start at 0, every device starts within (p-1) spans and ends within p spans.
    """
    return int(horizon) if objective == "makespan" else instance.devices * int(horizon)


def build_model(instance: Instance, objective: str, hint: Optional[dict[Pass, int]],
                symmetry: bool, horizon: int):
    """The CP-SAT model; returns (model, start variables, objective variable).

    `horizon` bounds the objective (as for the MILP backend): the model searches schedules
    with objective <= horizon, e.g. the warm start's.
    """
    _integral(instance)
    model = cp_model.CpModel()
    bound = int(horizon)
    horizon = time_window(instance, objective, bound)
    cost = {q: int(instance.cost(q[0], q[2])) for q in instance.passes()}
    start = {q: model.new_int_var(0, max(0, horizon - cost[q]), f"s{q[0]}{q[2]}{q[1]}")
             for q in cost}
    intervals: list[list] = [[] for _ in range(instance.devices)]
    for q, var in start.items():
        intervals[instance.device_of(q[0])].append(
            model.new_fixed_size_interval_var(var, cost[q], f"i{q[0]}{q[2]}{q[1]}"))
    for device_intervals in intervals:
        model.add_no_overlap(device_intervals)
    for q in cost:
        for a in dependencies(instance, q):
            model.add(start[q] >= start[a] + cost[a] + int(lag(instance, a, q)))
    if symmetry:
        _micro_batch_order(model, instance, start, cost)
    if instance.cap is not None:
        _memory(model, instance, start, cost, symmetry, horizon, hint)
    objective_var, firsts, lasts = _objective(model, instance, objective, start, cost, symmetry,
                                              horizon, bound)
    if hint:
        _add_hint(model, instance, objective, hint, start, cost, firsts, lasts, objective_var)
    return model, start, objective_var


def _micro_batch_order(model, instance, start, cost) -> None:
    # Micro-batches are interchangeable within a chain (DESIGN.md), so each stage may run each
    # kind in micro-batch order: this removes m! equivalent orders per stage and kind.
    for s in range(instance.num_stages):
        mbs = instance.microbatches_of(s)
        for kind in "FBW":
            for a, b in zip(mbs, mbs[1:]):
                model.add(start[(s, b, kind)] >= start[(s, a, kind)] + cost[(s, a, kind)])


def _memory(model, instance, start, cost, symmetry: bool, horizon: int,
            hint: Optional[dict[Pass, int]]) -> None:
    """Memory per device as a cumulative of holding intervals.

    Micro-batch j on stage s holds m_b - m_w from the start of F until the end of B, and m_w
    from the start of F until the end of W. An interval [a, b) counts at a but not at b, so at
    an instant where a B ends and an F starts the level is after both, as evaluate() counts
    (same as a reservoir with those events, but CP-SAT propagates cumulatives far better than
    it expands reservoirs).
    """
    for d in range(instance.devices):
        capacity = int(instance.cap[d] - instance.static_memory[d])
        holds, demands = [], []
        for s in instance.stages_of(d):
            for j in instance.microbatches_of(s):
                f, b, w = (s, j, "F"), (s, j, "B"), (s, j, "W")
                for until, demand in ((b, instance.m_b[s] - instance.m_w[s]),
                                      (w, instance.m_w[s])):
                    if demand <= 0:
                        continue
                    size = model.new_int_var(0, horizon, "")
                    model.add(size == start[until] + cost[until] - start[f])
                    if hint and f in hint and until in hint:
                        # a complete hint lets CP-SAT start from the warm start at once
                        model.add_hint(size, hint[until] + cost[until] - hint[f])
                    holds.append(model.new_interval_var(start[f], size,
                                                        start[until] + cost[until], ""))
                    demands.append(int(demand))
        if holds:
            model.add_cumulative(holds, demands, capacity)
        stages = instance.stages_of(d)
        if symmetry and len(stages) == 1:
            _in_flight(model, instance, stages[0], capacity, start, cost)


def _in_flight(model, instance, s: int, capacity: int, start, cost) -> None:
    """Precedences the cap implies on a one-stage device when B and W run in micro-batch order.

    When F(s, i) starts, (i+1) activations have been added; at most i B and i W have ended.
    Fitting under the cap needs nB >= i+1 - floor(C/m_b) ended B, and (even with i B ended)
    nW >= i - floor((C - m_b)/m_w) ended W; in micro-batch order those are B(s, nB-1) and
    W(s, nW-1).
    """
    m_b, m_w = int(instance.m_b[s]), int(instance.m_w[s])
    if m_b <= 0:
        return
    mbs = instance.microbatches_of(s)
    k_b = capacity // m_b
    k_w = (capacity - m_b) // m_w if m_w > 0 else None
    for i, j in enumerate(mbs):
        f = start[(s, j, "F")]
        need_b = i + 1 - k_b
        if need_b >= 1:
            b = (s, mbs[need_b - 1], "B")
            model.add(f >= start[b] + cost[b])
        if k_w is not None:
            need_w = i - k_w
            if need_w >= 1:
                w = (s, mbs[need_w - 1], "W")
                model.add(f >= start[w] + cost[w])


def _objective(model, instance, objective, start, cost, symmetry, horizon, bound):
    p = instance.devices
    best = math.ceil(bounds.best_lower_bound(instance, objective)[1] - 1e-9)
    # first pass of a device is always an F (B and W follow their F) and its last is a W
    first_candidates: list[list[Pass]] = [[] for _ in range(p)]
    last_candidates: list[list[Pass]] = [[] for _ in range(p)]
    for s in range(instance.num_stages):
        d = instance.device_of(s)
        mbs = instance.microbatches_of(s)
        firsts = mbs[:1] if symmetry else mbs
        lasts = mbs[-1:] if symmetry else mbs
        first_candidates[d] += [(s, j, "F") for j in firsts]
        last_candidates[d] += [(s, j, "W") for j in lasts]
    if objective == "makespan":
        makespan = model.new_int_var(best, max(best, bound), "makespan")
        for d in range(p):
            for q in last_candidates[d]:
                model.add(makespan >= start[q] + cost[q])
            head = math.ceil(bounds.device_head(instance, d) + bounds.device_bound(instance, d)
                             - 1e-9)
            model.add(makespan >= head)
        model.minimize(makespan)
        return makespan, None, None
    span = model.new_int_var(best, max(best, bound), "span")
    first = [model.new_int_var(0, horizon, f"first{d}") for d in range(p)]
    last = [model.new_int_var(0, horizon, f"last{d}") for d in range(p)]
    for d in range(p):
        for q in first_candidates[d]:
            model.add(first[d] <= start[q])
        for q in last_candidates[d]:
            model.add(last[d] >= start[q] + cost[q])
        model.add(span >= last[d] - first[d])
        model.add(last[d] - first[d] >= math.ceil(bounds.device_bound(instance, d) - 1e-9))
    # Neighbouring stages on two devices: F(s+1, j) follows F(s, j) and B(s+1, j) precedes
    # B(s, j), so each device has a pass inside the other's window.
    for stages, _ in instance.chains:
        for a, b in zip(stages, stages[1:]):
            da, db = instance.device_of(a), instance.device_of(b)
            if da != db:
                model.add(first[db] <= last[da])
                model.add(first[da] <= last[db])
    if symmetry and len(instance.chains) == 1:
        # translate time so the very first forward starts at 0 (every pass depends on it)
        model.add(start[(instance.chains[0][0][0], instance.chains[0][1][0], "F")] == 0)
    model.minimize(span)
    return span, first, last


def _add_hint(model, instance, objective, hint, start, cost, firsts, lasts, objective_var):
    for q, var in start.items():
        if q in hint:
            model.add_hint(var, int(hint[q]))
    if len(hint) < len(start):
        return
    ends = {q: hint[q] + cost[q] for q in start}
    if objective == "makespan":
        model.add_hint(objective_var, max(ends.values()))
        return
    spans = []
    for d in range(instance.devices):
        mine = [q for q in start if instance.device_of(q[0]) == d]
        lo, hi = min(hint[q] for q in mine), max(ends[q] for q in mine)
        model.add_hint(firsts[d], lo)
        model.add_hint(lasts[d], hi)
        spans.append(hi - lo)
    model.add_hint(objective_var, max(spans))


def solve_cpsat(instance: Instance, objective: str = "span", time_limit: float = 60.0,
                threads: int = 2, hint: Optional[dict[Pass, int]] = None, symmetry: bool = True,
                horizon: Optional[int] = None) -> BackendResult:
    """Solve the integer instance with CP-SAT; starts are scaled integer times."""
    began = time.perf_counter()
    if horizon is None:
        # the sum of all costs and lags bounds the span and makespan of running one
        # micro-batch at a time, which fits every cap that admits a schedule
        horizon = int(sum(instance.cost(q[0], q[2]) for q in instance.passes())
                      + instance.comm * instance.num_passes)
    model, start, objective_var = build_model(instance, objective, hint, symmetry, horizon)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit)
    solver.parameters.num_workers = int(threads)
    code = solver.solve(model)
    status = _STATUS.get(code, "unknown")
    starts = None
    value = bound = None
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        starts = {q: int(solver.value(var)) for q, var in start.items()}
        value = float(solver.objective_value)
        bound = float(solver.best_objective_bound)
    elif code == cp_model.UNKNOWN:
        bound = float(solver.best_objective_bound) if solver.best_objective_bound else None
    message = {"infeasible": "CP-SAT proved the model infeasible",
               "unknown": "CP-SAT found no schedule within the time limit"}.get(status, "")
    return BackendResult(status=status, starts=starts, objective=value, bound=bound,
                         message=message,
                         extra={"wall_time": time.perf_counter() - began,
                                "branches": solver.num_branches,
                                "conflicts": solver.num_conflicts})
