"""zbopt.plan.device_bound: the one-device relaxation solved by its dynamic programme over orders."""

from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

from zbopt.bounds import activation_capacity, round_trip
from zbopt.instance import within_cap
from zbopt.plan.device_bound import _Rules, device_relaxation
from zbopt.plan.memory_bound import held_counts, pipeline_bound, release_gaps
from zbopt.plan.search import _Search, schedule_methods
from zbopt.registry import run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_plan import _split_instances, _tight_model  # noqa: E402


def _orders(m: int, fits):
    """Every order of one device's passes: each kind in micro-batch order, B_j after F_j, W_j
    after B_j, and `fits(n_f, n_b, n_w)` before each F."""
    def grow(n_f, n_b, n_w, order):
        if n_w == m:
            yield order
            return
        if n_f < m and fits(n_f, n_b, n_w):
            yield from grow(n_f + 1, n_b, n_w, order + (("F", n_f),))
        if n_b < n_f:
            yield from grow(n_f, n_b + 1, n_w, order + (("B", n_b),))
        if n_w < n_b:
            yield from grow(n_f, n_b, n_w + 1, order + (("W", n_w),))
    yield from grow(0, 0, 0, ())


def _fits(instance, d):
    """Whether device d's memory admits its next F with n_f, n_b, n_w passes of each kind
    done (written out from the memory rule of docs/model.md)."""
    room = activation_capacity(instance, d)
    m_b, m_w = instance.m_b[d], instance.m_w[d]

    def fits(n_f, n_b, n_w):
        level = (n_f + 1 - n_b) * (m_b - m_w) + (n_f + 1 - n_w) * m_w
        return not math.isfinite(room) or within_cap(level, room)
    return fits


def relaxation_by_orders(instance, e: int) -> float:
    """The relaxation of the module doc, written out rule by rule: every order of e's passes,
    each pass as early as e and its rules allow, the least span."""
    p, m = instance.devices, instance.microbatches
    wait = [round_trip(instance, d, d) for d in range(p)]
    trip = [wait[d] + instance.t_b[d] for d in range(p)]
    held, gaps = held_counts(instance), release_gaps(instance)
    t = {"F": instance.t_f[e], "B": instance.t_b[e], "W": instance.t_w[e]}
    fits = _fits(instance, e)

    best = math.inf
    for order in _orders(m, fits):
        start = {}
        x = {d: {} for d in range(e + 1, p)}
        free, possible = 0.0, True
        for kind, j in order:
            at = free
            if kind == "F":
                for d in range(e):
                    k = held[d]
                    if 1 <= k <= j:
                        if ("B", j - k) not in start:  # its rule needs that B to end first
                            possible = False
                            break
                        at = max(at, start["B", j - k] + t["B"] + trip[d] - trip[e] + gaps[d])
                if not possible:
                    break
                for d in range(e + 1, p):
                    ahead = wait[e] - round_trip(instance, d, e)
                    x[d][j] = max([at + ahead]
                                  + ([x[d][j - 1] + instance.t_f[d]] if j else [])
                                  + ([x[d][j - held[d]] + trip[d] + gaps[d]]
                                     if 1 <= held[d] <= j else []))
            elif kind == "B":
                at = max(at, start["F", j] + wait[e])
                for d in range(e + 1, p):
                    at = max(at, x[d][j] + wait[e] - (wait[e] - round_trip(instance, d, e)))
            else:
                at = max(at, start["B", j] + t["B"])
            start[kind, j] = at
            free = at + t[kind]
        if not possible:
            continue
        span = max([free] + [start["B", m - 1] + t["B"] + trip[d] - trip[e] + instance.t_w[d]
                             for d in range(e)])
        best = min(best, span)
    return best


def test_the_programme_finds_the_relaxations_optimum():
    """With labels enough never to merge, the programme's least span equals the relaxation's
    optimum over every order of the device's passes (tiny random tight splits); with one label
    per state (merged) it is never above it, and below it on some."""
    rng = random.Random(7)
    checked = merged_below = 0
    for _ in range(60):
        model = _tight_model(rng, rng.randint(2, 3), rng.randint(2, 4))
        for _sizes, instance in _split_instances(model):
            for e in range(instance.devices):
                rules = _Rules(instance, e)
                exact_value, exact = rules.least_span(10_000, time.perf_counter() + 60)
                merged_value, _ = rules.least_span(1, time.perf_counter() + 60)
                brute = relaxation_by_orders(instance, e)
                assert exact
                assert math.isclose(exact_value, brute, rel_tol=1e-9, abs_tol=1e-9), \
                    (instance.t_f, e, exact_value, brute)
                assert merged_value <= brute + 1e-9
                merged_below += merged_value < brute - 1e-9
                checked += 1
        if checked >= 120:
            break
    assert checked >= 120 and merged_below >= 1


def _llama_32_blocks(vocab: int, cap: str, sizes: tuple[int, ...]):
    """The 32-block Llama-3-8B-shaped model of benchmarks/bench_plan.py on p=8, m=32 at one of
    its caps, split into `sizes`."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bench_plan import LLAMA3_8B, cap_levels, estimated

    model = estimated(LLAMA3_8B, vocab, 8, 32)
    return model.with_settings(memory_cap=cap_levels(model)[cap]).instance(sizes)


def test_the_relaxation_raises_the_mid_cap_bounds_of_the_32_block_plans():
    """On the 32-block p=8, m=32 plans at the mid cap (results/plan.md), the devices with five
    blocks hold three or four activations and few pending W. Their relaxations lie at least 1%
    above the memory-aware bounds of the split (which count idle and deferred W but not when
    each pass can run), and at or below every registered schedule of the split."""
    for vocab, sizes, device in ((32000, (4, 4, 4, 4, 4, 4, 5, 5), 6),
                                 (128256, (4, 4, 4, 4, 5, 5, 5, 3), 4)):
        instance = _llama_32_blocks(vocab, "mid", sizes)
        value = device_relaxation(instance, device, 30)
        assert value >= pipeline_bound(instance) * 1.01
        spans = [r.span for r in (run(name, instance) for name in schedule_methods("contiguous"))
                 if r.fits()]
        assert spans and value <= min(spans) + 1e-6


def test_plan_raises_an_open_splits_bound_with_the_relaxation():
    """plan's bounding step (zbopt.plan.search._Search.collide) gives an open split at least
    its device relaxation: 8 Llama-shaped blocks on p=4, m=6 at the tight cap, split
    (2, 3, 3, 2), whose device 1 relaxation lies above the memory-aware bound."""
    from test_plan import llama_model

    model = llama_model(128256, 6, 0.25)
    instance = model.instance((2, 3, 3, 2))
    relaxed = device_relaxation(instance, 1, 30)
    assert relaxed > pipeline_bound(instance) * 1.05
    search = _Search(model, 60.0, None, "cpsat", 1)
    split = search.schedule("contiguous", (2, 3, 3, 2))
    assert split.result is not None and split.span > relaxed
    opened = replace(split, bound=pipeline_bound(instance))
    raised = search.collide([opened], time.perf_counter() + 30)
    assert relaxed - 1e-6 <= raised[0].bound <= split.span + 1e-6


def test_relaxation_bound_goes_on_where_an_earlier_call_stopped(monkeypatch):
    """With a memo, calls too short to finish a device's passes add up: a pass of LABELS that
    finished is never run again, a complete device not at all, and the calls end at the value
    one long call gives."""
    import zbopt.plan.device_bound as device_bound

    instance = _llama_32_blocks(128256, "tight", (3, 4, 4, 4, 4, 5, 5, 5))
    whole = device_bound.relaxation_bound(instance, time.perf_counter() + 120)
    runs = []
    original = device_bound._Rules.least_span

    def least_span(rules, limit, deadline):
        value, exact = original(rules, limit, deadline)
        runs.append((len(rules.downs), limit, value is not None))  # devices after e: p - 1 - e
        return value, exact

    monkeypatch.setattr(device_bound._Rules, "least_span", least_span)
    memo, seconds, value = {}, 0.05, 0.0
    while not (len(memo) == instance.devices and all(done for _, _, done in memo.values())):
        value = device_bound.relaxation_bound(instance, time.perf_counter() + seconds, memo)
        seconds *= 2
        assert seconds < 1000
    assert seconds > 0.1  # the first call did not finish everything
    assert value == whole
    finished = [(e, limit) for e, limit, done in runs if done]
    assert len(finished) == len(set(finished))
    runs.clear()
    assert device_bound.relaxation_bound(instance, time.perf_counter() + 10, memo) == whole
    assert runs == []


def test_relaxation_bound_does_not_hand_a_devices_spare_time_to_the_next(monkeypatch):
    """The first sweep gives every device the same share (what the devices before it leave
    over would otherwise pile up on the last ones, which hold the most activations and raise
    the bound least); the devices cut short then get what is left, in the same order."""
    import zbopt.plan.device_bound as device_bound

    instance = _llama_32_blocks(128256, "tight", (3, 4, 4, 4, 4, 5, 5, 5))
    given = []

    def device_pass(instance, device, seconds, memo=None):
        given.append((device, seconds))
        if device == 7:  # quick and complete
            return 1.0, False
        time.sleep(min(seconds, 0.05))
        return 2.0, True

    monkeypatch.setattr(device_bound, "_device_pass", device_pass)
    budget = 2.0
    value = device_bound.relaxation_bound(instance, time.perf_counter() + budget)
    assert value == 2.0
    first = given[:instance.devices]
    assert sorted(d for d, _ in first) == list(range(instance.devices))
    assert first[0][0] == 7  # the device holding the fewest activations first
    assert all(seconds <= budget / instance.devices + 1e-9 for _, seconds in first)
    # then the seven cut short again, in the same order, the first with most of what is left
    again = given[instance.devices:]
    assert [d for d, _ in again[:3]] == [d for d, _ in first[1:4]]
    assert again[0][1] > budget / instance.devices


def test_collide_spends_nothing_above_the_least_bound_it_cannot_raise(monkeypatch):
    """The bound over all splits is the least of theirs: when the split of least bound cannot
    be raised, no other split's relaxations can raise that least, and collide stops there;
    when it is raised above the others, they get theirs in order of bound."""
    from test_plan import llama_model

    import zbopt.plan.search as search_module

    model = llama_model(128256, 6, 0.6)
    search = _Search(model, 60.0, None, "cpsat", 1)
    splits = [search.schedule("contiguous", sizes) for sizes in ((2, 3, 3, 2), (3, 3, 2, 2), (2, 2, 3, 3))]
    splits = [s for s in splits if s.result is not None]
    assert len(splits) >= 2
    best = min(splits, key=lambda s: s.span)
    search.best = best
    pending = [replace(s, bound=best.span * (0.5 + 0.1 * i)) for i, s in enumerate(splits)]
    for raise_to in (0.0, 10 * best.span):
        calls = []

        def relax(instance, deadline, memo=None, raise_to=raise_to, calls=calls):
            calls.append(instance)
            return raise_to

        monkeypatch.setattr(search_module, "relaxation_bound", relax)
        monkeypatch.setattr(search_module, "window_bound", lambda instance, deadline: 0.0)
        monkeypatch.setattr(search_module, "collision_bound", lambda *args: 0.0)
        monkeypatch.setattr(search_module.fb_bound, "fb_bound", lambda *args, **kwargs: 0.0)
        out = search.collide(pending, time.perf_counter() + 30)
        if raise_to == 0.0:
            assert len(calls) == 1 and calls[0] == search.instance("contiguous", pending[0].sizes)
            assert [s.bound for s in out] == [s.bound for s in pending]
        else:
            assert len(calls) == len(pending)
            assert all(s.bound == raise_to for s in out)
