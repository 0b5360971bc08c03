"""The MILP backend (PuLP with CBC and HiGHS): optima agree with brute force and CP-SAT, the
schedules it returns are valid and evaluate to its objective, statuses are the solver's own."""

import itertools
import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from zbopt import bounds
from zbopt.compare import best_schedule
from zbopt.dag import dependencies, lag
from zbopt.errors import ZboptError
from zbopt.instance import Instance
from zbopt.schedule import Schedule, evaluate, validate
from zbopt.solvers.api import run_backend
from zbopt.solvers.backends.cbc import parse_cbc_log
from zbopt.solvers.milp import default_horizon, structure

BACKENDS = ("cbc", "highs")
ZB_COSTS = dict(t_f=5, t_b=6, t_w=4, comm=1)


def inst(p, m, costs=None, cap=None, **kw):
    return Instance(devices=p, microbatches=m, m_b=2, m_w=1, memory_cap=cap,
                    **(costs or {}), **kw)


def run(instance, backend, objective="span", time_limit=60, **kw):
    kw.setdefault("horizon", default_horizon(instance))
    options = {"bound_cuts": kw.pop("bound_cuts")} if "bound_cuts" in kw else {}
    return run_backend(backend, instance, objective=objective, time_limit=time_limit,
                       threads=1, hint=kw.pop("hint", None), symmetry=kw.pop("symmetry", True),
                       options=options, **kw)


def schedule_of(instance, result, use_orders=True):
    """What solve() does: per-device orders (by start), released at each device's first start."""
    if use_orders:
        orders = [list(o) for o in result.orders]
    else:
        # ties only between zero-length passes and what follows them: shorter first
        orders = [sorted((q for q in result.starts if instance.device_of(q[0]) == d),
                         key=lambda q: (result.starts[q], instance.cost(q[0], q[2])))
                  for d in range(instance.devices)]
    release = [result.starts[o[0]] for o in orders]
    return Schedule.build(orders, method="milp", release=release)


def check_solution(instance, result, objective):
    """The schedule validates, fits the cap and evaluates to the solver's objective."""
    assert result.starts is not None
    for use_orders in (True, False):
        schedule = schedule_of(instance, result, use_orders)
        assert validate(instance, schedule) == []
        timeline = evaluate(instance, schedule)
        assert timeline.fits_cap
        # ASAP timing from the solver's first starts can only be as good or better ...
        assert timeline.objective(objective) <= result.objective
        if result.status == "optimal":  # ... and not better than a proven optimum
            assert timeline.objective(objective) == result.objective
    # the starts themselves satisfy every dependency (comm across devices) and never overlap
    for b in instance.passes():
        for a in dependencies(instance, b):
            assert result.starts[b] >= result.starts[a] + cost(instance, a) + lag(instance, a, b)
    for order in result.orders:
        for a, b in zip(order, order[1:]):
            assert result.starts[b] >= result.starts[a] + cost(instance, a)


def cost(instance, q):
    return instance.cost(q[0], q[2])


# ----- brute force: every per-device order, ASAP timing (optimal for the makespan) -------------

def device_orders(instance, device):
    """Every order of a device's passes that keeps F before B before W of each (stage, mb)."""
    passes = [q for q in instance.passes() if instance.device_of(q[0]) == device]
    rank = {"F": 0, "B": 1, "W": 2}
    for perm in itertools.permutations(passes):
        seen = {}
        ok = True
        for s, j, k in perm:
            if seen.get((s, j), -1) > rank[k]:
                ok = False
                break
            seen[(s, j)] = rank[k]
        if ok:
            yield perm


def brute_force_makespan(instance):
    best = math.inf
    per_device = [list(device_orders(instance, d)) for d in range(instance.devices)]
    for combo in itertools.product(*per_device):
        try:
            timeline = evaluate(instance, Schedule.build(combo))
        except ZboptError:  # deadlock
            continue
        if timeline.fits_cap:
            best = min(best, timeline.makespan)
    return best


@pytest.mark.slow
@pytest.mark.parametrize("costs", [None, ZB_COSTS], ids=["unit", "5-6-4"])
@pytest.mark.parametrize("p,cap", [(2, 2), (2, 4), (2, None), (3, 2), (3, 4)])
def test_makespan_matches_brute_force(costs, p, cap):
    instance = inst(p, 2, costs, cap)
    truth = brute_force_makespan(instance)
    for backend in BACKENDS:
        for symmetry in (True, False):
            result = run(instance, backend, "makespan", symmetry=symmetry, bound_cuts=False)
            assert result.status == "optimal"
            assert result.objective == truth == result.bound
            check_solution(instance, result, "makespan")


# ----- agreement with CP-SAT and between the two MILP solvers ---------------------------------

SMALL = [
    (2, 2, None, "1p"), (2, 4, None, "1p"), (3, 3, None, "1p"), (3, 4, None, "2p"),
    (2, 3, ZB_COSTS, "1p"), (3, 4, ZB_COSTS, "1p"), (3, 4, ZB_COSTS, "2p"), (3, 3, ZB_COSTS, None),
]


@pytest.mark.slow
@pytest.mark.parametrize("p,m,costs,cap", SMALL)
def test_cbc_highs_and_cpsat_agree(p, m, costs, cap):
    instance = inst(p, m, costs, cap)
    for objective in ("span", "makespan"):
        reference = run_backend("cpsat", instance, objective=objective, time_limit=600, threads=2,
                                horizon=default_horizon(instance))
        assert reference.status == "optimal"
        values = set()
        for backend in BACKENDS:
            # formulation alone (no bounds.py cuts), and the default model
            for cuts in (False, True):
                result = run(instance, backend, objective, bound_cuts=cuts)
                assert result.status == "optimal", (backend, cuts, result.message)
                check_solution(instance, result, objective)
                values.add(result.objective)
        assert values == {reference.objective}
        lower = bounds.best_lower_bound(instance, objective)[1]
        assert reference.objective >= lower - 1e-9


@pytest.mark.slow
@pytest.mark.parametrize("p,m,costs,cap,backend", [
    (2, 3, None, "1p", "cbc"), (2, 3, None, "1p", "highs"), (2, 4, None, "2p", "highs"),
    (3, 3, ZB_COSTS, "1p", "highs")])
def test_symmetry_breaking_keeps_the_optimum(p, m, costs, cap, backend):
    instance = inst(p, m, costs, cap)
    on = run(instance, backend, bound_cuts=False)
    off = run(instance, backend, symmetry=False)
    assert on.status == off.status == "optimal"
    assert on.objective == off.objective
    check_solution(instance, off, "span")
    # symmetry fixes orders: strictly fewer binaries to decide
    assert on.stats["binaries"] < off.stats["binaries"]


@pytest.mark.slow
@pytest.mark.parametrize("placement,chunks,m,cap", [("interleaved", 2, 2, "1p"), ("v", 0, 2, "1p"),
                                                    ("dualpipe", 0, 4, "1p"),
                                                    ("interleaved", 2, 3, None)])
def test_other_placements_agree_with_cpsat(placement, chunks, m, cap):
    instance = Instance(devices=2, microbatches=m, placement=placement, chunks=chunks,
                        t_f=2, t_b=3, t_w=1, comm=1, m_b=2, m_w=1, memory_cap=cap)
    reference = run_backend("cpsat", instance, objective="span", time_limit=600, threads=2,
                            horizon=default_horizon(instance))
    assert reference.status == "optimal"
    for backend in BACKENDS:
        result = run(instance, backend, bound_cuts=False)
        assert result.status == "optimal"
        assert result.objective == reference.objective
        check_solution(instance, result, "span")


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(2, 3), m=st.integers(1, 3), t_f=st.integers(1, 4), t_b=st.integers(1, 4),
       t_w=st.integers(0, 3), comm=st.integers(0, 2), cap=st.sampled_from([None, "1p", "2p"]),
       objective=st.sampled_from(["span", "makespan"]),
       placement=st.sampled_from(["contiguous", "contiguous", "interleaved", "v", "dualpipe"]))
# without the bound cuts HiGHS cannot close 30 against the optimum 31 here within a minute (the
# big-M model's relaxation is weak on V): the run with the cuts gives the optimum
@example(p=2, m=3, t_f=1, t_b=2, t_w=2, comm=0, cap="1p", objective="span", placement="v")
def test_optimum_between_bounds_and_every_family(p, m, t_f, t_b, t_w, comm, cap, objective,
                                                 placement):
    if placement == "dualpipe":
        m = 2  # one micro-batch per direction keeps it small
    instance = Instance(devices=p, microbatches=m, placement=placement, t_f=t_f, t_b=t_b,
                        t_w=t_w, comm=comm, m_b=2, m_w=1, memory_cap=cap)
    cut = run(instance, "highs", objective)
    assert cut.status == "optimal"
    check_solution(instance, cut, objective)
    assert cut.objective >= bounds.best_lower_bound(instance, objective)[1] - 1e-9
    # the bound cuts (zbopt.bounds) never cut the optimum off: the model without them finds
    # nothing shorter, and where it proves its optimum, the same one
    result = run(instance, "highs", objective, time_limit=10, bound_cuts=False)
    check_solution(instance, result, objective)
    assert result.objective >= cut.objective
    assert result.bound is None or result.bound <= cut.objective + 1e-9
    if result.status == "optimal":
        assert result.objective == cut.objective
    row = best_schedule(instance, objective)
    if row is not None:
        assert cut.objective <= row.timeline.objective(objective)


# ----- warm start ------------------------------------------------------------------------------

def family_hint(instance, objective="span"):
    row = best_schedule(instance, objective)
    timeline = row.timeline
    return {q: int(t) for q, t in timeline.start.items()}, timeline


@pytest.mark.parametrize("backend", BACKENDS)
def test_warm_start_is_used_and_never_lost(backend):
    instance = inst(3, 4, ZB_COSTS, "1p")
    hint, timeline = family_hint(instance)
    result = run(instance, backend, hint=hint, horizon=int(timeline.span))
    assert result.stats["warm_start"] is True
    assert result.status == "optimal"
    assert result.objective <= timeline.span
    check_solution(instance, result, "span")


def test_hint_breaking_micro_batch_order_is_reported_not_used():
    instance = inst(2, 2, None, None)
    hint, timeline = family_hint(instance)
    swapped = dict(hint)
    for s in range(2):  # swap the forwards of micro-batches 0 and 1 on every stage
        swapped[(s, 0, "F")], swapped[(s, 1, "F")] = hint[(s, 1, "F")], hint[(s, 0, "F")]
    result = run(instance, "highs", hint=swapped, horizon=int(timeline.span))
    assert result.stats["warm_start"] is False
    assert "warm start not used" in result.message
    assert result.status == "optimal"


# ----- statuses: infeasible, time limit -------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_cap_below_one_micro_batch_is_infeasible(backend):
    # interleaved: a micro-batch's forward crosses both chunks of a device before its first B,
    # so the device holds 2 * m_b; a cap of 3 admits no schedule
    instance = Instance(devices=2, microbatches=2, placement="interleaved", chunks=2,
                        m_b=2, m_w=1, memory_cap=3)
    result = run(instance, backend)
    assert result.status == "infeasible"
    assert result.starts is None and "cap" in result.message


@pytest.mark.parametrize("backend", BACKENDS)
def test_solver_proves_infeasibility_below_the_optimum(backend):
    instance = inst(3, 3, ZB_COSTS, "1p")
    best = run(instance, backend, bound_cuts=False)
    assert best.status == "optimal"
    # asking for a schedule strictly better than the optimum: the solver itself must say no
    below = run(instance, backend, horizon=best.objective - 1, bound_cuts=False)
    assert below.status == "infeasible"
    assert below.stats["solver_status"] == "infeasible"


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_time_limit_never_claims_a_false_optimum(backend):
    instance = inst(4, 8, ZB_COSTS, "1p")
    hint, timeline = family_hint(instance)
    # here the ramp-and-drain bound meets the best family: that value is the optimum
    optimum = timeline.span
    assert bounds.best_lower_bound(instance, "span")[1] == optimum
    # without the bound cuts this model needs far more than a second on CBC and HiGHS
    result = run(instance, backend, time_limit=1, hint=hint, horizon=int(timeline.span),
                 bound_cuts=False)
    # never a false "optimal"; and the warm start is a solution, so never "unknown" either
    assert result.status == "feasible"
    assert result.objective <= timeline.span
    assert result.bound is not None and result.bound <= optimum  # a bound, and a true one
    assert result.bound < result.objective  # "feasible" means not proven
    check_solution(instance, result, "span")


# ----- inputs and log parsing ------------------------------------------------------------------

def test_bad_arguments_raise_zbopt_error():
    instance = inst(2, 2)
    with pytest.raises(ZboptError, match="unknown solver"):
        run(instance, "gurobi")
    with pytest.raises(ZboptError, match="objective"):
        run(instance, "cbc", "throughput")
    with pytest.raises(ZboptError, match="integer"):
        run(Instance(devices=2, microbatches=2, t_f=1.5), "cbc", horizon=None)
    with pytest.raises(ZboptError, match="time_limit"):
        run(instance, "cbc", time_limit=0)


def test_cbc_log_parsing_reads_result_and_bound():
    stopped = ("Cbc0010I After 100 nodes, 3 on tree, 12 best solution, best possible 9 (1.0)\n"
               "\nResult - Stopped on time limit\n\nObjective value:  12.00000000\n"
               "Lower bound:                    10.500\nGap:  0.14\n")
    assert parse_cbc_log(stopped) == ("Stopped on time limit", 10.5)
    partial = "Partial search - best objective 12 (best possible 11), took 5 iterations\n"
    assert parse_cbc_log(partial)[1] == 11
    assert parse_cbc_log("Result - Optimal solution found\n\nObjective value: 7\n") == \
        ("Optimal solution found", None)
    assert parse_cbc_log("")[0] == ""


def test_memory_orders_fix_the_one_f_one_b_pattern():
    # cap 1p with m_b = 2 on p = 4: device 0 holds 4 activations, so F(0, j) needs B(0, j - 4)
    instance = inst(4, 6, None, "1p")
    fixed = structure(instance).forced
    assert ((0, 0, "B"), (0, 4, "F")) in fixed
    assert ((0, 1, "B"), (0, 5, "F")) in fixed
    assert ((0, 1, "B"), (0, 4, "F")) not in fixed and ((0, 4, "F"), (0, 1, "B")) not in fixed
    # without a cap nothing ties a backward to a later forward
    assert ((0, 0, "B"), (0, 4, "F")) not in structure(inst(4, 6)).forced


def test_default_horizon_fits_the_sequential_schedule():
    instance = inst(3, 2, ZB_COSTS, "1p")
    horizon = default_horizon(instance)
    orders = [[] for _ in range(3)]
    for j in range(2):
        for s in range(3):
            orders[s].append((s, j, "F"))
        for s in reversed(range(3)):
            orders[s] += [(s, j, "B"), (s, j, "W")]
    timeline = evaluate(instance, Schedule.build(orders))
    assert timeline.fits_cap and timeline.makespan <= horizon and timeline.span <= horizon


def test_no_temporary_files_left(tmp_path, monkeypatch):
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for backend in BACKENDS:
        instance = inst(2, 2, None, "1p")
        hint, timeline = family_hint(instance)
        assert run(instance, backend, hint=hint).status == "optimal"
    assert list(tmp_path.iterdir()) == []


def test_highs_runs_whatever_thread_count_came_before():
    # HiGHS keeps one thread pool per process; a different `threads` must not stop the next run
    instance = inst(2, 2, None, "1p")
    for threads in (1, 2, 1):
        result = run_backend("highs", instance, objective="span", time_limit=600,
                             threads=threads, hint=None, symmetry=True,
                             horizon=default_horizon(instance))
        assert result.status == "optimal", result.message
