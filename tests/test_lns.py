"""cpsat-lns: neighbourhoods around an incumbent give valid schedules, never worse, within time."""

import pytest

from zbopt.heuristics.list_scheduler import sequential_schedule
from zbopt.instance import Instance
from zbopt.schedule import evaluate, validate
from zbopt.solvers import solve
from zbopt.solvers.api import _hint_starts, _schedule_from_starts, run_backend, scaled_instance
from zbopt.solvers.lns import SWEEP, respects_symmetry

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


def test_the_sweep_from_the_tail_comes_first_and_improves_a_poor_incumbent():
    scaled, _, hint, value = _sequential_hint(INSTANCE)
    raw = run_backend("cpsat-lns", scaled, objective="span", time_limit=6, threads=2, hint=hint,
                      horizon=value, options={"full_share": 0, "seed": 2})
    # from a sequential schedule the tail gains; after a whole sweep without a gain (every
    # window is solved to optimality quickly on 54 passes) the random neighbourhoods follow
    assert raw.stats["sweep"] >= len(SWEEP) + 1 and raw.stats["sweep_improved"] >= 1
    assert raw.stats["neighbourhoods"] > raw.stats["sweep"]
    assert raw.objective < value


def test_the_subsolvers_kept_are_cp_sat_s_own():
    # a name CP-SAT does not know would leave a sub-model without a solver (UNKNOWN)
    from ortools.sat.python import cp_model

    from zbopt.solvers.lns import SUBSOLVERS

    model = cp_model.CpModel()
    x = model.new_interval_var(model.new_int_var(0, 9, ""), 2, model.new_int_var(0, 11, ""), "")
    y = model.new_interval_var(model.new_int_var(0, 9, ""), 3, model.new_int_var(0, 12, ""), "")
    model.add_no_overlap([x, y])
    model.minimize(x.end_expr() + y.end_expr())
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 2
    solver.parameters.filter_subsolvers.extend(SUBSOLVERS)
    solver.parameters.log_search_progress = True
    solver.parameters.log_to_stdout = False
    lines = []
    solver.log_callback = lines.append
    assert solver.status_name(solver.solve(model)) == "OPTIMAL"
    ignored = " ".join(line for line in lines if "ignored subsolvers" in line)
    used = " ".join(line for line in lines if "subsolver" in line and line not in ignored)
    assert all(name in used and name not in ignored for name in SUBSOLVERS)


def test_the_sweep_windows_start_at_the_tail_and_move_back():
    from zbopt.solvers.lns import _State, _sweep_window

    scaled, _, hint, value = _sequential_hint(INSTANCE)
    cost = {q: int(scaled.cost(q[0], q[2])) for q in scaled.passes()}
    state = _State(dict(hint), value, None)
    first, end = min(hint.values()), max(hint[q] + cost[q] for q in hint)
    befores = []
    for at, (low, high) in enumerate(SWEEP):
        chosen, before = _sweep_window(state, cost, at)
        assert chosen and before == int(first + low * (end - first))
        assert all(before <= hint[q] < first + high * (end - first) for q in chosen)
        befores.append(before)
    last = max(hint, key=hint.get)
    assert last in _sweep_window(state, cost, 0)[0]  # the first window is the tail
    assert befores == sorted(befores, reverse=True)


def test_a_pinned_window_keeps_the_passes_before_it_where_they_were():
    from zbopt.solvers.backends.cpsat import build_parts
    from zbopt.solvers.lns import _pin, _solve, _State, _window
    from zbopt.solvers.orders import device_orders

    scaled, _, hint, value = _sequential_hint(INSTANCE)
    cost = {q: int(scaled.cost(q[0], q[2])) for q in scaled.passes()}
    state = _State(dict(hint), value, None)
    first, end = min(hint.values()), max(hint[q] + cost[q] for q in hint)
    before = (first + end) // 2
    chosen = _window(state, before, float("inf"))
    kept = [q for q in hint if q not in chosen and hint[q] + cost[q] <= before]
    assert chosen and kept
    sub = build_parts(scaled, "span", None, True, value, device_orders(scaled, scaled, hint),
                      chosen)
    _pin(sub, state, cost, chosen, before)
    solver, code = _solve(sub, sub.model, scaled, "span", hint, 5, 2, 0)
    assert solver.status_name(code) in ("OPTIMAL", "FEASIBLE")
    starts = {q: solver.value(e) for q, e in sub.start.items()}
    assert all(starts[q] == hint[q] for q in kept)
    assert solver.objective_value < value  # the free tail still gains
    # moving a kept pass is impossible with the pin and possible without it
    last = max(kept, key=lambda q: hint[q])
    for pinned in (True, False):
        sub = build_parts(scaled, "span", None, True, value,
                          device_orders(scaled, scaled, hint), chosen)
        if pinned:
            _pin(sub, state, cost, chosen, before)
        sub.model.add(sub.start[last] != hint[last])
        solver, code = _solve(sub, sub.model, scaled, "span", hint, 5, 2, 0)
        assert (solver.status_name(code) == "INFEASIBLE") == pinned


def test_precede_holds_the_search_to_the_order_asked_and_claims_no_bound():
    # F(0, 1) after W(0, 0): the sequential hint keeps it, any pipelined schedule breaks it
    scaled, _, hint, value = _sequential_hint(INSTANCE)
    first, second = (0, 0, "W"), (0, 1, "F")
    free = run_backend("cpsat-lns", scaled, objective="span", time_limit=4, threads=2,
                       hint=hint, horizon=value, options={"seed": 1})
    held = run_backend("cpsat-lns", scaled, objective="span", time_limit=4, threads=2,
                       hint=hint, horizon=value, options={"seed": 1, "precede": [(first, second)]})
    assert free.starts[second] < free.starts[first]
    assert held.starts[second] >= held.starts[first]
    assert held.objective > free.objective
    # the held problem's bound is not the instance's: none is reported, nothing is "optimal"
    assert held.bound is None and held.status == "feasible"


@pytest.mark.parametrize("pairs,hinted,message", [
    ([((0, 0, "W"), (0, 9, "F"))], True, "not a pass"),
    ([((0, 1, "F"), (0, 0, "W"))], True, "keeps the order"),
    ([((0, 0, "W"), (0, 1, "F"))], False, "pass one"),
])
def test_precede_rejects_unknown_passes_a_hint_against_it_and_no_hint(pairs, hinted, message):
    scaled, _, hint, value = _sequential_hint(INSTANCE)
    with pytest.raises(ValueError, match=message):
        run_backend("cpsat-lns", scaled, objective="span", time_limit=1, threads=1,
                    hint=hint if hinted else None, horizon=value if hinted else None,
                    options={"precede": pairs})


def test_a_sweep_given_as_an_option_is_the_one_swept():
    from zbopt.solvers.lns import _State, _sweep_window

    scaled, _, hint, value = _sequential_hint(INSTANCE)
    cost = {q: int(scaled.cost(q[0], q[2])) for q in scaled.passes()}
    state = _State(dict(hint), value, None)
    first, end = min(hint.values()), max(hint[q] + cost[q] for q in hint)
    chosen, before = _sweep_window(state, cost, 0, ((0.0, 0.3),))
    assert before == first and chosen
    assert all(hint[q] < first + 0.3 * (end - first) for q in chosen)
    assert min(hint, key=hint.get) in chosen and max(hint, key=hint.get) not in chosen
    raw = run_backend("cpsat-lns", scaled, objective="span", time_limit=3, threads=2, hint=hint,
                      horizon=value, options={"full_share": 0, "sweep": [(0.0, 0.3)],
                                              "sweep_seconds": 1.0})
    assert raw.stats["sweep"] >= 1 and raw.objective <= value


@pytest.mark.parametrize("options,message", [
    ({"sweep": [(0.5, 0.2)]}, "sweep"), ({"sweep": []}, "sweep"),
    ({"sweep_seconds": 0}, "sweep_seconds"),
])
def test_bad_sweep_options_are_refused(options, message):
    scaled, _, hint, value = _sequential_hint(INSTANCE)
    with pytest.raises(ValueError, match=message):
        run_backend("cpsat-lns", scaled, objective="span", time_limit=1, threads=1, hint=hint,
                    horizon=value, options=options)
