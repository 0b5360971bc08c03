"""The periodic-schedule model of benchmarks/bench_steady.py: the periods it solves and refuses
are the ones the instance allows, and its patterns expand to valid schedules within the cap."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from zbopt.instance import Instance
from zbopt.registry import run
from zbopt.schedule import evaluate, validate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_steady import SCALE, expand, periodic_pattern, steady_rate, whole_bound, window_increment, window_optimum  # noqa: E402


def _check_expanded(instance: Instance, times: dict, k: int, period: int) -> None:
    schedule = expand(instance, times, k, period)
    assert validate(instance, schedule) == []
    timeline = evaluate(instance, schedule)
    assert timeline.fits_cap, timeline.cap_violations


@pytest.mark.parametrize("costs", [(1, 1, 1), (2, 3, 1), (3, 2, 2)])
def test_roomy_pattern_runs_at_the_busiest_load(costs):
    """With room for every activation 1F1B holds, a period of K times one micro-batch's work
    fits and one time step less does not (the device has that much work per period)."""
    t_f, t_b, t_w = costs
    instance = Instance(devices=3, microbatches=6, t_f=t_f, t_b=t_b, t_w=t_w, m_b=2, m_w=1,
                        memory_cap=8.0)  # 3 activations and 2 pending W on every device
    k = 3
    load = k * (t_f + t_b + t_w) * SCALE
    status, times = periodic_pattern(instance, k, load, 20)
    assert status == "solved"
    _check_expanded(instance, times, k, load)
    assert periodic_pattern(instance, k, load - 1, 20)[0] == "infeasible"


@pytest.mark.parametrize("comm", [0, 1])
@pytest.mark.parametrize("m_w", [0, 1])
def test_one_activation_runs_at_the_round_trip(comm, m_w):
    """A device holding one activation waits for each micro-batch's backward before the next
    forward, and for its W too when B keeps memory for it: the least period of one micro-batch
    is the first device's round trip, plus its t_w when m_w > 0."""
    instance = Instance(devices=3, microbatches=4, t_f=[1, 2, 1], t_b=[2, 1, 3], t_w=[2, 1, 1],
                        comm=comm, m_b=2, m_w=m_w, memory_cap=2.0)
    trip = sum(instance.t_f) + sum(instance.t_b) + 2 * (instance.devices - 1) * comm
    trip = (trip + (instance.t_w[0] if m_w else 0)) * SCALE
    status, times = periodic_pattern(instance, 1, trip, 20)
    assert status == "solved"
    _check_expanded(instance, times, 1, trip)
    assert periodic_pattern(instance, 1, trip - 1, 20)[0] == "infeasible"


def test_rounding_down_relaxes_the_costs():
    """Costs off the grid: rounded up (the default) a period of the true load is refused;
    rounded down (what an "infeasible" claim is checked with) it is solved."""
    instance = Instance(devices=2, microbatches=4, t_f=1.0004, t_b=1, t_w=1, m_b=2, m_w=1,
                        memory_cap=8.0)
    k = 2
    period = round(k * 3.0004 * SCALE)  # 6001: the true load per period is 6000.8
    assert periodic_pattern(instance, k, period, 20)[0] == "infeasible"
    assert periodic_pattern(instance, k, period, 20, round_up=False)[0] == "solved"


def test_steady_rate_of_1f1b_is_the_device_load():
    """In the middle of 1F1B on uniform stages every device runs F, B and W back to back: the
    rate per K micro-batches is K times a micro-batch's work; too few micro-batches give nan."""
    instance = Instance(devices=3, microbatches=12, t_f=2, t_b=3, t_w=1)
    timeline = evaluate(instance, run("1f1b", instance).schedule)
    assert steady_rate(timeline, 0, 2) == pytest.approx(2 * (2 + 3 + 1))
    short = Instance(devices=3, microbatches=8, t_f=2, t_b=3, t_w=1)
    assert math.isnan(steady_rate(evaluate(short, run("1f1b", short).schedule), 0, 2))


@pytest.mark.parametrize("cap", [None, 5.0])
def test_the_split_bound_of_the_fb_relaxation_holds_and_is_exact_here(cap):
    """The F/B relaxation of all m micro-batches, seen from any device, plus the paths to and
    from device 0 and its last W, never exceeds the span CP-SAT proves optimal; on this instance
    (two activations a device at cap 5) it meets it, so a missing or doubled path would show."""
    from zbopt.solvers import solve
    instance = Instance(devices=3, microbatches=5, t_f=[100, 200, 150], t_b=[200, 100, 300],
                        t_w=[100, 50, 100], comm=10, m_b=2, m_w=1, memory_cap=cap)
    result = solve(instance, time_limit=20)
    assert result.status == "optimal"
    for e in range(instance.devices):
        _, _, known = window_increment(instance, e, 1, 10, 20, lambda msg: None)
        value = whole_bound(instance, e, known, 10)
        assert value <= result.span + 1e-6
        assert value == pytest.approx(result.span)


def test_unknown_cap_names_the_caps(capsys, monkeypatch):
    import bench_steady

    monkeypatch.setattr(sys, "argv", ["bench_steady.py", "--caps", "tight,foo"])
    assert bench_steady.main() == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'foo'" in err and "tight and/or mid" in err


def test_unknown_model_names_the_models_and_writes_nothing(capsys, monkeypatch, tmp_path):
    import bench_steady

    out = tmp_path / "steady.md"
    monkeypatch.setattr(sys, "argv", ["bench_steady.py", "--models", "nosuch", "--out", str(out)])
    assert bench_steady.main() == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--models nosuch" in err and "llama-32L-v128k" in err
    assert not out.exists()


def test_window_of_one_micro_batch_is_the_round_trip():
    """One micro-batch alone crosses the pipeline and comes back with no wait: from F(e, 0)'s
    start to B(e, 0)'s end is the round trip from e."""
    instance = Instance(devices=4, microbatches=6, t_f=[1, 2, 1, 3], t_b=[2, 1, 3, 2], t_w=1,
                        comm=1, m_b=2, m_w=1, memory_cap=5.0)
    for e in range(4):
        trip = sum(instance.t_f[e:]) + sum(instance.t_b[e:]) + 2 * (3 - e) * instance.comm
        assert window_optimum(instance, e, 0, 20, unit=1.0) == (True, trip)


def test_one_activation_on_the_first_device_serialises_the_window():
    """Device 0 holding one activation (no W memory, so no release gap) starts each forward
    after the last backward: n micro-batches take n round trips."""
    instance = Instance(devices=3, microbatches=5, t_f=[1, 2, 1], t_b=[2, 1, 3], t_w=1,
                        comm=1, m_b=2, m_w=0, memory_cap=2.0)
    trip = sum(instance.t_f) + sum(instance.t_b) + 2 * 2 * instance.comm
    for last in range(4):
        assert window_optimum(instance, 0, last, 20, unit=1.0) == (True, (last + 1) * trip)


@pytest.mark.parametrize("cap", [4.0, 6.0])
def test_window_is_at_most_a_real_schedule(cap):
    """The F/B relaxation of all micro-batches is no longer than a valid schedule's time from
    F(0, 0)'s start to B(0, m - 1)'s end, grows with the window, and the cuts of the shorter
    windows (valid for any micro-batches in a row) leave the optimum as it is."""
    instance = Instance(devices=4, microbatches=8, t_f=[2, 1, 2, 1], t_b=[2, 2, 1, 3], t_w=1,
                        comm=1, m_b=2, m_w=1, memory_cap=cap)
    m = instance.microbatches
    known = {}
    for last in range(m):
        proven, value = window_optimum(instance, 0, last, 20, known, unit=1.0)
        assert proven
        assert value >= known.get(last - 1, 0)
        known[last] = value
    timeline = evaluate(instance, run("zb-greedy", instance).schedule)
    real = timeline.end[(0, m - 1, "B")] - timeline.start[(0, 0, "F")]
    assert known[m - 1] <= real
    plain = window_optimum(instance, 0, m - 1, 20, unit=1.0)
    assert plain == (True, known[m - 1])


def test_gap_against_the_bound_is_measured_as_result_gap():
    """The "plan gap against it" column and the plan's own gap column use one definition: the
    result of a solve, with its span and bound, gives the same gap either way."""
    import bench_steady

    from zbopt.solvers import solve

    instance = Instance(devices=3, microbatches=6, t_f=[1, 2, 1], t_b=[2, 1, 3], t_w=1, m_b=2,
                        m_w=1, memory_cap=5.0)
    result = solve(instance, "cpsat", time_limit=5, prove_with_bounds=False)
    low = result.lower_bound * 0.9  # a weaker bound: the gap is not 0 either way
    assert bench_steady.relative_gap(result.span, result.lower_bound) == pytest.approx(result.gap)
    # not span / bound - 1, which reads larger for the same two numbers
    assert bench_steady.relative_gap(result.span, low) < result.span / low - 1
