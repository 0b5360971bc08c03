"""The greedy heuristics (zb-greedy, zb-1p, zb-2p, v-greedy, v-half, v-min): reference rows,
validity and caps over random instances, errors for impossible caps."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zbopt.compare import compare, run_method
from zbopt.errors import ZboptError
from zbopt.families import families, generate
from zbopt.heuristics import _engine, _search
from zbopt.heuristics import v_greedy as vg
from zbopt.heuristics import zb_greedy as zb
from zbopt.instance import Instance, load_instance
from zbopt.schedule import Schedule, evaluate, validate

GREEDY = ("zb-greedy", "zb-1p", "zb-2p", "v-greedy", "v-half", "v-min")


def paper_instance(row, cap):
    return Instance(devices=row["p"], microbatches=row["m"], t_f=row["t_f"], t_b=row["t_b"],
                    t_w=row["t_w"], comm=row["comm"], m_b=row["m_b"], m_w=row["m_w"],
                    memory_cap=cap)


def judged(name, instance):
    """The timeline of `name`'s schedule on `instance`."""
    return evaluate(instance, generate(name, instance))


# ----- reference rows ---------------------------------------------------------------------

@pytest.mark.parametrize("index", range(6))
def test_paper_table5_zb_1p_and_2p_beat_or_equal_the_authors(paper_rows, index):
    row = paper_rows[index]
    for cap, name, key in (("1p", "zb-1p", "zb_1p_heuristic"), ("2p", "zb-2p", "zb_2p_heuristic")):
        instance = paper_instance(row, cap)
        for method in (name, "zb-greedy"):  # zb-greedy reads the instance's cap
            timeline = judged(method, instance)
            assert timeline.fits_cap, (method, cap)
            assert validate(instance, timeline.schedule) == []
            assert timeline.span <= row[key], (method, cap, timeline.span, row[key])


def test_unit_cost_grid_every_cap_column(unit_grid):
    for row in unit_grid:
        base = Instance(devices=row["p"], microbatches=row["m"], t_f=1, t_b=1, t_w=1, comm=0,
                        m_b=2, m_w=1)
        for k in ("1p", "1.5p", "2p", "3p"):
            instance = base.with_cap(k)
            timeline = judged("zb-greedy", instance)
            assert timeline.fits_cap and validate(instance, timeline.schedule) == []
            assert max(timeline.peak_memory) <= float(k[:-1]) * row["p"] * 2
            assert timeline.span <= row[f"zb_{k}"], (row, k, timeline.span)


def test_zb_names_schedule_for_their_own_cap_whatever_the_instance_says(paper_rows):
    row = paper_rows[0]
    unlimited = paper_instance(row, None)
    one_p = unlimited.with_cap("1p").cap[0]
    for name, k in (("zb-1p", 1), ("zb-2p", 2)):
        timeline = evaluate(unlimited, generate(name, unlimited))
        assert max(timeline.peak_memory) <= k * one_p
    # judged against the instance's own (smaller) cap, zb-2p does not fit: compare says so
    row_2p = run_method("zb-2p", paper_instance(row, "1p"))
    assert row_2p.applies and not row_2p.timeline.fits_cap
    assert run_method("zb-1p", paper_instance(row, "1p")).timeline.fits_cap


def test_memory_cap_keyword_overrides(paper_rows):
    instance = paper_instance(paper_rows[0], None)
    cap = instance.with_cap("1.5p").cap[0]
    schedule = generate("zb-greedy", instance, memory_cap="1.5p")
    assert max(evaluate(instance, schedule).peak_memory) <= cap
    tighter = generate("zb-2p", instance, memory_cap="1p")
    assert max(evaluate(instance, tighter).peak_memory) <= instance.with_cap("1p").cap[0]


def test_more_memory_never_hurts_on_the_paper_settings(paper_rows):
    row = paper_rows[1]
    spans = [judged("zb-greedy", paper_instance(row, k)).span for k in ("1p", "1.5p", "2p", "3p")]
    assert spans == sorted(spans, reverse=True)
    assert spans[-1] < spans[0]  # the extra memory is actually used


# ----- property tests ---------------------------------------------------------------------

@st.composite
def instances(draw, max_p=5):
    p = draw(st.integers(2, max_p))
    m = draw(st.integers(1, 3 * p))
    cost = st.integers(0, 12)  # zero-cost passes included: ties at one instant
    t_f = draw(st.lists(cost, min_size=p, max_size=p))
    t_b = draw(st.lists(cost, min_size=p, max_size=p))
    t_w = draw(st.lists(cost, min_size=p, max_size=p))
    if not sum(t_f + t_b + t_w):
        t_b[0] = 1
    m_b = draw(st.lists(st.integers(2, 6), min_size=p, max_size=p))
    m_w = [draw(st.integers(0, b)) for b in m_b]
    comm = draw(st.integers(0, 4))
    static = draw(st.lists(st.integers(0, 3), min_size=p, max_size=p))  # weights etc.
    instance = Instance(devices=p, microbatches=m, t_f=t_f, t_b=t_b, t_w=t_w, comm=comm,
                        m_b=m_b, m_w=m_w, static_memory=static)
    # caps: unlimited, a multiple of p, or per device an absolute number in a feasible range
    kind = draw(st.sampled_from(["none", "kp", "absolute"]))
    if kind == "kp":
        k = draw(st.sampled_from(["1p", "1.5p", "2p", "3p"]))
        try:
            return instance.with_cap(k)
        except ZboptError:
            return instance  # below one activation somewhere: covered by the error tests
    if kind == "absolute":
        caps = [static[d] + m_b[d] + draw(st.integers(0, 4 * max(m_b))) for d in range(p)]
        return instance.with_cap(caps)
    return instance


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=instances())
def test_zb_greedy_is_complete_deadlock_free_and_within_cap(instance):
    schedule = generate("zb-greedy", instance)
    assert validate(instance, schedule) == []  # every pass once, no deadlock, within cap
    timeline = evaluate(instance, schedule)
    assert timeline.fits_cap
    for name in ("zb-h1", "zb-h2"):  # never worse than a handcrafted order that fits
        other = evaluate(instance, generate(name, instance))
        if other.fits_cap:
            assert timeline.span <= other.span, name


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=instances(max_p=4), factor=st.sampled_from([None, 1.0, 1.5, 3.0]))
def test_v_greedy_is_complete_deadlock_free_and_within_cap(instance, factor):
    placed = instance.with_cap(None).with_placement("v")
    if factor is not None:
        # between the least a V schedule needs and a generous cap, per device
        placed = placed.with_cap([factor * need for need in vg.min_v_cap(placed)])
    schedule = generate("v-greedy", placed)
    assert validate(placed, schedule) == []
    assert evaluate(placed, schedule).fits_cap
    unit = placed.devices * placed.activation_unit
    for name, fraction in (("v-half", 1 / 2), ("v-min", 1 / 3)):
        other = generate(name, placed)
        assert validate(placed.with_cap(None), other) == []  # complete, no deadlock
        peaks = evaluate(placed, other).peak_memory
        for d, (peak, need) in enumerate(zip(peaks, vg.min_v_cap(placed))):  # its own cap
            assert peak <= max(fraction * unit + placed.static_memory[d], need) + 1e-9


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=instances(max_p=4), v=st.booleans())
def test_simulator_estimate_is_exactly_the_evaluated_span(instance, v):
    # the grid is pruned by the simulator's estimate: this is why that is safe
    if v:
        instance = instance.with_cap(None).with_placement("v")
        policies = vg.grid(instance)
    else:
        policies = zb.grid(instance)
    for policy in policies[:12]:
        outcome = _engine.run(instance, instance.cap, policy)
        assert outcome is not None
        timeline = evaluate(instance, Schedule.build(outcome.orders))
        assert timeline.span == pytest.approx(outcome.estimate)
        assert timeline.fits_cap


# ----- errors: caps no schedule can meet -----------------------------------------------

def test_cap_below_one_activation_names_the_needed_cap():
    instance = Instance(devices=3, microbatches=6, m_b=[2, 5, 3], m_w=1)
    with pytest.raises(ZboptError, match=r"no schedule fits memory_cap 4.*at least 5"):
        generate("zb-greedy", instance, memory_cap=4)
    # "1p" = 3 * 2 = 6 fits stage 1's 5; with m_b[1] = 7 it does not
    heavy = Instance(devices=3, microbatches=6, m_b=[2, 7, 3], m_w=1)
    with pytest.raises(ZboptError, match=r"zb-1p.*at least 7"):
        generate("zb-1p", heavy)
    assert "at least 7" in run_method("zb-1p", heavy).message


def test_v_cap_below_both_chunks_names_the_needed_cap():
    instance = Instance(devices=2, microbatches=4, m_b=4, m_w=1).with_placement("v")
    # each chunk holds 2; a V device needs both chunks of one micro-batch: 4
    assert vg.min_v_cap(instance) == [4, 4]
    bad = instance.with_cap(3)
    with pytest.raises(ZboptError, match=r"v-greedy: no schedule.*at least 4"):
        generate("v-greedy", bad)
    row = run_method("v-greedy", bad)  # compare lists it with the reason
    assert not row.applies and "at least 4" in row.message
    assert evaluate(instance.with_cap(4), generate("v-greedy", instance.with_cap(4))).fits_cap


def test_wrong_placement_is_an_error():
    contiguous = Instance(devices=2, microbatches=4)
    with pytest.raises(ZboptError, match="placement 'v'"):
        vg.v_greedy(contiguous)
    with pytest.raises(ZboptError, match="placement 'contiguous'"):
        zb.zb_greedy(contiguous.with_placement("v"))


# ----- registry, compare, V quality ------------------------------------------------------

def test_registered_as_heuristics_and_listed_by_compare():
    registry = families()
    for name in GREEDY:
        assert registry[name].kind == "heuristic"
    assert registry["v-greedy"].placement == "v"
    rows = {r.method: r for r in compare(Instance(devices=4, microbatches=8, memory_cap="1p"))}
    for name in GREEDY:
        assert rows[name].applies, (name, rows[name].message)
        assert rows[name].timeline.fits_cap or name == "zb-2p"  # 2p > the instance's 1p
    dual = compare(Instance(devices=4, microbatches=8, placement="dualpipe"), list(GREEDY))
    assert all(not r.applies and "placement" in r.message for r in dual)


V_CASES = [(Instance(devices=p, microbatches=m, t_f=2, t_b=2, t_w=2, m_b=2, m_w=1), cap)
           for p, m in ((2, 4), (4, 8), (4, 12)) for cap in ("1p", "0.5p")]


@pytest.mark.parametrize("instance, cap", V_CASES + [(load_instance("zb-1.5b-p8-m24"), "0.5p"),
                                                     (load_instance("zb-6.2b-p8-m24"), "0.5p")])
def test_v_greedy_never_worse_than_a_handwritten_v_order_that_fits(instance, cap):
    # at half of 1F1B's memory on the paper's models only the V-Min block fits of the
    # handwritten orders, and the greedy's grid alone was 2-5% longer than it
    placed = instance.with_placement("v").with_cap(cap)
    greedy = evaluate(placed, generate("v-greedy", placed))
    assert greedy.fits_cap
    names = [name for name, m in families().items() if m.placement == "v"]
    assert {"zb-v", "v-min-block", "v-half-block"} <= set(names)
    for name in names:
        handcrafted = evaluate(placed, generate(name, placed))
        if handcrafted.fits_cap:
            assert greedy.span <= handcrafted.span + 1e-6, name


def test_v_half_and_v_min_use_less_memory_than_v_greedy():
    instance = Instance(devices=6, microbatches=18, t_f=2, t_b=2, t_w=2, m_b=2, m_w=1,
                        memory_cap="1p").with_placement("v")
    peaks = {name: max(evaluate(instance, generate(name, instance)).peak_memory)
             for name in ("v-greedy", "v-half", "v-min")}
    one_p = instance.cap[0]
    assert peaks["v-half"] <= one_p / 2 and peaks["v-min"] <= one_p / 3 + 1e-9
    assert peaks["v-min"] <= peaks["v-half"] <= peaks["v-greedy"]


def test_large_instances_run_a_grid_prefix_and_keep_the_best_estimate(monkeypatch):
    instance = Instance(devices=6, microbatches=24, t_f=3, t_b=4, t_w=2, comm=1, m_b=2, m_w=1,
                        memory_cap="2p")
    full = evaluate(instance, generate("zb-greedy", instance))
    monkeypatch.setattr(zb, "SIMULATION_BUDGET", instance.num_passes)
    monkeypatch.setattr(_search, "LARGE", 1)
    assert len(zb.budgeted(zb.grid(instance), instance.num_passes)) == zb.MIN_POLICIES
    quick = evaluate(instance, generate("zb-greedy", instance))
    assert quick.fits_cap and validate(instance, quick.schedule) == []
    assert full.span <= quick.span  # the full grid can only do better


def test_deterministic():
    instance = Instance(devices=4, microbatches=10, t_f=[3, 2, 4, 3], t_b=4, t_w=2, comm=1,
                        m_b=3, m_w=1, memory_cap="1.5p")
    first = generate("zb-greedy", instance)
    zb._RECENT.clear()  # a second search, not the remembered one
    assert generate("zb-greedy", instance) == first


def test_cli_compare_lists_the_greedy_methods_and_their_reasons(capsys, tmp_path):
    import json

    from zbopt.cli import main

    code = main(["compare", "--json", "--methods", ",".join(GREEDY)])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = {r["method"]: r for r in json.loads(out)}
    assert set(rows) == set(GREEDY)
    assert rows["zb-greedy"]["span"] <= 1310405 and rows["zb-greedy"]["fits_cap"]
    assert rows["v-greedy"]["placement"] == "v" and rows["v-greedy"]["fits_cap"]
    # a V instance whose cap is below both chunks of one micro-batch: listed with the reason
    inst = tmp_path / "v.toml"
    inst.write_text('devices = 2\nmicrobatches = 4\nplacement = "v"\nt_f = 1\nt_b = 1\nt_w = 1\n'
                    'm_b = 2\nmemory_cap = 3\n')
    code = main(["compare", str(inst), "--json", "--methods", "v-greedy,zb-greedy"])
    out, _ = capsys.readouterr()
    assert code == 0
    rows = {r["method"]: r for r in json.loads(out)}
    assert not rows["v-greedy"]["applies"] and "at least 4" in rows["v-greedy"]["message"]
    assert not rows["zb-greedy"]["applies"] and "placement" in rows["zb-greedy"]["message"]
    code = main(["compare", str(inst), "--methods", "v-greedy"])
    assert code == 0 and "v-greedy: does not apply" in capsys.readouterr().out


@pytest.mark.parametrize("costs", [dict(t_f=0, t_b=1, t_w=0), dict(t_f=1, t_b=0, t_w=0),
                                   dict(t_f=0, t_b=0, t_w=1)])
def test_zero_cost_passes(costs):
    for placement, names in (("contiguous", ("zb-greedy", "zb-1p", "zb-2p")),
                             ("v", ("v-greedy", "v-half", "v-min"))):
        instance = Instance(devices=3, microbatches=5, comm=1, m_b=2, m_w=1, memory_cap="1p",
                            **costs).with_placement(placement)
        for name in names:
            schedule = generate(name, instance)
            assert validate(instance.with_cap(None), schedule) == [], name


# ----- pruning: a bounded run gives up only when it cannot win --------------------------

@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=instances(max_p=4), v=st.booleans(), scale=st.sampled_from([0.0, 0.9, 1.0, 1.1]))
def test_bounded_run_is_the_full_run_or_certainly_above_the_bound(instance, v, scale):
    if v:
        instance = instance.with_cap(None).with_placement("v")
        policies = vg.grid(instance)[:4]
    else:
        policies = zb.grid(instance)[:4]
    for policy in policies:
        full = _engine.run(instance, instance.cap, policy)
        assert full is not None
        bound = scale * full.estimate
        with _engine.bounded(bound):
            cut = _engine.run(instance, instance.cap, policy)
        if cut is None:
            assert full.estimate > bound  # pruned: it could not have come in at or below
        else:
            assert cut == full
        if scale >= 1.0:
            assert cut == full  # a bound at or above its estimate never stops a run


def test_simulate_is_run_within_its_own_bound():
    # the engine's one-call surface (zbopt.heuristics.policy_search uses it): a topology reused, the
    # instance's cap, and a bound that replaces an enclosing one
    instance = Instance(devices=4, microbatches=8, t_f=[3, 4, 3, 5], t_b=4, t_w=2, comm=1,
                        m_b=2, m_w=1, memory_cap="1.5p")
    top = _engine.Topology(instance)
    for policy in zb.grid(instance)[:4]:
        full = _engine.run(instance, instance.cap, policy)
        assert full is not None and full.estimate > 0
        assert _engine.simulate(instance, policy, top) == full
        with _engine.bounded(0.0):
            assert _engine.simulate(instance, policy, top) == full
        assert _engine.simulate(instance, policy, top, bound=full.estimate) == full
        assert _engine.simulate(instance, policy, top, bound=0.5 * full.estimate) is None


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=instances(max_p=5))
def test_replay_refuses_orders_over_the_cap_before_simulating(instance):
    top = _engine.Topology(instance)
    for name in ("zb-h1", "zb-h2"):
        orders = [[item[0] for item in order] for order in generate(name, instance).orders]
        fits = evaluate(instance, Schedule.build(orders)).fits_cap
        simulated = _engine._Greedy(instance, top, instance.cap, _engine.Policy(),
                                    fixed=orders).go()
        # the shortcut answers what the simulation answers
        assert _engine.replay(instance, instance.cap, orders, top) == simulated
        if not fits:
            assert simulated is None


def test_best_of_with_pruning_picks_what_the_full_grid_picks(monkeypatch):
    # pruned candidates are the ones that could not be kept: same choice with pruning off
    instance = Instance(devices=6, microbatches=30, t_f=[3, 4, 3, 5, 3, 4], t_b=4, t_w=2, comm=1,
                        m_b=2, m_w=1, memory_cap="1.5p")
    unbounded = _engine.bounded
    for large in (_search.LARGE, 1):
        monkeypatch.setattr(_search, "LARGE", large)
        zb._RECENT.clear()
        pruned = generate("zb-greedy", instance)
        zb._RECENT.clear()
        with monkeypatch.context() as m:
            m.setattr(_engine, "bounded", lambda bound: unbounded(float("inf")))
            full = generate("zb-greedy", instance)
        assert pruned == full


def test_zb_greedy_under_a_2p_cap_is_zb_2p_searched_or_remembered():
    instance = Instance(devices=5, microbatches=15, t_f=[3, 2, 4, 3, 2], t_b=4, t_w=2, comm=1,
                        m_b=3, m_w=1, memory_cap="2p")
    zb._RECENT.clear()
    searched = generate("zb-2p", instance)
    remembered = generate("zb-greedy", instance)
    zb._RECENT.clear()
    assert remembered.orders == searched.orders == generate("zb-greedy", instance).orders
    assert (searched.method, remembered.method) == ("zb-2p", "zb-greedy")


# The 1.5B model's costs (Zero Bubble paper profile, p=8, m=32)
COSTS_15B = dict(t_f=18513, t_b=18086, t_w=9331, comm=626, m_b=201216, m_w=73728)


@pytest.mark.parametrize("p, m", [(8, 32), (16, 64)])
def test_zb_greedy_meets_the_first_b_wave_at_2p(p, m):
    # the wave's ramp as in-flight limits gives a schedule at the bound: optimal among
    # contiguous schedules, proven by the bound alone
    from zbopt import bounds
    instance = Instance(devices=p, microbatches=m, **COSTS_15B).with_cap("2p")
    timeline = evaluate(instance, zb.zb_greedy(instance))
    assert timeline.fits_cap
    assert timeline.span == bounds.first_b_wave(instance) > max(bounds.device_loads(instance))


def test_wave_policies_follow_the_grids_first_point_and_stay_within_their_budget(monkeypatch):
    instance = Instance(devices=8, microbatches=32, **COSTS_15B).with_cap("3p")
    policies = zb.wave_policies(instance)
    assert 2 <= len(policies) <= max(2, zb.WAVE_BUDGET // instance.num_passes)
    assert all(p.inflight is not None and len(p.inflight) == 8 for p in policies)
    assert zb.wave_policies(instance.with_placement("v")) == []
    # the search runs the grid's first point, then the wave settings (pruned at its estimate)
    tried = []
    run = zb._engine.run
    monkeypatch.setattr(zb._engine, "run", lambda i, c, pol, top=None: tried.append(pol) or run(i, c, pol, top))
    monkeypatch.setattr(zb, "schedule_bound", lambda instance: None)  # no early stop
    zb._search_grid(instance, "zb-greedy")
    first = zb.grid(instance)[0]
    waves = [p for p in policies if p != first]  # a wave setting can be the grid's first point
    assert tried[0] == first
    assert tried[1:1 + len(waves)] == waves
