"""The lower bounds on instances of many chunks (far more than micro-batches): the closed states
of a micro-batch on a device are listed only where they are few, and whether they are is known
without listing one micro-batch's passes, let alone every pair of them. The values are the
ones the subset-testing enumeration gave; only the time changed."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bounds import instances

from zbopt import bounds
from zbopt.heuristics.list_scheduler import sequential_schedule
from zbopt.instance import Instance, load_instance, shipped_instances
from zbopt.registry import run
from zbopt.schedule import evaluate, validate

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _subset_states(instance: Instance, device: int, stage: int):
    """_closed_states as it was first written: every subset of the open passes, kept when no
    pair (ancestor, pass) has the pass in and the ancestor out; no early refusal."""
    mine = bounds._device_passes(instance, device, stage)
    position = bounds._shape(instance).position
    first = (stage, "F")
    before = [(a, b) for a in mine for b in mine if bounds._is_before(position, a, b)]
    ancestors = frozenset(a for a, b in before if b == first)
    base = ancestors | {first}
    rest = [q for q in mine if q not in base]
    if len(rest) > bounds.MAX_OPEN_PASSES:
        return None
    states = []
    for mask in range(1 << len(rest)):
        done = base | {q for i, q in enumerate(rest) if mask >> i & 1}
        if not any(b in done and a not in done for a, b in before):
            states.append(done)
    return tuple(mine), ancestors, tuple(states)


def _summed_forward_memory(instance: Instance, device: int, stage: int) -> bool:
    """_forwards_exceed_cap as it was first written: a sum over the stages, once per stage."""
    shape = bounds._shape(instance)
    upto = [u for u in shape.mine_on_chain(device, stage)
            if shape.position[u] <= shape.position[stage]]
    return sum(shape.count[u] * instance.m_b[u] for u in upto) > \
        bounds.activation_capacity(instance, device) + 1e-9


def _reference_bounds(instance: Instance, objective: str = "span") -> dict:
    """lower_bounds with the state listing and the forward memory computed as first written."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bounds, "_closed_states", _subset_states)
        patch.setattr(bounds, "_forwards_exceed_cap", _summed_forward_memory)
        return bounds.lower_bounds(instance, objective)


def _unit(chunks: int, devices: int = 4, microbatches: int = 8, cap: str = "2p") -> Instance:
    return Instance(devices=devices, microbatches=microbatches, placement="interleaved",
                    chunks=chunks, t_f=1, t_b=1, t_w=1, m_b=1, m_w=1, memory_cap=cap)


@FAST
@given(st.one_of(instances(), instances(placements=("interleaved",), max_p=3, max_m=5)),
       st.integers(2, 5))
def test_closed_states_are_the_closed_subsets(instance, chunks):
    """The listing gives the same closed sets as testing every subset, and refuses (None)
    exactly where the subsets were not tested, also when re-placed on more chunks."""
    more = instance.with_placement("interleaved", chunks) \
        if instance.placement == "contiguous" else instance
    for candidate in (instance, more):
        for device in range(candidate.devices):
            for stage in candidate.stages_of(device):
                listed = bounds._closed_states(candidate, device, stage)
                tested = _subset_states(candidate, device, stage)
                assert (listed is None) == (tested is None)
                if listed is not None:
                    assert listed[:2] == tested[:2]
                    assert len(listed[2]) == len(set(listed[2])) == len(tested[2])
                    assert set(listed[2]) == set(tested[2])


@FAST
@given(instances(), st.sampled_from(["span", "makespan"]))
def test_bounds_equal_the_subset_enumeration_on_random_instances(instance, objective):
    assert bounds.lower_bounds(instance, objective) == _reference_bounds(instance, objective)


def test_bounds_equal_the_subset_enumeration_where_it_finishes():
    """At 2 to 16 chunks (the subset test takes up to seconds there) every bound, both
    objectives, is what the subset enumeration gives; past 5 chunks the states are listed on
    a device's last stages only."""
    for devices, microbatches, chunks, cap in [(2, 4, 2, "2p"), (4, 8, 3, "2p"), (4, 8, 5, "1p"),
                                               (4, 8, 6, "2p"), (2, 3, 8, "3p"), (4, 8, 16, "2p")]:
        instance = _unit(chunks, devices, microbatches, cap)
        for objective in ("span", "makespan"):
            assert bounds.lower_bounds(instance, objective) == \
                _reference_bounds(instance, objective), (chunks, objective)
    six = _unit(6)  # 18 passes a micro-batch on a device: 17 left open at its first stage
    listed = [bounds._closed_states(six, 0, s) is not None for s in six.stages_of(0)]
    assert listed == [False, False, False, True, True, True]


def test_many_chunks_keep_the_old_bounds_and_stay_below_a_schedule():
    """unit-p4-m8 on 128 interleaved chunks (the audit's case: `zbopt simulate unit-p4-m8
    -s interleaved-1f1b --chunks 128`; each device's layers split into 128 chunks):
    the bounds are those the subset enumeration gave (it ran 15 s to give them), and none
    exceeds the span of the schedules that run on it."""
    instance = load_instance(shipped_instances()["unit-p4-m8"]).with_placement("interleaved", 128)
    found = bounds.lower_bounds(instance)
    assert found == {"ideal": 24.0, "memory_ramp": 24.0, "ramp_and_drain": 24.0,
                     "bottleneck": 16.0546875, "first_b_wave": 24.0, "w_deferral": 24.0,
                     "memory_area": 4.035156245964844}
    assert all(bounds._closed_states(instance, d, s) is None
               for d in range(4) for s in instance.stages_of(d)[:-5])
    result = run("interleaved-1f1b", instance)
    assert result.applies
    for schedule in (result.schedule, sequential_schedule(instance)):
        assert validate(instance, schedule) == []
        span = evaluate(instance, schedule).span
        assert max(found.values()) <= span + 1e-9, schedule.method
        assert bounds.best_lower_bound(instance)[1] <= span + 1e-9


def test_open_passes_counts_what_the_listing_leaves_open():
    """_open_passes, in O(1), is the number of passes _enumerate_closed would leave open."""
    for instance in (_unit(7), _unit(2, 3, 2), Instance(devices=3, microbatches=4,
                                                        placement="v", t_f=1, t_b=2, t_w=1),
                     Instance(devices=2, microbatches=4, placement="dualpipe", t_f=1, t_b=2,
                              t_w=1)):
        shape = bounds._shape(instance)
        for device in range(instance.devices):
            for stage in instance.stages_of(device):
                mine = bounds._device_passes(instance, device, stage)
                first = (stage, "F")
                base = {a for a in mine if bounds._is_before(shape.position, a, first)} | {first}
                assert bounds._open_passes(shape, device, stage) == \
                    len([q for q in mine if q not in base])
