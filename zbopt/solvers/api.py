"""solve(): one entry point for every exact solver, judged by the one evaluator.

Steps: validate the arguments; check the cap admits any schedule (else status "infeasible"
naming the smallest cap); scale costs to integers by a power of ten (reported as `scale`);
warm-start from the best registered family or heuristic that fits the cap (or, if none does,
one micro-batch at a time); stop early when that schedule already meets the lower bound; run
the backend with the warm start as a complete hint; turn its start times into per-device orders
(plus each device's first start as `release`, which the span objective needs); evaluate() and
validate() them on the original instance; report against the best lower bound.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from fractions import Fraction
from typing import Callable, Optional

from .. import bounds
from ..compare import best_schedule
from ..dag import Pass, dependencies, lag
from ..errors import ZboptError
from ..instance import Instance
from ..schedule import Schedule, Timeline, evaluate, validate
from .backend import BackendResult
from .result import SolveResult

SOLVERS = ("cpsat", "cbc", "highs")
OBJECTIVES = ("span", "makespan")
MAX_SCALE = 10 ** 6


# ----- arguments and scaling ----------------------------------------------------------------

def _check_arguments(solver: str, objective: str, time_limit: float, threads: int) -> None:
    if solver not in SOLVERS:
        raise ZboptError(f"unknown solver {solver!r}: use one of {', '.join(SOLVERS)}")
    if objective not in OBJECTIVES:
        raise ZboptError(f"unknown objective {objective!r}: use 'span' or 'makespan'")
    if not isinstance(time_limit, (int, float)) or not math.isfinite(time_limit) \
            or time_limit <= 0:
        raise ZboptError(f"time limit must be a positive number of seconds, got {time_limit!r}")
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ZboptError(f"threads must be a positive integer, got {threads!r}")


def _is_integral(x: float) -> bool:
    return abs(x - round(x)) <= 1e-9 * max(1.0, abs(x))


def power_of_ten_scale(values, what: str, limit: int = MAX_SCALE) -> int:
    """Smallest power of ten (<= limit) that makes every value an integer, else ZboptError."""
    values = list(values)
    scale = 1
    while scale <= limit:
        if all(_is_integral(x * scale) for x in values):
            return scale
        scale *= 10
    bad = next(x for x in values if not _is_integral(x * limit))
    raise ZboptError(f"{what} {bad!r} has more than {len(str(limit)) - 1} decimals: exact solvers "
                     f"need costs that become integers when multiplied by a power of ten up to "
                     f"{limit:g}; round the instance's values")


def scaled_instance(instance: Instance) -> tuple[Instance, int, int]:
    """(integer instance, time scale, memory scale).

    Times are multiplied by the time scale. Memory is multiplied by its own scale and the cap
    rounded down, which is exact: memory levels are then integers.
    """
    time_scale = power_of_ten_scale(
        [*instance.t_f, *instance.t_b, *instance.t_w, instance.comm], "the cost")
    memory_scale = power_of_ten_scale(
        [*instance.m_b, *instance.m_w, *instance.static_memory], "the memory value")

    def times(values):
        return tuple(int(round(x * time_scale)) for x in values)

    def memory(values):
        return tuple(int(round(x * memory_scale)) for x in values)

    cap = None
    if instance.cap is not None:
        cap = tuple(math.floor(Fraction(c) * memory_scale + Fraction(1, 10 ** 9))
                    for c in instance.cap)
    scaled = replace(instance, t_f=times(instance.t_f), t_b=times(instance.t_b),
                     t_w=times(instance.t_w), comm=int(round(instance.comm * time_scale)),
                     m_b=memory(instance.m_b), m_w=memory(instance.m_w),
                     static_memory=memory(instance.static_memory), memory_cap=cap)
    return scaled, time_scale, memory_scale


# ----- warm start ---------------------------------------------------------------------------

def sequential_schedule(instance: Instance) -> Schedule:
    """One micro-batch at a time through the whole pipeline, W right after each B.

    It fits any cap that admits a schedule at all (bounds.min_feasible_cap), so every feasible
    instance has a warm start.
    """
    orders: list[list[Pass]] = [[] for _ in range(instance.devices)]
    for stages, mbs in instance.chains:
        for j in mbs:
            for s in stages:
                orders[instance.device_of(s)].append((s, j, "F"))
            for s in reversed(stages):
                orders[instance.device_of(s)] += [(s, j, "B"), (s, j, "W")]
    return Schedule.build(orders, method="sequential")


class Admission:
    """Memory bookkeeping that keeps a pass-by-pass order deadlock-free under the cap.

    A device admits a micro-batch (at its first F there) only if the activations of all its
    stages for it fit beside what the device holds and what its admitted micro-batches will
    still add; admitted micro-batches then never wait for memory. One chain: admit per device
    (the first device on the chain whose admitted micro-batches all wait further down cannot
    exist); two chains (dualpipe) run opposite ways, so a micro-batch reserves every device
    of its chain at entry.
    """

    def __init__(self, instance: Instance):
        self.instance = instance
        p = instance.devices
        self.caps = instance.cap or (math.inf,) * p
        self.footprint: dict[tuple[int, int], float] = {}  # (device, mb) -> what it adds
        for s, j, k in instance.passes():
            if k == "F":
                key = (instance.device_of(s), j)
                self.footprint[key] = self.footprint.get(key, 0) + instance.m_b[s]
        self.level = list(instance.static_memory)
        self.owed = [0.0] * p  # activations admitted micro-batches will still add
        self.admitted: set[tuple[int, int]] = set()
        self.chain_devices = {j: sorted({instance.device_of(s) for s in stages})
                              for stages, mbs in instance.chains for j in mbs}

    def _admit_on(self, d: int, j: int) -> list[int]:
        return [d] if len(self.instance.chains) == 1 else self.chain_devices[j]

    def admitted_on(self, d: int, j: int) -> bool:
        return (d, j) in self.admitted

    def fits(self, q: Pass) -> bool:
        """Whether pass q may run now as far as memory goes (only a new F can be refused)."""
        s, j, k = q
        d = self.instance.device_of(s)
        if k != "F" or (d, j) in self.admitted:
            return True
        return all(self.level[e] + self.owed[e] + self.footprint[(e, j)] <= self.caps[e] + 1e-9
                   for e in self._admit_on(d, j))

    def run(self, q: Pass) -> None:
        """Account for pass q running (admitting its micro-batch if it is a new F)."""
        s, j, k = q
        inst = self.instance
        d = inst.device_of(s)
        if k == "F":
            if (d, j) not in self.admitted:
                for e in self._admit_on(d, j):
                    self.admitted.add((e, j))
                    self.owed[e] += self.footprint[(e, j)]
            self.owed[d] -= inst.m_b[s]
            self.level[d] += inst.m_b[s]
        elif k == "B":
            self.level[d] -= inst.m_b[s] - inst.m_w[s]
        else:
            self.level[d] -= inst.m_w[s]


def list_schedule(instance: Instance, new_before_w: bool = True) -> Schedule:
    """A memory-safe greedy for any placement, a fallback warm start where no family fits.

    Every device, whenever free, runs a ready B, else the next F of a micro-batch it already
    admitted, else (in the order `new_before_w` picks) a pending W or the F that admits a new
    micro-batch. A device admits a micro-batch (at its first stage there) only if the
    activations of all its stages for it fit beside what it holds and what its admitted
    micro-batches will still add, so admitted micro-batches never wait for memory and the
    order cannot deadlock. The order is then judged by evaluate() like any other.
    """
    p = instance.devices
    memory = Admission(instance)
    end: dict[Pass, float] = {}
    free_at = [0.0] * p
    nxt = {(s, k): 0 for s in range(instance.num_stages) for k in "FBW"}
    orders: list[list[Pass]] = [[] for _ in range(p)]
    total = instance.num_passes

    def candidates(d):
        out = []
        for s in instance.stages_of(d):
            mbs = instance.microbatches_of(s)
            for k in "BFW":
                i = nxt[(s, k)]
                if i >= len(mbs):
                    continue
                q = (s, mbs[i], k)
                deps = dependencies(instance, q)
                if any(a not in end for a in deps):
                    continue
                ready = max([end[a] + lag(instance, a, q) for a in deps], default=0.0)
                if k == "B":
                    rank = 0
                elif k == "F" and memory.admitted_on(d, q[1]):
                    rank = 1
                elif k == "F":
                    if not memory.fits(q):
                        continue
                    rank = 2 if new_before_w else 3
                else:
                    rank = 3 if new_before_w else 2
                out.append((ready, rank, -s, q))
        return out

    while sum(len(o) for o in orders) < total:
        best = None
        for d in range(p):
            cands = candidates(d)
            if not cands:
                continue
            now = [c for c in cands if c[0] <= free_at[d]]
            ready, rank, _, q = min(now, key=lambda c: c[1:]) if now else min(cands)
            start = max(free_at[d], ready)
            if best is None or (start, rank) < best[:2]:
                best = (start, rank, d, q)
        if best is None:
            raise ZboptError("the fallback list scheduler is stuck (internal error)")
        start, _, d, q = best
        s, _, k = q
        memory.run(q)
        end[q] = start + instance.cost(s, k)
        free_at[d] = end[q]
        nxt[(s, k)] += 1
        orders[d].append(q)
    return Schedule.build(orders, method="list" + ("" if new_before_w else "-w-first"))


def single_passes(schedule: Schedule) -> Schedule:
    """The same orders with every block split into its passes (solvers schedule single passes).

    Memory levels after each item do not rise: a block adds at its start and releases at its
    end, which the split passes do no later.
    """
    orders = [[(q,) for item in order for q in item] for order in schedule.orders]
    return Schedule(tuple(tuple(o) for o in orders), schedule.method, schedule.release)


def _warm_start(instance: Instance, objective: str):
    """(best registered method or None, its objective or None, best schedule known, and the
    best single-pass schedule for the hint); the last two are timelines that fit the cap."""
    candidates = []
    row = best_schedule(instance, objective)
    if row is not None:
        candidates.append(row.timeline)
    fallbacks = (lambda: sequential_schedule(instance), lambda: list_schedule(instance, True),
                 lambda: list_schedule(instance, False))
    for make in fallbacks:
        try:
            timeline = evaluate(instance, make())
        except ZboptError:  # a fallback that cannot run here is simply not a candidate
            continue
        if timeline.fits_cap:
            candidates.append(timeline)
    hints = []
    for timeline in candidates:
        try:
            flat = evaluate(instance, single_passes(timeline.schedule))
        except ZboptError:  # a split block that cannot run as two passes: not a hint
            continue
        if flat.fits_cap:
            hints.append(flat)
    # With an overlap discount, overlapped blocks can beat any single-pass schedule, which is
    # all the solvers and the lower bounds describe: stay among single-pass schedules then.
    pool = hints if instance.overlap else candidates + hints
    best = min(pool, key=lambda tl: tl.objective(objective))
    hint = min(hints, key=lambda tl: tl.objective(objective))
    name = row.method if row is not None else None
    value = row.timeline.objective(objective) if row is not None else None
    return name, value, best, hint


def _hint_starts(scaled: Instance, timeline: Timeline) -> tuple[dict[Pass, int], Timeline]:
    """Start times of every pass of the warm start in scaled integer time."""
    again = evaluate(scaled, replace(timeline.schedule, release=None))
    return {q: int(round(t)) for q, t in again.start.items()}, again


def _horizon(timeline: Timeline, objective: str, scale: int) -> int:
    """The warm start's objective in scaled time: backends search schedules no worse."""
    return int(round(timeline.objective(objective) * scale))


def backend_inputs(instance: Instance, objective: str = "span"):
    """(integer instance, time scale, hint, horizon) exactly as solve() hands them to a
    backend; for calling a backend directly (tests, benchmarks of one model)."""
    scaled, scale, _ = scaled_instance(instance)
    _, _, _, hint = _warm_start(instance, objective)
    return scaled, scale, _hint_starts(scaled, hint)[0], _horizon(hint, objective, scale)


# ----- the backends -------------------------------------------------------------------------

def _backend(solver: str) -> Callable[..., BackendResult]:
    if solver == "cpsat":
        from .cpsat import solve_cpsat
        return solve_cpsat
    try:
        from .milp import solve_milp
    except ImportError as err:
        raise ZboptError(f"the {solver} backend is not available ({err}): use --solver cpsat") \
            from None

    def run(instance, **kwargs):
        return solve_milp(instance, backend=solver, **kwargs)
    return run


def _schedule_from_starts(instance: Instance, scaled: Instance, starts: dict[Pass, int],
                          objective: str, scale: int, method: str,
                          backend_orders=None) -> Schedule:
    """Per-device orders sorted by start (ties: shorter first, so a zero-length pass that
    shares a start with a longer one runs first; a backend's own orders win), released at
    each device's first start."""
    if backend_orders is not None:
        orders = [list(order) for order in backend_orders]
    else:
        orders = [[] for _ in range(instance.devices)]
        for q in sorted(starts, key=lambda q: (starts[q], starts[q] + scaled.cost(q[0], q[2]),
                                               q)):
            orders[instance.device_of(q[0])].append(q)
    release = None
    if objective == "span":
        release = [min(starts[q] for q in order) / scale if order else 0.0 for order in orders]
    return Schedule.build(orders, method=method, release=release)


def _infeasible(instance: Instance, solver: str, objective: str,
                began: float) -> Optional[SolveResult]:
    """A result with status "infeasible" when the cap is below what any schedule needs."""
    if instance.cap is None:
        return None
    need = bounds.min_feasible_cap(instance)
    short = [d for d in range(instance.devices) if instance.cap[d] < need[d] - 1e-9]
    if not short:
        return None
    d = max(short, key=lambda x: need[x] - instance.cap[x])
    unit = instance.devices * instance.activation_unit
    multiple = f" (= {need[d] / unit:.4g}p)" if unit else ""
    message = (f"memory cap {instance.cap[d]:g} on device {d} admits no schedule: every "
               f"micro-batch holds the activations of all {instance.placement} stages of a "
               f"device at once; raise the cap to at least {need[d]:g}{multiple}")
    return SolveResult(status="infeasible", solver=solver, objective_name=objective,
                       schedule=None, timeline=None, objective=None, lower_bound=None,
                       runtime=time.perf_counter() - began, message=message,
                       extra={"min_feasible_cap": list(need)})


def solve(instance: Instance, solver: str = "cpsat", objective: str = "span",
          time_limit: float = 60, threads: int = 2, warm_start: bool = True,
          symmetry: bool = True, prove_with_bounds: bool = True) -> SolveResult:
    """The best schedule the solver finds within the time limit, with a proven lower bound.

    warm_start: hint the backend with the best known schedule. symmetry: micro-batch order
    per stage and kind. prove_with_bounds: skip the backend when the warm start already
    meets the lower bounds of zbopt.bounds (turn off to make the backend prove it).

    Statuses: "optimal" (objective == lower bound), "feasible" (a valid schedule and its gap),
    "infeasible" (no schedule fits the cap; `message` names the smallest cap that does),
    "unknown" (no schedule found). A returned schedule always passed evaluate() and validate().
    """
    began = time.perf_counter()
    _check_arguments(solver, objective, time_limit, threads)
    if not isinstance(instance, Instance):
        raise ZboptError(f"solve() takes an Instance, got {type(instance).__name__}")
    infeasible = _infeasible(instance, solver, objective, began)
    if infeasible is not None:
        return infeasible
    scaled, scale, memory_scale = scaled_instance(instance)
    bound_name, bound_value = bounds.best_lower_bound(instance, objective)
    # every objective value is an integer in scaled time, so the bound rounds up to one
    bound_scaled = math.ceil(bound_value * scale - 1e-6)
    heuristic_name, heuristic_value, warm, hint = _warm_start(instance, objective)
    hint_starts, hint_tl = _hint_starts(scaled, hint)
    horizon = _horizon(hint, objective, scale)
    if instance.overlap:
        note = (f"overlap {instance.overlap:g} is not modelled: the solver and the bound "
                f"cover schedules of single passes (no overlapped F&B blocks)")
    else:
        note = ""
    extra: dict = {"memory_scale": memory_scale, "bound_name": bound_name,
                   "warm_start": warm.schedule.method,
                   "warm_start_objective": warm.objective(objective)}

    def result(status, timeline, lower_scaled, message="", backend_status=None):
        message = "; ".join(x for x in (message, note) if x)
        objective_value = timeline.objective(objective) if timeline is not None else None
        return SolveResult(
            status=status, solver=solver, objective_name=objective,
            schedule=timeline.schedule if timeline is not None else None, timeline=timeline,
            objective=objective_value,
            lower_bound=lower_scaled / scale if lower_scaled is not None else None,
            runtime=time.perf_counter() - began, scale=scale, message=message,
            best_heuristic=heuristic_name, best_heuristic_objective=heuristic_value,
            extra={**extra, "backend_status": backend_status})

    def status_of(timeline, lower_scaled):
        value = int(round(timeline.objective(objective) * scale))
        return "optimal" if value <= lower_scaled else "feasible"

    if prove_with_bounds and round(warm.objective(objective) * scale) <= bound_scaled:
        # the warm start already meets the lower bound: proven without a search
        return result("optimal", warm, bound_scaled,
                      f"the warm start ({warm.schedule.method}) meets the {bound_name} bound")
    backend = _backend(solver)
    raw = backend(scaled, objective=objective, time_limit=float(time_limit), threads=threads,
                  hint=hint_starts if warm_start else None, symmetry=symmetry, horizon=horizon)
    lower = bound_scaled
    if raw.bound is not None and raw.status != "infeasible":
        lower = max(lower, math.ceil(raw.bound - 1e-6))
    timeline = None
    message = raw.message
    if raw.starts is not None:
        schedule = _schedule_from_starts(instance, scaled, raw.starts, objective, scale,
                                         f"solver-{solver}", raw.extra.get("orders"))
        problems = validate(instance, schedule)
        if problems:
            message = f"the {solver} schedule failed validation ({problems[0]}); " \
                      f"returning the warm start"
        else:
            timeline = evaluate(instance, schedule)
    if timeline is None or timeline.objective(objective) > warm.objective(objective):
        if raw.status == "infeasible":
            message = (f"{solver} reported the model infeasible although the warm start "
                       f"({warm.schedule.method}) is a valid schedule; returning it")
        elif timeline is None and not message:
            message = f"{solver} found no schedule in {time_limit:g} s; returning the warm start"
        timeline = warm
    return result(status_of(timeline, lower), timeline, lower, message, raw.status)
