"""Per-device orders from start times: what a time-indexed backend's answer means as a schedule."""

from __future__ import annotations

import networkx as nx

from ..instance import Instance
from ..passes import Pass, dependencies, neighbours


def tie_order(instance: Instance, starts: dict[Pass, int], ends: dict[Pass, int]) -> dict[Pass, int]:
    """Rank of every pass that shares its start and end with another (zero-length passes at
    one instant): a topological order of the dependencies among them, releases (B, W) before
    F where the dependencies allow, so the per-device orders never deadlock."""
    groups: dict[tuple[int, int], list[Pass]] = {}
    for q in starts:
        groups.setdefault((starts[q], ends[q]), []).append(q)
    links = neighbours(instance)
    rank: dict[Pass, int] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        inside = set(members)
        graph = nx.DiGraph()
        graph.add_nodes_from(members)
        # a dependency chain between two tied passes runs through tied passes only
        graph.add_edges_from((a, q) for q in members for a in dependencies(instance, q, links)
                             if a in inside)
        order = nx.lexicographical_topological_sort(
            graph, key=lambda q: ("WBF".index(q[2]), q[0], q[1]))
        rank.update((q, i) for i, q in enumerate(order))
    return rank


def device_orders(instance: Instance, scaled: Instance, starts: dict[Pass, int]) -> list[list[Pass]]:
    """Each device's passes by start (ties: shorter first, so a zero-length pass that shares a
    start with a longer one runs first; passes tied on start and end in a topological order).
    `scaled` holds the durations in the starts' time unit."""
    ends = {q: starts[q] + int(scaled.cost(q[0], q[2])) for q in starts}
    rank = tie_order(instance, starts, ends)
    orders: list[list[Pass]] = [[] for _ in range(instance.devices)]
    for q in sorted(starts, key=lambda q: (starts[q], ends[q], rank.get(q, 0))):
        orders[instance.device_of(q[0])].append(q)
    return orders
