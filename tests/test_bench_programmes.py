"""benchmarks/bench_programmes.py: the child process it times computes the same bound as the
package's own functions, for each kind of case."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from zbopt.instance import Instance
from zbopt.plan.device_bound import device_relaxation
from zbopt.plan.window_bound import window_relaxation
from zbopt.solvers.chunk_relaxation import orders_optimum

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_programmes import cases, run_child  # noqa: E402

SMALL = Instance(devices=4, microbatches=6, t_f=3, t_b=4, t_w=2, comm=1, m_b=2, m_w=1).with_cap(2.5)


@pytest.mark.parametrize("kind", ["device", "window", "chunk"])
def test_the_child_computes_the_packages_bound(tmp_path, kind):
    instance = SMALL.with_placement("interleaved", 2) if kind == "chunk" else SMALL
    task = {"kind": kind, "instance": instance.to_dict(), "devices": [0, 1, 2, 3], "first": 1,
            "device": 0}
    path = tmp_path / "task.json"
    path.write_text(json.dumps(task))
    value, seconds = run_child(ROOT, path)
    if kind == "device":
        expect = max(device_relaxation(instance, d, 60) for d in range(4))
    elif kind == "window":
        expect = window_relaxation(instance, 1, 2, 60)
    else:
        expect = orders_optimum(instance, 0, time.perf_counter() + 60)
    assert expect and value == pytest.approx(expect)
    assert seconds >= 0


def test_the_cases_are_the_tight_plan_splits_and_their_pairs_of_fewest_activations():
    labels = [label for label, _ in cases()]
    assert sum("device, all 8" in label for label in labels) == 2
    # the v128k split's last two devices hold 2 and 1 activations: plan tries them first
    assert "llama-32L-v128k tight 3-4-4-4-4-5-5-5: window 6-7" in labels
    assert labels[-1].startswith("interleaved")
