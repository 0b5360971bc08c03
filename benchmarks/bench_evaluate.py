"""Time evaluate() on a p=32, m=256 schedule (24,576 passes); write the median to results/.

Usage: python benchmarks/bench_evaluate.py [--repeats N]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

from zbopt.families import generate
from zbopt.instance import Instance
from zbopt.schedule import evaluate, validate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    instance = Instance(devices=32, microbatches=256, t_f=18522, t_b=18086, t_w=9337, comm=601,
                        m_b=201216, m_w=73728, memory_cap="2p")
    lines = ["# evaluate() speed", "",
             f"p=32, m=256, {instance.num_passes:,} passes; {args.repeats} runs each; "
             f"median (min, max) seconds. Python {platform.python_version()}, "
             f"{platform.machine()}; a shared 2-core machine, so expect noise.", "",
             "| schedule | evaluate | validate |", "|---|---|---|"]
    for name in ("1f1b", "zb-h1"):
        schedule = generate(name, instance)
        assert sum(1 for _ in schedule.passes()) == instance.num_passes
        times, vtimes = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            evaluate(instance, schedule)
            times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            validate(instance, schedule)
            vtimes.append(time.perf_counter() - t0)
        row = (f"| {name} | {statistics.median(times):.3f} ({min(times):.3f}, {max(times):.3f}) "
               f"| {statistics.median(vtimes):.3f} ({min(vtimes):.3f}, {max(vtimes):.3f}) |")
        print(row)
        lines.append(row)
    lines += ["", "Command: `python benchmarks/bench_evaluate.py`", ""]
    out = Path(__file__).resolve().parents[1] / "results" / "evaluate.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
