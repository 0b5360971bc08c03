"""The pass semantics, stated once: dependencies with their lags, durations, memory deltas and
what one atomic block may hold.

Every other module (the evaluator and validator, the DAG, the greedy engine and list scheduler,
the bounds and the solver models) takes these rules from here; docs/model.md explains them.

- A pass is `(stage, microbatch, kind)`, kind F (forward), B (input gradient) or W (weight
  gradient); its text form is `{stage}{kind}{mb}` (0F1, 3B0).
- F(s,j) after F(prev(s),j); B(s,j) after B(next(s),j), or after F(s,j) on a chain's last
  stage; W(s,j) after B(s,j). An edge between stages on different devices adds `comm`.
- Memory: F adds m_b[s]; B releases m_b[s] - m_w[s]; W releases m_w[s].
- A block (several passes run as one atomic item) holds passes of one device none of which
  depends on another; it lasts the sum of its passes less `overlap * min(forward, backward)`.
"""

from __future__ import annotations

from typing import Sequence

from .instance import Instance
from .instance import within_cap as fits  # noqa: F401  (the cap test, stated once)

Pass = tuple[int, int, str]  # (stage, micro-batch, kind)
Item = tuple[Pass, ...]  # one atomic block of passes on a device


def format_pass(p: Pass) -> str:
    """Text form `{stage}{kind}{mb}`, e.g. 0F1, 3B0, 2W7 (as PyTorch writes actions)."""
    return f"{p[0]}{p[2]}{p[1]}"


# ----- dependencies and lags -----------------------------------------------------------------

def neighbours(instance: Instance) -> tuple[dict[int, int], dict[int, int]]:
    """Previous and next stage of each stage along its chain (absent at the chain's ends)."""
    prev: dict[int, int] = {}
    nxt: dict[int, int] = {}
    for stages, _ in instance.chains:
        for a, b in zip(stages, stages[1:]):
            nxt[a] = b
            prev[b] = a
    return prev, nxt


def dependencies(instance: Instance, p: Pass, links=None) -> list[Pass]:
    """Passes that must end before `p` starts; nothing else constrains W.

    `links` is neighbours(instance), passed by callers in a loop to avoid recomputing it.
    """
    stage, mb, kind = p
    prev, nxt = links or neighbours(instance)
    if kind == "F":
        return [(prev[stage], mb, "F")] if stage in prev else []
    if kind == "B":
        return [(nxt[stage], mb, "B")] if stage in nxt else [(stage, mb, "F")]
    return [(stage, mb, "B")]


def stage_lag(instance: Instance, a: int, b: int) -> float:
    """Time from the end of a pass on stage `a` to the start of its dependant on stage `b`."""
    return instance.comm if instance.device_of(a) != instance.device_of(b) else 0


def lag(instance: Instance, a: Pass, b: Pass) -> float:
    """Time between the end of pass `a` and the start of its dependant `b`: comm across devices."""
    return stage_lag(instance, a[0], b[0])


# ----- durations -----------------------------------------------------------------------------

def duration(instance: Instance, p: Pass) -> float:
    return instance.cost(p[0], p[2])


def item_duration(instance: Instance, item: Item) -> float:
    """Sum of the passes' costs, less `overlap * min(forward, backward)` in an F&B block."""
    total = sum(instance.cost(s, k) for s, _, k in item)
    if instance.overlap and len(item) > 1:
        forward = sum(instance.cost(s, k) for s, _, k in item if k == "F")
        backward = total - forward
        if forward and backward:
            total -= instance.overlap * min(forward, backward)
    return total


# ----- memory --------------------------------------------------------------------------------

def memory_delta(instance: Instance, p: Pass) -> float:
    """What pass `p` changes on its device: F +m_b, B -(m_b - m_w), W -m_w."""
    stage, _, kind = p
    if kind == "F":
        return instance.m_b[stage]
    if kind == "B":
        return -(instance.m_b[stage] - instance.m_w[stage])
    return -instance.m_w[stage]


def stage_deltas(instance: Instance) -> dict[str, tuple[float, ...]]:
    """memory_delta of each kind on every stage, as flat per-stage tuples for hot loops."""
    return {kind: tuple(memory_delta(instance, (s, 0, kind)) for s in range(instance.num_stages))
            for kind in "FBW"}


def item_memory(instance: Instance, item: Item) -> tuple[float, float]:
    """(added at the item's start, released at its end): memory a block takes is held until
    the whole block ends, memory it frees leaves only then."""
    add = release = 0.0
    for p in item:
        delta = memory_delta(instance, p)
        if delta > 0:
            add += delta
        else:
            release -= delta
    return add, release


# ----- blocks --------------------------------------------------------------------------------

def block_problems(instance: Instance, item: Sequence[Pass], links=None) -> list[str]:
    """Why `item` cannot be one atomic block (empty list: it can): its passes must be distinct
    and none may depend on another, except a fused full backward (B then W of one stage and
    micro-batch, in that order), whose W the runtime computes with its B."""
    if len(item) < 2:
        return []
    if len(item) == 2:  # the common blocks, settled without building sets
        a, b = item
        if a != b and (a[1] != b[1] or (a[2] == "B" and b == (a[0], a[1], "W"))):
            return []
    inside = set(item)
    if len(inside) < len(item):
        return [f"block ({';'.join(format_pass(p) for p in item)}) repeats a pass"]
    # every dependency links passes of one micro-batch: passes of distinct micro-batches
    # cannot depend on each other, which settles most blocks at once
    shared = [p for p in item if sum(q[1] == p[1] for q in item) > 1]
    if not shared:
        return []
    links = links or neighbours(instance)
    for i, p in enumerate(item):
        if p not in shared:
            continue
        if p[2] == "W" and (p[0], p[1], "B") in item[:i]:
            continue  # fused backward; the B's own check covers everything before it
        if len(shared) == 2 and p[2] == "B" and (p[0], p[1], "W") in item[i + 1:]:
            continue  # exactly a fused backward (B then its W): nothing else to check
        for q in _ancestors(instance, p, links):
            if q in inside:
                return [f"block ({';'.join(format_pass(x) for x in item)}) holds "
                        f"{format_pass(p)} which depends on {format_pass(q)}: a block may only "
                        f"hold passes that do not depend on each other"]
    return []


def _ancestors(instance: Instance, p: Pass, links) -> set[Pass]:
    seen: set[Pass] = set()
    todo = list(dependencies(instance, p, links))
    while todo:
        q = todo.pop()
        if q not in seen:
            seen.add(q)
            todo.extend(dependencies(instance, q, links))
    return seen
