"""compare(): the rows in worker processes are the rows of one process, in the same order."""

from dataclasses import replace

import pytest

import zbopt.compare as compare_module
from zbopt import registry
from zbopt.compare import compare
from zbopt.instance import Instance


def rows_without_runtime(rows):
    return [{k: v for k, v in r.to_dict().items() if k != "runtime"} for r in rows]


@pytest.mark.parametrize("jobs", [2, 3])
def test_workers_give_the_rows_of_one_process_in_the_same_order(monkeypatch, jobs):
    monkeypatch.setattr(compare_module, "PARALLEL_FROM", 0)  # workers even for a small instance
    instance = Instance(devices=3, microbatches=6, t_f=2, t_b=3, t_w=1, comm=1, m_b=2, m_w=1,
                        memory_cap="1.5p")
    alone = compare(instance)
    said: list[str] = []
    together = compare(instance, jobs=jobs, progress=said.append)
    assert said[0] == f"compare: {len(alone)} methods in {jobs} processes"
    assert sum("methods done" in line for line in said) == len(alone)
    assert [r.method for r in together] == [r.method for r in alone]
    assert rows_without_runtime(together) == rows_without_runtime(alone)
    assert [r.timeline for r in together] == [r.timeline for r in alone]
    assert [r.timeline.start for r in together if r.applies] == \
        [r.timeline.start for r in alone if r.applies]


def test_a_small_instance_runs_in_this_process():
    said: list[str] = []
    rows = compare(Instance(devices=2, microbatches=4), ["1f1b", "zb-h1"], jobs=2,
                   progress=said.append)
    assert said == ["compare: 1f1b (1/2)", "compare: zb-h1 (2/2)"]
    assert [r.method for r in rows] == ["1f1b", "zb-h1"]


def test_a_failing_method_in_a_worker_fails_the_comparison(monkeypatch):
    monkeypatch.setattr(compare_module, "PARALLEL_FROM", 0)

    def broken(instance, **params):
        raise RuntimeError("broken generator")

    method = replace(registry.get_method("1f1b"), name="broken", generate=broken)
    monkeypatch.setitem(registry._REGISTRY, "broken", method)
    with pytest.raises(RuntimeError, match="broken generator"):
        compare(Instance(devices=2, microbatches=4), ["zb-h1", "broken", "1f1b"], jobs=2)


def test_the_two_ends_of_the_task_order_start_with_the_heuristics_of_the_largest_placements():
    instance = Instance(devices=4, microbatches=8)
    registry_ = registry.methods("schedule")
    tasks = [(name, registry.prepare(method, instance), "span") for name, method in registry_.items()]
    order = compare_module._two_ended(tasks, registry_)
    assert sorted(order) == list(range(len(tasks)))

    def weight(placement):
        return sum(t.num_passes * (3 if registry_[n].kind == "heuristic" else 1)
                   for n, t, _ in tasks if t.placement == placement)
    placements = sorted({t.placement for _, t, _ in tasks}, key=lambda x: -weight(x))
    front, back = tasks[order[0]], tasks[order[-1]]
    assert front[1].placement == placements[0] and registry_[front[0]].kind == "heuristic"
    assert back[1].placement == placements[1] and registry_[back[0]].kind == "heuristic"
    # each placement's methods are one run of the order, so one process shares their tables
    runs = [tasks[i][1].placement for i in order]
    changes = sum(a != b for a, b in zip(runs, runs[1:]))
    assert changes == len(placements) - 1
