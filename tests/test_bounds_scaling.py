"""The bounds of zbopt.bounds and zbopt.plan.memory_bound take time about linear in the devices:
each instance's pipeline shape is read once (not once per device), the instance is not hashed
once per device, and the loops over pairs of devices became prefix and suffix maxima that give
the same values as the pairwise loops they replace."""

import gc
import math
import random
import weakref

import pytest

from zbopt import bounds
from zbopt.errors import ZboptError
from zbopt.instance import Instance
from zbopt.passes import stage_lag
from zbopt.plan import memory_bound
from zbopt.plan.memory_bound import (
    chain_trips,
    held_counts,
    pipeline_bound,
    round_trips,
    start_chain,
    tail_span,
    window_tail,
    window_work,
)


def _random(rng: random.Random, placements=("contiguous", "interleaved", "v", "dualpipe"),
            max_p: int = 7) -> Instance:
    """A random instance with per-stage costs (integers or not) and, mostly, a cap."""
    while True:
        p = rng.randint(2, max_p)
        placement = rng.choice(placements)
        chunks = rng.choice([2, 3]) if placement == "interleaved" else \
            2 if placement in ("v", "dualpipe") else 1
        stages = p * chunks
        m = rng.choice([2, 4, 6, 8]) if placement == "dualpipe" else rng.randint(1, 9)
        integral = rng.random() < 0.5

        def values(low, high, integral=integral, stages=stages):
            return [rng.randint(low, high) if integral else round(rng.uniform(low, high), 3)
                    for _ in range(stages)]
        m_b = values(1, 3)
        data = dict(devices=p, microbatches=m, placement=placement, t_f=values(1, 5),
                    t_b=values(1, 6), t_w=values(0, 4), m_b=m_b,
                    m_w=[min(b, w) for b, w in zip(m_b, values(0, 2))],
                    comm=rng.choice([0, 0.5, 1, 0.37]),
                    memory_cap=rng.choice([None, "1p", "1.5p", "2p", "3p"]))
        if placement == "interleaved":
            data["chunks"] = chunks
        try:
            return Instance.from_dict(data, source="random")
        except ZboptError:
            continue


def _pairwise_bottlenecks(instance: Instance) -> tuple[float, ...]:
    """bottlenecks as the module doc states it: every device's first stage f on each chain
    against every later stage k (pairs of stages)."""
    best = [0.0] * instance.devices
    for stages, mbs in instance.chains:
        n, count = len(stages), len(mbs)
        forward, backward = [0.0] * n, [0.0] * n
        for i in range(1, n):
            a, b = stages[i - 1], stages[i]
            forward[i] = forward[i - 1] + instance.t_f[a] + stage_lag(instance, a, b)
            backward[i] = backward[i - 1] + stage_lag(instance, b, a) + instance.t_b[a]
        busy = [sum(count * (instance.t_f[stages[x]] + instance.t_b[stages[x]])
                    for x in range(i, n) if instance.device_of(stages[x]) ==
                    instance.device_of(stages[i])) for i in range(n)]
        first: dict[int, int] = {}
        for i, s in enumerate(stages):
            first.setdefault(instance.device_of(s), i)
        for d, f in first.items():
            for k in range(f, n):
                best[d] = max(best[d], (forward[k] - forward[f]) + busy[k]
                              + (backward[k] - backward[f]) + instance.t_w[stages[f]])
    return tuple(best)


def _pairwise_pipeline_bound(instance: Instance) -> float:
    """pipeline_bound with its terms over every pair of devices d <= e, and every device's own
    rule in the chain of starts."""
    if not memory_bound.applies(instance):
        return 0.0
    p, m = instance.devices, instance.microbatches
    trip, slot = round_trips(instance), chain_trips(instance)
    rooms = [bounds.activation_capacity(instance, d) for d in range(p)]
    counts = held_counts(instance)
    best = 0.0
    for e in range(p):
        args = (m, instance.t_f[e], instance.t_b[e], instance.t_w[e], instance.m_b[e],
                instance.m_w[e], rooms[e])
        work = max(window_work(*args, memory_bound._idle(instance, e)),
                   window_tail(*args, bounds.round_trip(instance, e, e),
                               bounds.ramp_idle(instance, e)))
        if e:
            ahead = max(trip[d] - trip[e] + instance.t_w[d] for d in range(e))
            best = max(best, tail_span(*args, trip[e], bounds.ramp_idle(instance, e), ahead))
        chain = start_chain(m, instance.t_f[e], [(counts[d], slot[d]) for d in range(e + 1)])
        window = max(work, chain + trip[e])
        for d in range(e + 1):
            best = max(best, trip[d] - trip[e] + window + instance.t_w[d])
    return best


def test_bottlenecks_are_the_pairwise_maximum():
    rng = random.Random(4)
    for _ in range(300):
        instance = _random(rng)
        assert bounds.bottlenecks(instance) == pytest.approx(_pairwise_bottlenecks(instance),
                                                             rel=1e-12, abs=1e-12)


def test_pipeline_bound_is_the_pairwise_maximum():
    rng = random.Random(6)
    checked = 0
    for _ in range(400):
        instance = _random(rng, placements=("contiguous",), max_p=12)
        if instance.cap is None:
            continue
        assert pipeline_bound(instance) == pytest.approx(_pairwise_pipeline_bound(instance),
                                                         rel=1e-12, abs=1e-12)
        checked += 1
    assert checked > 200


def test_the_per_device_bounds_read_the_chains_once_and_never_hash_the_instance(monkeypatch):
    """Instance.chains rebuilds the chains and hashing an instance reads every field (both
    O(stages)): asked once per device, either made the bounds quadratic in the devices. The
    count of either must not grow with the devices."""
    reads = {"chains": 0, "hash": 0}
    chains, hashed = Instance.chains, Instance.__hash__

    def counted_chains(self):
        reads["chains"] += 1
        return chains.fget(self)

    def counted_hash(self):
        reads["hash"] += 1
        return hashed(self)
    monkeypatch.setattr(Instance, "chains", property(counted_chains))
    monkeypatch.setattr(Instance, "__hash__", counted_hash)
    seen = {}
    for p in (40, 160):
        for placement, cap in (("contiguous", "1p"), ("contiguous", None), ("v", "2p")):
            instance = Instance(devices=p, microbatches=4, placement=placement, t_f=1, t_b=1,
                                t_w=1, comm=0.5, m_b=2, m_w=1, memory_cap=cap)
            reads.update(chains=0, hash=0)
            for objective in ("span", "makespan"):
                bounds.lower_bounds(instance, objective)
            for d in range(p):  # the per-device entry points, as zbopt.plan calls them
                bounds.device_bound(instance, d)
                bounds.ramp_idle(instance, d)
                bounds.drain_idle(instance, d)
                bounds.device_head(instance, d)
            bounds.min_feasible_cap(instance)
            seen[(p, placement, cap)] = dict(reads)
    for placement, cap in (("contiguous", "1p"), ("contiguous", None), ("v", "2p")):
        small, large = seen[(40, placement, cap)], seen[(160, placement, cap)]
        assert large == small, (placement, cap, small, large)
        assert large["hash"] <= 4  # memory_pipeline's cache, once per objective


def test_a_shape_is_kept_only_while_its_instance_lives():
    instance = Instance(devices=30, microbatches=4, t_f=1, t_b=1, t_w=1, comm=0, m_b=2, m_w=1,
                        memory_cap="1p")
    value = bounds.best_lower_bound(instance)[1]
    key, alive = id(instance), weakref.ref(instance)
    assert bounds._SHAPES[key][0]() is instance
    # an equal instance made anew gets the same values (its own shape)
    again = Instance(devices=30, microbatches=4, t_f=1, t_b=1, t_w=1, comm=0, m_b=2, m_w=1,
                     memory_cap="1p")
    assert bounds.best_lower_bound(again)[1] == value
    assert bounds._SHAPES[id(again)][1] is not bounds._SHAPES[key][1]
    del instance, again
    bounds.memory_pipeline.cache_clear()  # its lru_cache holds the instances it was asked
    gc.collect()
    assert alive() is None
    assert all(ref() is not None for ref, _ in bounds._SHAPES.values())  # no entry outlives


def test_forward_head_is_the_forward_path_from_the_chains_first_stage():
    rng = random.Random(9)
    for _ in range(100):
        instance = _random(rng)
        for stages, _ in instance.chains:
            total = 0.0
            for i, s in enumerate(stages):
                assert bounds.forward_head(instance, s) == total
                if i + 1 < len(stages):
                    total += instance.t_f[s] + stage_lag(instance, s, stages[i + 1])
        assert all(math.isfinite(bounds.device_head(instance, d))
                   for d in range(instance.devices))
