"""The collision relaxation of zbopt.plan.collision_bound: its wait rule against brute force, its
bound against CP-SAT optima and valid schedules, and what it adds on a tight Llama split."""

import itertools
import math
import random
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_plan import _partitions, _tight_model, llama_split, solved_where_raised

from zbopt.bounds import best_lower_bound
from zbopt.errors import ZboptError
from zbopt.plan.collision_bound import _pareto, _reach, collision_bound, collision_relaxation, need
from zbopt.plan.memory_bound import held_counts, pipeline_bound
from zbopt.plan.search import schedule_methods
from zbopt.registry import run


def _least_wait(instance, e: int, delta: float, top: int = 14) -> float:
    """Brute force: F(d, j) starts phi(d) after its earliest time, B(d, i) ends beta(d) before
    its latest (B(e, i) ends `delta` after F(e, j) starts), both waits growing along the path;
    the least phi + beta at the last device over waits in half units (the times here are
    integers, `delta` a multiple of 1/2) that keep F(d, j) and B(d, i) apart on every device."""
    p, comm = instance.devices, instance.comm
    free = p - 1 - e
    fwd, bwd = [0.0], [0.0]
    for d in range(e + 1, p):
        fwd.append(fwd[-1] + instance.t_f[d - 1] + comm)
        bwd.append(bwd[-1] + instance.t_b[d - 1] + comm)
    steps = [x / 2 for x in range(2 * top + 1)]
    profiles = [(0, *w) for w in itertools.combinations_with_replacement(steps, free)]
    best = math.inf
    for phi in profiles:
        for beta in profiles:
            if phi[-1] + beta[-1] >= best:
                continue
            clear = True
            for k in range(free + 1):
                d = e + k
                f_start = fwd[k] + phi[k]
                b_end = delta - bwd[k] - beta[k]
                if not (b_end <= f_start or b_end - instance.t_b[d] >= f_start + instance.t_f[d]):
                    clear = False
                    break
            if clear:
                best = phi[-1] + beta[-1]
    return best


def test_need_is_the_least_wait_that_keeps_the_passes_apart():
    rng = random.Random(3)
    checked = positive = 0
    while checked < 6:
        model = _tight_model(rng, 3, 4)
        sizes = next(iter(_partitions(model.num_layers, 3)))
        try:
            instance = model.instance(sizes)
        except ZboptError:
            continue
        for e in (0, 1):
            far = sum(instance.t_f[e:]) + sum(instance.t_b[e:]) + 2 * 3 * instance.comm + 2
            for half in range(-2, int(2 * far) + 1):
                delta = half / 2
                expected = _least_wait(instance, e, delta)
                assert need(instance, e, delta) == expected, (sizes, e, delta)
                positive += 0 < expected < math.inf
        checked += 1
    assert positive >= 10


def _llama_mid_split():
    """8 Llama-3-8B-shaped blocks on p=4, m=8 at the benchmark's mid cap, split (3, 2, 2, 3)."""
    return llama_split(32000, 8, 0.6, (3, 2, 2, 3))


def test_collisions_raise_the_bound_of_a_memory_bound_llama_split():
    """Device 0 holds 3 micro-batches and its round trip sets the pace; the memory-aware bounds
    assume the pipeline runs at that round trip, but the forwards of the next micro-batches and
    the backwards of the held ones collide on devices 1-3, and every collision costs a wait. The
    relaxation lies well above the other bounds and below every registered schedule."""
    instance = _llama_mid_split()
    others = max(pipeline_bound(instance), best_lower_bound(instance)[1])
    value = collision_bound(instance, time.perf_counter() + 30)
    spans = [r.span for r in (run(name, instance) for name in schedule_methods("contiguous"))
             if r.fits()]
    assert value >= 1.05 * others
    assert value <= min(spans)


def test_collision_relaxation_claims_nothing_where_it_does_not_apply():
    instance = _llama_mid_split()
    assert collision_relaxation(instance, instance.devices - 1, 5) == 0.0  # nothing after it
    assert collision_relaxation(instance, 0, 0) == 0.0  # no time


def _programme(instance, e: int) -> float:
    """The relaxation of the module doc written independently as a mixed-integer programme
    (HiGHS, one binary per pair and case, big-M): its optimum plus the paths to device 0."""
    import highspy

    from zbopt.plan.collision_bound import _windows
    from zbopt.plan.memory_bound import release_gaps, round_trips

    p, m = instance.devices, instance.microbatches
    held, trip, gaps = held_counts(instance), round_trips(instance), release_gaps(instance)
    paths, windows = _windows(instance, e)
    big = 2 * m * (trip[0] + sum(instance.t_w)) + trip[e]  # one micro-batch at a time fits
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("mip_rel_gap", 0.0)
    u = [h.addVariable(lb=0.0) for _ in range(m)]
    a = [h.addVariable(lb=0.0) for _ in range(m)]
    b = [h.addVariable(lb=0.0) for _ in range(m)]
    top = h.addVariable(lb=0.0)
    v = [u[j] + a[j] + b[j] + trip[e] for j in range(m)]
    h.addConstr(u[0] == 0)
    for j in range(m):
        h.addConstr(top - v[j] >= 0)
        if j:
            h.addConstr(u[j] - u[j - 1] >= instance.t_f[e])
    for d in range(p):
        for j in range(held[d], m):
            if d <= e:
                h.addConstr(u[j] - v[j - held[d]] >= trip[d] - trip[e] + gaps[d])
            else:
                h.addConstr(u[j] - v[j - held[d]] + a[j] + b[j - held[d]] >= gaps[d] - paths[d - e])
    crossing = {}  # per pair: (binary, device index past e or len(windows) for after)
    for i in range(m):
        for j in range(i + 1, min(m, i + held[e])):
            delta = v[i] - u[j]
            before, after = h.addBinary(), h.addBinary()
            inside = [h.addBinary() for _ in windows]
            h.addConstr(before + after + sum(inside) == 1)
            h.addConstr(delta + big * before <= big)
            h.addConstr(delta - big * after >= trip[e] - big)
            for z, (low, _, path) in zip(inside, windows):
                h.addConstr(delta - big * z >= low - big)
                h.addConstr(a[j] + b[i] - delta - big * z >= -path - big)
            crossing[i, j] = list(zip(inside, range(len(windows)))) + [(after, len(windows))]
    # two pairs sharing a micro-batch, the earlier crossing at a device, the other beyond it
    x = [u[j] + a[j] for j in range(m)]
    clear = [low for low, _, _ in windows] + [trip[e]]
    for (i, j), (i2, j2) in itertools.permutations(crossing, 2):
        for z1, c1 in crossing[i, j][:-1]:
            for z2, c2 in crossing[i2, j2][c1 + 1:]:
                weight = clear[c2] - windows[c1][2]
                if i == i2 and j > j2:  # (i, j) crosses at c1, (i, j2) beyond: j2 < j
                    h.addConstr(x[j] - u[j2] - big * z1 - big * z2 >= weight - 2 * big)
                if j == j2 and i < i2:  # (i, j) crosses at c1, (i2, j) beyond
                    h.addConstr(v[i2] - x[i] - big * z1 - big * z2 >= trip[e] + weight - 2 * big)
    h.minimize(top)
    assert h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    extra = max(trip[d] - trip[e] + instance.t_w[d] for d in range(e + 1))
    return h.getInfo().objective_function_value + extra


def test_the_dynamic_programme_finds_the_programmes_optimum():
    """On tight random splits and the Llama split, for every device the relaxation applies to,
    the dynamic programme's least V is the mixed-integer programme's optimum (within the
    margin it subtracts for its tolerances) where every pair in flight gets its rule, and never
    above it where the farther pairs are dropped (reach below k_e)."""
    rng = random.Random(11)
    cases = [(_llama_mid_split(), e) for e in range(3)]
    while len(cases) < 16:
        model = _tight_model(rng, rng.randint(3, 4), rng.randint(5, 7))
        for sizes in _partitions(model.num_layers, model.devices):
            try:
                instance = model.instance(sizes)
            except ZboptError:
                continue
            held = held_counts(instance)  # few in flight: a fast programme
            cases += [(instance, e) for e in range(instance.devices - 1)
                      if held[e] <= 4 and collision_relaxation(instance, e, 10) > 0]
            break
    exact = raised = 0
    for instance, e in cases:
        value = collision_relaxation(instance, e, 30)
        if value <= 0:
            continue
        optimum = _programme(instance, e)
        assert value <= optimum + 1e-6 * optimum, (instance.name, e, value, optimum)
        if _reach(instance, e) >= min(held_counts(instance)[e], instance.microbatches):
            assert value >= optimum - 1e-4 * optimum, (instance.name, e, value, optimum)
            exact += 1
        raised += value > pipeline_bound(instance) + 1e-6
    assert exact >= 10 and raised >= 2


def test_the_bound_reaches_many_micro_batches_and_stays_below_schedules():
    """m = 40 on the Llama split (the mixed-integer programme stalled from about m = 18): a
    bound above the other bounds, below every registered schedule, and a time limit that
    stops the programme early still gives a bound (of fewer micro-batches) no higher."""
    from dataclasses import replace
    instance = replace(_llama_mid_split(), microbatches=40)
    others = max(pipeline_bound(instance), best_lower_bound(instance)[1])
    value = collision_bound(instance, time.perf_counter() + 60)
    spans = [r.span for r in (run(name, instance) for name in schedule_methods("contiguous"))
             if r.fits()]
    assert others < value <= min(spans)
    assert 0 < collision_relaxation(instance, 0, 0.3) <= value


@pytest.mark.slow  # a few dozen exact solves
def test_collision_bound_is_below_the_optimum():
    """Never above CP-SAT's schedules (most proven optimal) of tight random splits where it lies
    above the other bounds (about one split in 40 here), also when the solver may run
    micro-batches out of order (symmetry off)."""
    found = solved_where_raised(random.Random(7),
                                lambda instance: collision_bound(instance, time.perf_counter() + 20),
                                (3, 4), (4, 6), 8, 60)
    assert len(found) >= 8
    assert sum(result.status == "optimal" for _, result in found) >= 5


@pytest.mark.slow  # dozens of splits scheduled by every heuristic
def test_collision_bound_holds_for_valid_schedules_of_larger_pipelines():
    """p=4..5, m=7..10 under tight caps: no registered schedule within the cap is shorter."""
    rng = random.Random(9)
    compared = splits = 0
    for _ in range(300):
        p = rng.randint(4, 5)
        model = _tight_model(rng, p, rng.randint(7, 10))
        for sizes in _partitions(model.num_layers, p):
            try:
                instance = model.instance(sizes)
            except ZboptError:
                continue
            spans = [r.span for r in (run(name, instance) for name in schedule_methods("contiguous"))
                     if r.fits()]
            if not spans:
                continue
            value = collision_bound(instance, time.perf_counter() + 10, min(spans))
            if value <= 0:
                continue
            assert value <= min(spans) + 1e-6, (sizes, value, min(spans))
            compared += len(spans)
            splits += 1
        if splits >= 15 and compared >= 40:
            break
    assert splits >= 15 and compared >= 40


def test_shared_waits_reach_the_exact_forward_backward_relaxation():
    """32 Llama-3-8B-shaped blocks on p=8 at the plan benchmark's tight cap, split as its plan
    (device 1 holds 3 micro-batches and sets the pace), m = 9 and 12. The F/B relaxation (W
    dropped, F and B in order, one pass at a time per device, the memory rules) solved exactly
    by CP-SAT (benchmarks/bench_steady.window_optimum, costs floored to 1 us) is what the
    collision relaxation relaxes further: the rules between pairs sharing a micro-batch raise the
    programme's least V by about 19,000 us here, up to that exact optimum and not past it (within
    the flooring, under 1 us per pass)."""
    import dataclasses
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bench_plan import LLAMA3_8B, cap_levels, estimated
    from bench_steady import window_optimum

    from zbopt.plan.memory_bound import round_trips

    model = estimated(LLAMA3_8B, 32000, 8, 32)
    split = model.with_settings(memory_cap=cap_levels(model)["tight"]).instance((4, 4, 4, 4, 4, 4, 4, 6))
    e = 1
    for m in (9, 12):
        instance = dataclasses.replace(split, microbatches=m)
        trip = round_trips(instance)
        extra = max(trip[d] - trip[e] + instance.t_w[d] for d in range(e + 1))
        shared = collision_relaxation(instance, e, 30) - extra
        apart = collision_relaxation(instance, e, 30, shared_waits=False) - extra
        proven, exact = window_optimum(instance, e, m - 1, 60, unit=1.0)
        assert proven
        slack = 4 * instance.devices * m  # the flooring: under 1 us per pass on any path
        assert shared > apart + 10_000, (m, shared, apart)
        assert abs(shared - exact) <= slack, (m, shared, exact)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(0, 700), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_pareto_keeps_each_undominated_row_once(cols, count, high, seed):
    """Integer rows (so the tolerance decides nothing): exactly the distinct rows no other row
    is at most in every column; up to three blocks of 256 rows, duplicates included."""
    values = np.random.default_rng(seed).integers(0, high + 1, size=(count, cols)).astype(float)
    kept = _pareto(values)
    distinct = {tuple(r) for r in values.tolist()}
    front = {r for r in distinct
             if not any(o != r and all(a <= b for a, b in zip(o, r)) for o in distinct)}
    as_tuples = [tuple(r) for r in kept.tolist()]
    assert len(as_tuples) == len(set(as_tuples))
    assert set(as_tuples) == front
