"""The pass dependency DAG: F/B/W passes, edges with the comm lag between devices."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .instance import Instance
from .passes import Pass, dependencies, format_pass, lag, neighbours

if TYPE_CHECKING:
    import networkx as nx

# The pass rules live in passes.py; re-exported here for the DAG's users.
__all__ = ["Pass", "build_dag", "critical_path", "critical_path_length", "dependencies",
           "format_pass", "lag", "neighbours"]


def build_dag(instance: Instance) -> nx.DiGraph:
    """Nodes are passes with `cost` and `device`; edges carry `lag` (comm across devices)."""
    import networkx as nx  # here, not at the top: compare and the bounds never build the graph

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
    import networkx as nx

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
