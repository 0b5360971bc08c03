"""Memory-aware lower bounds that couple the devices of a contiguous pipeline (one stage per device).

Notation for device e: k_e = floor(room_e / m_b(e)) with room_e = cap - static, the most
micro-batches with F started and B not ended it can hold (memory is added at an F's start and an
activation is released only when its B ends); R_e = t_f(e) + round trip + t_b(e), the least time
from the start of F(e, j) to the end of B(e, j); fwd(d, e) and bwd(e, d) the forward path from
the start of F(d, j) to the start of F(e, j) and the backward path from the end of B(e, j) to the
end of B(d, j) (pass times and comm of the stages d..e-1), so R_d = fwd(d, e) + R_e + bwd(e, d).
A device's span runs from its first pass (an F) to its last, which ends at least t_w after its
last B; so for d <= e, since F(d, j) precedes F(e, j) by fwd and B(d, j) follows B(e, j) by bwd,

    span_d >= fwd(d, e) + window_e + bwd(e, d) + t_w(d),                                   (1)

where window_e is the time from e's first F start to e's last B end. Two lower bounds on window_e:

- Work and idle (`window_work`). All F and B of e lie in the window. Let B(e, l) be the last B,
  starting at y. Every other B ended before y, every F too, and a W not ended by y has not
  started (the device runs one pass at a time), so at y the device holds m_b(e) for l and m_w(e)
  for each pending W: at most Q_e = floor((room_e - m_b(e)) / m_w(e)) of them (the level at y is
  at most the peak after the last F start, which the cap checks). So at most Q_e + 1 W follow the
  window and the other m - Q_e - 1 run in it. The window also holds the forced idle of
  zbopt.bounds (before e's first B, and before the B of its last F; both in the window, summed
  when the cap cannot hold every forward at once, the max otherwise), disjoint from the work.
- Seen from the last F (`window_tail`). Let the last F of e start at y with a micro-batches in
  flight (F started, B not ended; the new one included, 1 <= a <= k_e) and P W pending, so
  a m_b(e) + P m_w(e) <= room_e. A W that runs after the window's end z was pending at y or
  belongs to one of the a (its B runs after y), so at most a + P do, less every W run in
  [y, z]. That stretch holds only the last F, the a B and W passes (no F follows y, and every B
  ends by z), and lasts at least wait_e + t_b(e) (the last F's own round trip, wait_e from its
  start to its B's start): the W run in it or its idle fill wait_e - t_f(e) - (a - 1) t_b(e).
  So window_e >= m (t_f + t_b) + min over a of ((m - a - P_a) t_w + max(0, that fill)), with
  P_a the W that fit next to a activations; plus e's ramp idle when some F must follow its
  first B (then the ramp lies before y). This sees what the pending count alone does not: few
  held W when several micro-batches are in flight at the last F, or a long wait with one.
- Deferred W against the paths (`tail_span`). Both spans of (1) and e's own grow with window_e,
  and e's own span also holds the W that run after the window's end z: span_e >= window_e +
  N t_w(e). Seen from the last F of e (start y, a in flight, P pending, as above) with r W run
  in [y, z], N = P + a - r (at least 1: the W of the B that ends at z follows it), the work
  before y is (m - 1) t_f + (m - a) t_b + (m - a - P) t_w plus e's ramp idle (before its first
  B, so before y when m > a), and z - y >= max(R_e, t_f + a t_b + r t_w). So with
  A = max over d < e of (R_d - R_e + t_w(d)), span >= (that work) + (that stretch) +
  max(A, N t_w), least over a, P and N: a device cannot both hold back the W that cover the
  paths back to device 0 and spend them filling its last round trip. More P only helps, so
  P = P_a; the cost is convex in N and its least value lies at a breakpoint. (Only here, not in
  zbopt.plan.bound's segment table: A needs the whole t_w of the stages before e.)
- Chain of starts (`start_chain`). Order the micro-batches by the start s_1 <= ... <= s_m of their
  F on e. For d <= e: if s_{i+k_d} - fwd(d, e) < min over l in [i, i+k_d) of (end of B(e, l))
  + bwd(e, d), then at time s_{i+k_d} - fwd(d, e) each of the k_d + 1 micro-batches i..i+k_d has
  started F on d (at most s_l - fwd) and not ended B on d (at least end B(e, l) + bwd), which the
  cap forbids; and end B(e, l) >= s_l + R_e >= s_i + R_e. So s_{i+k_d} >= s_i + R_d for every
  d <= e (d = e included), and s_{i+1} >= s_i + t_f(e) (one device). The least s_m - s_1 under
  these difference constraints is their longest path (`start_chain`), and window_e >= s_m - s_1
  + R_e (the last B on e ends at least R_e after s_m). With e alone this is the throughput bound
  ceil(m / k_e) R_e of zbopt.plan.bound; with several devices it adds their effects up (a device
  that holds few micro-batches with a long round trip and one deeper that holds fewer).

Release gap (`release_gap`). Where k_d activations and one pending W exceed the cap, a slot
frees only delta_d = min(t_b(d), t_w(d)) after a B ends: if k_d + 1 micro-batches had F(d)
started by a time T and B(d) not ended by T - delta_d, at most k_d are in flight at T, so one B
ended in (T - delta_d, T] (only one can: B passes of the device are t_b >= delta_d apart), and
its W, which starts after that B and lasts t_w >= delta_d, is still pending at T: k_d in flight
and one pending W, over the cap (the level at T is at most the level after the last F start
before it, which the cap checks). So every rule above that lets F(d, .) follow a B end
(s_{i+k_d} >= s_i + R_d in the chain, the throughput bound of zbopt.plan.bound, the memory rules
of zbopt.plan.collision_bound and zbopt.plan.device_bound) holds with R_d + delta_d
(`chain_trips`): a micro-batch's slot lasts from its F start to delta_d past its B end.

`pipeline_bound` is the largest of (1) over d <= e with the larger window bound; every term holds
for every valid schedule of single passes, so the maximum does. tests/test_plan.py checks it
against CP-SAT optima of small layered models and against valid schedules of random orders.
"""

from __future__ import annotations

import math
from typing import Sequence

from ..bounds import activation_capacity, drain_idle, held_count, ramp_idle, round_trip
from ..instance import Instance, within_cap

EPS = 1e-9


def held_counts(instance: Instance) -> list[int]:
    """k_d of the module doc for every device: the most micro-batches it holds (m uncapped)."""
    m = instance.microbatches
    return [held_count(activation_capacity(instance, d), instance.m_b[d], m)
            for d in range(instance.devices)]


def round_trips(instance: Instance) -> list[float]:
    """R_d of the module doc for every device: the least F(d, j) start to B(d, j) end."""
    return [round_trip(instance, d, d) + instance.t_b[d] for d in range(instance.devices)]


def release_gap(held: int, m: int, t_b: float, t_w: float, m_b: float, m_w: float,
                static: float, cap: float) -> float:
    """delta of the module doc: min(t_b, t_w) where `held` activations (fewer than m) and one
    pending W exceed the cap (by more than the cap check tolerates, with a margin), else 0."""
    if not 1 <= held < m or m_w <= 0 or not math.isfinite(cap):
        return 0.0
    level = static + held * m_b + m_w
    if within_cap(level - 1e-6 * max(1.0, abs(cap)), cap):
        return 0.0
    return max(0.0, min(t_b, t_w))


def release_gaps(instance: Instance) -> list[float]:
    """delta_d of the module doc for every device (0 without a cap)."""
    if instance.cap is None:
        return [0.0] * instance.devices
    counts = held_counts(instance)
    return [release_gap(counts[d], instance.microbatches, instance.t_b[d], instance.t_w[d],
                        instance.m_b[d], instance.m_w[d], instance.static_memory[d],
                        instance.cap[d]) for d in range(instance.devices)]


def chain_trips(instance: Instance) -> list[float]:
    """R_d + delta_d: the least time from F(d, j)'s start until its activation's memory can
    serve F(d, j + k_d) (module doc)."""
    return [r + g for r, g in zip(round_trips(instance), release_gaps(instance))]


def window_work(m: int, t_f: float, t_b: float, t_w: float, m_b: float, m_w: float,
                room: float, idle: float) -> float:
    """Least window (first F start to last B end) of a device from its work and forced idle."""
    pending = held_count(room - m_b, m_w, m)
    return m * (t_f + t_b) + max(0, m - 1 - pending) * t_w + idle


def tail_span(m: int, t_f: float, t_b: float, t_w: float, m_b: float, m_w: float,
              room: float, trip: float, ramp: float, ahead: float) -> float:
    """Least span of the module doc's deferred-W bound (`trip`: R_e, `ramp`: e's ramp idle,
    `ahead`: A, the longest R_d - R_e + t_w(d) over the devices before e)."""
    held = held_count(room, m_b, m)
    best = math.inf
    for a in range(1, max(1, held) + 1):
        pending = min(m - a, held_count(room - a * m_b, m_w, m))
        before = (m - 1) * t_f + (m - a) * t_b + (m - a - pending) * t_w + (ramp if m > a else 0.0)
        fixed = t_f + a * t_b
        top = pending + a  # N runs from 1 to P + a

        candidates = {1, top}
        if t_w > 0:
            for x in (ahead / t_w, top - (trip - fixed) / t_w):
                candidates.update((math.floor(x), math.ceil(x)))
        best = min(best, before + min(max(trip, fixed + (top - n) * t_w) + max(ahead, n * t_w)
                                      for n in candidates if 1 <= n <= top))
    return best


def window_tail(m: int, t_f: float, t_b: float, t_w: float, m_b: float, m_w: float,
                room: float, wait: float, ramp: float) -> float:
    """Least window of a device seen from its last F (`wait`: its F start to B start, `ramp`:
    forced idle before its first B, counted only when some F must follow the first B)."""
    held = held_count(room, m_b, m)
    extra = math.inf
    for a in range(1, max(1, held) + 1):
        pending = min(m - a, held_count(room - a * m_b, m_w, m))
        fill = max(0.0, wait - t_f - (a - 1) * t_b)
        extra = min(extra, (m - a - pending) * t_w + fill)
    disjoint = m * m_b > room + EPS
    return m * (t_f + t_b) + extra + (ramp if disjoint else 0.0)


def start_chain(m: int, step: float, rules: Sequence[tuple[int, float]]) -> float:
    """Least s_m - s_1 with s_{i+1} >= s_i + step and s_{i+k} >= s_i + r for each (k, r)."""
    rules = [(k, r) for k, r in rules if 1 <= k < m]
    if not rules:
        return (m - 1) * step
    starts = [0.0] * m
    for i in range(1, m):
        value = starts[i - 1] + step
        for k, r in rules:
            if i >= k:
                value = max(value, starts[i - k] + r)
        starts[i] = value
    return starts[-1]


def _idle(instance: Instance, d: int) -> float:
    ramp, drain = ramp_idle(instance, d), drain_idle(instance, d)
    if instance.m_b[d] * instance.microbatches > activation_capacity(instance, d) + EPS:
        return ramp + drain  # some F starts after the first B: the two waits are disjoint
    return max(ramp, drain)


def applies(instance: Instance) -> bool:
    """The argument needs one stage per device on one chain and passes that never overlap."""
    return (instance.placement == "contiguous" and instance.num_stages == instance.devices
            and not instance.overlap)


def pipeline_bound(instance: Instance) -> float:
    """The memory-aware bound of the module doc on the span of any schedule (0 where it does
    not apply)."""
    if not applies(instance):
        return 0.0
    p, m = instance.devices, instance.microbatches
    trip, slot = round_trips(instance), chain_trips(instance)
    rooms = [activation_capacity(instance, d) for d in range(p)]
    counts = held_counts(instance)
    best = 0.0
    # the terms over d <= e (d < e for A) are R_d + t_w(d) less what depends on e alone: the
    # device of the largest R_d + t_w(d) so far gives them (`lead`), and the chain's rules
    # with one count keep the largest slot only (`rules`), so each device costs O(m) rules
    # rather than O(p): linear in the devices
    lead, rules = 0, {}
    for e in range(p):
        work = window_work(m, instance.t_f[e], instance.t_b[e], instance.t_w[e], instance.m_b[e],
                           instance.m_w[e], rooms[e], _idle(instance, e))
        work = max(work, window_tail(m, instance.t_f[e], instance.t_b[e], instance.t_w[e],
                                     instance.m_b[e], instance.m_w[e], rooms[e],
                                     round_trip(instance, e, e), ramp_idle(instance, e)))
        if e:
            ahead = trip[lead] - trip[e] + instance.t_w[lead]
            best = max(best, tail_span(m, instance.t_f[e], instance.t_b[e], instance.t_w[e],
                                       instance.m_b[e], instance.m_w[e], rooms[e], trip[e],
                                       ramp_idle(instance, e), ahead))
        if trip[e] + instance.t_w[e] > trip[lead] + instance.t_w[lead]:
            lead = e
        rules[counts[e]] = max(rules.get(counts[e], -math.inf), slot[e])
        chain = start_chain(m, instance.t_f[e], list(rules.items()))
        window = max(work, chain + trip[e])
        # fwd(d, e) + bwd(e, d) = R_d - R_e
        best = max(best, trip[lead] - trip[e] + window + instance.t_w[lead])
    return best
