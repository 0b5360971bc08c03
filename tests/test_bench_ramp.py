"""The idle split of benchmarks/bench_ramp.py: its three phases add up to the critical device's
idle, the phase before the first B is never below the bound's ramp idle, and `ahead` counts
the forwards of the first stage that precede the later stage's first forward. The held runs:
the grid's best point per count ahead, and the search held to an order keeps it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from zbopt import bounds
from zbopt.instance import Instance
from zbopt.registry import run
from zbopt.schedule import Schedule, evaluate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_ramp import eight_ahead, grid_by_ahead, grid_timelines, lns_from, phases  # noqa: E402


@pytest.mark.parametrize("p,m,cap", [(2, 4, "1p"), (3, 6, "1p"), (3, 6, "2p"), (4, 8, "1p")])
def test_phases_add_up_and_respect_the_ramp_bound(p, m, cap):
    instance = Instance(devices=p, microbatches=m, t_f=3, t_b=4, t_w=2, comm=1, m_b=2, m_w=1,
                        ).with_cap(cap).with_placement("interleaved", 2)
    timeline = run("interleaved-zb", instance).timeline
    parts = phases(instance, timeline)
    d = parts["device"]
    start, end = timeline.device_span[d]
    assert end - start == pytest.approx(timeline.span)
    load = bounds.device_loads(instance)[d]
    assert parts["ramp"] + parts["middle"] + parts["drain"] == pytest.approx(end - start - load)
    assert parts["ramp"] >= bounds.ramp_idle(instance, d) - 1e-9
    assert 1 <= parts["ahead"] <= m


def test_ahead_counts_first_stage_forwards_before_the_later_stage():
    """Interleaved p=2, m=2, one pass at a time: device 0 runs F(0,0), F(0,1) and then F(2,0)
    (ahead 2), or F(0,0), F(2,0), F(0,1) (ahead 1); the idle before its first B differs."""
    instance = Instance(devices=2, microbatches=2, t_f=1, t_b=1, t_w=1, comm=0
                        ).with_placement("interleaved", 2)

    def schedule(first_device):
        other = [(1, 0, "F"), (1, 1, "F"), (3, 0, "F"), (3, 0, "B"), (3, 0, "W"), (3, 1, "F"),
                 (3, 1, "B"), (3, 1, "W"), (1, 0, "B"), (1, 0, "W"), (1, 1, "B"), (1, 1, "W")]
        rest = [(2, 0, "B"), (2, 0, "W"), (2, 1, "B"), (2, 1, "W"), (0, 0, "B"), (0, 0, "W"),
                (0, 1, "B"), (0, 1, "W")]
        return Schedule.build([first_device + rest, other])

    late = evaluate(instance, schedule([(0, 0, "F"), (0, 1, "F"), (2, 0, "F"), (2, 1, "F")]))
    early = evaluate(instance, schedule([(0, 0, "F"), (2, 0, "F"), (0, 1, "F"), (2, 1, "F")]))
    late_parts, early_parts = phases(instance, late, 0), phases(instance, early, 0)
    assert (late_parts["ahead"], early_parts["ahead"]) == (2, 1)
    # early, F(2, 0) waits for F(1, 0), and device 1's F(1, 1) for F(0, 1), which now runs
    # after F(2, 0): B(3, 0) and so device 0's first B come later, with the same four forwards
    # before it
    assert early_parts["ramp"] > late_parts["ramp"]


def test_grid_by_ahead_keeps_the_shortest_point_of_each_count():
    instance = Instance(devices=3, microbatches=6, t_f=3, t_b=4, t_w=2, comm=1, m_b=2, m_w=1,
                        ).with_cap("1p").with_placement("interleaved", 2)
    best = grid_by_ahead(instance)
    assert best
    for ahead, timeline in best.items():
        assert phases(instance, timeline, 0)["ahead"] == ahead and timeline.fits_cap
    for timeline in grid_timelines(instance):
        assert best[phases(instance, timeline, 0)["ahead"]].span <= timeline.span


def test_lns_from_a_start_held_to_p_ahead_keeps_it():
    instance = Instance(devices=3, microbatches=6, t_f=3, t_b=4, t_w=2, comm=1, m_b=2, m_w=1,
                        ).with_cap("1p").with_placement("interleaved", 2)
    p = instance.devices
    start = grid_by_ahead(instance)[p]
    held = lns_from(instance, start, 3, [((p, 0, "F"), (0, p, "F"))])
    assert held.fits_cap and held.span <= start.span + 1e-9
    assert held.start[(0, p, "F")] >= held.start[(p, 0, "F")]


def test_eight_ahead_puts_each_device_s_later_first_forward_before_its_p_th_forward():
    instance = Instance(devices=3, microbatches=6, t_f=3, t_b=4, t_w=2, comm=1, m_b=2, m_w=1,
                        ).with_cap("1p").with_placement("interleaved", 2)
    p = instance.devices
    start = grid_by_ahead(instance)[p + 1]  # a grid point with a forward too many
    swapped = eight_ahead(instance, start)
    for d in range(p):
        assert swapped.start[(p + d, 0, "F")] < swapped.start[(d, p, "F")]
    assert phases(instance, swapped, 0)["ahead"] <= p < phases(instance, start, 0)["ahead"]
