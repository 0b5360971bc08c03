"""The F/B relaxation (zbopt.plan.fb_bound): never above an optimum or a schedule that runs, the
same optimum as the relaxation stated with AddNoOverlap, and plan() running it beside its steps."""

from __future__ import annotations

import random
import time

import pytest
from ortools.sat.python import cp_model
from test_bounds import independent_optimum  # noqa: E402
from test_device_bound import _llama_32_blocks  # noqa: E402
from test_plan import llama_model, llama_split  # noqa: E402

import zbopt.plan.search as search_module
from zbopt.bounds import best_lower_bound
from zbopt.instance import Instance
from zbopt.plan import fb_bound
from zbopt.plan.fb_bound import Background, grid_unit, window_optimum
from zbopt.plan.fb_bound import fb_bound as fb_value
from zbopt.plan.memory_bound import held_counts, pipeline_bound, release_gaps
from zbopt.plan.search import plan
from zbopt.registry import methods, run
from zbopt.solvers import interruptible
from zbopt.solvers.api import FB, solve


def _random_instance(rng: random.Random) -> Instance:
    """A contiguous instance whose devices hold 1 to 5 activations (whole-number costs)."""
    p, m = rng.randint(2, 4), rng.randint(3, 7)
    m_b = [rng.randint(1, 3) for _ in range(p)]
    return Instance(devices=p, microbatches=m, t_f=[rng.randint(1, 3) for _ in range(p)],
                    t_b=[rng.randint(1, 3) for _ in range(p)], t_w=[rng.randint(0, 2) for _ in range(p)],
                    comm=rng.randint(0, 1), m_b=m_b, m_w=[rng.randint(0, x) for x in m_b],
                    memory_cap=[x * rng.randint(1, 5) + rng.randint(0, 1) for x in m_b])


def _no_overlap_window(instance: Instance, e: int, last: int) -> float:
    """The relaxation of window_optimum stated with AddNoOverlap on every device (whole-number
    costs): an independent statement of the same problem."""
    p, m = instance.devices, last + 1
    t_f, t_b = [int(x) for x in instance.t_f], [int(x) for x in instance.t_b]
    comm, counts, gaps = int(instance.comm), held_counts(instance), release_gaps(instance)
    model = cp_model.CpModel()
    f = [[model.NewIntVar(-1000, 1000, "") for _ in range(m)] for _ in range(p)]
    b = [[model.NewIntVar(-1000, 1000, "") for _ in range(m)] for _ in range(p)]
    for d in range(p):
        for j in range(m):
            if d + 1 < p:
                model.Add(f[d + 1][j] >= f[d][j] + t_f[d] + comm)
                model.Add(b[d][j] >= b[d + 1][j] + t_b[d + 1] + comm)
            if j + 1 < m:
                model.Add(f[d][j + 1] >= f[d][j] + t_f[d])
                model.Add(b[d][j + 1] >= b[d][j] + t_b[d])
            if j + counts[d] < m:
                model.Add(f[d][j + counts[d]] >= b[d][j] + t_b[d] + int(gaps[d]))
        model.AddNoOverlap([model.NewFixedSizeIntervalVar(x, t_f[d], "") for x in f[d]]
                           + [model.NewFixedSizeIntervalVar(x, t_b[d], "") for x in b[d]])
    for j in range(m):
        model.Add(b[p - 1][j] >= f[p - 1][j] + t_f[p - 1])
    model.Add(f[e][0] == 0)
    model.Minimize(b[e][last] + t_b[e])
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 20
    assert solver.Solve(model) == cp_model.OPTIMAL
    return solver.ObjectiveValue()


def test_the_choices_of_order_are_those_of_one_pass_at_a_time():
    """window_optimum gives each device only the orders of F(j + i) and B(j) for 0 < i < k_d to
    choose: on random small instances it finds the optimum of the same relaxation with every
    pair of passes kept apart by AddNoOverlap (one and two CP-SAT workers alike)."""
    rng = random.Random(3)
    held = set()
    for index in range(16):
        instance = _random_instance(rng)
        held.update(held_counts(instance))
        e, last = rng.randrange(instance.devices), instance.microbatches - 1
        proven, value = window_optimum(instance, e, last, 20, threads=1 + index % 2)
        assert proven and grid_unit(instance) == 1.0
        assert value == _no_overlap_window(instance, e, last)
    assert {2, 3, 4} <= held  # devices with choices to make


@pytest.mark.slow  # a few dozen small exact solves
def test_the_bound_is_below_the_optimum_and_every_schedule_that_fits(monkeypatch):
    """fb_bound never exceeds a registered schedule that fits, nor the in-order optimum CP-SAT
    proves knowing nothing of zbopt's bounds; and it lies above zbopt.bounds' and the coupled
    bound (memory_bound.pipeline_bound) on several."""
    rng = random.Random(8)
    checked = raised = 0
    names = [name for name, m in methods("schedule").items() if m.placement == "contiguous"]
    for _ in range(40):
        # devices holding 1 to 3 activations, cheap W passes: where dropping W loses little
        p, m = rng.randint(3, 4), rng.randint(6, 8)
        m_b = [rng.randint(1, 3) for _ in range(p)]
        instance = Instance(devices=p, microbatches=m, t_f=[rng.randint(1, 3) for _ in range(p)],
                            t_b=[rng.randint(1, 3) for _ in range(p)],
                            t_w=[rng.randint(0, 1) for _ in range(p)], comm=rng.randint(0, 1),
                            m_b=m_b, m_w=[rng.randint(0, x) for x in m_b],
                            memory_cap=[x * rng.randint(1, 3) + rng.randint(0, 1) for x in m_b])
        value = fb_value(instance, time.perf_counter() + 10)
        spans = [r.span for r in (run(name, instance) for name in names) if r.fits()]
        assert all(value <= span + 1e-9 for span in spans), (instance, value, spans)
        optimum = independent_optimum(instance, monkeypatch, time_limit=10)
        if optimum is None:
            continue
        assert value <= optimum + 1e-9, (instance, value, optimum)
        checked += 1
        raised += value > max(best_lower_bound(instance)[1], pipeline_bound(instance)) + 1e-9
    assert checked >= 25 and raised >= 5, (checked, raised)


def test_fractional_costs_are_counted_on_a_finer_grid():
    """Costs with fractions are counted in a power of ten at most a thousandth of the least F or
    B cost (rounded down: each pass loses less than a step). A tenth of an instance's costs plus
    a little gives at least a tenth of its bound, and no more than a schedule that fits."""
    base = Instance(devices=3, microbatches=5, t_f=[2, 3, 2], t_b=[3, 3, 4], t_w=1, comm=1,
                    m_b=[2, 3, 2], m_w=1, memory_cap=[6, 8, 5])
    finer = Instance(devices=3, microbatches=5, t_f=[0.2037, 0.3037, 0.2037],
                     t_b=[0.3037, 0.3037, 0.4037], t_w=0.1, comm=0.1, m_b=[2, 3, 2], m_w=1,
                     memory_cap=[6, 8, 5])
    assert grid_unit(base) == 1.0 and grid_unit(finer) == pytest.approx(1e-4)
    value = fb_value(finer, time.perf_counter() + 10)
    assert value >= fb_value(base, time.perf_counter() + 10) / 10 - 1e-9
    spans = [r.span for r in (run(name, finer) for name in ("zb-greedy", "1f1b", "zb-h1"))
             if r.fits()]
    assert spans and value <= min(spans) + 1e-9


def test_no_cap_or_another_placement_gives_nothing():
    instance = Instance(devices=2, microbatches=4, t_f=1, t_b=1, t_w=1, m_b=1, m_w=1)
    assert fb_value(instance, time.perf_counter() + 5) == 0.0
    assert fb_value(instance.with_cap(4).with_placement("v"), time.perf_counter() + 5) == 0.0


def test_the_background_run_proves_what_the_call_does_and_stops_when_asked():
    """Background (one worker, in a thread) reaches fb_bound's value given the time, and its
    value() stops a search that runs: what it returns then is no more than that value."""
    instance = _random_instance(random.Random(2))
    while max(held_counts(instance)) < 3:
        instance = _random_instance(random.Random(instance.microbatches * 7 + len(instance.t_f)))
    expected = fb_value(instance, time.perf_counter() + 20)
    background = Background(instance, time.perf_counter() + 20)
    background.thread.join()
    assert background.proven() and background.value() == pytest.approx(expected)
    with Background(instance, time.perf_counter() + 60) as stopped:
        early = stopped.value()
        assert not stopped.thread.is_alive() and early <= expected + 1e-9


def test_searches_started_beside_a_background_run_yield_it_their_priority(monkeypatch):
    """While a Background runs, a CP-SAT search started from the main thread (through
    zbopt.solvers.interruptible) raises its own thread's nice value by YIELD_NICENESS, and
    only then; once the background search has ended, searches keep their priority."""
    calls = []
    monkeypatch.setattr(interruptible.os, "setpriority", lambda *args: calls.append(args))
    model = cp_model.CpModel()
    x = model.new_int_var(0, 5, "x")
    model.maximize(x)

    def search() -> None:
        solver = cp_model.CpSolver()
        assert interruptible.solve(solver, model) == cp_model.OPTIMAL

    search()
    assert calls == []
    instance = _llama_32_blocks(128256, "tight", (3, 4, 4, 4, 4, 5, 5, 5))  # 30-40 s alone
    with Background(instance, time.perf_counter() + 60) as background:
        search()
        assert not background.done()
    assert len(calls) == 1 and calls[0][2] == interruptible.os.getpriority(
        interruptible.os.PRIO_PROCESS, 0) + interruptible.YIELD_NICENESS
    search()
    assert len(calls) == 1


def _fb_plan_model():
    """8 Llama-shaped blocks on p=4, m=8 under the bench's mid cap (test_plan.llama_model):
    a plan of a few seconds leaves a gap there, so its relaxation step runs."""
    return llama_model(32000, 8, 0.6)


def test_plan_raises_a_splits_bound_with_the_relaxation_it_ran_beside_its_steps(monkeypatch):
    """plan() starts the F/B relaxation on the contiguous split of least bound when its
    relaxation step begins and takes its value after the solver step, having stopped it: a
    value above that split's bound becomes its proven bound, named F/B relaxation."""
    started, collected = [], []

    class Stub:
        def __init__(self, instance, deadline):
            started.append(self)
            self.instance, self.stopped = instance, False

        def value(self):
            self.stopped = True
            return 10.0 ** 9

        def done(self):
            return False

    real_collect = search_module._Search.collect_fb

    def collect(self, pending):
        key = self.fb[0] if self.fb is not None else None
        out = real_collect(self, pending)
        collected.append((key, out))
        return out

    monkeypatch.setattr(search_module.fb_bound, "Background", Stub)
    monkeypatch.setattr(fb_bound, "FROM_SECONDS", 0.0)
    monkeypatch.setattr(fb_bound, "GAP", 0.0)  # kept running whatever the gap
    monkeypatch.setattr(search_module._Search, "collect_fb", collect)
    plan(_fb_plan_model(), time_limit=6, threads=2)
    assert len(started) == 1 and started[0].stopped
    (key, pending), = collected
    raised = [s for s in pending if (s.placement, s.sizes) == key]
    assert len(raised) == 1 and raised[0].bound == 10.0 ** 9 and raised[0].bound_name == FB
    assert started[0].instance.devices == 4 and started[0].instance.placement == "contiguous"


def test_one_thread_runs_no_relaxation_beside_the_steps(monkeypatch):
    def refuse(*args):
        raise AssertionError("the F/B relaxation started on one thread")

    monkeypatch.setattr(search_module.fb_bound, "Background", refuse)
    monkeypatch.setattr(fb_bound, "FROM_SECONDS", 0.0)
    plan(_fb_plan_model(), time_limit=3, threads=1)


def test_an_exception_in_the_solver_step_stops_the_relaxation(monkeypatch):
    """Ctrl-C (or any exception) during the steps the F/B relaxation runs beside stops its
    search before plan() gives the exception up: no CP-SAT thread is left running."""
    runs = []
    real = fb_bound.Background

    def recorded(instance, deadline):
        runs.append(real(instance, deadline))
        return runs[-1]

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(search_module.fb_bound, "Background", recorded)
    monkeypatch.setattr(fb_bound, "FROM_SECONDS", 0.0)
    monkeypatch.setattr(search_module._Search, "solve", interrupted)
    with pytest.raises(KeyboardInterrupt):
        plan(_fb_plan_model(), time_limit=30, threads=2)
    assert len(runs) == 1 and not runs[0].thread.is_alive()


def _memory_bound_split() -> Instance:
    """8 Llama-shaped blocks on p=4, m=8, the mid cap, split 3-2-2-3 (test_plan.llama_split):
    the collision relaxation proves 497,332 there and the solver's schedule is 503,879."""
    return llama_split(32000, 8, 0.6, (3, 2, 2, 3))


def test_solve_reports_the_relaxation_where_it_is_the_highest_bound():
    """solve() runs the F/B relaxation after the other contiguous relaxations: on this split it
    proves its optimum at once, above the collision relaxation and zbopt.bounds, and names it."""
    instance = _memory_bound_split()
    expected = fb_value(instance, time.perf_counter() + 20)
    result = solve(instance, time_limit=4, threads=2)
    assert result.bound_name == FB and result.lower_bound == pytest.approx(expected, abs=1.0)
    assert expected > 1.01 * best_lower_bound(instance)[1] and result.lower_bound <= result.span


def test_solve_runs_it_beside_the_backend_and_stops_it(monkeypatch):
    """With time enough (FROM_SECONDS) solve() starts the relaxation in a thread when its
    backend starts and stops it when the backend returns; the bound it gives is the result's
    where it is the highest (here the only F/B bound: the quick one in the relaxation share is
    switched off)."""
    instance = _memory_bound_split()
    expected = fb_value(instance, time.perf_counter() + 20)
    started = []

    class Stub:
        def __init__(self, instance, deadline):
            started.append(self)
            self.stopped = False

        def value(self):
            self.stopped = True
            return expected

    monkeypatch.setattr(fb_bound, "Background", Stub)
    monkeypatch.setattr(fb_bound, "FROM_SECONDS", 0.0)
    monkeypatch.setattr(fb_bound, "fb_bound", lambda *args, **kwargs: 0.0)
    result = solve(instance, time_limit=4, threads=2)
    assert len(started) == 1 and started[0].stopped
    assert result.bound_name == FB and result.lower_bound == pytest.approx(expected, abs=1.0)
    started.clear()
    solve(instance, time_limit=4, threads=1)  # one thread: the backend's alone
    assert not started
