"""The ordered model (zbopt.solvers.ordered): the same optimum as the interval model on random
capped pipelines, schedules that evaluate() accepts, and cpsat-lns searching it where it applies."""

from __future__ import annotations

import random

import pytest
from ortools.sat.python import cp_model

from zbopt.instance import Instance
from zbopt.plan.memory_bound import held_counts
from zbopt.schedule import Schedule, evaluate
from zbopt.solvers import ordered
from zbopt.solvers.api import backend_inputs, solve
from zbopt.solvers.backends.cpsat import solve_cpsat
from zbopt.solvers.lns import solve_lns
from zbopt.solvers.orders import device_orders
from zbopt.solvers.protocol import BackendRequest


def _random_instance(rng: random.Random) -> Instance:
    """A capped contiguous instance, whole-number costs and memory, W passes that may be pending
    beside the activations (or not)."""
    p, m = rng.randint(2, 4), rng.randint(3, 6)
    m_b = [rng.randint(2, 4) for _ in range(p)]
    m_w = [rng.randint(0, x) for x in m_b]
    return Instance(devices=p, microbatches=m, t_f=[rng.randint(1, 3) for _ in range(p)],
                    t_b=[rng.randint(1, 4) for _ in range(p)],
                    t_w=[rng.randint(0, 3) for _ in range(p)], comm=rng.randint(0, 1),
                    m_b=m_b, m_w=m_w, static_memory=[rng.randint(0, 3) for _ in range(p)],
                    memory_cap=[rng.randint(b + 3, 3 * b + 3) for b in m_b])


def _ordered_optimum(instance: Instance, objective: str) -> tuple[int, dict]:
    horizon = int(sum(instance.cost(q[0], q[2]) for q in instance.passes())
                  + instance.comm * instance.num_passes)
    parts = ordered.build(instance, objective, horizon)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 20
    solver.parameters.num_workers = 1
    assert solver.solve(parts.model) == cp_model.OPTIMAL
    return int(solver.objective_value), {q: solver.value(v) for q, v in parts.start.items()}


def test_the_ordered_model_has_the_interval_models_optimum():
    """On random capped pipelines, span and makespan, the ordered model's optimum is the
    interval model's (both with micro-batch order), and its schedule, judged by evaluate() with
    the orders its starts give, fits the cap within that value: so its literals neither forbid
    an in-order schedule nor allow one that breaks the cap or runs two passes at once."""
    rng = random.Random(5)
    tight = 0
    for index in range(24):
        instance = _random_instance(rng)
        if not ordered.applies(instance):
            continue
        objective = ("span", "makespan")[index % 2]
        reference = solve_cpsat(BackendRequest(instance, objective, time_limit=20, threads=1))
        if reference.status == "infeasible":
            continue
        assert reference.status == "optimal"
        value, starts = _ordered_optimum(instance, objective)
        assert value == reference.objective
        orders = device_orders(instance, instance, starts)
        timeline = evaluate(instance, Schedule.build(orders, release=[
            min(starts[q] for q in order) for order in orders] if objective == "span" else None))
        assert timeline.fits_cap
        assert timeline.objective(objective) <= value
        tight += any(h < instance.microbatches for h in held_counts(instance))
    assert tight >= 6  # the caps bind on many of them


def test_applies_only_to_capped_contiguous_pipelines():
    base = dict(devices=2, microbatches=4, t_f=1, t_b=1, t_w=1, m_b=2, m_w=1)
    assert ordered.applies(Instance(**base, memory_cap=6))
    assert not ordered.applies(Instance(**base))  # no cap: nothing to gain over the intervals
    assert not ordered.applies(Instance(**{**base, "devices": 2}, placement="v", memory_cap=6))


@pytest.mark.parametrize("objective", ["span", "makespan"])
def test_cpsat_lns_searches_the_ordered_model_where_it_applies(objective):
    """cpsat-lns on a capped contiguous pipeline searches the ordered model first (its stats
    say so) and returns starts whose orders evaluate() accepts, no worse than the hint; on V
    it keeps the interval model. solve() with it gives a schedule that fits."""
    instance = Instance(devices=4, microbatches=8, t_f=[2, 3, 3, 4], t_b=[3, 3, 4, 4],
                        t_w=[2, 2, 3, 3], comm=1, m_b=4, m_w=1, static_memory=[0, 0, 2, 5],
                        memory_cap=14)
    scaled, _, hint, horizon = backend_inputs(instance, objective)
    answer = solve_lns(BackendRequest(scaled, objective, time_limit=4, threads=2, hint=hint,
                                      horizon=horizon))
    assert answer.stats["ordered_model"] is True
    assert answer.status in ("optimal", "feasible") and answer.objective <= horizon
    orders = device_orders(scaled, scaled, answer.starts)
    timeline = evaluate(scaled, Schedule.build(orders, release=[
        min(answer.starts[q] for q in order) for order in orders]))
    assert timeline.fits_cap and timeline.objective(objective) <= answer.objective
    result = solve(instance, solver="cpsat-lns", objective=objective, time_limit=4, threads=2)
    assert result.timeline.fits_cap and result.objective <= horizon
    v = Instance(devices=2, microbatches=4, t_f=1, t_b=1, t_w=1, m_b=2, m_w=1, memory_cap=12,
                 placement="v")
    scaled, _, hint, horizon = backend_inputs(v, "span")
    answer = solve_lns(BackendRequest(scaled, "span", time_limit=2, threads=1, hint=hint,
                                      horizon=horizon))
    assert answer.stats["ordered_model"] is False
