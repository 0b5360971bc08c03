"""Memory-capped greedy for the V placement (device d holds stages d and 2p-1-d).

The same list scheduler as zb-greedy (see _engine.py): a device runs a ready B, else a ready F
that fits, else a W that fills a gap or frees memory. Each micro-batch's F on its first chunk
reserves room for its F on the second chunk, so a started micro-batch can always finish its
forward on that device and the greedy never deadlocks (a tighter variant keeps room for one
micro-batch only). A grid over its choices (B or F first, how W fills, which chunk first, how
much room) plus every registered handwritten V order that fits (zb-v, the V-Min and V-Half
blocks, DualPipeV's when it runs single passes) is judged by evaluate(); the smallest span
within the cap wins, then the improvement step of refine.py: its passes that nothing waits for
re-placed, and a bounded local search.

Registered names: `v-greedy` (the instance's cap, unlimited if none), `v-half` and `v-min`
(caps of about 1/2 and 1/3 of 1F1B's activation memory, like the V-Half / V-Min schedules).
Every generator takes `memory_cap=` to override.
"""

from __future__ import annotations

from typing import Any

from .. import bounds
from ..errors import ZboptError
from ..instance import Instance
from ..registry import methods, register
from ..schedule import Schedule
from . import _engine
from ._search import _UNSET, CAP_CHECK, LARGE, capped_instance, derived_cap
from .refine import refine_best
from .zb_greedy import SIMULATION_BUDGET

# The grid, most useful first: the order in which its points won on random V instances (a
# greedy set cover; in-flight limits never won there and are left out, the early chunk first
# comes last). Large instances only run a prefix of MIN_POLICIES or what the budget allows.
PRIORITY = ((False, "eager"), (True, "eager"), (False, "gap"), (True, "gap"),
            (False, "balance"), (True, "balance"), (False, "lazy"), (True, "lazy"))
MIN_POLICIES = 2


def grid(instance: Instance) -> list[_engine.Policy]:
    """(B first, W fill) x room kept for the second chunk (every started micro-batch's, or one),
    the later chunk's ready pass first, then the same with the earlier chunk first."""
    return [_engine.Policy(b_first=b_first, w_fill=w_fill, late_chunk_first=late_first,
                           reserve_all=reserve_all)
            for late_first in (True, False)
            for b_first, w_fill in PRIORITY
            for reserve_all in (True, False)]


def min_v_cap(instance: Instance) -> list[float]:
    """Per device, the least cap any V schedule needs: both chunks' activations of one
    micro-batch are held at once (its first-chunk B waits for its second-chunk F)."""
    return list(bounds.min_feasible_cap(instance))


def v_schedule(instance: Instance, method: str) -> Schedule:
    if instance.placement != "v":
        raise ZboptError(f"{method} runs on placement 'v', the instance is "
                         f"{instance.placement!r}")
    caps = instance.cap
    need = min_v_cap(instance)

    def needed() -> str:
        return (f"a V schedule holds both chunks' activations of a micro-batch at once: "
                f"memory_cap of at least {max(need):g} would fit")

    if caps is not None and any(c + 1e-9 < n for c, n in zip(caps, need)):
        raise ZboptError(f"{method}: no schedule of this method fits the memory cap "
                         f"{instance.memory_cap!r}; {needed()}")
    top = _engine.Topology(instance)
    policies = grid(instance)
    if len(policies) * instance.num_passes > SIMULATION_BUDGET:
        policies = policies[:max(MIN_POLICIES, SIMULATION_BUDGET // instance.num_passes)]
    candidates = [lambda pol=pol: _engine.run(instance, caps, pol, top) for pol in policies]
    # On large instances each handwritten order is its own compare row and warm start;
    # generating them again here would double the time (the grid is already cut to its first
    # points there).
    if instance.num_passes <= LARGE:
        # first: where one is the best (zb-v at loose caps, the V-Min block below half of
        # 1F1B's memory), its span prunes the grid's simulations early
        candidates[:0] = [lambda family=family: _replay_family(family, instance, caps, top)
                          for family in handwritten_v()]
    return refine_best(instance, candidates, method, needed)


def handwritten_v() -> list:
    """The registered handwritten V orders (zb-v, the V-Min and V-Half blocks, DualPipeV), zb-v
    first."""
    found = [m for m in methods("handwritten").values() if m.placement == "v"]
    return sorted(found, key=lambda m: m.name != "zb-v")


def _replay_family(family, instance: Instance, caps, top) -> _engine.Outcome | None:
    """Another generator's order as a candidate (single passes only; else skipped)."""
    try:
        schedule = family.generate(instance, **family.params)
    except ZboptError:
        return None
    if any(len(item) != 1 for order in schedule.orders for item in order):
        return None
    return _engine.replay(instance, caps, [[item[0] for item in order]
                                           for order in schedule.orders], top)


def _fraction_cap(instance: Instance, fraction: float, memory_cap: Any) -> Any:
    """`memory_cap` if given, else `fraction` of 1F1B's activation memory, raised to the least
    a V schedule can use on each device (no cap where nothing holds memory: derived_cap)."""
    if memory_cap is not _UNSET:
        return memory_cap
    unit = instance.devices * instance.activation_unit
    return derived_cap([max(fraction * unit + instance.static_memory[d], need)
                        for d, need in enumerate(min_v_cap(instance))])


@register("v-greedy", "v", "V-shape greedy: memory-capped F/B/W order on placement v",
          kind="heuristic", checks=CAP_CHECK)
def v_greedy(instance: Instance, memory_cap: Any = _UNSET) -> Schedule:
    return v_schedule(capped_instance(instance, memory_cap, "v-greedy"), "v-greedy")


@register("v-half", "v", "V-shape greedy at about half of 1F1B's activation memory",
          kind="heuristic", checks=CAP_CHECK)
def v_half(instance: Instance, memory_cap: Any = _UNSET) -> Schedule:
    cap = _fraction_cap(instance, 1 / 2, memory_cap)
    return v_schedule(capped_instance(instance, cap, "v-half"), "v-half")


@register("v-min", "v", "V-shape greedy at about a third of 1F1B's activation memory",
          kind="heuristic", checks=CAP_CHECK)
def v_min(instance: Instance, memory_cap: Any = _UNSET) -> Schedule:
    cap = _fraction_cap(instance, 1 / 3, memory_cap)
    return v_schedule(capped_instance(instance, cap, "v-min"), "v-min")
