"""Zero-bubble greedy for the interleaved placement (device d holds stages d, d + p, ...).

The list scheduler of zb-greedy and v-greedy (_engine.py) run on v chunks with split B and W:
a device runs a ready B, else a ready F that fits under the cap, else a W that fills a gap or
frees memory. A micro-batch's first-chunk F on a device reserves room for its later chunks'
F there, so a started micro-batch always finishes its forward and the greedy fits every cap
that admits a schedule (all chunks' activations of one micro-batch on each device). A grid
over its choices (B or F first, how W fills, which chunk first, how much room is reserved) is
judged by evaluate(); the smallest span within the cap wins, then the improvement step of
refine.py (its passes that nothing waits for re-placed, and a bounded local search). In-flight
limits like 1F1B's (per stage, a multiple of the stages left on the chain) are part of the
grid: at 1p they beat memory alone. So are forwards in a fixed order of micro-batch groups
(`sequenced`): the first p micro-batches through each chunk, then groups of about p/2; at 1p
they won on the 1.5B costs at p=8 (m=16: 845,198.5 against the rest's 889,458.5). Their best is
refined apart from the grid's and the shorter of the two kept (below 20,000 passes).

Registered names: `interleaved-zb` (the instance's cap, unlimited if none) and
`interleaved-zb-1p` (cap 1p whatever the instance says). Both take `memory_cap=`.
"""

from __future__ import annotations

from typing import Any

from .. import bounds
from ..errors import ZboptError
from ..instance import Instance
from ..registry import register
from ..schedule import Schedule
from . import _engine
from ._search import _UNSET, CAP_CHECK, LARGE, capped_instance, derived_cap
from .refine import _Judge, refine_best
from .v_greedy import MIN_POLICIES, PRIORITY
from .zb_greedy import SIMULATION_BUDGET

# In-flight limits per stage, as multiples of the stages from s to the chain's end (1F1B's
# limit on one chunk); the best first, as they won on the 1.5B settings at 1p and 2p.
INFLIGHT = (2, 1, None)
# each of the two pools (grid, sequenced) gets this share of one refinement's local-search
# re-timings, so that together they search as long as one pool did
POOL_SHARE = 0.5
# (B first, W fill) in the order the grids try them: B after F with W filling gaps first
POINTS = ((False, "gap"),) + tuple(x for x in PRIORITY if x != (False, "gap"))


def _inflight(stages: int, factor: int | None) -> tuple[int, ...] | None:
    """The in-flight limit per stage for one factor of INFLIGHT (None: memory only)."""
    return None if factor is None else tuple(factor * (stages - s) for s in range(stages))


def group_sizes(p: int) -> range:
    """Group sizes after the first p micro-batches in sequenced(): 4 to 6 at p=8."""
    return range(max(1, p // 2), p // 2 + 3)


def grid(instance: Instance) -> list[_engine.Policy]:
    """In-flight limit x (B first, W fill) x room reserved (the later chunk's ready pass
    first: the earlier chunk first never won there)."""
    stages = instance.num_stages
    policies = []
    for factor in INFLIGHT:
        limit = _inflight(stages, factor)
        for b_first, w_fill in POINTS:
            for reserve_all in (False, True):
                policies.append(_engine.Policy(b_first=b_first, w_fill=w_fill, inflight=limit,
                                               reserve_all=reserve_all))
    # the warm-up's depth: at most `limit` micro-batches in flight on the first chunk's stages
    # (later chunks free), which lets a device wait for a later chunk's forward instead of
    # starting one more micro-batch; it won on uneven costs at 1p
    p = instance.devices
    for extra in range(4):
        limit = tuple(p + extra if s < p else instance.microbatches for s in range(stages))
        for w_fill in ("eager", "gap"):
            policies.append(_engine.Policy(b_first=True, w_fill=w_fill, inflight=limit,
                                           reserve_all=False))
    return policies


def sequenced(instance: Instance) -> list[_engine.Policy]:
    """Grid points with a forward sequence (Policy.sequence): p micro-batches through each
    chunk, then groups of about p/2, with the first two in-flight limits and room kept for one
    micro-batch. On a tight cap (interleaved p=8, m=32, 1.5B costs at 1p) they beat every point
    of grid(): the first p forwards of the first chunk ahead of the later chunk's is the head
    of the lower bound's ramp, and groups of about p/2 micro-batches keep a device's activations
    under the cap in the steady state. The policy search starts from them too."""
    p = instance.devices
    policies = []
    limits = [_inflight(instance.num_stages, factor) for factor in INFLIGHT[:2]]
    # the (B first, W fill) choice outermost: a budget that keeps a prefix keeps every group
    # size and limit of the first choices
    for b_first, w_fill in POINTS:
        for limit in limits:
            for size in group_sizes(p):
                policies.append(_engine.Policy(b_first=b_first, w_fill=w_fill, inflight=limit,
                                               reserve_all=False, sequence=(p, size)))
    return policies


def min_interleaved_cap(instance: Instance) -> list[float]:
    """Per device, the least cap any schedule needs: a micro-batch's forward passes every
    chunk of the device before its first backward can run there."""
    return list(bounds.min_feasible_cap(instance))


def interleaved_schedule(instance: Instance, method: str) -> Schedule:
    if instance.placement != "interleaved":
        raise ZboptError(f"{method} runs on placement 'interleaved', the instance is "
                         f"{instance.placement!r}")
    need = min_interleaved_cap(instance)

    def needed() -> str:
        return (f"an interleaved schedule holds every chunk's activation of a micro-batch at "
                f"once: memory_cap of at least {max(need):g} would fit")

    if instance.cap is not None and any(c + 1e-9 < n for c, n in zip(instance.cap, need)):
        raise ZboptError(f"{method}: no schedule fits the memory cap {instance.memory_cap!r}; "
                         f"{needed()}")
    top = _engine.Topology(instance)

    def candidates(policies: list[_engine.Policy]) -> list:
        if len(policies) * instance.num_passes > SIMULATION_BUDGET:
            policies = policies[:max(MIN_POLICIES, SIMULATION_BUDGET // instance.num_passes)]
        return [lambda pol=pol: _engine.run(instance, instance.cap, pol, top) for pol in policies]

    if instance.num_passes >= LARGE:
        # a second pool would double the runtime where compare must stay fast
        return refine_best(instance, candidates(grid(instance)), method, needed)
    judge = _Judge(instance)  # both pools' spans, read again to keep the shorter
    best = refine_best(instance, candidates(grid(instance)), method, needed, share=POOL_SHARE,
                       judge=judge)
    # the sequenced points are refined apart: in one pool their estimates can push a point
    # that refines shorter out of the finalists (p=4, m=8 at 2p), so each pool's best is kept
    try:
        other = refine_best(instance, candidates(sequenced(instance)), method, needed,
                            share=POOL_SHARE, judge=judge)
    except ZboptError:
        return best  # every sequenced point got stuck (the next forward never fit)
    return min((best, other), key=judge)


@register("interleaved-zb", "interleaved",
          "Interleaved zero bubble: greedy F/B/W order over v chunks under the instance's cap",
          kind="heuristic", chunks=2, checks=CAP_CHECK)
def interleaved_zb(instance: Instance, memory_cap: Any = _UNSET) -> Schedule:
    return interleaved_schedule(capped_instance(instance, memory_cap, "interleaved-zb"),
                                "interleaved-zb")


@register("interleaved-zb-1p", "interleaved",
          "Interleaved zero bubble at cap 1p (1F1B's activation memory), or the least that fits",
          kind="heuristic", chunks=2, checks=CAP_CHECK)
def interleaved_zb_1p(instance: Instance, memory_cap: Any = _UNSET) -> Schedule:
    if memory_cap is _UNSET:
        unit = instance.devices * instance.activation_unit
        memory_cap = derived_cap([max(unit + instance.static_memory[d], need)
                                  for d, need in enumerate(min_interleaved_cap(instance))])
    return interleaved_schedule(capped_instance(instance, memory_cap, "interleaved-zb-1p"),
                                "interleaved-zb-1p")
