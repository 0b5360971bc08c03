"""A lower bound from forwards and backwards that cannot pass each other on the same device.

On a contiguous pipeline (one stage per device, passes never overlapping) take a device e and
assume, as the exact solvers do (docs/model.md, symmetry), that every stage runs its F and its B
in micro-batch order. For micro-batch j let u_j be the start of F(e, j) and v_j the end of
B(e, j). For a device d >= e let Pf(d) and Pb(d) be the forward and backward paths between e and
d (the t_f, resp. t_b, of stages e..d-1, each plus comm) and P(d) = Pf(d) + Pb(d); R_e = the
least u_j to v_j (zbopt.plan.memory_bound). Then F(d, j) starts at u_j + Pf(d) + phi_j(d) and
B(d, i) ends at v_i - Pb(d) - beta_i(d), with waits phi and beta >= 0 that grow with d. Write
a_j = phi_j(p-1) (the forward waits of j) and b_j = v_j - u_j - R_e - a_j >= 0 (the rest of its
loop); phi_j(d) <= a_j and beta_i(d) <= b_i.

Collisions. F(d, j) and B(d, i) do not overlap iff y - sigma <= 0 or y - sigma >= t_f(d) + t_b(d),
where y = (v_i - u_j) - P(d) and sigma = phi_j(d) + beta_i(d) in [0, a_j + b_i]. Let
E_d = P(d) + t_f(d) + t_b(d) (increasing in d) and d* the first device with v_i - u_j < E_d.
Every device before d* is clear; at d*, y < t_f + t_b, so y - sigma <= 0 is needed:

    a_j + b_i >= v_i - u_j - P(d*)  when d* > e,   and   v_i - u_j <= 0  when d* = e

(at e itself sigma = 0). Forward and backward waves meet on the devices between e and the last
one, and unless the starts are spaced in whole multiples of a device's t_f + t_b they collide
somewhere, and a collision costs waiting time: this is what no bound that treats devices one at
a time or pairs of them sees (a pipeline whose throughput one device's memory sets cannot run at
that device's round trip, it loses a little in every period).

Memory (k_d = the most activations device d holds, zbopt.plan.memory_bound.held_count): F(d, j)
waits for the end of B(d, j - k_d), so u_{j + k_d} >= v_j + R_d - R_e for d <= e and
u_j >= v_{j - k_d} - P(d) - a_j - b_{j - k_d} for d > e; and u_{j+1} >= u_j + t_f(e).

Only the pairs i < j < i + k_e need a rule: from j = i + k_e on, F(e, j) follows v_i, and for
j <= i, v_i - u_j >= R_e = E_{p-1}, past every window. With u_0 = 0 and V >= v_j for every j,
device d <= e runs from its first F, which starts at most u_0 less the forward path from d to e,
to the end of W(d, j), at least v_j plus the backward path from e to d plus t_w(d), so

    span >= V + max over d <= e of (R_d - R_e + t_w(d)).

The least V over this relaxation is a mixed-integer programme (one binary per pair and device
window); HiGHS solves it, and its proven dual bound (less a margin for its tolerances) is a lower
bound on the span of every in-order schedule of the split. It grows exponentially with m: the
programme is built only up to MAX_BINARIES binaries, and where HiGHS stops at its time limit the
dual bound still holds. tests/test_collision_bound.py checks it against CP-SAT optima on small
instances.
"""

from __future__ import annotations

import math

from ..instance import Instance
from .device_bound import best_over_devices
from .memory_bound import applies, held_counts, round_trips

# The programme has one binary per pair of micro-batches in flight together and per device
# window after e. HiGHS proves about 200 of them in a few seconds (p=8, m=12: 3 s) and the time
# grows about fivefold with every 3 micro-batches more; beyond that its dual bound rarely rises
# above the chain of round trips that cheaper bounds already have, so larger programmes are not
# built, and plan() does not try instances with more micro-batches than MAX_MICROBATCHES.
MAX_BINARIES = 200
MAX_MICROBATCHES = 16
# seconds one device's programme may take
DEVICE_LIMIT = 5.0


def _windows(instance: Instance, e: int) -> tuple[list[float], list[tuple[float, float, float]]]:
    """P(d) for d >= e (indexed d - e) and the device windows (E_{d-1}, E_d, P(d)) for d > e."""
    comm = instance.comm
    paths = [0.0]
    for d in range(e + 1, instance.devices):
        paths.append(paths[-1] + instance.t_f[d - 1] + instance.t_b[d - 1] + 2 * comm)
    ends = [paths[d - e] + instance.t_f[d] + instance.t_b[d] for d in range(e, instance.devices)]
    windows = [(ends[d - e - 1], ends[d - e], paths[d - e]) for d in range(e + 1, instance.devices)]
    return paths, windows


def need(instance: Instance, e: int, delta: float) -> float:
    """The least a_j + b_i for a pair with v_i - u_j = delta (module doc); inf where no wait
    helps (F(e, j) inside B(e, i))."""
    paths, windows = _windows(instance, e)
    if delta <= 0:
        return 0.0
    if delta < instance.t_f[e] + instance.t_b[e]:
        return math.inf
    for low, high, path in windows:
        if low <= delta < high:
            return max(0.0, delta - path)
    return 0.0


def collision_relaxation(instance: Instance, device: int, time_limit: float,
                         upper: float = math.inf) -> float:
    """The proven bound of the relaxation of the module doc seen from `device` (0 where it
    proves nothing). `upper`: a known span of the instance (bounds the programme's big-M)."""
    import highspy

    from ..solvers.backends.highs import _stdout_silenced

    if not applies(instance) or time_limit <= 0:
        return 0.0
    p, m, e = instance.devices, instance.microbatches, device
    held = held_counts(instance)
    if e >= p - 1 or held[e] < 2:
        return 0.0
    trip = round_trips(instance)
    paths, windows = _windows(instance, e)
    last = paths[-1] + instance.t_f[p - 1] + instance.t_b[p - 1]
    if abs(last - trip[e]) > 1e-9 * max(1.0, trip[e]):
        return 0.0  # the paths above are not the round trip's (lags the argument does not know)
    pairs = sum(min(held[e] - 1, m - 1 - i) for i in range(m))
    if pairs * (len(windows) + 2) > MAX_BINARIES:
        return 0.0
    extra = max(trip[d] - trip[e] + instance.t_w[d] for d in range(e + 1))
    if not math.isfinite(upper):
        # one micro-batch at a time through the whole pipeline fits any feasible cap
        upper = m * (trip[0] + sum(instance.t_w))
    # V of a schedule no longer than `upper` is at most this (the optimum's is); the slack keeps
    # "no such V" (returned as `upper`) clear of HiGHS' tolerances
    top = upper - extra + 1e-6 * max(1.0, upper)
    big = 2 * top + trip[e]
    with _stdout_silenced():
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("mip_rel_gap", 0.0)
    highspy.Highs.resetGlobalScheduler(True)
    u = [h.addVariable(lb=0.0, ub=top) for _ in range(m)]
    a = [h.addVariable(lb=0.0, ub=top) for _ in range(m)]
    b = [h.addVariable(lb=0.0, ub=top) for _ in range(m)]
    top_v = h.addVariable(lb=0.0, ub=top)
    v = [u[j] + a[j] + b[j] + trip[e] for j in range(m)]
    h.addConstr(u[0] == 0)
    rows = 0
    for j in range(m):
        h.addConstr(top_v - v[j] >= 0)
        if j:
            h.addConstr(u[j] - u[j - 1] >= instance.t_f[e])
    for d in range(p):
        k = held[d]
        for j in range(k, m):
            if d <= e:
                h.addConstr(u[j] - v[j - k] >= trip[d] - trip[e])
            else:
                h.addConstr(u[j] - v[j - k] + a[j] + b[j - k] >= -paths[d - e])
    for i in range(m):
        for j in range(i + 1, min(m, i + held[e])):
            delta = v[i] - u[j]
            before = h.addBinary()  # delta <= 0
            after = h.addBinary()  # past every window
            inside = [h.addBinary() for _ in windows]
            h.addConstr(before + after + sum(inside) == 1)
            h.addConstr(delta + big * before <= big)
            h.addConstr(delta - big * after >= last - big)
            for z, (low, high, path) in zip(inside, windows):
                h.addConstr(delta - big * z >= low - big)
                h.addConstr(delta + big * z <= high + big)
                h.addConstr(a[j] + b[i] - delta - big * z >= -path - big)
            rows += 3 + 3 * len(windows)
    h.minimize(top_v)
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return upper  # no schedule shorter than `upper` exists in the relaxation
    bound = h.getInfo().mip_dual_bound
    if bound is None or not math.isfinite(bound) or bound <= 0:
        return 0.0
    # the dual bound is the least LP bound of the open nodes, valid up to the LP's feasibility
    # tolerance (1e-7 of a row's scale); a margin covers every row at once
    margin = 1e-7 * big * (rows + 2 * m) + 1e-9 * abs(bound)
    return max(0.0, bound - margin + extra)


def collision_bound(instance: Instance, deadline: float, upper: float = math.inf) -> float:
    """The largest collision relaxation bound found before `deadline` (perf_counter), over the
    devices whose memory limits the pipeline most (longest round trip per held micro-batch
    first), each given an even share of what is left, at most DEVICE_LIMIT seconds."""
    if not applies(instance) or instance.microbatches > MAX_MICROBATCHES:
        return 0.0
    held, trip = held_counts(instance), round_trips(instance)
    devices = [d for d in range(instance.devices - 1) if 2 <= held[d] < instance.microbatches]
    devices.sort(key=lambda d: -trip[d] / held[d])
    return best_over_devices(devices, deadline, DEVICE_LIMIT,
                             lambda device, seconds: collision_relaxation(instance, device,
                                                                          seconds, upper))
