"""The evaluator and the validator: timing by hand, every fault named, blocks and release."""

import pytest

from zbopt.errors import ZboptError
from zbopt.families import generate
from zbopt.instance import Instance
from zbopt.schedule import Schedule, evaluate, fused, parse_item, validate


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
