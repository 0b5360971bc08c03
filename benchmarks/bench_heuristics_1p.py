"""The multi-chunk zero-bubble heuristics at cap 1p: v-greedy (placement v) and interleaved-zb
(two chunks), before and after their improvement step, against the best lower bound and CP-SAT.

Per instance: the span of the method with the improvement step (zbopt/heuristics/refine.py:
sink placement and local search) off ("old": the grid and, on V, every registered handwritten
V order that fits) and on ("new"), each one's gap to
`bounds.best_lower_bound`, their runtimes (median of --repeats), and CP-SAT's span after
--time-limit seconds warm-started from the new heuristic (the peer: "optimal" when it proved it).
Instances: the 1.5B costs of the solver-reach table (p=8, m=32; per-chunk costs halved), p=4
analogues (m=8, 12), tiny ones CP-SAT proves, and uneven per-stage costs. Also the runtime of
both methods at p=64, m=256, where the local search is off (compare must stay fast).

Usage: python benchmarks/bench_heuristics_1p.py [--time-limit S] [--threads N] [--repeats N]
       [--no-solver] [--out results/heuristics_1p.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from zbopt import bounds
from zbopt.heuristics import local_search
from zbopt.instance import Instance
from zbopt.registry import generate
from zbopt.result import relative_gap
from zbopt.schedule import evaluate, validate
from zbopt.solvers.api import solve

ROOT = Path(__file__).resolve().parents[1]
COSTS_15B = dict(t_f=18513, t_b=18086, t_w=9331, comm=626, m_b=201216, m_w=73728)
METHOD = {"v": "v-greedy", "interleaved": "interleaved-zb"}


def placed(base: Instance, placement: str) -> Instance:
    return base.with_placement("v") if placement == "v" else base.with_placement("interleaved", 2)


def uneven(p: int, m: int, placement: str) -> Instance:
    """Per-stage costs that differ by up to 40% (every third stage heavier, the last stage the
    output layer at 1.5x), 1.5B scale, cap 1p."""
    stages = 2 * p
    weight = [1.0 + 0.2 * (s % 3) for s in range(stages)]
    weight[-1] = 1.5
    costs = {k: [round(COSTS_15B[k] / 2 * w) for w in weight] for k in ("t_f", "t_b", "t_w")}
    return Instance(devices=p, microbatches=m, placement=placement, chunks=2, comm=626,
                    m_b=100608, m_w=36864, memory_cap="1p", **costs)


def cases():
    for p, m in ((8, 32), (4, 8), (4, 12), (3, 4), (2, 4)):
        base = Instance(devices=p, microbatches=m, **COSTS_15B).with_cap("1p")
        for placement in ("v", "interleaved"):
            yield f"1.5B p{p} m{m}", placement, placed(base, placement)
    for p, m in ((4, 8), (8, 32)):
        for placement in ("v", "interleaved"):
            yield f"uneven p{p} m{m}", placement, uneven(p, m, placement)


def timed(method: str, instance: Instance, repeats: int, search: bool):
    saved = local_search.OFF_ABOVE
    local_search.OFF_ABOVE = saved if search else -1
    try:
        times, schedule = [], None
        for _ in range(repeats):
            t0 = time.perf_counter()
            schedule = generate(method, instance)
            times.append(time.perf_counter() - t0)
    finally:
        local_search.OFF_ABOVE = saved
    timeline = evaluate(instance, schedule)
    assert timeline.fits_cap and not validate(instance, schedule), (method, instance.name)
    return timeline.span, statistics.median(times)


def gap(span: float, bound: float) -> str:
    """zbopt.result.relative_gap as a percentage."""
    return f"{100 * relative_gap(span, bound):.2f}%" if bound > 0 else "-"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-solver", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "results" / "heuristics_1p.md"))
    args = parser.parse_args()
    load = os.getloadavg()[0]
    rows = []
    for label, placement, instance in cases():
        method = METHOD[placement]
        print(f"{label} {placement}: {method} ...", file=sys.stderr, flush=True)
        old, t_old = timed(method, instance, args.repeats, search=False)
        new, t_new = timed(method, instance, args.repeats, search=True)
        name, bound = bounds.best_lower_bound(instance)
        peer = "-"
        if not args.no_solver:
            print(f"  cpsat {args.time_limit:g} s ...", file=sys.stderr, flush=True)
            result = solve(instance, time_limit=args.time_limit, threads=args.threads)
            peer = f"{result.span:,.1f} ({result.status})"
            bound = max(bound, result.lower_bound or 0.0)
        rows.append((label, placement, method, instance.num_passes, old, new, bound, t_old, t_new,
                     peer))
    large = []
    for placement in ("v", "interleaved"):
        instance = placed(Instance(devices=64, microbatches=256, **COSTS_15B).with_cap("1p"),
                          placement)
        print(f"p64 m256 {placement} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        generate(METHOD[placement], instance)
        large.append((placement, METHOD[placement], instance.num_passes, time.perf_counter() - t0))

    lines = [
        "# Multi-chunk zero-bubble heuristics at cap 1p",
        "",
        "Written by `benchmarks/bench_heuristics_1p.py` "
        f"(`python benchmarks/bench_heuristics_1p.py --time-limit {args.time_limit:g} "
        f"--threads {args.threads} --repeats {args.repeats}`).",
        "",
        "*old*: the method with its improvement step off (the policy grid and, on V, every "
        "registered handwritten V order that fits, whichever evaluate() finds shortest; on interleaved the grid "
        "already holds the first-chunk warm-up limits added with the step); *new*: the same followed by "
        "`zbopt/heuristics/refine.py` (W passes and first-stage B passes re-placed into waits by "
        "`sink_placement.py`, then the local search of `local_search.py`; two rounds). Spans from "
        "`evaluate()`; every schedule is valid and within the cap. *bound*: the larger of "
        "`bounds.best_lower_bound` and CP-SAT's "
        "own bound; gaps are (span - bound) / span. *CP-SAT*: `solve(time_limit, threads)` warm-started from the "
        "new heuristic, its span and status (optimal = proven by the solver or the bounds). "
        "Runtimes are medians, in seconds.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"load average {load:.1f} at the start: other engineers' jobs shared the CPU, so runtimes "
        "are noisy.",
        "",
        "| instance | placement | method | passes | old span | new span | gain | bound | old gap | "
        "new gap | CP-SAT | old s | new s |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for label, placement, method, passes, old, new, bound, t_old, t_new, peer in rows:
        lines.append(f"| {label} | {placement} | {method} | {passes:,} | {old:,.1f} | {new:,.1f} | "
                     f"{100 * (old - new) / old:.2f}% | {bound:,.1f} | {gap(old, bound)} | "
                     f"{gap(new, bound)} | {peer} | {t_old:.2f} | {t_new:.2f} |")
    gains = [100 * (r[4] - r[5]) / r[4] for r in rows]
    lines += ["", f"Median gain of the improvement step: {statistics.median(gains):.2f}% "
              f"(largest {max(gains):.2f}%, {sum(g > 0 for g in gains)} of {len(gains)} "
              f"instances improved).", "",
              "## Large instances (improvement step off from "
              f"{local_search.OFF_ABOVE:,} passes)", "",
              "| instance | placement | method | passes | runtime (s) |", "|---|---|---|---:|---:|"]
    for placement, method, passes, seconds in large:
        lines.append(f"| 1.5B p64 m256 1p | {placement} | {method} | {passes:,} | {seconds:.2f} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
