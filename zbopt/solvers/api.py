"""solve(): one entry point for every exact solver, judged by the one evaluator.

Steps: validate the arguments; check the cap admits any schedule (else status "infeasible"
naming the smallest cap); scale costs to integers by a power of ten (reported as `scale`);
warm-start from the best registered family or heuristic that fits the cap (or, if none does,
one micro-batch at a time); on interleaved and V instances, tune the greedy's policies per
device and stage for a share of the limit (zbopt.heuristics.policy_search); stop early when the
best schedule already meets the lower bound (where it does not, relaxations may raise the
bound first: one-device on interleaved and V, one-device and collision on contiguous placements
whose cap 1F1B does not fit); run the backend with the warm start as a complete hint; turn its
start times into per-device orders (plus each device's first start as `release`,
which the span objective needs); evaluate() and validate() them on the original instance; report
against the best lower bound.
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import replace
from fractions import Fraction
from typing import Callable, Optional

from .. import bounds, signals
from ..errors import ZboptError
from ..heuristics import policy_search
from ..heuristics.list_scheduler import list_schedule, sequential_schedule, single_passes
from ..instance import MAX_TOTAL_TEXT, Instance, TooLarge, near_whole
from ..passes import Pass, neighbours
from ..registry import get_method, solver_names
from ..result import Result
from ..schedule import Schedule, Timeline, evaluate, structure_problems, validate
from ..sizes import readable
from . import chunk_relaxation
from .orders import device_orders
from .protocol import BackendRequest, BackendResult

OBJECTIVES = ("span", "makespan")
Progress = Callable[[dict], None]
MAX_SCALE = 10 ** 6


# ----- arguments and scaling ----------------------------------------------------------------

def check_time_limit(value) -> float:
    """`value` as seconds (float); ZboptError unless a finite number > 0 (True is no number)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or value <= 0:
        raise ZboptError(f"time limit must be a positive number of seconds, got {value!r}")
    return float(value)


def check_threads(value) -> int:
    """`value` as an int; ZboptError unless a whole number >= 1 (True is no number)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ZboptError(f"threads must be a positive integer, got {value!r}")
    return int(value)


def check_flag(name: str, value) -> bool:
    """ZboptError unless `value` is True or False (numpy's bool too): a string such as "no" is
    not read as one."""
    import numpy  # a dependency of zbopt's
    if not isinstance(value, (bool, numpy.bool_)):
        raise ZboptError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_progress(value, takes: str = "a dict") -> None:
    """ZboptError unless `value` is None or something to call (with `takes`)."""
    if value is not None and not callable(value):
        raise ZboptError(f"progress must be a function taking {takes}, or None; got "
                         f"{type(value).__name__} {value!r}")


def _check_arguments(solver: str, objective: str, time_limit: float, threads: int,
                     known_bound=None) -> None:
    if not isinstance(solver, str):
        raise ZboptError(f"solver must be a name such as 'cpsat', got {type(solver).__name__}: "
                         f"use one of {', '.join(solver_names())}")
    if solver not in solver_names():
        raise ZboptError(f"unknown solver {solver!r}: use one of {', '.join(solver_names())}")
    if objective not in OBJECTIVES:
        raise ZboptError(f"unknown objective {objective!r}: use 'span' or 'makespan'")
    check_time_limit(time_limit)
    check_threads(threads)
    if known_bound is not None and not (
            isinstance(known_bound, tuple) and len(known_bound) == 2
            and isinstance(known_bound[0], str) and not isinstance(known_bound[1], bool)
            and isinstance(known_bound[1], numbers.Real)
            and math.isfinite(known_bound[1]) and known_bound[1] >= 0):
        raise ZboptError(f"known_bound must be a (name, value) pair with a finite value >= 0, "
                         f"got {known_bound!r}")


def power_of_ten_scale(values, what: str, limit: int = MAX_SCALE) -> int:
    """Smallest power of ten (<= limit) that makes every value an integer, else ZboptError."""
    values = list(values)
    scale = 1
    while scale <= limit:
        if all(near_whole(x * scale) for x in values):
            return scale
        scale *= 10
    bad = next(x for x in values if not near_whole(x * limit))
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
    try:
        scaled = replace(instance, t_f=times(instance.t_f), t_b=times(instance.t_b),
                         t_w=times(instance.t_w), comm=int(round(instance.comm * time_scale)),
                         m_b=memory(instance.m_b), m_w=memory(instance.m_w),
                         static_memory=memory(instance.static_memory), memory_cap=cap)
    except TooLarge as err:  # the scaled totals pass Instance's limit (MAX_TOTAL)
        what, scale = ("times", time_scale) if err.kind == "time" else \
            ("memory figures", memory_scale)
        raise ZboptError(f"exact solvers scale the {what} by {scale:g} to make them whole, and "
                         f"that takes their total past zbopt's limit of {MAX_TOTAL_TEXT}: round "
                         f"the {what} to fewer decimals or give them in a larger unit") from None
    return scaled, time_scale, memory_scale


# ----- time budget and warm start ------------------------------------------------------------

# solve() needs about this many passes per second of its time limit for the warm start, the
# model and the checks of the result (benchmarks/bench_time_limits.py); larger problems are
# refused at once rather than overrunning the limit.
PASSES_PER_SECOND = 4_000
# share of the time limit the registered heuristics may use (once one schedule fits)
WARM_SHARE = 0.3
# On these placements the greedy's grid lies furthest from the bound (1-3% on interleaved at 1p,
# p=8): its policies tuned per device and stage (zbopt.heuristics.policy_search) get this share
# of the limit before the backend, and their best becomes the hint. On interleaved p=8, m=32 at
# 1p the search finds its best (1,580,759) about 7 s in and nothing shorter in the next 9 s,
# while cpsat-lns gains about 0.1% every few seconds there: so a share of 0.2 (12 s of 60).
POLICY_PLACEMENTS = ("interleaved", "v")
POLICY_SHARE = 0.2
# on interleaved and V: the one-device relaxation of the device with the highest analytic bound
# (zbopt.solvers.chunk_relaxation) gets at most this share of the limit, when its model is small
RELAX_SHARE = 0.15
RELAX_MAX = 30.0  # seconds, whatever the limit
RELAXED = "device relaxation"  # its bound name
# on contiguous placements with a cap, the one-device relaxations of zbopt.plan.device_bound, the
# window relaxations of zbopt.plan.window_bound and then the collision relaxation of
# zbopt.plan.collision_bound (the bounds `zbopt plan` proves its splits with) share the same time;
# the names of the bounds solve() computes itself
WINDOW = "window relaxation"
COLLISION = "collision relaxation"
FB = "F/B relaxation"  # zbopt.plan.fb_bound: every device, the W passes dropped
RELAXATIONS = (RELAXED, WINDOW, COLLISION, FB)
# climbs in a row without a shorter schedule that end it sooner: a climb takes about a second at
# p=8, m=32 (so the share is used up there, and kicks kept finding shorter schedules), a few
# milliseconds on small instances (which give the time back to the backend)
POLICY_PATIENCE = 12


def check_size(instance: Instance, time_limit: float) -> None:
    """ZboptError when the time limit cannot cover the instance (see PASSES_PER_SECOND)."""
    need = instance.num_passes / PASSES_PER_SECOND
    if need > time_limit:
        raise ZboptError(
            f"{instance.num_passes:,} passes ({instance.devices} devices x "
            f"{instance.microbatches} micro-batches x {instance.num_stages // instance.devices}"
            f" chunk(s) x 3) need a time limit of at least {math.ceil(need)} s: solve() builds "
            f"a warm start and a model and checks the result at about {PASSES_PER_SECOND:,} "
            f"passes per second; raise the time limit or solve a smaller instance")


def _registered_rows(instance: Instance, objective: str, until: float) -> list[Result]:
    """Results of the registered generators on the instance's own placement that fit the cap
    (a solver warm start needs the same passes); heuristics first, and once one fits no new
    generator starts after `until`."""
    from ..registry import methods, run
    names = [name for name, m in methods("schedule").items() if m.placement == instance.placement]
    names.sort(key=lambda name: methods("schedule")[name].kind != "heuristic")
    rows: list[Result] = []
    for name in names:
        if rows and signals.past(until):  # its share is up, or asked to finish now
            break
        row = run(name, instance, objective=objective)
        if row.fits():
            rows.append(row)
    return rows


def _fallbacks(instance: Instance) -> list[Timeline]:
    """One micro-batch at a time (fits every cap that admits a schedule) and the list
    scheduler, those that fit the cap."""
    out = []
    for make in (lambda: sequential_schedule(instance), lambda: list_schedule(instance, True),
                 lambda: list_schedule(instance, False)):
        try:
            timeline = evaluate(instance, make())
        except ZboptError:  # a fallback that cannot run here is simply not a candidate
            continue
        if timeline.fits_cap:
            out.append(timeline)
    return out


def _single_pass_hints(instance: Instance, candidates: list[Timeline],
                       objective: str) -> list[Timeline]:
    hints = []
    for timeline in sorted(candidates, key=lambda tl: tl.objective(objective)):
        if all(len(item) == 1 for order in timeline.schedule.orders for item in order):
            flat = timeline
        else:
            try:
                flat = evaluate(instance, single_passes(timeline.schedule))
            except ZboptError:  # a split block that cannot run as two passes: not a hint
                continue
        if flat.fits_cap:
            hints.append(flat)
            if not instance.overlap:
                break  # sorted: the first single-pass one is the best hint
    return hints


def _warm_start(instance: Instance, objective: str, until: float = math.inf):
    """(best registered method or None, its objective or None, best schedule known, and the
    best single-pass schedule for the hint); the last two are timelines that fit the cap.

    The fallbacks (one micro-batch at a time, the list scheduler) run only when no registered
    generator gives a single-pass schedule within the cap."""
    rows = _registered_rows(instance, objective, until)
    row = min(rows, key=lambda r: r.timeline.objective(objective)) if rows else None
    candidates = [r.timeline for r in rows]
    hints = _single_pass_hints(instance, candidates, objective)
    if not hints:
        extra = _fallbacks(instance)
        candidates += extra
        hints = _single_pass_hints(instance, extra, objective)
    # With an overlap discount, overlapped blocks can beat any single-pass schedule, which is
    # all the solvers and the lower bounds describe: stay among single-pass schedules then.
    hint = min(hints, key=lambda tl: tl.objective(objective))
    best = hint if instance.overlap else min([*candidates, hint],
                                             key=lambda tl: tl.objective(objective))
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


# ----- from the backend's answer to a schedule ------------------------------------------------

def _schedule_from_starts(instance: Instance, scaled: Instance, starts: dict[Pass, int],
                          objective: str, scale: int, method: str,
                          backend_orders=None) -> Schedule:
    """Per-device orders sorted by start (ties: shorter first, so a zero-length pass that
    shares a start with a longer one runs first; passes tied on start and end in a
    topological order; a backend's own orders win), released at each device's first start."""
    if backend_orders is not None:
        orders = [list(order) for order in backend_orders]
    else:
        orders = device_orders(instance, scaled, starts)
    release = None
    if objective == "span":
        release = [min(starts[q] for q in order) / scale if order else 0.0 for order in orders]
    return Schedule.build(orders, method=method, release=release)


def _infeasible(instance: Instance, solver: str, objective: str,
                began: float) -> Optional[Result]:
    """A result with status "infeasible" when the cap is below what any schedule needs."""
    if instance.cap is None:
        return None
    need = bounds.min_feasible_cap(instance)
    short = [d for d in range(instance.devices) if instance.cap[d] < need[d] - 1e-9]
    if not short:
        return None
    d = max(short, key=lambda x: need[x] - instance.cap[x])
    unit = instance.devices * instance.activation_unit
    multiple = f" (= {(need[d] - instance.static_memory[d]) / unit:.4g}p)" if unit else ""
    unit_name = instance.memory_unit
    message = (f"memory cap {readable(instance.cap[d], unit_name)} on device {d} admits no "
               f"schedule: every micro-batch holds the activations of all {instance.placement} "
               f"stages of a device at once; raise the cap to at least "
               f"{readable(need[d], unit_name, at_least=True)}{multiple}")
    return Result(solver, "solver", "infeasible", instance, objective_name=objective,
                  runtime=time.perf_counter() - began, message=message,
                  min_feasible_cap=tuple(need))


def _given_start(instance: Instance, schedule: Schedule, objective: str) -> tuple[Timeline, Timeline]:
    """(the given schedule's timeline, its single-pass form for the hint); ZboptError when it
    is not a valid schedule of the instance within the cap."""
    problems = structure_problems(instance, schedule)
    if problems:
        raise ZboptError(f"the warm start schedule is not a valid schedule of this instance: "
                         f"{problems[0]}; pass a schedule of the same instance (or warm_start=True)")
    try:
        timeline = evaluate(instance, schedule)
    except ZboptError as err:  # a deadlocking order
        raise ZboptError(f"the warm start schedule cannot run: {err}; pass a schedule that "
                         f"can (or warm_start=True)") from None
    if not timeline.fits_cap:
        name = f" ({schedule.method})" if schedule.method else ""
        raise ZboptError(f"the warm start schedule{name} goes over the memory cap: "
                         f"{timeline.cap_violations[0]}; pass one that fits the cap "
                         f"(or warm_start=True)")
    flat = _single_pass_hints(instance, [timeline], objective)
    return timeline, (flat[0] if flat else timeline)


def solve(instance: Instance, solver: str = "cpsat", objective: str = "span",
          time_limit: float = 60, threads: int = 2, warm_start: bool | Schedule = True,
          symmetry: bool = True, prove_with_bounds: bool = True,
          options: Optional[dict] = None, progress: Optional[Progress] = None,
          known_bound: Optional[tuple[str, float]] = None) -> Result:
    """The best schedule the solver finds within the time limit, with a proven lower bound.

    warm_start: hint the backend with the best known schedule; a Schedule of the instance is
    also a candidate (the hint and the incumbent when it beats the registered methods'; it
    must be valid and fit the cap, else ZboptError). symmetry: micro-batch order
    per stage and kind. prove_with_bounds: skip the backend when the warm start already
    meets the lower bounds of zbopt.bounds (turn off to make the backend prove it).
    options: backend-specific switches (BackendRequest.options).
    known_bound: (name, value), a lower bound the caller proved for this instance and objective
    (zbopt plan passes its split's relaxation bounds): used where it is the highest, and the
    contiguous relaxations are not run again.
    progress: called with a dict at each phase ({"phase": "bounds" (again with the raised
    "bound" when a relaxation raises it: one-device on interleaved and V; one-device and
    collision on contiguous under a cap 1F1B does not fit) | "warm start" |
    "policy search" (interleaved and V only) | "search" | "done", ...}); during the search
    with "incumbent", "bound" and "gap" (instance time units) as they improve, and "elapsed"
    seconds.

    Statuses: "optimal" (objective == lower bound), "feasible" (a valid schedule and its gap),
    "infeasible" (no schedule fits the cap; `message` names the smallest cap that does).
    A returned schedule always passed evaluate() and validate().
    """
    began = time.perf_counter()
    _check_arguments(solver, objective, time_limit, threads, known_bound)
    threads = int(threads)  # a plain int, whatever integer type it came as
    if type(time_limit) not in (int, float):
        time_limit = float(time_limit)  # numpy's numbers as plain ones
    if not isinstance(instance, Instance):
        raise ZboptError(f"solve() takes an Instance, got {type(instance).__name__}")
    if not isinstance(warm_start, (bool, Schedule)):
        raise ZboptError(f"warm_start must be True, False or a Schedule, got {type(warm_start).__name__}")
    symmetry = check_flag("symmetry", symmetry)
    prove_with_bounds = check_flag("prove_with_bounds", prove_with_bounds)
    check_progress(progress)
    if options is not None and not isinstance(options, dict):
        raise ZboptError(f"options must be a dict of backend switches, or None; got "
                         f"{type(options).__name__}")
    params = {"time_limit": time_limit, "threads": threads}
    check_size(instance, time_limit)
    deadline = began + time_limit
    infeasible = _infeasible(instance, solver, objective, began)
    if infeasible is not None:
        return infeasible
    def tell(phase: str, **fields) -> None:
        if progress is not None:
            progress({"phase": phase, "elapsed": time.perf_counter() - began, **fields})

    # a given warm start is checked before anything costly runs
    given = _given_start(instance, warm_start, objective) if isinstance(warm_start, Schedule) else None
    scaled, scale, memory_scale = scaled_instance(instance)
    tell("bounds")
    analytic_name, analytic_value = bounds.best_lower_bound(instance, objective)
    bound_name, bound_value = analytic_name, analytic_value
    # every objective value is an integer in scaled time, so the bound rounds up to one
    bound_scaled = math.ceil(bound_value * scale - 1e-6)
    if known_bound is not None and math.ceil(known_bound[1] * scale - 1e-6) > bound_scaled:
        bound_name, bound_value = known_bound
        bound_scaled = math.ceil(bound_value * scale - 1e-6)
    ignored = ""  # says why a caller's known bound was not used
    tell("warm start", bound=bound_value)
    # what the answer is when the backend finds nothing better: the schedule it was hinted with,
    # or (warm_start=False) the best registered one, which it was not given
    def start(method) -> str:
        return f"the warm start ({method})" if warm_start is not False else \
            f"the best registered schedule ({method}; {solver} was given no warm start)"
    heuristic_name, heuristic_value, warm, hint = _warm_start(
        instance, objective, began + WARM_SHARE * time_limit)
    if given is not None:
        given, given_hint = given
        single = all(len(item) == 1 for order in given_hint.schedule.orders for item in order)
        if single and given_hint.objective(objective) < hint.objective(objective):
            hint = given_hint
        # with an overlap discount the incumbent stays among single-pass schedules (see above)
        candidate = given_hint if instance.overlap else given
        if (single or not instance.overlap) and \
                candidate.objective(objective) < warm.objective(objective):
            warm = candidate
    if known_bound is not None and round(warm.objective(objective) * scale) < \
            math.ceil(known_bound[1] * scale - 1e-6):
        # a schedule below it: the caller's value is no lower bound of this instance
        ignored = (f"known_bound {known_bound[0]!r} = {known_bound[1]:g} is above the "
                   f"{objective} {warm.objective(objective):g} of {warm.schedule.method or 'a schedule'}"
                   f" (not a lower bound of this instance): ignored")
        known_bound = None
        bound_name, bound_value = analytic_name, analytic_value
        bound_scaled = math.ceil(bound_value * scale - 1e-6)
    # asked to finish now (SIGUSR1): no relaxation, policy search or backend after this
    if objective in ("span", "makespan") and round(warm.objective(objective) * scale) > bound_scaled \
            and not signals.finish_requested():
        relax_until = time.perf_counter() + min(RELAX_MAX, RELAX_SHARE * time_limit)
        relaxed = _chunk_bound(instance, scaled, relax_until, threads, hint)
        if relaxed is not None and relaxed > bound_scaled:
            bound_scaled, bound_name = relaxed, RELAXED
            tell("bounds", bound=bound_scaled / scale)
        # (a caller's bound on a contiguous split came from these relaxations already)
        for name, value in () if known_bound is not None else \
                _contiguous_bounds(instance, relax_until, warm.objective(objective)):
            value = math.ceil(value * scale - 1e-6)
            if value > bound_scaled:
                bound_scaled, bound_name = value, name
                tell("bounds", bound=bound_scaled / scale)
    if instance.placement in POLICY_PLACEMENTS and objective == "span" \
            and warm_start is not False and round(hint.span * scale) > bound_scaled \
            and not signals.finish_requested():
        tell("policy search", incumbent=warm.span, bound=bound_value)
        tuned = policy_search.improve(instance, hint.span,
                                      time.perf_counter() + POLICY_SHARE * time_limit,
                                      target=bound_scaled / scale,
                                      patience=POLICY_PATIENCE)
        if tuned is not None:  # shorter than the hint, single passes, within the cap
            hint = tuned
            if tuned.span < warm.span:
                warm = tuned
    checked = time.perf_counter()
    hint_starts, hint_tl = _hint_starts(scaled, hint)
    # turning the backend's answer into a checked schedule costs a few evaluations: keep
    # that much of the limit back
    reserve = 0.2 + 2.5 * (time.perf_counter() - checked)
    horizon = _horizon(hint, objective, scale)
    best = {"incumbent": warm.objective(objective), "bound": bound_scaled / scale}

    def searched(incumbent: Optional[float], bound: Optional[float]) -> None:
        # the backend's numbers are scaled; only improvements are reported
        if incumbent is not None:
            best["incumbent"] = min(best["incumbent"], incumbent / scale)
        if bound is not None:
            best["bound"] = max(best["bound"], math.ceil(bound - 1e-6) / scale)
        value = best["incumbent"]
        tell("search", incumbent=value, bound=best["bound"],
             gap=max(0.0, (value - best["bound"]) / value) if value else None)

    if instance.overlap:
        note = (f"overlap {instance.overlap:g} is not modelled: the solver and the bound "
                f"cover schedules of single passes (no overlapped F&B blocks)")
    else:
        note = ""

    def result(timeline, lower_scaled, message="", backend_status=None, name=bound_name):
        stopped = f"stopped on request after {time.perf_counter() - began:.1f} s" \
            if signals.finish_requested() else ""
        message = "; ".join(x for x in (stopped, message, note, ignored) if x)
        value = int(round(timeline.objective(objective) * scale))
        status = "optimal" if value <= lower_scaled else "feasible"
        tell("done", status=status, incumbent=value / scale, bound=lower_scaled / scale)
        return Result(solver, "solver", status, instance, timeline,
                      lower_bound=lower_scaled / scale, bound_name=name,
                      runtime=time.perf_counter() - began, message=message,
                      objective_name=objective, params=params,
                      best_heuristic=heuristic_name, best_heuristic_objective=heuristic_value,
                      scale=scale, backend_status=backend_status,
                      warm_start=warm.schedule.method if warm_start is not False else None)

    if prove_with_bounds and round(warm.objective(objective) * scale) <= bound_scaled:
        # the warm start already meets the lower bound: proven without a search
        return result(warm, bound_scaled,
                      f"{start(warm.schedule.method)} meets the {bound_name} bound")
    backend = get_method(solver, "solver").backend
    search_time = deadline - reserve - time.perf_counter()
    if signals.finish_requested():
        return result(warm, bound_scaled, f"{solver} did not search; returning "
                      f"{start(warm.schedule.method)}")
    if search_time < 0.1:
        return result(warm, bound_scaled, f"no time left for the {solver} search within the "
                      f"{time_limit:g} s limit (warm start and bounds took it); returning "
                      f"{start(warm.schedule.method)}")
    searched(None, None)
    # the F/B relaxation on one core beside the backend, where it pays (a caller's bound on a
    # contiguous split came from it already: zbopt plan runs it beside its own steps)
    beside = _fb_beside(instance, search_time, threads, warm.objective(objective),
                        bound_scaled / scale) if known_bound is None else None
    try:
        raw = backend(BackendRequest(scaled, objective=objective, time_limit=search_time,
                                     threads=threads,
                                     hint=hint_starts if warm_start is not False else None,
                                     horizon=horizon, symmetry=symmetry,
                                     options=dict(options or {}),
                                     lower=bound_scaled if bound_name in RELAXATIONS
                                     or known_bound is not None else None,
                                     on_progress=searched if progress is not None else None))
    finally:
        relaxed = beside.value() if beside is not None else 0.0  # stopped where it is
    lower = bound_scaled
    relaxed_scaled = math.ceil(relaxed * scale - 1e-6)
    if relaxed > 0 and relaxed_scaled > lower:
        lower, bound_name = relaxed_scaled, FB
    if raw.bound is not None and raw.status != "infeasible":
        backend_bound = math.ceil(raw.bound - 1e-6)
        if backend_bound > lower:
            lower, bound_name = backend_bound, solver
    timeline = None
    message = raw.message
    failed = False  # the backend's schedule failed validation
    if raw.starts is not None:
        schedule = _schedule_from_starts(instance, scaled, raw.starts, objective, scale,
                                         f"solver-{solver}", raw.orders)
        problems = validate(instance, schedule)
        if problems:
            failed = True
            message = f"the {solver} schedule failed validation ({problems[0]}); " \
                      f"returning {start(warm.schedule.method)}"
        else:
            timeline = evaluate(instance, schedule)
    if timeline is None or timeline.objective(objective) > warm.objective(objective):
        if raw.status == "infeasible":
            message = (f"{solver} reported the model infeasible although "
                       f"{start(warm.schedule.method)} is a valid schedule; returning it")
        elif not failed:  # the backend's own words (its status) follow
            known = warm.schedule.method or "the best schedule known"
            said = (f"{solver} returned no schedule within the {time_limit:g} s limit; "
                    f"returning {start(known)}") if raw.starts is None else \
                (f"{solver} found nothing better than {start(known)} within the "
                 f"{time_limit:g} s limit; returning it")
            message = "; ".join(x for x in (said, raw.message) if x)
        timeline = warm
    return result(timeline, lower, message, raw.status, bound_name)


def _chunk_bound(instance: Instance, scaled: Instance, deadline: float, threads: int,
                 hint: Timeline) -> Optional[int]:
    """The best one-device relaxation (zbopt.solvers.chunk_relaxation) found before `deadline`,
    in scaled time units, if the placement has one: where its model is small, that of the
    device whose analytic bound is highest, the hint's start times seeding CP-SAT; beyond
    MAX_PASSES the programme over orders alone on every device, those a probe on fewer
    micro-batches finds fastest first (chunk_relaxation.probe_order), the others by highest
    analytic bound plus tail through device 0 (chunk_relaxation's module doc), each with half
    the time left (at least an even share of it; a probed device at least PROBE_GROWTH times
    its probe's), and then those cut short with what is left (zbopt.plan.device_bound.sweep)."""
    from ..plan.device_bound import sweep
    if not chunk_relaxation.applies(instance) or instance.cap is None or \
            deadline - time.perf_counter() <= 0.1:
        return None
    if chunk_relaxation.device_passes(instance) <= chunk_relaxation.MAX_PASSES:
        device = max(range(instance.devices), key=lambda d: bounds.device_bound(instance, d))
        starts, _ = _hint_starts(scaled, hint)
        value = chunk_relaxation.chunk_relaxation(scaled, device, deadline - time.perf_counter(),
                                                  threads, starts)
    else:
        # the likeliest to be highest first: the analytic bound plus the tail through device 0;
        # then the likeliest to finish soon before the rest (probe_order)
        links = neighbours(scaled)
        order = sorted(range(instance.devices), key=lambda d: -(
            bounds.device_bound(scaled, d) + chunk_relaxation.first_stage_tail(scaled, links, d)))
        order, probed = chunk_relaxation.probe_order(scaled, order, deadline)

        def relax(device: int, seconds: float) -> tuple[float, bool]:
            if device in probed:  # enough for what its probe foretells, where time is left
                wanted = chunk_relaxation.PROBE_GROWTH * probed[device]
                seconds = max(seconds, min(wanted, deadline - time.perf_counter()))
            value = chunk_relaxation.chunk_relaxation(scaled, device, seconds,
                                                      programme_only=True)
            return value, value <= 0

        # where the programme finishes at p = 8, m = 32 on V at a tight cap it takes 1 to 5 s a
        # device, and the first in the order are the likeliest to finish or to be highest:
        # halving the time lets the first two finish, and a probed device gets what its probe
        # foretells
        value, _ = sweep(order, deadline, lambda left, remaining: max(left / remaining, left / 2),
                         relax)
    return math.ceil(value - 1e-6) if value > 0 else None


def _fb_beside(instance: Instance, seconds: float, threads: int, upper: float, bound: float):
    """zbopt.plan.fb_bound's relaxation started in a thread for `seconds` (its Background),
    where fb_bound.runs_beside says it pays; None elsewhere."""
    from ..plan import fb_bound
    if not fb_bound.runs_beside(instance, seconds, threads, upper, bound):
        return None
    return fb_bound.Background(instance, time.perf_counter() + seconds)


def _contiguous_bounds(instance: Instance, deadline: float, upper: float):
    """(name, value) of the relaxation bounds `zbopt plan` proves its contiguous splits with, in
    the instance's time units: the one-device relaxations (half the time left), the window
    relaxations (half the rest), the collision relaxation (the rest) and the F/B relaxation
    (what the collision relaxation left) while the bound is below
    `upper` (the best schedule's objective; all bound the span, and the makespan is at least the
    span). Nothing where they
    do not apply (one stage per device on one chain, a cap, no overlap discount) or where the
    cap holds on every device what 1F1B keeps in flight there (the caps of Zero Bubble's
    settings, 1p and above): there the time goes to the search."""
    # zbopt.plan builds on solve(); its bound modules only on zbopt.bounds and the instance
    from ..plan.collision_bound import collision_bound
    from ..plan.device_bound import relaxation_bound
    from ..plan.fb_bound import fb_bound
    from ..plan.memory_bound import applies, held_counts
    from ..plan.window_bound import window_bound
    if instance.cap is None or not applies(instance) or deadline - time.perf_counter() <= 0.1:
        return
    p, m = instance.devices, instance.microbatches
    if all(k >= min(m, p - d) for d, k in enumerate(held_counts(instance))):
        return  # every device holds what 1F1B keeps in flight there: memory does not set the pace
    now = time.perf_counter()
    value = relaxation_bound(instance, now + (deadline - now) / 2)
    yield RELAXED, value
    if value < upper and not signals.past(deadline - 0.1):
        now = time.perf_counter()
        windowed = window_bound(instance, now + (deadline - now) / 2)
        yield WINDOW, windowed
        value = max(value, windowed)
    if value < upper and not signals.past(deadline - 0.1):
        collided = collision_bound(instance, deadline, upper)
        yield COLLISION, collided
        value = max(value, collided)
    if value < upper and not signals.past(deadline - 0.1):
        # what is left of the share: small splits are proven in milliseconds (solve() runs it
        # again beside the backend where that pays)
        yield FB, fb_bound(instance, deadline)


def run_backend(solver: str, instance: Instance, **request) -> BackendResult:
    """Call one registered backend directly on an integer instance (tests, benchmarks of one
    model): `request` holds the BackendRequest fields (objective, time_limit, threads, hint,
    horizon, symmetry, options)."""
    return get_method(solver, "solver").backend(BackendRequest(instance, **request))
