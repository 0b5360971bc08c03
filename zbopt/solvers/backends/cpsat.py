"""CP-SAT backend: one interval per pass, no-overlap per device, memory per device.

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
- a complete hint (every start) from the warm start; workers = threads;
- for the span objective, each device's passes on the device's own clock (see build_model).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional

from ortools.sat.python import cp_model

from ... import bounds
from ...errors import ZboptError
from ...instance import Instance
from ...passes import Pass, dependencies, lag, memory_delta
from ...registry import register_backend
from .. import interruptible
from ..protocol import BackendRequest, BackendResult

# Devices with at most this many holding intervals also get the memory rule as a reservoir.
_RESERVOIR_EVENTS = 16

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
        raise ZboptError("solve_cpsat needs integer costs and memory: scale the instance first "
                         "(zbopt.solvers.solve does)")


def time_window(instance: Instance, objective: str, horizon: int) -> int:
    """Latest end time any schedule with objective <= horizon needs.

    Makespan: the horizon itself. Span: the pass windows of two devices holding neighbouring
    stages overlap (F(s+1, j) follows F(s, j), B(s+1, j) precedes B(s, j)), so once time is
    shifted to start at 0, every device starts within (p-1) spans and ends within p spans.
    """
    return int(horizon) if objective == "makespan" else instance.devices * int(horizon)


@dataclass(frozen=True)
class ModelParts:
    """The CP-SAT model and its variables: start expressions, each device's local clock
    (span objective: start = offset[device] + local), per-device spans and the objective."""

    model: cp_model.CpModel
    start: dict
    local: dict
    offset: list
    device_spans: Optional[list]
    objective: object
    cost: dict
    holds: tuple = ()  # (size variable, F, the B or W that ends the hold) per memory hold


def build_model(instance: Instance, objective: str, hint: Optional[dict[Pass, int]],
                symmetry: bool, horizon: int, lower: Optional[int] = None):
    """The CP-SAT model; returns (model, start expressions, objective variable); see
    build_parts."""
    parts = build_parts(instance, objective, hint, symmetry, horizon, lower=lower)
    return parts.model, parts.start, parts.objective


def build_parts(instance: Instance, objective: str, hint: Optional[dict[Pass, int]],
                symmetry: bool, horizon: int, fixed_orders=None,
                free: Optional[set] = None, lower: Optional[int] = None) -> ModelParts:
    """The CP-SAT model and its variables.

    With `fixed_orders` (per device, a complete order) every pass outside `free` keeps its
    place in its device's order (precedences between consecutive kept passes); a device with
    no free pass then needs neither no-overlap nor memory constraints (memory levels depend
    only on the order), which keeps neighbourhoods of a large-neighbourhood search small.

    `horizon` bounds the objective (as for the MILP backend): the model searches schedules
    with objective <= horizon, e.g. the warm start's. `lower`: a proven lower bound beyond
    zbopt.bounds (BackendRequest.lower), the objective's least value.

    For the span, each pass's start is written as offset[device] + local[pass]: a device's
    passes live in [0, span] of their own clock. No-overlap, memory and micro-batch order are
    stated on local times (they concern one device), so the solver sees every device's window
    directly instead of inferring it from two floating ends; only dependencies between devices
    involve the offsets.
    """
    _integral(instance)
    model = cp_model.CpModel()
    bound = int(horizon)
    window = time_window(instance, objective, bound)
    p = instance.devices
    cost = {q: int(instance.cost(q[0], q[2])) for q in instance.passes()}
    if objective == "span":
        offset = [model.new_int_var(0, window, f"offset{d}") for d in range(p)]
        local_limit = bound
    else:
        offset = [0] * p
        local_limit = window
    local = {q: model.new_int_var(0, max(0, local_limit - cost[q]), f"s{q[0]}{q[2]}{q[1]}")
             for q in cost}
    start = {q: offset[instance.device_of(q[0])] + local[q] for q in cost}
    intervals: list[list] = [[] for _ in range(p)]
    for q, var in local.items():
        intervals[instance.device_of(q[0])].append(
            model.new_fixed_size_interval_var(var, cost[q], f"i{q[0]}{q[2]}{q[1]}"))
    searched = set(range(p))
    if fixed_orders is not None:
        searched = {instance.device_of(q[0]) for q in free}
        for order in fixed_orders:
            kept = [q for q in order if q not in free]
            for a, b in zip(kept, kept[1:]):
                model.add(local[b] >= local[a] + cost[a])
    for d, device_intervals in enumerate(intervals):
        if d in searched:
            model.add_no_overlap(device_intervals)
    for q in cost:
        for a in dependencies(instance, q):
            same = instance.device_of(a[0]) == instance.device_of(q[0])
            times = local if same else start
            model.add(times[q] >= times[a] + cost[a] + int(lag(instance, a, q)))
    if symmetry:
        _micro_batch_order(model, instance, local, cost)
    holds = ()
    if instance.cap is not None:
        holds = _memory(model, instance, local, cost, symmetry, local_limit, hint, searched)
    objective_var, device_spans = _objective(model, instance, objective, local, offset, cost,
                                             symmetry, bound, lower)
    if hint:
        add_hint(model, instance, objective, hint, local, offset, cost, device_spans,
                 objective_var)
    return ModelParts(model, start, local, offset, device_spans, objective_var, cost,
                      tuple(holds))


def _micro_batch_order(model, instance, start, cost) -> None:
    # Micro-batches are interchangeable within a chain (docs/model.md), so each stage may run each
    # kind in micro-batch order: this removes m! equivalent orders per stage and kind.
    for s in range(instance.num_stages):
        mbs = instance.microbatches_of(s)
        for kind in "FBW":
            for a, b in zip(mbs, mbs[1:]):
                model.add(start[(s, b, kind)] >= start[(s, a, kind)] + cost[(s, a, kind)])


def _memory(model, instance, start, cost, symmetry: bool, horizon: int,
            hint: Optional[dict[Pass, int]], devices=None) -> list:
    """Memory per device as a cumulative of holding intervals; returns (size variable, F,
    releasing pass) of every hold.

    Micro-batch j on stage s holds m_b - m_w from the start of F until the end of B, and m_w
    from the start of F until the end of W. An interval [a, b) counts at a but not at b, so at
    an instant where a B ends and an F starts the level is after both, as evaluate() counts
    (same as a reservoir with those events, but CP-SAT propagates cumulatives far better than
    it expands reservoirs).
    """
    sizes = []
    for d in range(instance.devices) if devices is None else sorted(devices):
        capacity = int(instance.cap[d] - instance.static_memory[d])
        holds, demands = [], []
        for s in instance.stages_of(d):
            for j in instance.microbatches_of(s):
                f, b, w = (s, j, "F"), (s, j, "B"), (s, j, "W")
                # F's activation is held from F's start until the B and the W release it
                for until in (b, w):
                    demand = -memory_delta(instance, until)
                    if demand <= 0:
                        continue
                    size = model.new_int_var(0, horizon, "")
                    sizes.append((size, f, until))
                    model.add(size == start[until] + cost[until] - start[f])
                    if hint and f in hint and until in hint:
                        # a complete hint lets CP-SAT start from the warm start at once
                        model.add_hint(size, hint[until] + cost[until] - hint[f])
                    holds.append(model.new_interval_var(start[f], size,
                                                        start[until] + cost[until], ""))
                    demands.append(int(demand))
        if holds:
            model.add_cumulative(holds, demands, capacity)
        if len(holds) <= _RESERVOIR_EVENTS:
            _reservoir(model, instance, d, capacity, start, cost)
        stages = instance.stages_of(d)
        if symmetry and len(stages) == 1:
            _in_flight(model, instance, stages[0], capacity, start, cost)
    return sizes


def _reservoir(model, instance, d: int, capacity: int, start, cost) -> None:
    """The same memory rule as a reservoir, added on small devices: CP-SAT expands it into
    pairwise order literals (quadratic in the events), which prunes small models well but
    makes large ones slow to presolve."""
    times, changes = [], []
    for s in instance.stages_of(d):
        for j in instance.microbatches_of(s):
            f, b, w = (s, j, "F"), (s, j, "B"), (s, j, "W")
            for when, delta in ((start[f], memory_delta(instance, f)),
                                (start[b] + cost[b], memory_delta(instance, b)),
                                (start[w] + cost[w], memory_delta(instance, w))):
                if delta:
                    times.append(when)
                    changes.append(int(delta))
    if times:
        model.add_reservoir_constraint(times, changes, 0, capacity)


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


def _objective(model, instance, objective, local, offset, cost, symmetry, bound, lower=None):
    p = instance.devices
    best = math.ceil(bounds.best_lower_bound(instance, objective)[1] - 1e-9)
    best = max(best, int(lower or 0))
    # a device's last pass is a W (B and W follow their F): only W ends bound the objective
    last_candidates: list[list[Pass]] = [[] for _ in range(p)]
    for s in range(instance.num_stages):
        mbs = instance.microbatches_of(s)
        lasts = mbs[-1:] if symmetry else mbs
        last_candidates[instance.device_of(s)] += [(s, j, "W") for j in lasts]
    if objective == "makespan":
        makespan = model.new_int_var(best, max(best, bound), "makespan")
        for d in range(p):
            for q in last_candidates[d]:
                model.add(makespan >= local[q] + cost[q])
            head = math.ceil(bounds.device_head(instance, d) + bounds.device_bound(instance, d)
                             - 1e-9)
            model.add(makespan >= head)
        model.minimize(makespan)
        return makespan, None
    span = model.new_int_var(best, max(best, bound), "span")
    device_span = []
    for d in range(p):
        least = math.ceil(bounds.device_bound(instance, d) - 1e-9)
        var = model.new_int_var(min(least, bound), bound, f"span{d}")
        for q in last_candidates[d]:
            model.add(var >= local[q] + cost[q])
        model.add(span >= var)
        device_span.append(var)
    # Neighbouring stages on two devices: F(s+1, j) follows F(s, j) and B(s+1, j) precedes
    # B(s, j), so each device has a pass inside the other's window.
    for stages, _ in instance.chains:
        for a, b in zip(stages, stages[1:]):
            da, db = instance.device_of(a), instance.device_of(b)
            if da != db:
                model.add(offset[db] <= offset[da] + device_span[da])
                model.add(offset[da] <= offset[db] + device_span[db])
    if symmetry and len(instance.chains) == 1:
        # With micro-batch order, device d's first pass is F(f, first mb), f its first stage
        # on the chain (every other pass of d depends on it or follows it): its clock starts
        # there. Time itself starts at device 0's first pass, which every pass depends on.
        stages, mbs = instance.chains[0]
        for d in range(p):
            f = next(s for s in stages if instance.device_of(s) == d)
            model.add(local[(f, mbs[0], "F")] == 0)
        model.add(offset[instance.device_of(stages[0])] == 0)
    model.minimize(span)
    return span, device_span


def add_hint(model, instance, objective, hint, local, offset, cost, device_spans,
             objective_var):
    if len(hint) < len(local):
        for q, var in local.items():
            if q in hint and objective == "makespan":
                model.add_hint(var, int(hint[q]))
        return
    firsts = [0] * instance.devices
    if objective == "span":
        for d in range(instance.devices):
            firsts[d] = min(hint[q] for q in local if instance.device_of(q[0]) == d)
            model.add_hint(offset[d], firsts[d])
    for q, var in local.items():
        model.add_hint(var, int(hint[q]) - firsts[instance.device_of(q[0])])
    ends = [0] * instance.devices
    for q in local:
        d = instance.device_of(q[0])
        ends[d] = max(ends[d], hint[q] + cost[q] - firsts[d])
    if device_spans is not None:
        for var, value in zip(device_spans, ends):
            model.add_hint(var, value)
    model.add_hint(objective_var, max(ends))


def solve_cpsat(request: BackendRequest) -> BackendResult:
    """Solve the integer instance with CP-SAT; starts are scaled integer times."""
    began = time.perf_counter()
    instance, objective = request.instance, request.objective
    if objective not in ("span", "makespan"):
        raise ZboptError(f"unknown objective {objective!r}: use 'span' or 'makespan'")
    horizon = request.horizon
    if horizon is None:
        # the sum of all costs and lags bounds the span and makespan of running one
        # micro-batch at a time, which fits every cap that admits a schedule
        horizon = int(sum(instance.cost(q[0], q[2]) for q in instance.passes())
                      + instance.comm * instance.num_passes)
    model, start, objective_var = build_model(instance, objective, request.hint,
                                              request.symmetry, horizon, request.lower)
    solver = cp_model.CpSolver()
    # the time limit covers building the model too
    solver.parameters.max_time_in_seconds = max(0.05, float(request.time_limit)
                                                - (time.perf_counter() - began))
    solver.parameters.num_workers = int(request.threads)
    callback = None
    if request.on_progress is not None:
        report = request.on_progress
        callback = Incumbents(report)
        solver.best_bound_callback = lambda bound: report(None, float(bound))
    code = interruptible.solve(solver, model, callback)
    status = _STATUS.get(code, "unknown")
    starts = None
    value = bound = None
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        starts = {q: int(solver.value(var)) for q, var in start.items()}
        value = float(solver.objective_value)
        bound = float(solver.best_objective_bound)
    elif code == cp_model.UNKNOWN:
        bound = float(solver.best_objective_bound) if solver.best_objective_bound else None
    # with a hint, solve() says it kept the hint's schedule: "found no schedule" would read as
    # if there were none
    message = {"infeasible": "CP-SAT proved the model infeasible",
               "unknown": "" if request.hint else
               "CP-SAT found no schedule within the time limit"}.get(status, "")
    return BackendResult(status=status, starts=starts, objective=value, bound=bound,
                         message=message,
                         stats={"wall_time": time.perf_counter() - began,
                                "branches": solver.num_branches,
                                "conflicts": solver.num_conflicts})


class Incumbents(cp_model.CpSolverSolutionCallback):
    """Reports every improving solution and the bound at that moment."""

    def __init__(self, report):
        super().__init__()
        self._report = report

    def on_solution_callback(self) -> None:
        self._report(float(self.objective_value), float(self.best_objective_bound))


register_backend("cpsat", "OR-Tools CP-SAT: intervals, no-overlap and a memory cumulative per "
                 "device", solve_cpsat)
