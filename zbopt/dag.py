"""The pass dependency DAG: F/B/W passes, edges with the comm lag between devices."""

from __future__ import annotations

import networkx as nx

from .instance import Instance

Pass = tuple[int, int, str]  # (stage, micro-batch, kind)


def format_pass(p: Pass) -> str:
    """Text form `{stage}{kind}{mb}`, e.g. 0F1, 3B0, 2W7 (as PyTorch writes actions)."""
    return f"{p[0]}{p[2]}{p[1]}"


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
    """Passes that must end before `p` starts (DESIGN.md: nothing else constrains W).

    `links` is neighbours(instance), passed by callers in a loop to avoid recomputing it.
    """
    stage, mb, kind = p
    prev, nxt = links or neighbours(instance)
    if kind == "F":
        return [(prev[stage], mb, "F")] if stage in prev else []
    if kind == "B":
        return [(nxt[stage], mb, "B")] if stage in nxt else [(stage, mb, "F")]
    return [(stage, mb, "B")]


def lag(instance: Instance, a: Pass, b: Pass) -> float:
    """Time between the end of `a` and the start of its dependant `b`: comm across devices."""
    return instance.comm if instance.device_of(a[0]) != instance.device_of(b[0]) else 0


def build_dag(instance: Instance) -> nx.DiGraph:
    """Nodes are passes with `cost` and `device`; edges carry `lag` (comm across devices)."""
    graph = nx.DiGraph()
    links = neighbours(instance)
    for p in instance.passes():
        graph.add_node(p, cost=instance.cost(p[0], p[2]), device=instance.device_of(p[0]))
    for p in instance.passes():
        for q in dependencies(instance, p, links):
            graph.add_edge(q, p, lag=lag(instance, q, p))
    return graph


def critical_path(instance: Instance) -> tuple[float, list[Pass]]:
    """Longest chain of passes plus lags, ignoring devices: a lower bound on any makespan."""
    graph = build_dag(instance)
    finish: dict[Pass, float] = {}
    best_pred: dict[Pass, Pass | None] = {}
    for node in nx.topological_sort(graph):
        start, pred = 0.0, None
        for q in graph.predecessors(node):
            t = finish[q] + graph.edges[q, node]["lag"]
            if t > start:
                start, pred = t, q
        finish[node] = start + graph.nodes[node]["cost"]
        best_pred[node] = pred
    end = max(finish, key=finish.__getitem__)
    path = [end]
    while best_pred[path[-1]] is not None:
        path.append(best_pred[path[-1]])
    return finish[end], path[::-1]


def critical_path_length(instance: Instance) -> float:
    return critical_path(instance)[0]
