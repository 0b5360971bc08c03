"""Time the greedy schedulers on the largest paper scale, p=32, m=256 (24,576 passes).

Each run is one `generate()` call: the grid simulations, the handcrafted candidates and the
choice among them. Writes medians to results/greedy_timing.md.

Usage: python benchmarks/bench_greedy.py [--repeats N] [--out results/greedy_timing.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

from zbopt.families import generate
from zbopt.heuristics import v_greedy, zb_greedy
from zbopt.instance import Instance
from zbopt.schedule import evaluate

# The 1.5B setting's profiled costs (paper Table 9) at the largest scale of the paper.
BASE = dict(devices=32, microbatches=256, t_f=18522, t_b=18086, t_w=9337, comm=601,
            m_b=201216, m_w=73728)

CASES = (  # (method, instance cap, placement)
    ("zb-greedy", "1p", "contiguous"),
    ("zb-greedy", "2p", "contiguous"),
    ("zb-greedy", None, "contiguous"),
    ("zb-1p", None, "contiguous"),
    ("zb-2p", None, "contiguous"),
    ("v-greedy", "1p", "v"),
    ("v-half", None, "v"),
    ("v-min", None, "v"),
)


def measure(method: str, instance: Instance, repeats: int) -> tuple[list[float], list[float]]:
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        generate(method, instance)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return wall, cpu


def fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}, {max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1]
                                             / "results" / "greedy_timing.md"))
    args = parser.parse_args()
    base = Instance(**BASE)
    load_before = os.getloadavg()[0]
    rows = []
    for method, cap, placement in CASES:
        instance = base.with_cap(cap).with_placement(placement)
        wall, cpu = measure(method, instance, args.repeats)
        timeline = evaluate(instance, generate(method, instance))
        rows.append(f"| {method} | {placement} | {cap or 'none'} | {fmt(wall)} | {fmt(cpu)} | "
                    f"{timeline.span:,.0f} | {timeline.bubble_rate:.2%} |")
        print(rows[-1], flush=True)
    load_after = os.getloadavg()[0]
    lines = [
        "# Greedy scheduler speed",
        "",
        f"p=32, m=256 ({base.num_passes:,} passes), the 1.5B setting's costs (t_f=18522, "
        f"t_b=18086, t_w=9337, comm=601 us). One run = one `generate()` call: grid "
        f"simulations, handcrafted candidates, and the choice among them. "
        f"{args.repeats} runs each; median (min, max) seconds, wall clock and this process's "
        f"CPU time. On instances this size the grid runs a prefix (SIMULATION_BUDGET): "
        f"{max(zb_greedy.MIN_POLICIES, zb_greedy.SIMULATION_BUDGET // base.num_passes)} "
        f"points for zb-*, "
        f"{max(v_greedy.MIN_POLICIES, zb_greedy.SIMULATION_BUDGET // (2 * base.num_passes))} "
        f"for v-* (placement v has twice the "
        f"passes, {2 * base.num_passes:,}), and the best estimate is returned without a "
        f"second evaluate() (the caller's evaluate() judges it; zbopt/heuristics/_search.py).",
        "",
        f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores, "
        f"shared with other work: 1-minute load average {load_before:.1f} before, "
        f"{load_after:.1f} after (wall clock inflates with load; CPU time much less).",
        "",
        "| method | placement | instance cap | wall s | CPU s | span | bubble |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Command: `python benchmarks/bench_greedy.py`",
        "",
    ]
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
