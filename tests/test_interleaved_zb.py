"""interleaved-zb: the zero-bubble greedy over v chunks fits every cap that admits a schedule."""

from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zbopt import bounds
from zbopt.compare import compare
from zbopt.errors import ZboptError
from zbopt.heuristics.interleaved_zb import interleaved_zb, interleaved_zb_1p, min_interleaved_cap
from zbopt.heuristics.local_search import improve
from zbopt.heuristics.refine import refine
from zbopt.heuristics.sink_placement import place_sinks
from zbopt.instance import Instance
from zbopt.registry import get_method, run
from zbopt.schedule import Schedule, evaluate, validate
from zbopt.solvers.api import _warm_start


@st.composite
def interleaved_instances(draw):
    p = draw(st.integers(1, 4))
    v = draw(st.integers(2, 3))
    m = draw(st.integers(1, 6))
    n = p * v
    costs = st.lists(st.integers(0, 5), min_size=n, max_size=n)
    m_b = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    t_f = draw(costs)
    t_f[0] += 1  # not every cost zero
    instance = Instance(devices=p, microbatches=m, placement="interleaved", chunks=v,
                        t_f=t_f, t_b=draw(costs), t_w=draw(costs),
                        comm=draw(st.integers(0, 2)), m_b=m_b,
                        m_w=[draw(st.integers(0, b)) for b in m_b],
                        static_memory=draw(st.integers(0, 2)))
    extra = draw(st.lists(st.integers(0, 3), min_size=p, max_size=p))
    return instance.with_cap([need + e for need, e in
                              zip(bounds.min_feasible_cap(instance), extra)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(interleaved_instances())
def test_every_cap_that_admits_a_schedule_gets_a_valid_one_within_it(instance):
    timeline = evaluate(instance, interleaved_zb(instance))
    assert validate(instance, timeline.schedule) == []
    assert timeline.fits_cap
    assert timeline.span >= bounds.best_lower_bound(instance)[1] - 1e-9


def test_the_least_cap_is_every_chunk_of_one_micro_batch():
    instance = Instance(devices=2, microbatches=4, placement="interleaved", chunks=2,
                        m_b=[1, 2, 3, 4], static_memory=1)
    assert min_interleaved_cap(instance) == list(bounds.min_feasible_cap(instance))
    with pytest.raises(ZboptError, match="at least"):
        interleaved_zb(instance.with_cap(min(min_interleaved_cap(instance)) - 1))


def test_registered_as_a_heuristic_that_fits_1p_where_interleaved_1f1b_does_not():
    base = Instance(devices=4, microbatches=8, t_f=4, t_b=4, t_w=2, comm=1, m_b=2, m_w=1,
                    memory_cap="1p")
    assert get_method("interleaved-zb").kind == "heuristic"
    rows = {r.method: r for r in compare(base) if r.placement == "interleaved"}
    assert rows["interleaved-zb"].fits() and not rows["interleaved-1f1b"].fits()
    assert run("interleaved-zb-1p", base).fits()


def test_it_is_the_solver_warm_start_on_an_interleaved_placement_at_1p():
    instance = Instance(devices=4, microbatches=8, t_f=4, t_b=4, t_w=2, comm=1, m_b=2, m_w=1,
                        memory_cap="1p").with_placement("interleaved", 2)
    name, value, best, _ = _warm_start(instance, "span")
    assert name.startswith("interleaved-zb")
    assert best.span == value and best.fits_cap


def test_cap_parameter_overrides_the_instance_cap():
    instance = Instance(devices=3, microbatches=6, placement="interleaved", chunks=2, m_b=2,
                        m_w=1)
    tight = evaluate(instance.with_cap(4), interleaved_zb_1p(instance, memory_cap=4))
    assert tight.peak_memory and max(tight.peak_memory) <= 4


# ----- the local search that ends interleaved-zb and v-greedy -------------------------------

def _plain_greedy(instance):
    """One point of the greedy's grid, before any local search."""
    from zbopt.heuristics import _engine
    outcome = _engine.run(instance, instance.cap, _engine.Policy(b_first=False))
    assert outcome is not None  # room kept for every started micro-batch: never stuck
    return Schedule(tuple(tuple((q,) for q in order) for order in outcome.orders), "plain")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(interleaved_instances())
def test_local_search_is_valid_within_the_cap_and_never_longer(instance):
    start = _plain_greedy(instance)
    improved = improve(instance, start)
    assert validate(instance, improved) == []
    after = evaluate(instance, improved)
    assert after.fits_cap
    assert after.span <= evaluate(instance, start).span


def test_local_search_moves_a_w_that_delays_the_critical_chain():
    # device 1 runs W of micro-batch 0 before the forward micro-batch 1 waits for: moving that W
    # after the backward lets device 0 finish a step earlier
    instance = Instance(devices=2, microbatches=2, t_f=1, t_b=1, t_w=1, comm=0)
    late = Schedule.build([["0F0", "0F1", "0B0", "0W0", "0B1", "0W1"],
                           ["1F0", "1B0", "1W0", "1F1", "1B1", "1W1"]])
    improved = evaluate(instance, improve(instance, late))
    assert improved.span < evaluate(instance, late).span


def test_local_search_keeps_a_w_deferral_out_when_it_would_break_the_cap():
    # the same order, but a cap that holds only one W's gradient at a time on device 1
    instance = Instance(devices=2, microbatches=2, t_f=1, t_b=1, t_w=1, comm=0, m_b=2, m_w=1)
    late = Schedule.build([["0F0", "0F1", "0B0", "0W0", "0B1", "0W1"],
                           ["1F0", "1B0", "1W0", "1F1", "1B1", "1W1"]])
    capped = instance.with_cap([4, 3])
    assert evaluate(capped, late).fits_cap
    assert evaluate(capped, improve(capped, late)).fits_cap


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(interleaved_instances())
def test_interleaved_zb_never_longer_than_its_own_grid(instance):
    from zbopt.heuristics import _engine
    from zbopt.heuristics._search import best_of
    from zbopt.heuristics.interleaved_zb import grid
    plain = best_of(instance, [lambda pol=pol: _engine.run(instance, instance.cap, pol)
                               for pol in grid(instance)], "plain", lambda: "")
    assert evaluate(instance, interleaved_zb(instance)).span <= evaluate(instance, plain).span


def test_below_the_least_cap_one_line_names_the_cap_needed():
    instance = Instance(devices=3, microbatches=6, placement="interleaved", chunks=2, m_b=2,
                        m_w=1, static_memory=1)
    need = max(min_interleaved_cap(instance))
    with pytest.raises(ZboptError) as err:
        interleaved_zb(instance, memory_cap=need - 0.5)
    assert "\n" not in str(err.value) and f"{need:g}" in str(err.value)
    assert evaluate(instance.with_cap(need), interleaved_zb(instance, memory_cap=need)).fits_cap


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(interleaved_instances(), st.sampled_from([0.0, 0.5, 1.0, 2.0]))
def test_sink_placement_keeps_the_other_passes_order_and_the_cap(instance, threshold):
    start = _plain_greedy(instance)
    orders = [[item[0] for item in order] for order in start.orders]
    placed = place_sinks(instance, orders, threshold)
    assert placed is not None  # the greedy's own order fits, so its W can always make room
    sinks = {q for q in instance.passes() if q[2] == "W" or (q[2] == "B" and q[0] == 0)}
    for before, after in zip(orders, placed):
        assert sorted(before) == sorted(after)
        assert [q for q in before if q not in sinks] == [q for q in after if q not in sinks]
    schedule = Schedule(tuple(tuple((q,) for q in order) for order in placed))
    assert validate(instance, schedule) == [] and evaluate(instance, schedule).fits_cap


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(interleaved_instances())
def test_refine_is_valid_within_the_cap_and_never_longer(instance):
    start = _plain_greedy(instance)
    refined = refine(instance, start)
    assert validate(instance, refined) == []
    after = evaluate(instance, refined)
    assert after.fits_cap and after.span <= evaluate(instance, start).span


# ----- forwards in a fixed order of micro-batch groups (Policy.sequence) --------------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(interleaved_instances(), st.integers(1, 5), st.integers(1, 5), st.booleans())
def test_a_forward_sequence_is_the_order_of_every_devices_forwards(instance, first, size,
                                                                   reserve_all):
    from zbopt.heuristics import _engine
    top = _engine.Topology(instance)
    outcome = _engine.run(instance, instance.cap,
                          _engine.Policy(reserve_all=reserve_all, sequence=(first, size)), top)
    if outcome is None:
        return  # stuck: the grid skips such a point
    for d, order in enumerate(outcome.orders):
        expected = [(s, top.mbs[s][k]) for s, k in _engine._forward_sequence(top, d, first, size)]
        assert [(s, j) for s, j, kind in order if kind == "F"] == expected
    schedule = Schedule(tuple(tuple((q,) for q in order) for order in outcome.orders))
    assert validate(instance, schedule) == []
    assert evaluate(instance, schedule).fits_cap


def test_the_sequence_of_p_then_groups_of_two():
    from zbopt.heuristics import _engine
    instance = Instance(devices=2, microbatches=5, placement="interleaved", chunks=2)
    top = _engine.Topology(instance)
    # device 1 holds stages 1 and 3: micro-batches 0-1 through both, then 2-3, then 4
    assert _engine._forward_sequence(top, 1, 2, 2) == [
        (1, 0), (1, 1), (3, 0), (3, 1), (1, 2), (1, 3), (3, 2), (3, 3), (1, 4), (3, 4)]
    with pytest.raises(ValueError, match="at least one micro-batch"):
        _engine.run(instance, None, _engine.Policy(sequence=(2, 0)), top)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(interleaved_instances())
def test_the_sequenced_points_never_lengthen_interleaved_zb(instance):
    with_them = evaluate(instance, interleaved_zb(instance)).span
    with _grid_alone():
        without = evaluate(instance, interleaved_zb(instance)).span
    assert with_them <= without


def test_at_1p_the_sequenced_points_win_and_run_p_forwards_ahead():
    # Zero Bubble 1.5B costs, per chunk halved, p=8, m=16 at 1p: the first p forwards of the
    # first chunk run before the later chunk's, the head of the lower bound's ramp
    p = 8
    instance = Instance(devices=p, microbatches=16, t_f=18513, t_b=18086, t_w=9331, comm=626,
                        m_b=201216, m_w=73728, memory_cap="1p").with_placement("interleaved", 2)
    timeline = evaluate(instance, interleaved_zb(instance))
    with _grid_alone():
        assert timeline.span < evaluate(instance, interleaved_zb(instance)).span
    for d, order in enumerate(timeline.schedule.orders):
        forwards = [q for (q,) in order if q[2] == "F"]
        assert [q[:2] for q in forwards[:p]] == [(d, j) for j in range(p)]


@contextmanager
def _grid_alone():
    """interleaved-zb without its sequenced points (its grid alone), within the block."""
    from zbopt.heuristics import interleaved_zb as module
    original = module.sequenced
    module.sequenced = lambda instance: []
    try:
        yield
    finally:
        module.sequenced = original


def test_the_two_pools_share_one_refinement_allowance(monkeypatch):
    # interleaved-zb refines its grid and its sequenced points apart; each gets half the
    # local search's re-timings one refine_best() gets alone, so the two cost what one did
    from zbopt.heuristics import refine as module
    given = []
    original = module.local_search.Allowance

    class Recorded(original):
        def __init__(self, retimes):
            given.append(retimes)
            super().__init__(retimes)

    monkeypatch.setattr(module.local_search, "Allowance", Recorded)
    instance = Instance(devices=4, microbatches=8, t_f=18513, t_b=18086, t_w=9331, comm=626,
                        m_b=201216, m_w=73728, memory_cap="1p").with_placement("interleaved", 2)
    full = min(module.MOST, module.TOTAL // instance.num_passes)
    interleaved_zb(instance)
    assert given == [full // 2, full // 2]
    given.clear()
    interleaved_zb_1p(instance)
    assert given == [full // 2, full // 2]
