"""Handwritten families against the seed articles' closed forms (comm = 0), and their errors."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zbopt.errors import ZboptError
from zbopt.families import families, generate, get_family, prepare
from zbopt.instance import Instance
from zbopt.schedule import evaluate, validate

costs = st.integers(min_value=1, max_value=9)


def bubble(instance, name):
    timeline = evaluate(instance, generate(name, instance))
    assert validate(instance, timeline.schedule) == []
    return timeline.span - timeline.ideal, timeline


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 6), extra=st.integers(0, 8), t_f=costs, t_b=costs, t_w=costs)
def test_gpipe_and_1f1b_bubble_and_memory(p, extra, t_f, t_b, t_w):
    m = p + extra
    instance = Instance(devices=p, microbatches=m, t_f=t_f, t_b=t_b, t_w=t_w, m_b=1, m_w=0)
    for name, in_flight in (("gpipe", m), ("1f1b", p)):
        gap, timeline = bubble(instance, name)
        assert gap == (p - 1) * (t_f + t_b + t_w), name
        assert timeline.peak_memory[0] == in_flight, name


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 5), v=st.integers(2, 4), groups=st.integers(1, 3),
       c_f=costs, c_b=costs, c_w=costs)
def test_interleaved_bubble_divided_by_v(p, v, groups, c_f, c_b, c_w):
    # per-chunk costs c, so the device's full costs are v*c: bubble (p-1)(t_f+t_b+t_w)/v
    m = p * groups
    instance = Instance(devices=p, microbatches=m, placement="interleaved", chunks=v,
                        t_f=c_f, t_b=c_b, t_w=c_w, m_b=1, m_w=0)
    gap, timeline = bubble(instance, "interleaved-1f1b")
    assert gap == (p - 1) * v * (c_f + c_b + c_w) / v
    # device 0 peaks at p + (p-1)/v full-stage activations = v*p + p - 1 chunk activations
    # (all v*m when there are fewer micro-batches than that warm-up)
    assert timeline.peak_memory[0] == min(v * p + p - 1, v * m)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 6), extra=st.integers(0, 8), t_f=costs, t_b=costs, t_w=costs)
def test_zero_bubble_handcrafted(p, extra, t_f, t_b, t_w):
    t_w = min(t_w, t_f, t_b)  # the articles state the formulas for t_w <= min(t_f, t_b)
    m = 2 * p + extra
    instance = Instance(devices=p, microbatches=m, t_f=t_f, t_b=t_b, t_w=t_w, m_b=1, m_w=0)
    gap, timeline = bubble(instance, "zb-h1")
    assert gap == (p - 1) * (t_f + t_b - t_w)
    assert timeline.peak_memory[0] == p  # in-flight activations (F done, B not done)
    gap, timeline = bubble(instance, "zb-h2")
    assert gap == (p - 1) * (t_f + t_b - 2 * t_w)
    assert max(timeline.peak_memory) == 2 * p - 1


@settings(max_examples=20, deadline=None)
@given(p=st.integers(2, 6), extra=st.integers(0, 6))
def test_zb_h1_memory_with_weight_gradients(p, extra):
    # the article: stage i (from 1) peaks at (p-i+1) M_B + (i-1) M_W <= p M_B
    m = 2 * p + extra
    instance = Instance(devices=p, microbatches=m, m_b=3, m_w=1)
    timeline = evaluate(instance, generate("zb-h1", instance))
    assert list(timeline.peak_memory) == [(p - i + 1) * 3 + (i - 1) * 1 for i in range(1, p + 1)]


def test_interleaved_group_size_preconditions():
    instance = Instance(devices=4, microbatches=12, placement="interleaved", chunks=2)
    with pytest.raises(ZboptError, match="multiple of the group size"):
        generate("interleaved-1f1b", instance, group_size=8)
    with pytest.raises(ZboptError, match="N >= p"):
        generate("interleaved-1f1b", instance, group_size=2)
    # breadth-first (N = m) holds more activations than depth-first (N = p), same work
    depth = evaluate(instance, generate("interleaved-1f1b", instance))
    breadth = evaluate(instance, generate("interleaved-1f1b", instance, group_size=12))
    assert breadth.peak_memory[0] > depth.peak_memory[0]
    assert breadth.ideal == depth.ideal


def test_interleaved_needs_multiple_of_p():
    instance = Instance(devices=4, microbatches=6, placement="interleaved", chunks=2)
    with pytest.raises(ZboptError, match="multiple"):
        generate("interleaved-1f1b", instance)


def test_registry_errors_and_placement():
    with pytest.raises(ZboptError, match="unknown schedule 'nope'"):
        get_family("nope")
    contiguous = Instance(devices=4, microbatches=8)
    with pytest.raises(ZboptError, match="placement"):
        generate("interleaved-1f1b", contiguous)
    placed = prepare(get_family("interleaved-1f1b"), contiguous)
    assert placed.placement == "interleaved" and placed.chunks == 2
    # re-placing splits each device's work evenly: total work per device unchanged
    assert sum(placed.t_f[s] for s in placed.stages_of(0)) == contiguous.t_f[0]
    assert {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2"} <= set(families())


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "zb-h1", "zb-h2"])
def test_fewer_microbatches_than_devices(name):
    instance = Instance(devices=6, microbatches=2, t_f=2, t_b=3, t_w=1, comm=1)
    timeline = evaluate(instance, generate(name, instance))
    assert validate(instance, timeline.schedule) == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(1, 5), extra=st.integers(0, 8), costs=st.tuples(*[st.integers(0, 5)] * 3),
       comm=st.sampled_from([0, 1]), cap=st.sampled_from(["1p", "1.5p", None]))
def test_v_greedy_never_worse_than_zb_v(p, extra, costs, comm, cap):
    if not sum(costs):
        costs = (1, 1, 1)
    t_f, t_b, t_w = costs
    instance = Instance(devices=p, microbatches=p + extra, t_f=t_f, t_b=t_b, t_w=t_w, comm=comm,
                        m_b=2, m_w=1, memory_cap=cap).with_placement("v")
    zbv = evaluate(instance, generate("zb-v", instance))
    if zbv.fits_cap:
        greedy = evaluate(instance, generate("v-greedy", instance))
        assert greedy.fits_cap and greedy.span <= zbv.span


# ----- zb-v: the shortcuts of its search (bounded reruns, twin combinations) --------------

@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(1, 5), extra=st.integers(0, 8), costs=st.tuples(*[st.integers(0, 5)] * 3),
       comm=st.sampled_from([0, 1]))
def test_zb_v_search_shortcuts_give_what_the_full_search_gives(p, extra, costs, comm):
    from zbopt.families import zbv

    if not sum(costs):
        costs = (1, 1, 1)
    instance = Instance(devices=p, microbatches=2 * p + extra, t_f=costs[0], t_b=costs[1],
                        t_w=costs[2], comm=comm, m_b=2, m_w=1).with_placement("v")
    plan = zbv.uniform_twin(instance)
    try:
        chosen = generate("zb-v", instance)
    except ZboptError:
        return
    best = None
    for fill_b in (True, False):
        for fill_f in (True, False):
            # every combination, every rerun to its end, no bound
            run = zbv._VRounds(instance, plan, fill_f, fill_b, None).run()
            while True:
                rerun = zbv._VRounds(instance, plan, fill_f, fill_b, run.waits).run()
                bounded = zbv._VRounds(instance, plan, fill_f, fill_b, run.waits,
                                       run.worst_wait).run()
                # a bounded rerun stops exactly when its worst wait rises to the bound
                if rerun.worst_wait >= run.worst_wait and rerun.worst_wait > 0:
                    assert bounded is None
                else:
                    assert bounded == rerun
                if not rerun.worst_wait < run.worst_wait:
                    break
                run = rerun
            if best is None or run.worst_wait < best.worst_wait:
                best = run
    assert chosen.orders == tuple(tuple((q,) for q in order) for order in best.orders)
