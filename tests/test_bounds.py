"""Lower bounds (zbopt.bounds): every bound must sit at or below every valid schedule.

They are checked against random valid schedules of random instances (every placement,
per-stage costs and memory, static memory, per-device caps), against every registered family,
and against optima proven by CP-SAT.
"""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zbopt import bounds
from zbopt.compare import compare
from zbopt.dag import dependencies
from zbopt.errors import ZboptError
from zbopt.heuristics.list_scheduler import Admission, sequential_schedule
from zbopt.instance import Instance
from zbopt.schedule import Schedule, evaluate, validate
from zbopt.solvers.api import run_backend, scaled_instance

FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


@st.composite
def instances(draw, placements=("contiguous", "interleaved", "v", "dualpipe"), max_p=4,
              max_m=6, capped=True, uniform=False):
    p = draw(st.integers(1, max_p))
    placement = draw(st.sampled_from(placements))
    chunks = draw(st.integers(2, 3)) if placement == "interleaved" else 0
    m = draw(st.integers(1, max_m))
    if placement == "dualpipe":
        m = 2 * max(1, m // 2)
    stages = p * (chunks or (1 if placement == "contiguous" else 2))

    def per_stage(lo, hi):
        if uniform:
            return draw(st.integers(lo, hi))
        return draw(st.lists(st.integers(lo, hi), min_size=stages, max_size=stages))

    t_f, t_b, t_w = per_stage(1, 6), per_stage(1, 6), per_stage(0, 5)
    m_b = per_stage(1, 4)
    m_w = [draw(st.integers(0, x)) for x in m_b] if not uniform else draw(st.integers(0, m_b))
    static = draw(st.integers(0, 2)) if not uniform else 0
    base = Instance(devices=p, microbatches=m, placement=placement, chunks=chunks,
                    t_f=t_f, t_b=t_b, t_w=t_w, comm=draw(st.integers(0, 2)), m_b=m_b, m_w=m_w,
                    static_memory=static)
    if not capped or not draw(st.booleans() if not uniform else st.just(True)):
        return base
    need = bounds.min_feasible_cap(base)
    extra = draw(st.integers(0, 3 * max(m_b if isinstance(m_b, list) else [m_b])))
    if uniform:
        return base.with_cap(need[0] + extra)
    return base.with_cap([n + extra + draw(st.integers(0, 2)) for n in need])


def random_schedule(instance: Instance, rng: random.Random) -> Schedule:
    """A random valid order: any ready pass on any device, micro-batches admitted on a device
    only when all their activations there fit (on every device of its chain at once when two
    chains run opposite ways, as in dualpipe), so it never deadlocks."""
    p = instance.devices
    memory = Admission(instance)
    done = set()
    remaining = set(instance.passes())
    orders = [[] for _ in range(p)]
    while remaining:
        ready = [q for q in remaining
                 if all(a in done for a in dependencies(instance, q)) and memory.fits(q)]
        q = rng.choice(sorted(ready))
        memory.run(q)
        done.add(q)
        remaining.discard(q)
        orders[instance.device_of(q[0])].append(q)
    release = [rng.randint(0, 20) for _ in range(p)] if rng.random() < 0.3 else None
    return Schedule.build(orders, method="random", release=release)


@FAST
@given(instances(), st.randoms(use_true_random=False))
def test_bounds_never_exceed_a_random_valid_schedule(instance, rng):
    for _ in range(3):
        schedule = random_schedule(instance, rng)
        assert validate(instance, schedule) == []
        timeline = evaluate(instance, schedule)
        for objective in ("span", "makespan"):
            for name, value in bounds.lower_bounds(instance, objective).items():
                assert value <= timeline.objective(objective) + 1e-9, (name, objective)


@FAST
@given(instances())
def test_every_schedule_holds_at_least_the_min_feasible_cap(instance):
    # the smallest cap that admits a schedule: nothing goes below it, sequential reaches it
    need = bounds.min_feasible_cap(instance)
    rng = random.Random(0)
    peaks = evaluate(instance, random_schedule(instance, rng)).peak_memory
    assert all(pk >= n - 1e-9 for pk, n in zip(peaks, need))
    sequential = evaluate(instance, sequential_schedule(instance))
    assert list(sequential.peak_memory) == pytest.approx(list(need))


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(placements=("contiguous",), max_p=5, max_m=10))
def test_bounds_never_exceed_any_family_that_fits(instance):
    for row in compare(instance):
        if not row.applies or not row.timeline.fits_cap:
            continue
        for objective in ("span", "makespan"):
            best = bounds.best_lower_bound(row.instance, objective)[1]
            assert best <= row.timeline.objective(objective) + 1e-9, (row.method, objective)


@FAST
@given(instances(placements=("contiguous",), max_p=8, max_m=16, uniform=True))
def test_ramp_generalisation_reduces_to_the_issue_formula(instance):
    # contiguous, uniform costs, one cap, no static memory: device 0 gives exactly
    # m(T_F+T_B+T_W) + max(0, (p-k)T_F + (p-1)(T_B + 2 comm)), k = min(m, floor(cap/m_b))
    p, m, c = instance.devices, instance.microbatches, instance.comm
    t_f, t_b, t_w, m_b = instance.t_f[0], instance.t_b[0], instance.t_w[0], instance.m_b[0]
    k = min(m, int(instance.cap[0] // m_b))
    formula = m * (t_f + t_b + t_w) + max(0, (p - k) * t_f + (p - 1) * (t_b + 2 * c))
    assert bounds.ramp_formula(instance) == formula
    assert bounds.device_bound(instance, 0, with_drain=False) == pytest.approx(formula)
    assert bounds.lower_bounds(instance)["memory_ramp"] >= formula - 1e-9


def test_ramp_and_drain_is_tight_for_zb_h1_at_1p():
    # ZB-H1 keeps 1F1B's memory; at 1p its device 0 idles exactly in the ramp and the drain
    # windows, so the combined bound meets it (with comm, which the formula alone misses)
    instance = Instance(devices=6, microbatches=18, t_f=5, t_b=6, t_w=4, comm=1, m_b=2, m_w=1,
                        memory_cap="1p")
    rows = {r.method: r for r in compare(instance, ["zb-h1"])}
    span = rows["zb-h1"].timeline.span
    found = bounds.lower_bounds(instance)
    assert found["ramp_and_drain"] == span
    assert found["memory_ramp"] < span


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(max_p=3, max_m=4), st.sampled_from(["span", "makespan"]))
def test_bounds_never_exceed_a_proven_optimum(instance, objective):
    scaled, scale, _ = scaled_instance(instance)
    # not proving the optimum in time (a slow or busy machine) still leaves a schedule that
    # every bound must stay below; the proven-optimum grid lives in tests/test_audit.py
    result = run_backend("cpsat", scaled, objective=objective, time_limit=30, threads=2)
    assert result.status in ("optimal", "feasible")
    for name, value in bounds.lower_bounds(instance, objective).items():
        assert value <= result.objective / scale + 1e-9, name


def test_knapsack_is_exact_when_enumerated_and_an_upper_bound_otherwise():
    rng = random.Random(3)
    for _ in range(200):
        items = [(rng.randint(1, 6), rng.randint(1, 9), rng.randint(0, 4)) for _ in range(3)]
        capacity = rng.randint(0, 20)
        brute = max(
            sum(c * v for c, (_, v, _) in zip(counts, items))
            for counts in _all_counts([n for _, _, n in items])
            if sum(c * w for c, (w, _, _) in zip(counts, items)) <= capacity)
        assert bounds.knapsack_max(items, capacity) == brute
        assert bounds._fractional(items, capacity) >= brute - 1e-9


def _all_counts(limits):
    if not limits:
        yield ()
        return
    for c in range(limits[0] + 1):
        for rest in _all_counts(limits[1:]):
            yield (c,) + rest


def test_unknown_objective_is_a_user_error():
    with pytest.raises(ZboptError, match="objective"):
        bounds.lower_bounds(Instance(devices=2, microbatches=2), "latency")


def test_bounds_of_an_uncapped_instance_are_the_load_and_critical_path():
    instance = Instance(devices=3, microbatches=4, t_f=[1, 2, 3], t_b=2, t_w=1, comm=1)
    found = bounds.lower_bounds(instance, "makespan")
    load = max(bounds.device_loads(instance))
    assert found["ideal"] >= load
    assert found["critical_path"] == 1 + 1 + 2 + 1 + 3 + 2 + 1 + 2 + 1 + 2 + 1  # F0..F2, B2..B0, W0


def test_bottleneck_is_tight_when_micro_batches_are_few():
    # p=8, m=24, cap 2p (Zero Bubble's 1.5B setting): the last device's F and B passes plus
    # the paths to and from it are the whole span of device 0; CP-SAT's proven optimum
    instance = Instance(devices=8, microbatches=24, t_f=18522, t_b=18086, t_w=9337, comm=601,
                        m_b=201216, m_w=73728, memory_cap="2p")
    assert bounds.lower_bounds(instance)["bottleneck"] == 1152599
    assert bounds.best_lower_bound(instance) == ("bottleneck", 1152599)


@pytest.mark.parametrize("placement", ["contiguous", "interleaved", "v", "dualpipe"])
def test_bottleneck_never_exceeds_the_optimum_of_the_milp_without_bound_cuts(placement):
    # the MILP without bound cuts knows nothing of zbopt.bounds: an independent optimum
    for p, m in ((2, 2), (3, 2)):
        instance = Instance(devices=p, microbatches=m, placement=placement, t_f=3, t_b=4, t_w=1,
                            comm=1, m_b=2, m_w=1)
        instance = instance.with_cap([2 * c for c in bounds.min_feasible_cap(instance)])
        scaled, scale, _ = scaled_instance(instance)
        raw = run_backend("highs", scaled, objective="span", time_limit=600, threads=2,
                          options={"bound_cuts": False})
        assert raw.status == "optimal", raw.message
        assert bounds.lower_bounds(instance)["bottleneck"] <= raw.objective / scale + 1e-9
