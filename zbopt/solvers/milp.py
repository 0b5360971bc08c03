"""The MILP model through PuLP, shared by the MILP backends (backends/cbc.py, backends/highs.py).

The model is the ordering-binary (big-M disjunctive) formulation of the Zero Bubble paper's
appendix (Qi et al., ICLR 2024), written for zbopt's conventions:

- a continuous start time `s[p]` per pass, an integer objective `z`;
- precedence `s[q] >= s[p] + d[p] + lag` for every DAG edge p -> q (comm across devices);
- for every two passes a, b on one device whose order is not already implied, a binary y
  (1: a runs before b) with `s[b] >= s[a] + d[a] - M (1 - y)` and `s[a] >= s[b] + d[b] - M y`;
- memory: at the start of every F pass p on device d (the only moment the level rises),
  `static[d] + m_b[p] + sum(delta[q] * [q before p]) <= cap[d]`, delta = +m_b (F),
  -(m_b - m_w) (B), -m_w (W), exactly the evaluator's accounting;
- objective: makespan (`z >= s[p] + d[p]`, every device may start at 0) or span
  (`z >= last[d] - first[d]` with per-device first/last variables).

Orders implied by the DAG (and, with symmetry breaking, by running same-kind passes of a stage
in micro-batch order) are fixed, so they need no binary; so are orders the cap implies (an F
that cannot fit unless some B or W ran before it: with cap 1p that is 1F1B's "F(j) after
B(j - k)"). Fixed orders give "energy" cuts: a pass starts after everything forced before it on
its device has run. Optionally (`bound_cuts`, on by default) every device window is bounded
below by zbopt.bounds, whose ramp and drain arguments the LP relaxation cannot see.
`M` comes from the horizon: the model only looks for schedules with objective <= horizon, and
any two passes of one device then lie within one window of length <= horizon. Costs must be
integers (solve() scales them): an optimal schedule then has integer starts, so objective and
bound are integers.

Only single passes are scheduled: fused (B, W) and DualPipe's overlapped F&B blocks are not
modelled (an overlap discount is therefore never used by this backend).
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Optional

import networkx as nx
import pulp

from .. import bounds, signals
from ..errors import ZboptError
from ..instance import Instance
from ..passes import Pass, dependencies, format_pass, lag, memory_delta
from .protocol import BackendRequest, BackendResult

OBJECTIVES = ("span", "makespan")

# Feasibility tolerance when reading continuous start times back (solver tolerances are ~1e-9).
_EPS = 1e-6


# ----- problem structure (pure) --------------------------------------------------------------

@dataclass(frozen=True)
class Structure:
    """What the model needs from an instance, computed once.

    `device_passes[d]` lists device d's passes in a topological order; `forced` holds every
    ordered pair (a, b) on one device where a must run before b (DAG ancestors, same-kind
    micro-batch order when symmetry breaking is on, and orders the memory cap implies);
    `free` the unordered pairs left to decide. `head[p]`/`tail[p]` are the longest chains
    before p's start / after p's end; `between[a, b]` (forced pairs) the total duration of the
    passes forced after a and before b; `after[p]`/`before[p]` the total duration of the
    passes of p's device forced after / before p.
    """

    device_passes: tuple[tuple[Pass, ...], ...]
    duration: dict[Pass, int]
    delta: dict[Pass, float]
    forced: frozenset[tuple[Pass, Pass]]
    free: tuple[tuple[Pass, Pass], ...]
    head: dict[Pass, int]
    tail: dict[Pass, int]
    edges: tuple[tuple[Pass, Pass, int], ...]  # precedence edges (a, b, lag), DAG + symmetry
    between: dict[tuple[Pass, Pass], int]
    after: dict[Pass, int]
    before: dict[Pass, int]
    memory_orders: int = 0  # pairs fixed by the memory argument


def _integer(name: str, value: float) -> int:
    if not float(value).is_integer():
        raise ZboptError(f"the MILP backend needs integer costs, {name} is {value}: "
                         f"scale the instance's costs to integers first (solve() does this)")
    return int(value)


def activation_room(instance: Instance, device: int) -> float:
    """What a device's cap leaves for activations: the cap less its static memory (the one
    place the model accounts for static memory)."""
    return instance.cap[device] - instance.static_memory[device]


def symmetry_edges(instance: Instance) -> list[tuple[Pass, Pass]]:
    """Same-kind passes of one stage in micro-batch order (identical passes: a valid choice)."""
    out = []
    for stages, mbs in instance.chains:
        for s in stages:
            for kind in "FBW":
                out.extend(((s, a, kind), (s, b, kind)) for a, b in zip(mbs, mbs[1:]))
    return out


def _closure(graph: nx.DiGraph) -> tuple[list[Pass], dict[Pass, int], dict[Pass, int]]:
    """Topological order, and ancestors / descendants of every node as bitsets over it."""
    order = list(nx.topological_sort(graph))
    index = {p: i for i, p in enumerate(order)}
    up: dict[Pass, int] = {}
    for p in order:
        bits = 0
        for q in graph.predecessors(p):
            bits |= up[q] | (1 << index[q])
        up[p] = bits
    down: dict[Pass, int] = {}
    for p in reversed(order):
        bits = 0
        for q in graph.successors(p):
            bits |= down[q] | (1 << index[q])
        down[p] = bits
    return order, up, down


def _bits(mask: int):
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _memory_orders(instance: Instance, dev: tuple[Pass, ...], device: int,
                   index: dict[Pass, int], up: dict[Pass, int], down: dict[Pass, int],
                   delta: dict[Pass, float]) -> list[tuple[Pass, Pass]]:
    """Releases that must run before an F for it to fit the cap.

    At the start of F pass p the level is at least static + m_b[p] + the deltas of passes
    forced before p - every release still undecided. If leaving release q (and all passes
    forced after q) out of that sum already exceeds the cap, q must precede p.
    """
    cap = activation_room(instance, device)
    by_index = {index[q]: q for q in dev}
    out = []
    for p in dev:
        if p[2] != "F":
            continue
        mine = sum(1 << index[q] for q in dev if q != p)
        before_bits = up[p] & mine
        undecided = mine & ~before_bits & ~down[p]
        releases = [by_index[i] for i in _bits(undecided) if delta[by_index[i]] < 0]
        release_bits = sum(1 << index[q] for q in releases)
        level = delta[p] + sum(delta[by_index[i]] for i in _bits(before_bits))
        most = -sum(delta[q] for q in releases)
        if level <= cap + 1e-9:
            continue  # fits whatever runs before it
        if level - most > cap + 1e-9:
            # over the cap even if every release runs first
            raise _CapTooSmall(f"device {device} exceeds its cap ({cap:g} left after static "
                               f"memory) at {format_pass(p)} whatever runs before it")
        for q in releases:
            lost = -sum(delta[by_index[i]]
                        for i in _bits((down[q] | (1 << index[q])) & release_bits))
            if level - (most - lost) > cap + 1e-9:
                out.append((q, p))
    return out


def structure(instance: Instance, symmetry: bool = True,
              deadline: Optional[float] = None) -> Structure:
    """The passes' durations, forced and free orders, heads and tails the MILP is built on;
    past `deadline` (a time.perf_counter() value) it stops with _OutOfTime (large models take
    minutes: 1e5 free pairs about 4 s, 6e5 about a minute)."""
    passes = list(instance.passes())
    duration = {p: _integer(f"t_{p[2].lower()}[{p[0]}]", instance.cost(p[0], p[2]))
                for p in passes}
    _integer("comm", instance.comm)
    delta = {p: memory_delta(instance, p) for p in passes}
    graph = nx.DiGraph()
    graph.add_nodes_from(passes)
    edges: list[tuple[Pass, Pass, int]] = []
    for b in passes:
        for a in dependencies(instance, b):
            edges.append((a, b, int(lag(instance, a, b))))
    if symmetry:
        edges.extend((a, b, 0) for a, b in symmetry_edges(instance))
    graph.add_weighted_edges_from(edges, weight="lag")
    by_device = [[p for p in passes if instance.device_of(p[0]) == d]
                 for d in range(instance.devices)]
    memory_orders = 0
    while True:  # memory-implied orders may imply more: repeat to a fixed point
        order, up, down = _closure(graph)
        index = {p: i for i, p in enumerate(order)}
        new = []
        if instance.cap is not None:
            for d, dev in enumerate(by_device):
                _in_time(deadline)
                new += _memory_orders(instance, tuple(dev), d, index, up, down, delta)
        if not new:
            break
        memory_orders += len(new)
        edges.extend((a, b, 0) for a, b in new)
        graph.add_weighted_edges_from(((a, b, 0) for a, b in new), weight="lag")
        if not nx.is_directed_acyclic_graph(graph):
            # contradictory orders: the cap admits no schedule (reported as infeasible)
            raise _CapTooSmall("the orders the cap forces contradict each other")
    head: dict[Pass, int] = {}
    for p in order:
        head[p] = max((head[q] + duration[q] + graph.edges[q, p]["lag"]
                       for q in graph.predecessors(p)), default=0)
    tail: dict[Pass, int] = {}
    for p in reversed(order):
        tail[p] = max((graph.edges[p, q]["lag"] + duration[q] + tail[q]
                       for q in graph.successors(p)), default=0)
    device_passes = tuple(tuple(sorted(dev, key=index.__getitem__)) for dev in by_device)
    forced, free = set(), []
    between: dict[tuple[Pass, Pass], int] = {}
    after: dict[Pass, int] = {}
    before: dict[Pass, int] = {}
    for dev in device_passes:
        mine = sum(1 << index[q] for q in dev)
        cost = {index[q]: duration[q] for q in dev}
        for p in dev:
            after[p] = sum(cost[i] for i in _bits(down[p] & mine))
            before[p] = sum(cost[i] for i in _bits(up[p] & mine))
        for i, a in enumerate(dev):
            _in_time(deadline)
            for b in dev[i + 1:]:  # index[a] < index[b], so b is never an ancestor of a
                if up[b] >> index[a] & 1:
                    forced.add((a, b))
                    between[a, b] = sum(cost[k] for k in _bits(down[a] & up[b] & mine))
                else:
                    free.append((a, b))
    return Structure(device_passes, duration, delta, frozenset(forced), tuple(free), head, tail,
                     tuple(edges), between, after, before, memory_orders)


# the least time limit a MILP solver is given (when the deadline has all but passed)
LEAST_SECONDS = 0.05


def seconds_left(deadline: float) -> float:
    """A solver's time limit: what is left until `deadline` (time.perf_counter()), at least
    LEAST_SECONDS."""
    return max(LEAST_SECONDS, deadline - time.perf_counter())


class _CapTooSmall(Exception):
    """The memory cap forces a cyclic order: no schedule fits."""


class _OutOfTime(Exception):
    """Building the model passed its deadline (the solver's time limit)."""


def _in_time(deadline: Optional[float]) -> None:
    """_OutOfTime once `deadline` (a time.perf_counter() value) has passed, or once the
    solvers were asked to finish now (SIGUSR1, zbopt.signals)."""
    if (deadline is not None and time.perf_counter() > deadline) or signals.finish_requested():
        raise _OutOfTime


def default_horizon(instance: Instance) -> int:
    """Objective of running one pass at a time along a topological order: an upper bound.

    It holds the activations of a single micro-batch at a time, the least any schedule needs,
    so it is a valid horizon whenever some schedule fits the cap.
    """
    total = sum(_integer("cost", instance.cost(p[0], p[2])) for p in instance.passes())
    crossings = sum(1 for b in instance.passes() for a in dependencies(instance, b)
                    if lag(instance, a, b))
    return total + crossings * _integer("comm", instance.comm)


# ----- model ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Model:
    """The PuLP problem and its variables (PuLP objects are mutable; the mapping is not)."""

    problem: pulp.LpProblem
    start: dict[Pass, pulp.LpVariable]
    order: dict[tuple[Pass, Pass], pulp.LpVariable]  # free pair (a, b) -> 1 if a before b
    first: tuple[pulp.LpVariable, ...]
    last: tuple[pulp.LpVariable, ...]
    objective: pulp.LpVariable
    structure: Structure


def _before(model: Model, a: Pass, b: Pass):
    """1 (or its expression) when a runs before b on their device."""
    if (a, b) in model.structure.forced:
        return 1
    if (b, a) in model.structure.forced:
        return 0
    if (a, b) in model.order:
        return model.order[a, b]
    return 1 - model.order[b, a]


def build_model(instance: Instance, objective: str, horizon: int,
                symmetry: bool = True, bound_cuts: bool = True,
                lower: Optional[int] = None, deadline: Optional[float] = None) -> Model:
    """The MILP; past `deadline` (a time.perf_counter() value) it stops with _OutOfTime."""
    st = structure(instance, symmetry, deadline)
    prob = pulp.LpProblem("zbopt", pulp.LpMinimize)
    d = st.duration
    makespan = objective == "makespan"
    start = {}
    for dev in st.device_passes:
        for p in dev:
            # makespan: a pass cannot start before its head nor end after horizon - tail
            upper = horizon - st.tail[p] - d[p] if makespan else None
            start[p] = prob.add_variable(f"s_{format_pass(p)}", lowBound=st.head[p] if makespan
                                         else 0, upBound=upper)
    z = prob.add_variable("z", lowBound=0, upBound=horizon, cat=pulp.LpInteger)
    prob += z
    order = {(a, b): prob.add_variable(f"y_{format_pass(a)}_{format_pass(b)}",
                                       cat=pulp.LpBinary)
             for a, b in st.free}
    first = tuple(prob.add_variable(f"first_{k}", lowBound=0) for k in range(instance.devices))
    last = tuple(prob.add_variable(f"last_{k}", lowBound=0) for k in range(instance.devices))
    model = Model(prob, start, order, first, last, z, st)
    for a, b, gap in st.edges:
        prob += start[b] >= start[a] + d[a] + gap
    for a, b in st.forced:  # forced order: a, then every pass forced between them, then b
        prob += start[b] >= start[a] + d[a] + st.between[a, b]
    for n, ((a, b), y) in enumerate(order.items()):
        if n % 4096 == 0:
            _in_time(deadline)
        big = horizon
        if makespan:  # a ends by horizon - tail[a], b starts no earlier than head[b]
            big = max(0, horizon - st.tail[a] - st.head[b])
        prob += start[b] >= start[a] + d[a] - big * (1 - y)
        big = max(0, horizon - st.tail[b] - st.head[a]) if makespan else horizon
        prob += start[a] >= start[b] + d[b] - big * y
    for k, dev in enumerate(st.device_passes):
        busy = sum(d[p] for p in dev)
        for p in dev:
            # the passes forced before / after p run on this device too, one at a time
            prob += first[k] <= start[p] - st.before[p]
            prob += last[k] >= start[p] + d[p] + st.after[p]
        # a device runs one pass at a time: valid cuts the LP relaxation would not see
        prob += last[k] - first[k] >= busy
        prob += z >= busy
        prob += (z >= last[k] - first[k]) if not makespan else (z >= last[k])
    if makespan:
        prob += z >= max(st.head[p] + d[p] + st.tail[p] for p in start)
    if bound_cuts:
        # zbopt.bounds: every schedule's device window is at least its load plus the idle
        # time the memory ramp and drain force (the LP relaxation cannot see the latter)
        for k in range(instance.devices):
            prob += last[k] - first[k] >= _ceil(bounds.device_bound(instance, k))
        prob += z >= _ceil(bounds.best_lower_bound(instance, objective)[1])
    if lower:
        prob += z >= int(lower)
    if instance.cap is not None:
        for k, dev in enumerate(st.device_passes):
            _in_time(deadline)
            for p in dev:
                if p[2] != "F":
                    continue
                level = st.delta[p]
                room = activation_room(instance, k)
                terms = []
                for q in dev:
                    if q == p or st.delta[q] == 0:
                        continue
                    x = _before(model, q, p)
                    if isinstance(x, int):
                        level += st.delta[q] * x
                    else:
                        terms.append(st.delta[q] * x)
                if terms:
                    prob += pulp.lpSum(terms) + level <= room
                elif level > room:
                    # forced orders alone overflow the cap: an always-false row says infeasible
                    prob += z >= horizon + 1
    return model


# ----- warm start ----------------------------------------------------------------------------

def hint_problem(instance: Instance, st: Structure, hint: dict[Pass, int], horizon: int,
                 objective: str) -> str:
    """Why `hint` cannot be the model's start ('' if it can)."""
    d = st.duration
    missing = [p for dev in st.device_passes for p in dev if p not in hint]
    if missing:
        return f"the hint has no start for {format_pass(missing[0])}"
    for a, b, gap in st.edges:
        if hint[b] < hint[a] + d[a] + gap:
            return (f"{format_pass(b)} starts before {format_pass(a)} ends (+ comm), which a "
                    f"dependency, micro-batch order or the cap requires")
    ranks = hint_order(st, hint)
    for a, b in st.forced:
        if ranks[a] > ranks[b]:
            return f"{format_pass(b)} runs before {format_pass(a)}"
    for dev in st.device_passes:
        ordered = sorted(dev, key=ranks.__getitem__)
        for a, b in zip(ordered, ordered[1:]):
            if hint[b] < hint[a] + d[a]:
                return f"{format_pass(a)} and {format_pass(b)} overlap"
    for k, dev in enumerate(st.device_passes):
        level = 0.0
        for p in sorted(dev, key=ranks.__getitem__):
            if p[2] == "F" and instance.cap is not None \
                    and level + st.delta[p] > activation_room(instance, k) + 1e-9:
                return f"device {k} is over the memory cap at {format_pass(p)}"
            level += st.delta[p]
    value = _hint_objective(st, hint, objective)
    if value > horizon:
        return f"its {objective} {value} exceeds the horizon {horizon}"
    return ""


def hint_order(st: Structure, hint: dict[Pass, int]) -> dict[Pass, int]:
    """Position of every pass in its device's order: by start, ties (zero-length passes) by
    the forced order, which the device-topological listing respects."""
    ranks = {}
    for dev in st.device_passes:
        listed = {p: i for i, p in enumerate(dev)}
        for i, p in enumerate(sorted(dev, key=lambda p: (hint[p], hint[p] + st.duration[p],
                                                          listed[p]))):
            ranks[p] = i
    return ranks


def _hint_objective(st: Structure, hint: dict[Pass, int], objective: str) -> int:
    windows = [(min(hint[p] for p in dev), max(hint[p] + st.duration[p] for p in dev))
               for dev in st.device_passes if dev]
    if objective == "makespan":
        return max(e for _, e in windows)
    return max(e - s for s, e in windows)


def set_warm_start(model: Model, hint: dict[Pass, int], objective: str) -> None:
    """Initial value of every variable, consistent with the hint."""
    st = model.structure
    ranks = hint_order(st, hint)
    for p, var in model.start.items():
        var.setInitialValue(hint[p])
    for (a, b), y in model.order.items():
        y.setInitialValue(1 if ranks[a] < ranks[b] else 0)
    for k, dev in enumerate(st.device_passes):
        model.first[k].setInitialValue(min(hint[p] for p in dev))
        model.last[k].setInitialValue(max(hint[p] + st.duration[p] for p in dev))
    model.objective.setInitialValue(_hint_objective(st, hint, objective))


# ----- solvers -------------------------------------------------------------------------------

@dataclass(frozen=True)
class SolverOutcome:
    """What a MILP solver run gives back to solve_milp()."""

    status: str  # optimal, feasible, infeasible, unknown (as the solver itself proved it)
    has_solution: bool
    bound: Optional[float]
    message: str = ""


# run(model, time_limit, threads, warm, workdir) -> SolverOutcome
Runner = Callable[["Model", float, int, bool, str], SolverOutcome]


# ----- entry point ---------------------------------------------------------------------------

def solve_milp(request: BackendRequest, run: Runner, name: str) -> BackendResult:
    """Solve the request's instance (integer costs) with the MILP on one solver (`run`).

    The horizon must be at least the objective of some schedule that fits the cap (the warm
    start's, or default_horizon()): the model searches objective <= horizon only, so
    "infeasible" means no schedule under the cap within the horizon. The result's `orders`
    hold each device's passes in the solved order (ties of zero-length passes resolved).
    `request.options["bound_cuts"]` (default on) adds zbopt.bounds' per-device and global
    lower bounds as constraints; turn it off to check the formulation on its own.
    """
    instance, objective = request.instance, request.objective
    time_limit, threads, hint = request.time_limit, request.threads, request.hint
    bound_cuts = bool(request.options.get("bound_cuts", True))
    if objective not in OBJECTIVES:
        raise ZboptError(f"unknown objective {objective!r}: use 'span' or 'makespan'")
    if not time_limit or time_limit <= 0:
        raise ZboptError(f"time_limit must be positive, got {time_limit}")
    if threads < 1:
        raise ZboptError(f"threads must be >= 1, got {threads}")
    horizon = default_horizon(instance) if request.horizon is None \
        else int(math.ceil(request.horizon))
    t0 = time.perf_counter()
    deadline = t0 + time_limit  # building the model counts too
    try:
        model = build_model(instance, objective, horizon, request.symmetry, bound_cuts,
                            request.lower, deadline=deadline)
    except _CapTooSmall as err:
        return BackendResult("infeasible", None, None, None,
                             f"no schedule fits the memory cap ({err}): raise the cap",
                             stats={"horizon": horizon, "presolve": True})
    except _OutOfTime:
        seconds = time.perf_counter() - t0
        said = "was stopped on request, unfinished" if signals.finish_requested() else \
            (f"used all the {time_limit:.3g} s left for it, unfinished; raise the time limit "
             f"or use solver 'cpsat'")
        return BackendResult("unknown", None, None, None,
                             f"{name}: building the MILP ({instance.num_passes:,} passes) "
                             f"{said}",
                             stats={"horizon": horizon, "seconds": round(seconds, 3)})
    notes = []
    warm = False
    if hint is not None:
        problem = hint_problem(instance, model.structure, hint, horizon, objective)
        if problem:
            notes.append(f"warm start not used: {problem}")
        else:
            set_warm_start(model, hint, objective)
            warm = True
    with tempfile.TemporaryDirectory(prefix="zbopt-milp-") as workdir:
        try:
            outcome = run(model, seconds_left(deadline), threads, warm, workdir)
        except pulp.PulpSolverError as err:  # the solver crashed or wrote no solution
            outcome = SolverOutcome("unknown", False, None, f"{name} failed: {err}")
    notes.insert(0, outcome.message)
    stats = {"horizon": horizon, "variables": len(model.problem.variables()),
             "binaries": len(model.order), "constraints": model.problem.numConstraints(),
             "warm_start": warm, "bound_cuts": bound_cuts, "memory_orders":
             model.structure.memory_orders, "solver_status": outcome.status,
             "seconds": round(time.perf_counter() - t0, 3)}
    if outcome.status == "infeasible":
        return BackendResult("infeasible", None, None, None,
                             "; ".join(notes + [f"no schedule fits the memory cap with "
                                                f"{objective} <= {horizon}"]), stats=stats)
    if not outcome.has_solution:
        return BackendResult("unknown", None, None, _ceil(outcome.bound), "; ".join(notes),
                             stats=stats)
    starts = {p: int(math.floor(v.varValue + _EPS)) for p, v in model.start.items()}
    value = int(round(model.objective.varValue))
    bound = _ceil(outcome.bound)
    status = outcome.status
    if status == "optimal" and bound is None:
        bound = value  # CBC prints no bound when it proves optimality
    if bound is not None and bound > value:
        bound = value  # the solver's bound cannot exceed its own incumbent
    if status == "optimal" and bound < value:
        # the solver stopped within its gap tolerance without proving optimality
        status = "feasible"
    return BackendResult(status, starts, value, bound, "; ".join(notes),
                         orders=solved_orders(model, starts), stats=stats)


def _ceil(bound: Optional[float]) -> Optional[int]:
    """The optimum is an integer (integer data), so any bound rounds up."""
    return None if bound is None else int(math.ceil(bound - _EPS))


def solved_orders(model: Model, starts: dict[Pass, int]) -> tuple[tuple[Pass, ...], ...]:
    """Each device's passes by start; ties by how many passes the binaries put before."""
    out = []
    for dev in model.structure.device_passes:
        before = {p: 0 for p in dev}
        for i, a in enumerate(dev):
            for b in dev[i + 1:]:
                x = _before(model, a, b)
                a_first = x if isinstance(x, int) else round(pulp.value(x)) == 1
                before[b if a_first else a] += 1
        out.append(tuple(sorted(dev, key=lambda p: (starts[p], before[p]))))
    return tuple(out)
