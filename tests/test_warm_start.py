"""solve(warm_start=Schedule): a given schedule is checked, and becomes the backend's hint and the
incumbent when it is better than the registered methods' (warm_start=True/False unchanged)."""

import functools
import random

import pytest

from zbopt.errors import ZboptError
from zbopt.heuristics.list_scheduler import sequential_schedule
from zbopt.layers import Layer, LayeredModel
from zbopt.plan.polish import polish
from zbopt.result import Result
from zbopt.schedule import evaluate, validate
from zbopt.solvers import api


def _tight_instance(rng: random.Random):
    layers = tuple(Layer(f"l{k}", t_f=rng.choice([1, 2, 3]), t_b=rng.choice([1, 2, 3]),
                         t_w=rng.choice([0, 1, 2, 3]), m_b=2, m_w=rng.choice([1, 2]),
                         static=rng.choice([0, 1]))
                   for k in range(4))
    model = LayeredModel(layers=layers, devices=4, microbatches=rng.randint(6, 10),
                         comm=rng.choice([0, 1]), memory_cap=rng.choice([5, 6, 7]))
    return model.instance((1, 1, 1, 1))


@functools.lru_cache(maxsize=1)
def _better_than_registered():
    """(instance, schedule) with the schedule shorter than every registered method's: the best
    warm start polished by local search."""
    rng = random.Random(4)
    for _ in range(60):
        instance = _tight_instance(rng)
        _, _, warm, _ = api._warm_start(instance, "span")
        base = Result(warm.schedule.method, "heuristic", "heuristic", instance, warm)
        better = polish(base, deadline=float("inf"))
        if better is not None:
            return instance, better.schedule, warm
    raise AssertionError("no instance where local search beats the registered methods")


def test_a_better_given_schedule_is_the_hint_and_the_incumbent(recorder):
    instance, schedule, warm = _better_than_registered()
    given = evaluate(instance, schedule)
    assert given.span < warm.span
    result = api.solve(instance, time_limit=30, threads=1, warm_start=schedule,
                       prove_with_bounds=False)
    # the backend found nothing: the answer is the given schedule, not the registered one
    assert result.span == pytest.approx(given.span)
    assert result.warm_start == schedule.method and not validate(instance, result.schedule)
    request = recorder.requests[-1]
    scaled, scale, _ = api.scaled_instance(instance)
    assert request.hint == api._hint_starts(scaled, given)[0]
    assert request.horizon == round(given.span * scale)


def test_a_worse_given_schedule_changes_nothing(recorder):
    instance, _, warm = _better_than_registered()
    plain = api.solve(instance, time_limit=30, threads=1, prove_with_bounds=False)
    hint = recorder.requests[-1].hint
    slow = sequential_schedule(instance)  # one micro-batch at a time: valid, and longer
    assert evaluate(instance, slow).span > warm.span
    result = api.solve(instance, time_limit=30, threads=1, warm_start=slow,
                       prove_with_bounds=False)
    assert result.span == pytest.approx(plain.span) == pytest.approx(warm.span)
    assert recorder.requests[-1].hint == hint


def test_true_and_false_keep_their_meaning(recorder):
    instance, _, _ = _better_than_registered()
    api.solve(instance, time_limit=30, threads=1, warm_start=True, prove_with_bounds=False)
    api.solve(instance, time_limit=30, threads=1, warm_start=False, prove_with_bounds=False)
    assert recorder.requests[0].hint is not None and recorder.requests[1].hint is None


def test_a_schedule_of_another_instance_is_refused():
    instance, schedule, _ = _better_than_registered()
    other = LayeredModel(layers=tuple(Layer(f"l{k}", t_f=1, t_b=1, t_w=1, m_b=1, m_w=1)
                                      for k in range(4)), devices=4,
                         microbatches=instance.microbatches + 1).instance((1, 1, 1, 1))
    with pytest.raises(ZboptError, match="warm start schedule is not a valid schedule"):
        api.solve(other, time_limit=30, threads=1, warm_start=schedule)
    with pytest.raises(ZboptError, match="warm_start must be"):
        api.solve(instance, time_limit=30, threads=1, warm_start="zb-h1")


def test_the_real_solver_never_returns_worse_than_the_given_schedule():
    instance, schedule, _ = _better_than_registered()
    given = evaluate(instance, schedule).span
    result = api.solve(instance, time_limit=20, threads=1, warm_start=schedule)
    assert result.span <= given + 1e-9
    assert not validate(instance, result.schedule)
    assert result.lower_bound <= result.span + 1e-9



def test_without_a_warm_start_the_fallback_is_not_called_one():
    from zbopt.instance import load_instance
    instance = load_instance("zb-1.5b-p8-m24").with_cap("0.5p")
    # CP-SAT unhinted finds nothing in a second here: the answer is the best registered schedule
    result = api.solve(instance, solver="cpsat", time_limit=1, warm_start=False)
    assert result.warm_start is None
    assert "warm start (" not in result.message
    if result.schedule.method != "solver-cpsat":
        assert f"the best registered schedule ({result.schedule.method}; cpsat was given no " \
               f"warm start)" in result.message
    hinted = api.solve(instance, solver="cpsat", time_limit=1)
    assert hinted.warm_start == hinted.best_heuristic
