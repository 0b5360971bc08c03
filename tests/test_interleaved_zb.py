"""interleaved-zb: the zero-bubble greedy over v chunks fits every cap that admits a schedule."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zbopt import bounds
from zbopt.compare import compare
from zbopt.errors import ZboptError
from zbopt.heuristics.interleaved_zb import interleaved_zb, interleaved_zb_1p, min_interleaved_cap
from zbopt.instance import Instance
from zbopt.registry import get_method, run
from zbopt.schedule import evaluate, validate
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
