"""Regression tests for the defects an independent audit found, and tests that fail on each of
the single-line bugs ("mutants") the earlier suite let through."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import pytest

from zbopt import bounds
from zbopt.errors import ZboptError
from zbopt.heuristics import _engine, v_greedy, zb_greedy
from zbopt.instance import Instance
from zbopt.registry import generate, get_method
from zbopt.schedule import Schedule, evaluate, validate
from zbopt.solvers import api
from zbopt.solvers.api import run_backend, scaled_instance, solve
from zbopt.solvers.protocol import BackendResult

BACKENDS = ("cpsat", "cbc", "highs")


# ----- blocks may only hold passes that do not depend on each other ---------------------------

def two_device_blocks(block: str, overlap: float = 0.0) -> tuple[Instance, Schedule]:
    instance = Instance(devices=2, microbatches=1, overlap=overlap)  # stage 1 is the last stage
    return instance, Schedule.build([["0F0", "0B0", "0W0"], [block, "1W0"]])


@pytest.mark.parametrize("block", ["(1F0;1B0)", "(1B0;1F0)"])
def test_a_block_of_dependent_passes_is_refused(block):
    instance, schedule = two_device_blocks(block)
    problems = validate(instance, schedule)
    assert any("1B0 which depends on 1F0" in p for p in problems), problems
    # with overlap the block used to get the F&B discount: now it is not a schedule at all
    overlapped, schedule = two_device_blocks(block, overlap=0.5)
    with pytest.raises(ZboptError, match="depend"):
        evaluate(overlapped, schedule)


def test_a_fused_backward_of_one_pass_is_still_a_block():
    instance = Instance(devices=2, microbatches=1)
    schedule = Schedule.build([["0F0", "0B0", "0W0"], ["1F0", "(1B0;1W0)"]])
    assert validate(instance, schedule) == []
    # the reverse (W before its own B) is a dependency inside a block
    reverse = Schedule.build([["0F0", "0B0", "0W0"], ["1F0", "(1W0;1B0)"]])
    assert any("depends on" in p for p in validate(instance, reverse))


# ----- a cap equal to the need, in floating point ---------------------------------------------

def test_a_cap_equal_to_the_need_is_accepted_in_floating_point():
    instance = Instance(devices=1, microbatches=1, m_b=0.2, m_w=0.1, static_memory=0.1,
                        memory_cap=0.3)
    assert instance.cap == (0.3,)
    timeline = evaluate(instance, generate("1f1b", instance))
    assert timeline.fits_cap and timeline.peak_memory[0] == pytest.approx(0.3)
    with pytest.raises(ZboptError, match="below static memory plus one activation"):
        Instance(devices=1, microbatches=1, m_b=0.2, m_w=0.1, static_memory=0.1,
                 memory_cap=0.299)


# ----- mutants the suite missed -------------------------------------------------------------

def test_a_deadlock_on_a_single_device_is_reported():
    instance = Instance(devices=1, microbatches=1)
    schedule = Schedule.build([["0B0", "0F0", "0W0"]])
    problems = validate(instance, schedule)
    assert len(problems) == 1 and "deadlock" in problems[0] and "device 0" in problems[0]
    with pytest.raises(ZboptError, match="deadlock"):
        evaluate(instance, schedule)


def test_a_fractional_kp_cap_is_not_truncated():
    assert Instance(devices=3, microbatches=3, m_b=1, memory_cap="1.5p").cap == (4.5, 4.5, 4.5)
    assert Instance(devices=3, microbatches=3, m_b=1, memory_cap="2p").cap == (6, 6, 6)


@pytest.mark.parametrize("key", ["t_f", "t_b", "t_w", "m_b", "m_w", "comm", "overlap",
                                 "static_memory", "memory_cap"])
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("as_list", [False, True])
def test_infinite_or_nan_numbers_are_refused(key, bad, as_list):
    if as_list and key in ("comm", "overlap"):
        pytest.skip("a scalar-only key")
    fields = dict(devices=2, microbatches=2, t_f=1, t_b=1, t_w=1, m_b=4, m_w=0, memory_cap=100)
    if key == "m_w" and bad == math.inf:
        fields["m_b"] = math.inf  # so the m_w <= m_b rule is not what refuses it
    fields[key] = [bad, 1] if as_list else bad
    with pytest.raises(ZboptError):
        Instance(**fields)


def _engine_cases():
    contiguous = Instance(devices=8, microbatches=40, t_f=3, t_b=4, t_w=2, comm=1, m_b=3, m_w=1,
                          static_memory=[2, 0, 1, 0, 0, 1, 0, 2])
    for cap in ("1p", "1.3p", "2p"):
        capped = contiguous.with_cap(cap)
        yield "zb", capped, zb_greedy.grid(capped)
        v = capped.with_placement("v")
        yield "v", v, v_greedy.grid(v)


@pytest.mark.parametrize("case", list(_engine_cases()), ids=lambda c: f"{c[0]}-{c[1].cap[0]:g}")
def test_every_greedy_grid_point_keeps_the_cap_when_re_evaluated(case):
    """The engine's own admission is checked by evaluate(), not by its own bookkeeping (a cap
    test that left out the F being admitted went unnoticed before)."""
    _, instance, policies = case
    top = _engine.Topology(instance)
    ran = 0
    for policy in policies:
        outcome = _engine.run(instance, instance.cap, policy, top)
        if outcome is None:
            continue
        ran += 1
        schedule = Schedule.build([[q] for q in order] for order in outcome.orders)
        timeline = evaluate(instance, schedule)
        assert timeline.fits_cap, (policy, timeline.cap_violations[:1])
    assert ran


@pytest.mark.slow
@pytest.mark.parametrize("name,placement", [("zb-greedy", "contiguous"), ("v-greedy", "v")])
def test_greedy_output_on_a_large_instance_fits_its_cap(name, placement):
    # above _search.LARGE passes the greedy returns its best estimate without evaluating it
    instance = Instance(devices=8, microbatches=900, t_f=3, t_b=4, t_w=2, comm=1, m_b=3, m_w=1,
                        memory_cap="1p").with_placement(placement)
    assert instance.num_passes >= 20_000
    timeline = evaluate(instance, generate(name, instance))
    assert timeline.fits_cap
    assert max(timeline.peak_memory) == pytest.approx(instance.cap[0])  # the cap binds


# ----- static memory with a binding cap, in every backend -------------------------------------

STATIC = Instance(devices=3, microbatches=4, t_f=1, t_b=1, t_w=1, m_b=2, m_w=1,
                  static_memory=[4, 2, 0], memory_cap=[7, 7, 7])
# the same problem without static memory: the cap less the static memory on each device
SHIFTED = Instance(devices=3, microbatches=4, t_f=1, t_b=1, t_w=1, m_b=2, m_w=1,
                   memory_cap=[3, 5, 7])


@pytest.mark.parametrize("backend", BACKENDS)
def test_backends_honour_static_memory_under_a_binding_cap(backend):
    # the MILP's bound cuts alone can pin the optimum: check the formulation on its own
    options = {} if backend == "cpsat" else {"bound_cuts": False}
    limits = dict(objective="span", time_limit=60, threads=1, options=options)
    with_static = run_backend(backend, scaled_instance(STATIC)[0], **limits)
    shifted = run_backend(backend, scaled_instance(SHIFTED)[0], **limits)
    free = run_backend(backend, scaled_instance(STATIC.with_cap(None))[0], **limits)
    assert with_static.status == shifted.status == free.status == "optimal"
    assert with_static.objective == shifted.objective > free.objective  # the cap binds
    result = solve(STATIC, solver=backend, time_limit=600, threads=1, prove_with_bounds=False)
    assert result.status == "optimal" and result.backend_status == "optimal", result.message
    assert "failed validation" not in result.message
    assert validate(STATIC, result.schedule) == [] and result.fits_cap
    assert result.objective == with_static.objective


# ----- the status rule: optimal exactly when the objective meets the bound ---------------------

# no family fits this interleaved instance at 1p, so the warm start is far from the bound
FAR = Instance(devices=4, microbatches=8, t_f=[5, 4, 6, 5], t_b=[6, 6, 7, 5], t_w=[4, 3, 4, 4],
               comm=1, m_b=2, m_w=1).with_placement("interleaved").with_cap("1p")


def _fake_backend(margin: int):
    """A backend that returns the warm start and claims a bound `margin` units below it."""
    def backend(request):
        return BackendResult("feasible", dict(request.hint), request.horizon,
                             request.horizon - margin)
    return backend


@pytest.mark.parametrize("margin,status", [(0, "optimal"), (1, "feasible"), (2, "feasible")])
def test_status_is_optimal_exactly_when_the_objective_equals_the_bound(monkeypatch, margin,
                                                                       status):
    method = replace(get_method("cpsat", "solver"), backend=_fake_backend(margin))
    monkeypatch.setattr(api, "get_method", lambda name, kind=None: method)
    result = solve(FAR, solver="cpsat", time_limit=5, prove_with_bounds=False)
    value = result.objective * result.scale
    assert bounds.best_lower_bound(FAR)[1] * result.scale < value - 2  # the fake's bound counts
    assert result.status == status
    assert result.lower_bound * result.scale == pytest.approx(value - margin)
    assert result.gap == pytest.approx(margin / value)


# ----- every bound against proven optima at the cap's edges -----------------------------------

def _edge_grid():
    for placement in ("contiguous", "v"):
        for p, m in ((2, 2), (2, 3), (3, 3))[:3 if placement == "contiguous" else 2]:
            for costs in ((1, 1, 1), (2, 3, 1), (1, 2, 2)):
                base = Instance(devices=p, microbatches=m, t_f=costs[0], t_b=costs[1],
                                t_w=costs[2], comm=1, m_b=2, m_w=1)
                placed = base.with_placement(placement)
                # every forward of a device's stages held at once (the forwards fit exactly),
                # the model's 1p, and the least cap any schedule fits
                exact = [sum(placed.m_b[s] for s in placed.stages_of(d)) * m for d in range(p)]
                yield placed.with_cap(exact)
                yield base.with_cap("1p").with_placement(placement)
                yield placed.with_cap(list(bounds.min_feasible_cap(placed)))


EDGES = list(_edge_grid())


@pytest.mark.slow
@pytest.mark.parametrize("instance", EDGES,
                         ids=lambda i: f"{i.placement}-p{i.devices}-m{i.microbatches}-"
                                       f"{i.t_f[0]}{i.t_b[0]}{i.t_w[0]}-cap{i.cap[0]:g}")
def test_every_bound_is_below_the_proven_optimum_at_the_caps_edges(instance):
    scaled, scale, _ = scaled_instance(instance)
    began = time.perf_counter()
    result = run_backend("cpsat", scaled, objective="span", time_limit=600, threads=1)
    # a generous limit: these prove in well under a second; a slower machine only waits longer
    assert result.status == "optimal", (result.status, time.perf_counter() - began)
    optimum = result.objective / scale
    for name, value in bounds.lower_bounds(instance, "span").items():
        assert value <= optimum + 1e-9, (name, value, optimum)
