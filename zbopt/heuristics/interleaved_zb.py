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
grid: at 1p they beat memory alone.

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
from ._search import _UNSET, capped_instance
from .refine import refine_best
from .v_greedy import MIN_POLICIES, PRIORITY
from .zb_greedy import SIMULATION_BUDGET

# In-flight limits per stage, as multiples of the stages from s to the chain's end (1F1B's
# limit on one chunk); the best first, as they won on the 1.5B settings at 1p and 2p.
INFLIGHT = (2, 1, None)


def grid(instance: Instance) -> list[_engine.Policy]:
    """In-flight limit x (B first, W fill) x room reserved (the later chunk's ready pass
    first: the earlier chunk first never won there)."""
    stages = instance.num_stages
    points = [(False, "gap")] + [x for x in PRIORITY if x != (False, "gap")]
    policies = []
    for factor in INFLIGHT:
        limit = None if factor is None else tuple(factor * (stages - s) for s in range(stages))
        for b_first, w_fill in points:
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
    policies = grid(instance)
    if len(policies) * instance.num_passes > SIMULATION_BUDGET:
        policies = policies[:max(MIN_POLICIES, SIMULATION_BUDGET // instance.num_passes)]
    candidates = [lambda pol=pol: _engine.run(instance, instance.cap, pol, top)
                  for pol in policies]
    return refine_best(instance, candidates, method, needed)


@register("interleaved-zb", "interleaved",
          "Interleaved zero bubble: greedy F/B/W order over v chunks under the instance's cap",
          kind="heuristic", chunks=2)
def interleaved_zb(instance: Instance, memory_cap: Any = _UNSET) -> Schedule:
    return interleaved_schedule(capped_instance(instance, memory_cap, "interleaved-zb"),
                                "interleaved-zb")


@register("interleaved-zb-1p", "interleaved",
          "Interleaved zero bubble at cap 1p (1F1B's activation memory), or the least that fits",
          kind="heuristic", chunks=2)
def interleaved_zb_1p(instance: Instance, memory_cap: Any = _UNSET) -> Schedule:
    if memory_cap is _UNSET:
        unit = instance.devices * instance.activation_unit
        memory_cap = [max(unit + instance.static_memory[d], need)
                      for d, need in enumerate(min_interleaved_cap(instance))]
    return interleaved_schedule(capped_instance(instance, memory_cap, "interleaved-zb-1p"),
                                "interleaved-zb-1p")
