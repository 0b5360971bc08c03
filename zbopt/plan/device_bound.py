"""A lower bound from one device scheduled exactly, the others reduced to delays and memory rules.

On a contiguous pipeline (one stage per device, overlap 0), take device e and assume, as the exact
solvers do (docs/model.md, symmetry), that every stage runs its F, B and W in micro-batch order.
Then any schedule restricted to e satisfies, with F_j, B_j, W_j the starts of e's passes of
micro-batch j (R_d, wait_d, fwd, bwd as in zbopt.plan.memory_bound):

- e runs one pass at a time, each kind in micro-batch order; B_j >= F_j + wait_e, W_j after B_j;
- e's memory, exactly: m_b - m_w from F_j's start to B_j's end and m_w until W_j's end, within
  cap - static at every moment;
- a device d before e holds at most k_d activations and releases them in order, so F(d, j) waits
  for the end of B(d, j - k_d) and the release gap delta_d (zbopt.plan.memory_bound); in e's time
  that is F_j >= end of B_{j - k_d} + R_d - R_e + delta_d (the forward path from d to e and the
  backward path back);
- a device d after e: its F starts x_j follow F_j by the forward path, each other by t_f(d), and
  the (j - k_d)-th by R_d + delta_d (its activation freed), and B_j follows x_j by the least path
  from F(d, j) to the start of B(e, j).

The span is at least e's own (F_0 to the end of W_{m-1}) and, for every d before e, the end of
B_{m-1} plus R_d - R_e plus t_w(d) from F_0 (d's first F precedes F_0 by the forward path, its
last W follows B(e, m-1) by the backward path and a t_w). CP-SAT minimises that over the
relaxation; its proven bound (not only an optimum) is a lower bound on every in-order schedule's
span. Unlike zbopt.plan.memory_bound, it sees how F, B and W of one device collide under the
exact memory of e (few pending W while several activations are held).
"""

from __future__ import annotations

import math
import time

from ..bounds import activation_capacity, round_trip
from ..instance import Instance
from .memory_bound import applies, held_count, held_counts, release_gaps


def device_relaxation(instance: Instance, device: int, time_limit: float,
                      threads: int = 1) -> float:
    """The proven bound of the relaxation of `device` (0 if none was proven in time)."""
    from ortools.sat.python import cp_model

    from ..solvers.api import scaled_instance

    if not applies(instance) or time_limit <= 0:
        return 0.0
    scaled, scale, _ = scaled_instance(instance)
    p, m, e = scaled.devices, scaled.microbatches, device
    wait = [int(round(round_trip(scaled, d, d))) for d in range(p)]
    trip = [wait[d] + int(scaled.t_b[d]) for d in range(p)]
    rooms = [activation_capacity(scaled, d) for d in range(p)]
    held = [held_count(rooms[d], scaled.m_b[d], m) for d in range(p)]
    gaps = [math.floor(g) for g in release_gaps(scaled)]  # integer data: floor keeps it a bound
    t_f, t_b, t_w = (int(x) for x in (scaled.t_f[e], scaled.t_b[e], scaled.t_w[e]))
    horizon = m * (sum(trip) + t_f + t_b + t_w) + sum(int(x) for x in scaled.t_w)
    model = cp_model.CpModel()
    f = [model.NewIntVar(0, horizon, f"F{j}") for j in range(m)]
    b = [model.NewIntVar(0, horizon, f"B{j}") for j in range(m)]
    w = [model.NewIntVar(0, horizon, f"W{j}") for j in range(m)]
    model.Add(f[0] == 0)
    intervals = []
    for j in range(m):
        intervals += [model.NewFixedSizeIntervalVar(f[j], t_f, ""),
                      model.NewFixedSizeIntervalVar(b[j], t_b, ""),
                      model.NewFixedSizeIntervalVar(w[j], t_w, "")]
        model.Add(b[j] >= f[j] + wait[e])
        model.Add(w[j] >= b[j] + t_b)
        if j:
            model.Add(f[j] >= f[j - 1] + t_f)
            model.Add(b[j] >= b[j - 1] + t_b)
            model.Add(w[j] >= w[j - 1] + t_w)
    model.AddNoOverlap(intervals)
    if math.isfinite(rooms[e]):
        _memory(model, f, b, w, t_b, t_w, int(scaled.m_b[e]), int(scaled.m_w[e]), int(rooms[e]),
                horizon)
    span = model.NewIntVar(0, 2 * horizon, "span")
    model.Add(span >= w[m - 1] + t_w)
    for d in range(e):
        delta = trip[d] - trip[e]
        for j in range(held[d], m):
            model.Add(f[j] >= b[j - held[d]] + t_b + delta + gaps[d])
        model.Add(span >= b[m - 1] + t_b + delta + int(scaled.t_w[d]))
    for d in range(e + 1, p):
        ahead = wait[e] - int(round(round_trip(scaled, d, e)))  # start of F(e, j) to start of F(d, j)
        x = [model.NewIntVar(0, horizon, "") for _ in range(m)]
        for j in range(m):
            model.Add(x[j] >= f[j] + ahead)
            model.Add(b[j] >= x[j] + wait[e] - ahead)
            if j:
                model.Add(x[j] >= x[j - 1] + int(scaled.t_f[d]))
            if j >= held[d]:
                model.Add(x[j] >= x[j - held[d]] + trip[d] + gaps[d])
    model.Minimize(span)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = threads
    status = solver.Solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
        return 0.0  # infeasible would mean no in-order schedule: claim nothing
    return math.ceil(solver.BestObjectiveBound() - 1e-6) / scale


def _memory(model, f, b, w, t_b: int, t_w: int, m_b: int, m_w: int, room: int,
            horizon: int) -> None:
    """e's level: m_b - m_w from F's start to B's end, m_w from F's start to W's end."""
    intervals, demands = [], []
    for j in range(len(f)):
        for end, demand in ((b[j] + t_b, m_b - m_w), (w[j] + t_w, m_w)):
            if demand <= 0:
                continue
            size = model.NewIntVar(0, 2 * horizon, "")
            model.Add(size == end - f[j])
            intervals.append(model.NewIntervalVar(f[j], size, end, ""))
            demands.append(demand)
    if intervals:
        model.AddCumulative(intervals, demands, room)


# seconds one device's relaxation may take: those that prove anything mostly do it in one or
# two seconds at p=8, m=32 (768 passes), and the rest of a solver run is worth more to CP-SAT
DEVICE_LIMIT = 2.0


def relaxation_bound(instance: Instance, deadline: float, threads: int = 1) -> float:
    """The largest device relaxation bound found before `deadline` (perf_counter); devices that
    hold the fewest activations first, deeper first among equals (the first device, which holds
    the most, is slow to prove and rarely the highest), each given an even share of what is
    left, at most DEVICE_LIMIT seconds."""
    if not applies(instance):
        return 0.0
    held = held_counts(instance)
    order = sorted(range(instance.devices), key=lambda d: (held[d], -d))
    return best_over_devices(order, deadline, DEVICE_LIMIT,
                             lambda device, seconds: device_relaxation(instance, device, seconds,
                                                                       threads))


def best_over_devices(devices, deadline: float, limit: float, relax) -> float:
    """The largest relax(device, seconds) over `devices`, in order, before `deadline`
    (perf_counter), each given an even share of what is left and at most `limit` seconds."""
    best = 0.0
    for index, device in enumerate(devices):
        left = deadline - time.perf_counter()
        if left <= 0.05:
            break
        share = min(limit, left / (len(devices) - index))
        best = max(best, relax(device, share))
    return best

