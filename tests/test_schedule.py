"""The evaluator and the validator: timing by hand, every fault named, blocks and release, and
the evaluator against a straightforward reference on random orders."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbopt.errors import ZboptError
from zbopt.families import generate
from zbopt.instance import Instance, within_cap
from zbopt.passes import dependencies, format_pass, item_duration, item_memory, lag
from zbopt.schedule import Schedule, _table, evaluate, format_item, fused, parse_item, validate
from zbopt.sizes import readable


def tiny(**kw):
    return Instance(**{"devices": 2, "microbatches": 1, "t_f": 2, "t_b": 3, "t_w": 1,
                       "comm": 1, "m_b": 4, "m_w": 1, **kw})


def test_timing_by_hand():
    inst = tiny()
    sched = Schedule.build([["0F0", "0B0", "0W0"], ["1F0", "1B0", "1W0"]])
    tl = evaluate(inst, sched)
    # 0F0 [0,2]; comm 1 -> 1F0 [3,5]; 1B0 [5,8]; 1W0 [8,9]; comm -> 0B0 [9,12]; 0W0 [12,13]
    assert tl.start[(1, 0, "F")] == 3 and tl.end[(1, 0, "B")] == 8
    assert tl.start[(0, 0, "B")] == 9 and tl.end[(0, 0, "W")] == 13
    assert tl.makespan == 13
    assert tl.span == 13  # device 0: 0..13; device 1: 3..9
    assert tl.ideal == 6 and tl.bubble_rate == pytest.approx(7 / 13)
    assert tl.busy == (6, 6) and tl.idle == (7, 7)
    assert tl.peak_memory == (4, 4)
    # memory curve: F adds at its start, B frees m_b - m_w at its end, W frees m_w at its end
    assert tl.memory_curve[0] == ((0.0, 0), (0, 4), (12, 1), (13, 0))


def test_fused_backward_releases_gradient_at_block_end():
    inst = tiny()
    split = evaluate(inst, Schedule.build([["0F0", "0B0", "0W0"], ["1F0", "1B0", "1W0"]]))
    fuse = evaluate(inst, Schedule.build([["0F0", "0B0", "0W0"], ["1F0", fused(1, 0)]]))
    assert split.start[(0, 0, "B")] == 9
    assert fuse.start[(0, 0, "B")] == 10  # waits for the whole full backward of stage 1


def test_overlapped_block_and_overlap_factor():
    inst = Instance(devices=1, microbatches=2, t_f=2, t_b=3, t_w=1, overlap=0.5)
    sched = Schedule.build([["0F0", "0B0", [(0, 1, "F"), (0, 0, "W")], "0B1", "0W1"]])
    tl = evaluate(inst, sched)
    # block F1 + W0: 2 + 1 - 0.5 * min(2, 1) = 2.5
    assert tl.item_times[0][2] == (5, 7.5)
    assert tl.makespan == 7.5 + 3 + 1


def test_release_delays_first_pass():
    inst = tiny()
    sched = Schedule.build([["0F0", "0B0", "0W0"], ["1F0", "1B0", "1W0"]], release=[0, 4])
    tl = evaluate(inst, sched)
    assert tl.start[(1, 0, "F")] == 4 and tl.makespan == 14


def test_validator_names_each_fault():
    inst = tiny(microbatches=2)
    good = generate("1f1b", inst)
    assert validate(inst, good) == []
    rows = good.text()
    missing = Schedule.build([rows[0][:-1], rows[1]])
    assert "2 pass(es) missing: 0B1, 0W1" in validate(inst, missing)
    duplicated = Schedule.build([rows[0] + ["0F0"], rows[1]])
    assert any("0F0 appears 2 times" in p for p in validate(inst, duplicated))
    misplaced = Schedule.build([rows[0] + ["1F0"], [r for r in rows[1] if r != "1F0"]])
    assert any("1F0 is on device 0 but stage 1 lives on device 1" in p
               for p in validate(inst, misplaced))
    unknown = Schedule.build([rows[0] + ["0F9"], rows[1]])
    assert any("0F9 is not in the instance" in p for p in validate(inst, unknown))
    # many strangers or repeats: one line each kind, the first few named, the rest counted
    strangers = [f"0F{j}" for j in range(9, 27)]
    many = Schedule.build([rows[0] + strangers, rows[1]])
    [line] = [p for p in validate(inst, many) if "not in the instance" in p]
    assert line == "18 passes are not in the instance: " + ", ".join(strangers[:10]) + \
        " and 8 more"
    repeats = Schedule.build([rows[0] * 2, rows[1] * 2])  # 12 passes twice each
    lines = [p for p in validate(inst, repeats) if "appear" in p]
    assert len(lines) == 11 and lines[-1] == "2 more pass(es) appear more than once"
    # device 1 runs its backward before its forward arrives: each device's stuck pass is named
    deadlock = Schedule.build([["0F0", "0B0", "0W0", "0F1", "0B1", "0W1"],
                               ["1B0", "1F0", "1W0", "1F1", "1B1", "1W1"]])
    [message] = validate(inst, deadlock)
    assert "deadlocks" in message and "device 1 is stuck on 1B0 (waits for 1F0)" in message
    assert "device 0 is stuck on 0B0" in message
    with pytest.raises(ZboptError, match="deadlocks"):
        evaluate(inst, deadlock)
    capped = inst.with_cap(4)  # one activation: 1F1B's two in-flight F on device 0 exceed it
    over = validate(capped, generate("gpipe", capped))
    assert "device 0 holds 8 > cap 4 after 0F1" in over
    assert not evaluate(capped, generate("gpipe", capped)).fits_cap


def test_parse_and_text_round_trip():
    inst = tiny(microbatches=3)
    sched = generate("1f1b", inst)
    assert Schedule.from_text(sched.text()).orders == sched.orders
    assert parse_item("(0F3;3B1)") == ((0, 3, "F"), (3, 1, "B"))
    with pytest.raises(ZboptError, match="is not a pass"):
        parse_item("0X1")


# ----- the evaluator against a straightforward reference, on random orders -------------------

def reference(instance: Instance, schedule: Schedule):
    """Timing, memory and deadlock by the rules of passes.py, the plain way: sweep the devices,
    run each one's next item once everything it waits for has run, until nothing moves."""
    where = {p: (d, i) for d, order in enumerate(schedule.orders)
             for i, item in enumerate(order) for p in item}
    finish: dict[tuple[int, int], float] = {}
    times = [[] for _ in schedule.orders]
    moved = True
    while moved:
        moved = False
        for d, order in enumerate(schedule.orders):
            i = len(times[d])
            if i == len(order):
                continue
            needs = [(q, p) for p in order[i] for q in dependencies(instance, p)
                     if where[q] != (d, i)]
            if any(where[q] not in finish for q, _ in needs):
                continue
            begin = times[d][-1][1] if i else (
                float(schedule.release[d]) if schedule.release else 0.0)
            for q, p in needs:
                begin = max(begin, finish[where[q]] + lag(instance, q, p))
            finish[d, i] = begin + item_duration(instance, order[i])
            times[d].append((begin, finish[d, i]))
            moved = True
    stuck = []
    for d, order in enumerate(schedule.orders):
        i = len(times[d])
        if i < len(order):
            waits = [format_pass(q) for p in order[i] for q in dependencies(instance, p)
                     if where[q] != (d, i) and where[q] not in finish]
            stuck.append(f"device {d} is stuck on {format_item(order[i])} (waits for "
                         f"{', '.join(waits) or 'an earlier pass on its device'})")
    if stuck:
        return "the order deadlocks: " + "; ".join(stuck)
    start, end, curves, peaks, violations = {}, {}, [], [], []
    for d, order in enumerate(schedule.orders):
        level = peak = instance.static_memory[d]
        curve = [(0.0, level)]
        for item, (t0, t1) in zip(order, times[d]):
            raw = sum(instance.cost(s, k) for s, _, k in item) or 1.0
            cursor = t0
            for p in item:
                length = instance.cost(p[0], p[2]) * (t1 - t0) / raw if len(item) > 1 else t1 - t0
                start[p], end[p] = cursor, cursor + length
                cursor += length
            add, release = item_memory(instance, item)
            if add:
                level += add
                curve.append((t0, level))
            if level > peak:
                peak = level
                cap = instance.cap[d] if instance.cap else None
                if cap is not None and not within_cap(level, cap) and len(violations) < 20:
                    violations.append(f"device {d} holds {readable(level, instance.memory_unit)} "
                                      f"> cap {readable(cap, instance.memory_unit)} "
                                      f"after {format_item(item)}")
            if release:
                level -= release
                curve.append((t1, level))
        curves.append(tuple(curve))
        peaks.append(peak)
    busy = []
    for row in times:
        total = 0.0
        for t0, t1 in row:
            total += t1 - t0
        busy.append(total)
    spans = [(row[0][0], row[-1][1]) if row else (0.0, 0.0) for row in times]
    return {"item_times": tuple(tuple(row) for row in times), "start": start, "end": end,
            "makespan": max(e for _, e in spans), "span": max(e - s for s, e in spans),
            "busy": tuple(busy), "device_span": tuple(spans), "peak_memory": tuple(peaks),
            "memory_curve": tuple(curves), "cap_violations": tuple(violations),
            "fits_cap": instance.cap is None or all(map(within_cap, peaks, instance.cap))}


def random_order(instance: Instance, rng: random.Random, fuse: float, overlap: float,
                 swap: bool, release: bool) -> Schedule:
    """Passes in a random order that respects their dependencies, then (as asked) adjacent B
    and W fused, adjacent passes of two micro-batches made one block, two items swapped (which
    may deadlock) and random device release times."""
    after: dict[tuple, list] = {}
    left = {}
    for p in instance.passes():
        left[p] = len(dependencies(instance, p))
        for q in dependencies(instance, p):
            after.setdefault(q, []).append(p)
    ready = [p for p, n in left.items() if n == 0]
    orders: list[list[tuple]] = [[] for _ in range(instance.devices)]
    while ready:
        p = ready.pop(rng.randrange(len(ready)))
        orders[instance.device_of(p[0])].append((p,))
        for q in after.get(p, ()):
            left[q] -= 1
            if left[q] == 0:
                ready.append(q)
    for order in orders:
        i = 0
        while i + 1 < len(order):
            (a,), (b,) = order[i], order[i + 1]
            if (a[2] == "B" and b == (a[0], a[1], "W") and rng.random() < fuse) or (
                    a[1] != b[1] and "F" in (a[2], b[2]) and rng.random() < overlap):
                order[i:i + 2] = [(a, b)]
            i += 1
    if swap:
        order = rng.choice([o for o in orders if o] or [[]])
        if len(order) > 1:
            i, j = rng.sample(range(len(order)), 2)
            order[i], order[j] = order[j], order[i]
    starts = [rng.choice([0, 0.5, 2, 3]) for _ in orders] if release else None
    return Schedule.build(orders, release=starts)


COSTS = st.sampled_from([0, 1, 2, 3, 0.1, 0.7, 2.5])
POSITIVE = st.sampled_from([1, 2, 0.3])  # t_b: no instance has only zero costs


@st.composite
def random_cases(draw):
    placement = draw(st.sampled_from(["contiguous", "interleaved", "v", "dualpipe"]))
    p = draw(st.integers(1, 4))
    m = draw(st.integers(1, 6))
    if placement == "dualpipe":
        m = 2 * max(1, m // 2)
    chunks = draw(st.integers(2, 3)) if placement == "interleaved" else 0
    stages = p * (chunks or (1 if placement == "contiguous" else 2))
    parts = p if placement == "dualpipe" else stages
    per_stage = st.lists(COSTS, min_size=parts, max_size=parts)
    m_b = draw(st.lists(st.sampled_from([1, 2, 0.3, 0.5]), min_size=parts, max_size=parts))
    instance = Instance(
        devices=p, microbatches=m, placement=placement, chunks=chunks,
        t_f=draw(st.one_of(COSTS, per_stage)),
        t_b=draw(st.one_of(POSITIVE, st.lists(POSITIVE, min_size=parts, max_size=parts))),
        t_w=draw(st.one_of(COSTS, per_stage)), comm=draw(st.sampled_from([0, 1, 0.2])), m_b=m_b,
        m_w=[draw(st.sampled_from([0, x / 3, x])) for x in m_b],
        static_memory=draw(st.sampled_from([0, 1, 0.5])),
        overlap=draw(st.sampled_from([0.0, 0.5])) if placement == "dualpipe" else 0.0)
    try:  # a cap that would not hold one activation is refused; such a case runs uncapped
        instance = instance.with_cap(draw(st.sampled_from([None, "1p", "2p", 2.5])))
    except ZboptError:
        pass
    rng = random.Random(draw(st.integers(0, 2**32)))
    schedule = random_order(instance, rng, fuse=draw(st.sampled_from([0, 0.5, 1])),
                            overlap=draw(st.sampled_from([0, 0.3])), swap=draw(st.booleans()),
                            release=draw(st.booleans()))
    return instance, schedule


@settings(max_examples=300, deadline=None)
@given(random_cases())
def test_evaluate_equals_a_straightforward_reference(case):
    instance, schedule = case
    expected = reference(instance, schedule)
    if isinstance(expected, str):  # a deadlock: the same devices, items and waits named
        with pytest.raises(ZboptError) as err:
            evaluate(instance, schedule)
        assert str(err.value) == expected
        assert validate(instance, schedule) == [expected]
        return
    timeline = evaluate(instance, schedule)
    for key, value in expected.items():
        assert getattr(timeline, key) == value, key
        assert repr(getattr(timeline, key)) == repr(value), key  # ints stay ints, floats floats
    assert list(timeline.start) == list(expected["start"])  # in device, then item order
    assert validate(instance, schedule) == list(expected["cap_violations"])


@settings(max_examples=100, deadline=None)
@given(random_cases(), st.data())
def test_structural_faults_are_named_whatever_the_order(case, data):
    instance, schedule = case
    rows = [list(order) for order in schedule.orders]
    d = data.draw(st.sampled_from([d for d, order in enumerate(rows) if order]))
    i = data.draw(st.integers(0, len(rows[d]) - 1))
    item = rows[d][i]
    fault = data.draw(st.sampled_from(["drop", "repeat", "move", "unknown"]))
    if fault == "drop":
        del rows[d][i]
        expected = f"pass(es) missing: {', '.join(sorted_text(item))}" if len(item) == 1 else "missing"
    elif fault == "repeat":
        rows[d].append(item)
        expected = f"pass {format_pass(item[0])} appears 2 times"
    elif fault == "move" and instance.devices > 1:
        rows[(d + 1) % instance.devices].append(rows[d].pop(i))
        expected = f"pass {format_pass(item[0])} is on device {(d + 1) % instance.devices} but"
    else:
        rows[d].append(((instance.num_stages, 0, "F"),))
        expected = f"pass {instance.num_stages}F0 is not in the instance"
    broken = Schedule(tuple(tuple(order) for order in rows), release=schedule.release)
    problems = validate(instance, broken)
    assert any(expected in p for p in problems), (expected, problems)
    with pytest.raises(ZboptError, match="invalid schedule"):
        evaluate(instance, broken)


def sorted_text(item) -> list[str]:
    return [format_pass(p) for p in sorted(item)]


@settings(max_examples=40, deadline=None)
@given(random_cases())
def test_the_pass_table_holds_the_rules_of_every_pass(case):
    instance, _ = case
    table = _table(instance)
    assert table.passes == tuple(instance.passes())
    for i, p in enumerate(table.passes):
        before = dependencies(instance, p)
        assert ([table.passes[table.dep[i]]] if table.dep[i] >= 0 else []) == before
        assert table.gap[i] == (lag(instance, before[0], p) if before else 0)
        assert table.cost[i] == instance.cost(p[0], p[2])
        assert (table.add[i], table.release[i]) == item_memory(instance, (p,))
        assert table.device[i] == instance.device_of(p[0])
