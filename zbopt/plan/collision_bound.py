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

(at e itself sigma = 0). More precisely, z(d) = y - sigma (B(d, i)'s end less F(d, j)'s start)
falls by at least t_f(d) + t_b(d) + 2 comm from one device to the next, so the pair crosses at one
device c (the first with z(c) <= 0; c = e is "before", no device at all "after"): every device
d < c has z(d) >= t_f(d) + t_b(d), and waits only move c down from d*. Taking c as the pair's
case (a window case c asks v_i - u_j >= E_{c-1} and a_j + b_i >= v_i - u_j - P(c); "after" asks
v_i - u_j >= R_e) is therefore a relaxation whose best choice without the rules below is d*.

Two pairs sharing a micro-batch share its waits, which the totals a and b hide. For i < j < j'
with (i, j') crossing at a device c1 > e and (i, j) at c2 beyond c1 (a later device, or after):
at c1, beta_i(c1) >= v_i - u_j' - P(c1) - a_j'; at c2 - 1 >= c1, where (i, j) has not crossed,
beta_i(c2 - 1) <= v_i - u_j - E_{c2-1} (E_{p-1} = R_e for after); beta grows with d, so

    x_j' >= u_j + E_{c2-1} - P(c1).

For i < i' < j with (i, j) crossing at c1 > e and (i', j) at c2 beyond c1, the same with phi_j:
phi_j(c1) >= v_i - u_j - P(c1) - b_i and phi_j(c2 - 1) <= v_i' - u_j - E_{c2-1}, so

    v_i' >= x_i + R_e + E_{c2-1} - P(c1).

Forward and backward waves meet on the devices between e and the last one, and unless the
starts are spaced in whole multiples of a device's t_f + t_b they collide somewhere, and a
collision costs waiting time: this is what no bound that treats devices one at a time or pairs
of them sees (a pipeline whose throughput one device's memory sets cannot run at that device's
round trip, it loses a little in every period).

Memory (k_d = the most activations device d holds, zbopt.plan.memory_bound.held_count, and
delta_d its release gap there): F(d, j) waits delta_d past the end of B(d, j - k_d), so
u_{j + k_d} >= v_j + R_d - R_e + delta_d for d <= e and
u_j >= v_{j - k_d} - P(d) - a_j - b_{j - k_d} + delta_d for d > e; and u_{j+1} >= u_j + t_f(e).

Only the pairs i < j < i + k_e need a rule: from j = i + k_e on, F(e, j) follows v_i, and for
j <= i, v_i - u_j >= R_e = E_{p-1}, past every window. With u_0 = 0 and V >= v_j for every j,
device d <= e runs from its first F, which starts at most u_0 less the forward path from d to e,
to the end of W(d, j), at least v_j plus the backward path from e to d plus t_w(d), so

    span >= V + max over d <= e of (R_d - R_e + t_w(d)).

The least V over this relaxation is found exactly by a dynamic programme over the micro-batches
(`_least_v`: each pair's case turns every rule into a difference constraint, and only the
Pareto-least states survive); it is a lower bound on the span of every in-order schedule of the
split. A time limit stops it at the micro-batches done (a relaxation of the rest); more than
MAX_STATES states are merged by rounding their values down, and where a device holds many
micro-batches only the pairs fewer than `reach` apart get their rule (MAX_CASES): relaxations
too, so what it returns is always a bound. tests/test_collision_bound.py checks it against the
same relaxation written as a mixed-integer programme (HiGHS) and against CP-SAT optima on small
instances.
"""

from __future__ import annotations

import itertools
import math
import time
from typing import Optional

import numpy as np

from ..instance import Instance
from .memory_bound import applies, chain_trips, held_counts, release_gaps, round_trips

# Each pair of micro-batches has a case (before, after or a device window); the programme
# enumerates those of the pairs a new micro-batch forms and keeps those of the pairs a state
# carries: at most this many combinations (8 cases at p = 8 allow pairs 1 and 2 apart; all
# pairs where a device holds 3); then the Pareto states kept per micro-batch before rounding
MAX_CASES = 600
MAX_STATES = 3000
TOL = 1e-6
_U, _X, _V = 0, 1, 2  # a micro-batch's columns: u_j, x_j = u_j + a_j, v_j
_NEG = -1e18  # a column not (yet) set
# seconds one device's programme may take, and the devices tried: the relaxation sees the
# collisions behind a device whose memory sets the pace, and the others rarely beat the
# coupled bound (at p = 8, m = 32 the best came from the first or second)
DEVICE_LIMIT = 10.0
PACING = 2


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
                         upper: float = math.inf, shared_waits: bool = True) -> float:
    """The bound of the relaxation of the module doc seen from `device` (0 where it proves
    nothing), by the dynamic programme of `_least_v`; where `time_limit` (seconds) runs out, the
    least V of the micro-batches done so far (fewer micro-batches relax the rest). `upper`: a
    known span of the instance (relaxed schedules longer than it are dropped). `shared_waits`:
    with the rules between two pairs sharing a micro-batch (off only to measure them)."""
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
    reach = _reach(instance, e)
    extra = max(trip[d] - trip[e] + instance.t_w[d] for d in range(e + 1))
    if not math.isfinite(upper):
        # one micro-batch at a time through the whole pipeline fits any feasible cap
        upper = m * (trip[0] + sum(instance.t_w))
    # V of a schedule no longer than `upper` is at most this (the optimum's is)
    top = upper - extra + 1e-6 * max(1.0, upper)
    value = _least_v(instance, e, reach, held, trip, release_gaps(instance), paths, windows, top,
                     time.perf_counter() + time_limit, shared_waits)
    if value is None:
        return upper  # no relaxed schedule within `upper`: nothing shorter exists
    if value <= 0:
        return 0.0
    # each comparison tolerates 1e-6 (TOL) per step and pass; the margin covers them all
    return max(0.0, value + extra - TOL * 100 * m - 1e-9 * value)


def _reach(instance: Instance, e: int) -> int:
    """Pairs fewer than this apart get their rule (all of them when it is k_e; dropping the
    farther ones relaxes): the cases of a new micro-batch's pairs times those of the pairs a
    state keeps stay within MAX_CASES."""
    cases = instance.devices - 1 - e + 2  # before, after, one window per device after e
    reach = min(held_counts(instance)[e], instance.microbatches)
    while reach > 2 and cases ** (reach * (reach - 1) // 2) > MAX_CASES:
        reach -= 1
    return reach


def _least_v(instance: Instance, e: int, reach: int, held, trip, gaps, paths, windows,
             top: float, deadline: float, shared_waits: bool = True) -> Optional[float]:
    """The least V of the relaxation with the pair rules of micro-batches less than `reach`
    apart (None: none at most `top`), micro-batch by micro-batch.

    With x_j = u_j + a_j every rule of the module doc is a difference constraint once each pair
    has chosen its case (before, after, or crossing at a device d: v_i - u_j >= low,
    x_j - x_i >= R_e - P(d)), the rules between two pairs sharing a micro-batch included; so,
    for a choice of cases, the least u, x, v are longest paths, and every rule only raises a
    value when another rises. A state after micro-batch j holds the least values of the last
    micro-batches (columns per offset back from j) and the cases of the pairs among the ones
    that later pairs can still move (by the offsets of i and j); a state
    no later than another in every column, with the same cases, does at least as well in every
    continuation, so only the Pareto-least states are kept. Values older than the window are
    frozen, and the rules that would raise them dropped: a relaxation, as is rounding the
    values down to a grid when more than MAX_STATES states remain. Vectorised with numpy over
    the states and the cases of the new pairs."""
    m, p = instance.microbatches, instance.devices
    R, last = trip[e], windows[-1][1]  # past the last device window (the round trip)
    # (source kind, lag, destination kind, weight) into micro-batch j
    structural = [(_U, 1, _U, instance.t_f[e]), (_U, 0, _X, 0.0), (_X, 0, _V, R)]
    for d in range(p):
        if held[d] < m:
            structural.append((_V, held[d], _U, trip[d] - R + gaps[d]) if d <= e
                              else (_X, held[d], _X, R - paths[d - e] + gaps[d]))
    live = max(reach, 2)  # micro-batches whose values may still rise (offsets 0..live-1)
    tracked = max(live, max(lag for _, lag, _, _ in structural) + 1)
    width = 3 * tracked + 1
    vmax = width - 1

    def col(offset: int, kind: int) -> int:
        return 3 * offset + kind

    # per pair (i, j): its cases as edges (source kind, source is i, destination kind, dest is i, w)
    cases = [[(_V, True, _U, False, 0.0)], [(_U, False, _V, True, last)]]
    cases += [[(_U, False, _V, True, low), (_X, True, _X, False, R - path)] for low, _, path in windows]
    # for the rules between two pairs (module doc): the rank of a case's crossing device, P of
    # a window case's device, and the low end of the first device a pair has not yet crossed
    rank = [-1, len(windows)] + list(range(len(windows)))
    crossed = [None, None] + [path for _, _, path in windows]
    clear = [None, last] + [low for low, _, _ in windows]

    def between(pairs_of: list[tuple[int, int, int]]) -> list[tuple[int, int, float]]:
        """The edges of the rules between pairs (offsets of i and j, case) sharing a micro-batch."""
        out = []
        for (i1, j1, c1), (i2, j2, c2) in itertools.permutations(pairs_of if shared_waits else (), 2):
            if crossed[c1] is None or rank[c2] <= rank[c1]:
                continue
            if i1 == i2 and j2 > j1:  # (i, j1) crosses at c1, (i, j2), j2 earlier, not before c2
                out.append((col(j2, _U), col(j1, _X), clear[c2] - crossed[c1]))
            elif j1 == j2 and i1 > i2:  # (i1, j) crosses at c1, (i2, j), i2 later, not before c2
                out.append((col(i1, _X), col(i2, _V), R + clear[c2] - crossed[c1]))
        return out

    relevant = np.ones(width, dtype=bool)  # frozen columns no rule reaches again are cleared
    for offset in range(live, tracked):
        for kind in (_U, _X, _V):
            relevant[col(offset, kind)] = any(k == kind and lag > offset for k, lag, _, _ in structural)
    first = np.full((1, width), _NEG)
    first[0, vmax] = 0.0
    states: dict[tuple, np.ndarray] = {(): first}
    grid = 0.0
    best = 0.0
    for j in range(m):
        if time.perf_counter() > deadline:
            return best
        pairs = min(reach - 1, j)
        choices = list(itertools.product(range(len(cases)), repeat=pairs))
        chosen = [[(q + 1, 0, c) for q, c in enumerate(choice)] for choice in choices]
        chosen_edges = [_case_edges(pairs_of, cases, col) + between(pairs_of) for pairs_of in chosen]
        rules = [(col(r + lag, sk), col(r, dk), w) for sk, lag, dk, w in structural
                 for r in range(live) if r + lag < tracked and j - r - lag >= 0]
        # one weight per case choice for each edge (-inf where the choice lacks it); the same
        # for every state, which adds only the edges of the cases it keeps
        step_weights: dict[tuple[int, int], np.ndarray] = {}
        for s, d, w in rules:
            _raise(step_weights, (s, d), len(choices), slice(None), w)
        for index, edges in enumerate(chosen_edges):
            for s, d, w in edges:
                _raise(step_weights, (s, d), len(choices), index, w)
        new: dict[tuple, list[np.ndarray]] = {}
        for key, values in states.items():
            n = len(values)
            shifted = np.full((n, width), _NEG)
            shifted[:, 3:vmax] = values[:, :vmax - 3]
            shifted[:, vmax] = values[:, vmax]
            shifted[:, col(0, _U)] = 0.0
            kept = [(i + 1, k + 1, c) for i, k, c in key]
            weights = {edge: row.copy() for edge, row in step_weights.items()}
            for s, d, w in _case_edges(kept, cases, col) + between(kept):
                _raise(weights, (s, d), len(choices), slice(None), w)
            for index, pairs_of in enumerate(chosen):
                for s, d, w in between(kept + pairs_of):
                    if d == col(0, _X):  # a kept (i, j) with the new (i, j'): into x_j'
                        _raise(weights, (s, d), len(choices), index, w)
            block = np.repeat(shifted[None], len(choices), axis=0).reshape(-1, width)
            edges = [(s, d, np.repeat(w, n)) for (s, d), w in weights.items() if d // 3 < live]
            ok = _longest_paths(block, edges, top)
            block[:, vmax] = np.maximum(block[:, vmax],
                                        block[:, [col(r, _V) for r in range(min(live, j + 1))]].max(axis=1))
            for index, pairs_of in enumerate(chosen):
                rows = block[index * n:(index + 1) * n][ok[index * n:(index + 1) * n]]
                if len(rows):
                    following = tuple(sorted((i, k, c) for i, k, c in kept + pairs_of
                                             if i <= live - 2))
                    new.setdefault(following, []).append(rows)
        states = {}
        for key, parts in new.items():
            values = np.concatenate(parts)
            values[:, ~relevant] = _NEG
            states[key] = _pareto(values)
        while sum(len(v) for v in states.values()) > MAX_STATES:
            grid = max(2 * grid, 1e-4 * top)
            for key, values in states.items():
                rounded = values.copy()
                rounded[:, :vmax] = np.where(rounded[:, :vmax] > _NEG / 2,
                                             np.floor(rounded[:, :vmax] / grid) * grid, _NEG)
                states[key] = _pareto(rounded)
        if not states:
            return None
        best = min(float(values[:, vmax].min()) for values in states.values())
    return best


def _case_edges(pairs_of, cases, col) -> list[tuple[int, int, float]]:
    """The edges of each pair's case: (column, column, weight) from (offset of i, of j, case)."""
    return [(col(i if s_i else k, sk), col(i if d_i else k, dk), w)
            for i, k, c in pairs_of for sk, s_i, dk, d_i, w in cases[c]]


def _raise(weights: dict, edge: tuple[int, int], size: int, where, w: float) -> None:
    """Raise the weights of `edge` at `where` (a choice's index, or all) to at least w."""
    row = weights.setdefault(edge, np.full(size, -np.inf))
    row[where] = np.maximum(row[where], w)


def _longest_paths(values: np.ndarray, edges, top: float) -> np.ndarray:
    """Raise `values` until every edge (source column, destination column, weight per row)
    holds; the rows that do not settle (a positive cycle: contradictory cases) or pass `top`
    are False."""
    rising = np.zeros(len(values), dtype=bool)
    for _ in range(len({d for _, d, _ in edges}) + 2):
        rising[:] = False
        for s, d, w in edges:
            raised = values[:, s] + w
            up = raised > values[:, d] + TOL
            if up.any():
                values[:, d] = np.where(up, raised, values[:, d])
                rising |= up
        if not rising.any():
            break
    return ~rising & (values[:, :-1].max(axis=1) <= top)


def _pareto(values: np.ndarray) -> np.ndarray:
    """The rows no other row is at most (within TOL) in every column; equal rows once."""
    if len(values) <= 1:
        return values
    values = np.unique(values, axis=0)
    values = values[np.argsort(values.sum(axis=1), kind="stable")]
    kept = values[:0]
    for start in range(0, len(values), 256):
        rows = values[start:start + 256]
        if len(kept):
            rows = rows[~np.all(kept[None] <= rows[:, None] + TOL, axis=2).any(axis=1)]
        if len(rows) > 1:  # sorted by sum: only an earlier row of the block can be at most it
            below = np.all(rows[None] <= rows[:, None] + TOL, axis=2)
            rows = rows[~(below & np.tri(len(rows), k=-1, dtype=bool)).any(axis=1)]
        kept = np.concatenate([kept, rows])
    return kept


def collision_bound(instance: Instance, deadline: float, upper: float = math.inf) -> float:
    """The largest collision relaxation bound found before `deadline` (perf_counter), over the
    PACING devices whose memory limits the pipeline most (longest round trip per held
    micro-batch), one after the other, each given what is left, at most DEVICE_LIMIT seconds."""
    if not applies(instance):
        return 0.0
    held, trip = held_counts(instance), chain_trips(instance)
    devices = [d for d in range(instance.devices - 1) if 2 <= held[d] < instance.microbatches]
    devices.sort(key=lambda d: -trip[d] / held[d])
    best = 0.0
    for device in devices[:PACING]:
        left = deadline - time.perf_counter()
        if left <= 0.05:
            break
        best = max(best, collision_relaxation(instance, device, min(DEVICE_LIMIT, left), upper))
    return best
