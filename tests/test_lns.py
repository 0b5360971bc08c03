"""cpsat-lns: neighbourhoods around an incumbent give valid schedules, never worse, within time."""

import pytest

from zbopt.heuristics.list_scheduler import sequential_schedule
from zbopt.instance import Instance
from zbopt.schedule import evaluate, validate
from zbopt.solvers import solve
from zbopt.solvers.api import _hint_starts, _schedule_from_starts, run_backend, scaled_instance
from zbopt.solvers.lns import respects_symmetry

INSTANCE = Instance(devices=3, microbatches=6, t_f=5, t_b=6, t_w=4, comm=1, m_b=2, m_w=1,
                    memory_cap="1p")


def _sequential_hint(instance):
    scaled, scale, _ = scaled_instance(instance)
    timeline = evaluate(instance, sequential_schedule(instance))
    starts, again = _hint_starts(scaled, timeline)
    return scaled, scale, starts, int(round(again.span))


def test_neighbourhoods_alone_improve_a_poor_incumbent_into_a_valid_schedule():
    # no full model (full_share 0): every gain comes from the neighbourhoods
    scaled, scale, hint, value = _sequential_hint(INSTANCE)
    raw = run_backend("cpsat-lns", scaled, objective="span", time_limit=8, threads=2, hint=hint,
                      horizon=value, options={"full_share": 0, "seed": 1})
    assert raw.stats["neighbourhoods"] >= 1 and raw.stats["improved"] >= 1
    assert raw.objective < value
    assert raw.bound is None and raw.status == "feasible"  # nothing proven without the model
    schedule = _schedule_from_starts(INSTANCE, scaled, raw.starts, "span", scale, "lns")
    assert validate(INSTANCE, schedule) == []
    assert evaluate(INSTANCE, schedule).span == pytest.approx(raw.objective / scale)


def test_solve_with_lns_never_reports_worse_than_the_warm_start():
    instance = Instance(devices=4, microbatches=8, t_f=5, t_b=6, t_w=4, comm=1, m_b=2, m_w=1,
                        memory_cap="1.5p")
    seen = []
    result = solve(instance, solver="cpsat-lns", time_limit=6, prove_with_bounds=False,
                   progress=seen.append)
    assert result.objective <= result.best_heuristic_objective
    assert validate(instance, result.schedule) == []
    assert (result.status == "optimal") == (result.objective == result.lower_bound)
    assert {"bounds", "warm start", "done"} <= {x["phase"] for x in seen}


def test_symmetry_is_recognised_from_the_starts():
    scaled, _, hint, _ = _sequential_hint(INSTANCE)
    cost = {q: int(scaled.cost(q[0], q[2])) for q in scaled.passes()}
    assert respects_symmetry(scaled, hint, cost)
    swapped = dict(hint)
    swapped[(0, 0, "F")], swapped[(0, 1, "F")] = hint[(0, 1, "F")], hint[(0, 0, "F")]
    assert not respects_symmetry(scaled, swapped, cost)
