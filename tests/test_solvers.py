"""solve() and the exact backends: agreement, validity, bounds, scaling, statuses, the CLI."""

import json
import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zbopt import bounds
from zbopt.cli import main
from zbopt.compare import compare
from zbopt.errors import ZboptError
from zbopt.heuristics.list_scheduler import list_schedule, sequential_schedule
from zbopt.instance import Instance
from zbopt.registry import solver_names
from zbopt.schedule import evaluate, validate
from zbopt.solvers import solve
from zbopt.solvers.api import (
    _schedule_from_starts,
    backend_inputs,
    power_of_ten_scale,
    run_backend,
    scaled_instance,
)

# every registered backend: the backend-generic tests run once per backend
BACKENDS = solver_names()

SMALL = [
    Instance(devices=2, microbatches=4, t_f=1, t_b=1, t_w=1, m_b=2, m_w=1, memory_cap="1p"),
    Instance(devices=3, microbatches=4, t_f=5, t_b=6, t_w=4, comm=1, m_b=2, m_w=1,
             memory_cap="1p"),
    Instance(devices=3, microbatches=4, t_f=[2, 3, 2], t_b=[3, 3, 4], t_w=[1, 2, 1], comm=1,
             m_b=[2, 3, 2], m_w=1, memory_cap=[7, 8, 6]),
    Instance(devices=2, microbatches=4, t_f=3, t_b=3, t_w=2, comm=1, m_b=2, m_w=1,
             placement="v", memory_cap="1p"),
    Instance(devices=2, microbatches=4, t_f=3, t_b=4, t_w=2, comm=1, m_b=2, m_w=1,
             placement="dualpipe", memory_cap="1p"),
]
IDS = ["unit-p2", "564-p3", "stages-p3", "v-p2", "dualpipe-p2"]


def _backend(name, instance, objective, symmetry=True, time_limit=600):
    # a generous limit: the backends stop as soon as they prove the optimum, so the tests do
    # not depend on how fast the machine is
    scaled, scale, hint, horizon = backend_inputs(instance, objective)
    raw = run_backend(name, scaled, objective=objective, time_limit=time_limit, threads=2,
                      hint=hint, symmetry=symmetry, horizon=horizon)
    return raw, scaled, scale


def _checked_optimum(name, instance, objective, symmetry=True):
    """The backend's proven optimum, after checking its starts make a valid schedule whose
    evaluated objective is exactly the model's (the model is exact for the evaluator)."""
    raw, scaled, scale = _backend(name, instance, objective, symmetry)
    assert raw.status == "optimal", (name, raw.status, raw.message)
    schedule = _schedule_from_starts(instance, scaled, raw.starts, objective, scale, name)
    assert validate(instance, schedule) == []
    value = evaluate(instance, schedule).objective(objective)
    assert value == pytest.approx(raw.objective / scale)
    return value


# ----- agreement, optimality, bounds --------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("objective", ["span", "makespan"])
@pytest.mark.parametrize("instance", SMALL[:3], ids=IDS[:3])
def test_every_backend_agrees_on_the_optimum(instance, objective):
    values = {name: _checked_optimum(name, instance, objective) for name in BACKENDS}
    assert len(set(values.values())) == 1, values


@pytest.mark.parametrize("objective", ["span", "makespan"])
@pytest.mark.parametrize("instance", SMALL, ids=IDS)
def test_optimum_is_between_every_bound_and_every_fitting_family(instance, objective):
    optimum = _checked_optimum("cpsat", instance, objective)
    for name, value in bounds.lower_bounds(instance, objective).items():
        assert value <= optimum + 1e-9, name
    for row in compare(instance):
        if row.applies and row.timeline.fits_cap and row.instance.placement == instance.placement:
            assert optimum <= row.timeline.objective(objective) + 1e-9, row.method
    result = solve(instance, objective=objective, time_limit=600)
    assert result.status == "optimal" and result.objective == pytest.approx(optimum)


# without symmetry breaking the search grows with m! per stage and kind: keep these tiny
UNBROKEN = SMALL[:3] + [replace(SMALL[3], microbatches=3), SMALL[4]]


@pytest.mark.parametrize("objective", ["span", "makespan"])
@pytest.mark.parametrize("instance", UNBROKEN, ids=["unit-p2", "564-p3", "stages-p3", "v-p2-m3",
                                                   "dualpipe-p2"])
def test_symmetry_breaking_keeps_the_optimum(instance, objective):
    assert _checked_optimum("cpsat", instance, objective, symmetry=False) == \
        _checked_optimum("cpsat", instance, objective, symmetry=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", [b for b in BACKENDS if b != "cpsat"])
def test_milp_without_symmetry_breaking_keeps_the_optimum(name):
    instance = SMALL[0]
    assert _checked_optimum(name, instance, "span", symmetry=False) == \
        _checked_optimum("cpsat", instance, "span")


@pytest.mark.parametrize("name", BACKENDS)
def test_solve_with_every_backend_returns_an_evaluated_optimum(name):
    instance = SMALL[1]
    result = solve(instance, solver=name, time_limit=600, prove_with_bounds=False)
    assert result.solver == name and result.status == "optimal"
    assert validate(instance, result.schedule) == []
    assert result.objective == pytest.approx(_checked_optimum("cpsat", instance, "span"))


# ----- result contract ----------------------------------------------------------------------

def _check_result(instance, result, objective):
    assert result.status in ("optimal", "feasible")
    assert validate(instance, result.schedule) == []
    timeline = evaluate(instance, result.schedule)
    assert result.objective == timeline.objective(objective)
    assert result.lower_bound <= result.objective + 1e-9
    assert result.lower_bound >= bounds.best_lower_bound(instance, objective)[1] - 1e-9
    assert (result.status == "optimal") == math.isclose(result.objective, result.lower_bound)
    assert result.gap == pytest.approx((result.objective - result.lower_bound) / result.objective)
    if result.best_heuristic_objective is not None:
        assert result.objective <= result.best_heuristic_objective + 1e-9


@st.composite
def small_instances(draw):
    p = draw(st.integers(1, 3))
    placement = draw(st.sampled_from(["contiguous", "interleaved", "v", "dualpipe"]))
    m = draw(st.integers(1, 4))
    if placement == "dualpipe":
        m = 2 * max(1, m // 2)
    stages = p * (1 if placement == "contiguous" else 2)
    costs = st.lists(st.integers(1, 5), min_size=stages, max_size=stages)
    # zero-length W passes too: ties in start times must still give a valid order
    w_costs = st.lists(st.integers(0, 4), min_size=stages, max_size=stages)
    base = Instance(devices=p, microbatches=m, placement=placement, t_f=draw(costs),
                    t_b=draw(costs), t_w=draw(w_costs), comm=draw(st.integers(0, 2)),
                    m_b=draw(st.integers(2, 3)), m_w=draw(st.integers(0, 2)))
    need = bounds.min_feasible_cap(base)
    # "1p" always admits a schedule: it holds p micro-batches' activations of device 0
    return base.with_cap(draw(st.sampled_from([None, max(need), max(need) + 2, "1p", "2p"])))


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_instances(), st.sampled_from(["span", "makespan"]), st.booleans())
def test_solve_returns_a_valid_evaluated_schedule_and_a_true_bound(instance, objective,
                                                                    shortcut):
    result = solve(instance, objective=objective, time_limit=5, prove_with_bounds=shortcut)
    _check_result(instance, result, objective)


def test_a_tiny_time_limit_still_returns_a_valid_schedule_with_its_gap():
    # no family fits interleaved at 1p and the fallback is far from the bound
    instance = Instance(devices=4, microbatches=8, t_f=[5, 4, 6, 5], t_b=[6, 6, 7, 5],
                        t_w=[4, 3, 4, 4], comm=1, m_b=2, m_w=1) \
        .with_placement("interleaved").with_cap("1p")
    result = solve(instance, time_limit=0.05)
    _check_result(instance, result, "span")
    assert result.status == "feasible" and result.gap > 0


def test_fractional_costs_are_scaled_by_a_power_of_ten_and_reported():
    instance = Instance(devices=2, microbatches=3, t_f=0.5, t_b=0.75, t_w=0.25, comm=0.1,
                        m_b=2, m_w=1, memory_cap="1p")
    result = solve(instance, time_limit=10)
    assert result.scale == 100
    _check_result(instance, result, "span")
    scaled, scale, _ = scaled_instance(instance)
    assert scale == 100 and scaled.t_f[0] == 50 and scaled.comm == 10
    assert solve(scaled, time_limit=10).objective == pytest.approx(result.objective * 100)


def test_memory_is_scaled_separately_and_the_cap_rounds_down_exactly():
    instance = Instance(devices=2, microbatches=2, m_b=1.5, m_w=0.5, memory_cap=3.25)
    scaled, scale, memory_scale = scaled_instance(instance)
    assert (scale, memory_scale) == (1, 10)
    assert scaled.m_b == (15, 15) and scaled.cap == (32, 32)


def test_costs_that_no_power_of_ten_makes_integral_are_a_user_error():
    with pytest.raises(ZboptError, match="decimals"):
        power_of_ten_scale([1 / 3], "the cost")
    with pytest.raises(ZboptError, match="decimals"):
        solve(Instance(devices=2, microbatches=2, t_f=1 / 3), time_limit=1)


@pytest.mark.parametrize("kwargs, match", [
    ({"solver": "gurobi"}, "unknown solver"),
    ({"objective": "latency"}, "unknown objective"),
    ({"time_limit": 0}, "time limit"),
    ({"threads": 0}, "threads"),
    ({"known_bound": 12.0}, "known_bound"),
    ({"known_bound": ("split", float("nan"))}, "known_bound"),
])
def test_bad_arguments_are_user_errors(kwargs, match):
    with pytest.raises(ZboptError, match=match):
        solve(SMALL[0], **kwargs)


def test_a_cap_below_any_schedule_is_infeasible_and_names_the_smallest_cap():
    # interleaved: a micro-batch's two chunks on a device are held at once, so 2 m_b is needed
    instance = Instance(devices=2, microbatches=4, placement="interleaved", m_b=2, m_w=1,
                        memory_cap=3)
    result = solve(instance, time_limit=5)
    assert result.status == "infeasible" and result.schedule is None
    assert "at least 4" in result.message
    assert solve(instance.with_cap(4), time_limit=5).status in ("optimal", "feasible")


@settings(max_examples=40, deadline=None)
@given(small_instances())
def test_fallback_warm_starts_fit_the_cap(instance):
    for schedule in (sequential_schedule(instance), list_schedule(instance, True),
                     list_schedule(instance, False)):
        assert validate(instance, schedule) == []


def test_a_bound_met_by_the_warm_start_is_proven_without_search():
    instance = Instance(devices=8, microbatches=32, t_f=5, t_b=6, t_w=4, comm=1, m_b=2, m_w=1,
                        memory_cap="1p")
    result = solve(instance, time_limit=600)
    assert result.status == "optimal" and result.backend_status is None
    assert result.objective == bounds.best_lower_bound(instance)[1]


def test_the_backend_can_be_made_to_prove_what_the_bounds_prove():
    instance = SMALL[1]
    quick = solve(instance, time_limit=600)
    searched = solve(instance, time_limit=600, prove_with_bounds=False, warm_start=False)
    assert quick.backend_status is None
    assert searched.backend_status == "optimal"
    assert searched.status == "optimal" and searched.objective == quick.objective
    assert validate(instance, searched.schedule) == []


def test_zero_length_passes_tied_on_a_start_are_ordered_by_their_dependencies():
    # t_b = 0: on "v" B(1, j) and B(2, j) can share a start; ordering ties by the pass tuple
    # put B(1, j) first, which deadlocks, and solve() fell back to the warm start (32)
    instance = Instance(placement="v", devices=2, microbatches=2, t_f=2, t_b=0, t_w=4, comm=0,
                        m_b=2, m_w=1, memory_cap=[4, 6])
    result = solve(instance, solver="cpsat", time_limit=600, prove_with_bounds=False)
    assert result.backend_status == "optimal"
    assert result.status == "optimal" and result.objective == 28
    assert validate(instance, result.schedule) == []


def test_tied_zero_length_starts_become_an_order_that_runs():
    instance = Instance(placement="v", devices=2, microbatches=1, t_f=2, t_b=0, t_w=1, m_b=2,
                        m_w=1)
    scaled, scale, _ = scaled_instance(instance)
    # every B at one instant (t_b = 0): the chain 3B0 -> 2B0 -> 1B0 -> 0B0 must be kept
    starts = {(0, 0, "F"): 0, (1, 0, "F"): 2, (2, 0, "F"): 4, (3, 0, "F"): 6,
              (3, 0, "B"): 8, (2, 0, "B"): 8, (1, 0, "B"): 8, (0, 0, "B"): 8,
              (0, 0, "W"): 8, (1, 0, "W"): 8, (2, 0, "W"): 9, (3, 0, "W"): 9}
    schedule = _schedule_from_starts(instance, scaled, starts, "makespan", scale, "t")
    assert validate(instance, schedule) == []
    assert evaluate(instance, schedule).makespan == 10


def test_an_instance_too_large_for_the_time_limit_is_refused_at_once():
    instance = Instance(devices=64, microbatches=256, m_b=2, m_w=1, memory_cap="2p")
    with pytest.raises(ZboptError, match=r"49,152 passes .* at least 13 s"):
        solve(instance, time_limit=5)


def test_the_fallback_schedulers_do_not_run_when_a_registered_schedule_fits(monkeypatch):
    import zbopt.solvers.api as api

    def refuse(*args, **kwargs):
        raise AssertionError("fallback scheduler ran")

    monkeypatch.setattr(api, "list_schedule", refuse)
    monkeypatch.setattr(api, "sequential_schedule", refuse)
    result = solve(SMALL[1], time_limit=10)
    assert result.status in ("optimal", "feasible") and result.best_heuristic is not None


def test_the_search_gets_only_what_the_warm_start_left_of_the_limit(monkeypatch):
    import zbopt.solvers.api as api

    seen = {}
    real = api.get_method

    def spy(name, kind=None):
        method = real(name, kind)
        if kind != "solver":
            return method

        def backend(request):
            seen["limit"] = request.time_limit
            return method.backend(request)
        return replace(method, backend=backend)

    monkeypatch.setattr(api, "get_method", spy)
    solve(SMALL[1], time_limit=7, prove_with_bounds=False)
    assert 0 < seen["limit"] < 7


# ----- CLI ----------------------------------------------------------------------------------

def _instance_file(tmp_path, instance=SMALL[1]):
    path = tmp_path / "inst.toml"
    instance.save(path)
    return str(path)


def test_cli_json_has_the_documented_keys(tmp_path, capsys):
    code = main(["solve", _instance_file(tmp_path), "--time-limit", "10", "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("status", "objective", "lower_bound", "gap", "runtime", "best_heuristic",
                "best_heuristic_objective"):
        assert key in data
    assert data["status"] == "optimal" and data["gap"] == 0
    assert data["gain"] == pytest.approx(data["best_heuristic_objective"] - data["objective"])


def test_auto_runs_cpsat_lns_only_on_large_interleaved_and_v_instances():
    from zbopt.solvers import LNS_FROM_PASSES, default_solver
    base = Instance(devices=8, microbatches=32, t_f=4, t_b=4, t_w=2, comm=1, m_b=2, m_w=1)
    assert base.num_passes < LNS_FROM_PASSES <= base.with_placement("v").num_passes
    assert default_solver(base) == "cpsat"  # contiguous: cpsat is measured better there
    assert default_solver(base.with_placement("v")) == "cpsat-lns"
    assert default_solver(base.with_placement("interleaved", 2)) == "cpsat-lns"
    small = Instance(devices=4, microbatches=8).with_placement("interleaved", 2)
    assert default_solver(small) == "cpsat"


def test_cli_solver_auto_is_the_default_and_resolves_per_instance(tmp_path, capsys):
    assert main(["solve", _instance_file(tmp_path), "--time-limit", "10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["solver"] == "cpsat"
    large = Instance(devices=8, microbatches=32, t_f=4, t_b=4, t_w=2, comm=1, m_b=2, m_w=1,
                     memory_cap="1p").with_placement("interleaved", 2)
    (tmp_path / "large").mkdir()
    code = main(["solve", _instance_file(tmp_path / "large", large), "--time-limit", "4",
                 "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["solver"] == "cpsat-lns" and data["objective"] is not None


def test_cli_an_unknown_solver_is_one_line_and_exit_2(tmp_path, capsys):
    code = main(["solve", _instance_file(tmp_path), "--solver", "nope"])
    err = capsys.readouterr().err
    assert code == 2 and "nope" in err and len(err.strip().splitlines()) == 1


def test_cli_prints_status_bound_and_gain(tmp_path, capsys):
    code = main(["solve", _instance_file(tmp_path), "--mem", "2p", "--time-limit", "10"])
    out = capsys.readouterr().out
    assert code == 0
    for word in ("status", "span", "lower bound", "gap", "time", "gain"):
        assert word in out


def test_cli_writes_the_schedule_file_and_refuses_to_overwrite(tmp_path, capsys):
    inst = _instance_file(tmp_path)
    out = tmp_path / "schedule.json"
    assert main(["solve", inst, "--time-limit", "10", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["format"] == "zbopt.schedule/1" and doc["solver"]["status"] == "optimal"
    before = out.read_text()
    assert main(["solve", inst, "--time-limit", "10", "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err and out.read_text() == before
    assert main(["solve", inst, "--time-limit", "10", "--out", str(out), "--force"]) == 0


def test_cli_infeasible_cap_is_one_line_and_exit_2(tmp_path, capsys):
    inst = _instance_file(tmp_path, Instance(devices=2, microbatches=4, placement="interleaved",
                                             m_b=2, m_w=1))
    assert main(["solve", inst, "--mem", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "infeasible" in err and "at least 4" in err


def test_cli_bad_solver_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["solve", _instance_file(tmp_path), "--solver", "gurobi"]) == 2
    assert "unknown solver" in capsys.readouterr().err


@pytest.mark.slow  # the warm start runs every V heuristic
def test_the_w_deferral_bound_certifies_the_v_turn_instance():
    # the turn device of a V at its smallest cap (tests/test_bounds.py derives 48 by hand):
    # the schedule solve() returns meets zbopt's own bound, which names the proof
    instance = Instance(devices=3, microbatches=2, placement="v", t_f=2, t_b=2, t_w=0, comm=1,
                        m_b=1, m_w=1, memory_cap=3)
    result = solve(instance, time_limit=600)
    _check_result(instance, result, "span")
    assert result.status == "optimal" and result.objective == 48
    assert result.lower_bound == 48 and result.bound_name == "w_deferral"


def _memory_bound_split():
    """8 Llama-3-8B-shaped blocks on p=4, m=8 at the plan benchmark's mid cap, split (3, 2, 2, 3):
    device 0's memory sets the pace (tests/test_collision_bound.py)."""
    from test_plan import llama_split
    return llama_split(32000, 8, 0.6, (3, 2, 2, 3))


@pytest.mark.slow  # two 8 s solves
def test_solve_proves_a_memory_bound_split_with_the_relaxations_plan_uses():
    """On a contiguous split whose memory sets the pace, solve() runs the one-device, window
    and collision relaxations of zbopt.plan (as `zbopt plan` does on its splits) and reports
    their bound: well above zbopt.bounds' and what CP-SAT proves alone in the same time."""
    from zbopt.solvers.api import RELAXATIONS
    instance = _memory_bound_split()
    analytic = bounds.best_lower_bound(instance)[1]
    result = solve(instance, time_limit=8, threads=1)
    assert result.bound_name in RELAXATIONS
    assert result.lower_bound >= 1.05 * analytic
    assert result.lower_bound <= result.span + 1e-6 and result.fits()
    alone = solve(instance, time_limit=8, threads=1, known_bound=("none", 0.0))
    assert alone.lower_bound < result.lower_bound


def test_a_known_bound_is_the_floor_and_the_relaxations_do_not_run_again(monkeypatch):
    import zbopt.solvers.api as api

    def fail(*args):
        raise AssertionError("the relaxations ran although the caller knew a bound")

    monkeypatch.setattr(api, "_contiguous_bounds", fail)
    instance = _memory_bound_split()
    known = 490_000.0  # below the 497,331.9 the collision relaxation proves
    result = solve(instance, time_limit=3, threads=1, known_bound=("split", known))
    assert result.lower_bound >= known and result.bound_name in ("split", "cpsat")
    assert result.lower_bound <= result.span


def test_cli_solve_of_a_schedule_file_starts_from_its_schedule(tmp_path, capsys):
    """`zbopt solve schedule.json` (or a plan file) hints the solver with the file's own schedule
    when it beats the registered methods; one over a tighter --mem is left out, said on stderr."""
    # the optimum (58) beats zb-greedy (59), the best registered method
    instance = Instance(devices=3, microbatches=6, t_f=[2, 3, 2], t_b=[3, 3, 4], t_w=[1, 2, 1],
                        comm=1, m_b=[2, 3, 2], m_w=1, memory_cap=[7, 8, 6])
    first = tmp_path / "first.json"
    assert main(["solve", _instance_file(tmp_path, instance), "--time-limit", "10",
                 "--threads", "1", "--out", str(first), "--json"]) == 0
    solved = json.loads(capsys.readouterr().out)
    assert solved["objective"] < solved["best_heuristic_objective"]
    assert main(["solve", str(first), "--time-limit", "5", "--threads", "1", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["warm_start"] == "solver-cpsat" and again["objective"] == solved["objective"]
    # a cap of 7 on every device is below the stored schedule's peak on device 1
    assert max(json.loads(first.read_text())["metrics"]["peak_memory"]) > 7
    assert main(["solve", str(first), "--time-limit", "5", "--threads", "1", "--json",
                 "--mem", "7"]) == 0
    captured = capsys.readouterr()
    assert "not used as a warm start" in captured.err
    assert json.loads(captured.out)["warm_start"] != "solver-cpsat"


def test_the_contiguous_relaxations_run_only_where_memory_sets_the_pace(monkeypatch):
    """Caps of 1p and above hold on every device what 1F1B keeps in flight: the relaxations are
    not tried there (their time goes to the search); on the memory-bound split they are."""
    import time

    import zbopt.plan.device_bound as device_bound
    from zbopt.solvers.api import RELAXED, _contiguous_bounds
    calls = []
    monkeypatch.setattr(device_bound, "relaxation_bound",
                        lambda instance, deadline: calls.append(instance) or 1.0)
    deadline = time.perf_counter() + 5
    roomy = Instance(devices=4, microbatches=8, t_f=3, t_b=4, t_w=2, comm=1, m_b=2, m_w=1,
                     memory_cap="1p")
    assert list(_contiguous_bounds(roomy, deadline, math.inf)) == [] and not calls
    split = _memory_bound_split()
    assert next(_contiguous_bounds(split, deadline, math.inf)) == (RELAXED, 1.0)
    assert calls == [split]
