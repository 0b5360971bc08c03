"""The greedy's policies tuned per device and stage (zbopt.heuristics.policy_search) on the
multi-chunk placements, and solve() using it before the backend on interleaved and V."""

import math
import random

import pytest

from zbopt import bounds
from zbopt.heuristics import policy_search
from zbopt.instance import Instance
from zbopt.registry import run
from zbopt.schedule import evaluate, validate
from zbopt.solvers import api

GREEDY = {"interleaved": "interleaved-zb", "v": "v-greedy"}


def _capped(rng: random.Random, placement: str) -> Instance:
    p = rng.randint(2, 5)
    base = Instance(devices=p, microbatches=rng.randint(p, 3 * p), t_f=rng.randint(3, 6),
                    t_b=rng.randint(3, 7), t_w=rng.randint(1, 4), comm=rng.randint(0, 1),
                    m_b=2, m_w=1, memory_cap=rng.choice(["1p", "1.5p"]))
    return base.with_placement("interleaved", 2) if placement == "interleaved" \
        else base.with_placement("v")


@pytest.mark.slow  # some twenty climbs of a few hundred greedy runs
@pytest.mark.parametrize("placement", ["interleaved", "v"])
def test_only_shorter_valid_schedules_within_the_cap_and_some_shorten(placement):
    """From the placement's greedy (its grid, then the improvement step): whatever the search
    returns is valid, within the cap, evaluated afresh, shorter and never below the bounds; and
    on some instances it is shorter (the grid applies one W rule to every device)."""
    rng = random.Random(1)
    shorter = 0
    for _ in range(12):
        instance = _capped(rng, placement)
        greedy = run(GREEDY[placement], instance)
        if not greedy.fits():
            continue
        tuned = policy_search.improve(instance, greedy.span, deadline=math.inf)
        if tuned is None:
            continue
        again = evaluate(instance, tuned.schedule)
        assert not validate(instance, tuned.schedule)
        assert again.fits_cap and again.span == pytest.approx(tuned.span)
        assert tuned.span < greedy.span
        assert tuned.span >= bounds.best_lower_bound(instance)[1] - 1e-9
        assert tuned.schedule.method == GREEDY[placement] + policy_search.SUFFIX
        shorter += 1
    assert shorter >= 2


@pytest.fixture
def simulations(monkeypatch):
    """The greedy simulations the search runs, counted (one item each)."""
    calls = []
    real = policy_search.simulate

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(policy_search, "simulate", counted)
    return calls


def test_a_target_already_met_ends_the_search_at_the_grid(simulations):
    """With the target at or above every span, only the grid runs: no climb."""
    instance = _capped(random.Random(3), "interleaved")
    policy_search.improve(instance, math.inf, deadline=math.inf, target=math.inf)
    assert len(simulations) == len(policy_search._grid(instance))


def test_dualpipe_and_overlap_are_left_alone():
    base = Instance(devices=4, microbatches=8, memory_cap="2p")
    assert policy_search.improve(base.with_placement("dualpipe"), math.inf, math.inf) is None
    overlapped = Instance(devices=4, microbatches=8, memory_cap="2p", overlap=0.5)
    assert policy_search.improve(overlapped, math.inf, math.inf) is None


def _where_tuning_wins(placement: str):
    rng = random.Random(1)
    for _ in range(12):
        instance = _capped(rng, placement)
        _, _, warm, hint = api._warm_start(instance, "span")
        if policy_search.improve(instance, hint.span, math.inf) is not None:
            return instance, warm
    raise AssertionError(f"no {placement} instance where tuning beats the registered methods")


@pytest.mark.slow  # the search of the test above, then solve() twice
def test_solve_hints_the_backend_with_the_tuned_schedule(recorder, monkeypatch):
    """On an interleaved instance where tuning beats every registered method, solve() hands the
    backend the tuned schedule (hint and horizon) and returns it when the backend finds nothing;
    the search gets at most POLICY_SHARE of the limit."""
    instance, warm = _where_tuning_wins("interleaved")
    deadlines = []
    real = policy_search.improve

    def timed(instance, span, deadline, **kwargs):
        deadlines.append((deadline, api.time.perf_counter()))
        return real(instance, span, deadline, **kwargs)

    monkeypatch.setattr(policy_search, "improve", timed)
    result = api.solve(instance, time_limit=30, threads=1, prove_with_bounds=False)
    assert result.warm_start == "interleaved-zb" + policy_search.SUFFIX
    assert result.span < warm.span and result.span < result.best_heuristic_objective
    assert not validate(instance, result.schedule) and result.timeline.fits_cap
    request = recorder.requests[-1]
    scaled, scale, _ = api.scaled_instance(instance)
    assert request.hint == api._hint_starts(scaled, result.timeline)[0]
    assert request.horizon == round(result.span * scale)
    (deadline, called), = deadlines
    assert deadline - called <= api.POLICY_SHARE * 30 + 1e-6


def test_solve_does_not_tune_contiguous_instances(recorder, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("policy search on a contiguous instance")

    monkeypatch.setattr(policy_search, "improve", refuse)
    instance = Instance(devices=4, microbatches=8, t_f=5, t_b=6, t_w=4, comm=1,
                        memory_cap="1p")
    result = api.solve(instance, time_limit=10, threads=1, prove_with_bounds=False)
    assert result.warm_start and "policy-search" not in result.warm_start


def test_more_patience_continues_the_same_search(simulations):
    """Same seed: a search allowed more stale climbs runs the same climbs first, so it is never
    longer, and it runs more greedy simulations."""
    instance = _capped(random.Random(5), "interleaved")
    spans, calls = [], []
    for patience in (1, 6):
        simulations.clear()
        spans.append(policy_search.improve(instance, math.inf, math.inf, patience=patience).span)
        calls.append(len(simulations))
    assert spans[1] <= spans[0] and calls[1] > calls[0]


@pytest.mark.parametrize("placement", ["interleaved", "v"])
def test_on_several_chunks_the_search_ends_with_its_base_heuristics_improvement_step(
        placement, monkeypatch):
    """p=4, m=12 at half of 1F1B's memory: with no deadline the search is deterministic; its
    best schedule then goes through refine.py's step (as v-greedy's and interleaved-zb's own
    do), which makes it shorter than the search alone finds (here the search alone finds
    nothing shorter than the greedy), valid and within the cap."""
    base = Instance(devices=4, microbatches=12, t_f=3, t_b=4, t_w=2, comm=1, m_b=2, m_w=1)
    instance = (base.with_placement("interleaved", 2) if placement == "interleaved"
                else base.with_placement("v")).with_cap("0.5p")
    greedy = run(GREEDY[placement], instance)
    stepped = policy_search.improve(instance, greedy.span, math.inf, patience=1)
    assert stepped is not None and stepped.span < greedy.span
    assert validate(instance, stepped.schedule) == [] and stepped.fits_cap
    monkeypatch.setattr(policy_search, "refine", lambda instance, schedule, allowance: schedule)
    alone = policy_search.improve(instance, greedy.span, math.inf, patience=1)
    assert alone is None or stepped.span < alone.span
