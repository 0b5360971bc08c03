"""Where the gap of the interleaved 1p row lies: the critical device's idle, phase by phase.

The row is results/solver.md's `interleaved p8 m32` at 1p (the 1.5B costs, per-chunk costs
halved). Its bound is device 0's load plus two idles that zbopt.bounds proves for that device:
before its first B (bounds.ramp_idle: the first B waits for a forward to cross the pipeline and
come back, while the cap lets only so many forwards run) and after its last F (the chain drain).
For each schedule below this benchmark splits the idle of the critical device (the one whose
span is the schedule's) at the same two events: before its first B (ramp), between its first B
and its last F (middle), after its last F (drain), next to the bound's ramp and drain. It also
counts the forwards of the device's first stage that run before the first forward of its later
stage: with p of them that forward can start as soon as it arrives; with more it waits for one
of them to end (or the device idles until it arrives).

Schedules: every point of interleaved-zb's grid (grouped by ramp idle: how many points, the
shortest span), the policy search as solve() runs it (12 s), and solve() with cpsat-lns (60 s,
2 threads) --runs times. Writes results/ramp.md.

Usage:
  python benchmarks/bench_ramp.py [--runs N] [--time-limit S] [--out results/ramp.md]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_solver import reach_runs  # noqa: E402

from zbopt import bounds  # noqa: E402
from zbopt.heuristics import _engine, interleaved_zb, policy_search  # noqa: E402
from zbopt.instance import Instance  # noqa: E402
from zbopt.schedule import Schedule, Timeline, evaluate  # noqa: E402
from zbopt.solvers.api import POLICY_PATIENCE, POLICY_SHARE, solve  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def phases(instance: Instance, timeline: Timeline, device: Optional[int] = None) -> dict:
    """The idle of `device` (default: the critical one, whose span is the schedule's) before its
    first B, between it and its last F, and after its last F; and how many forwards of its
    first stage precede its later stage's first forward."""
    starts, ends = timeline.start, timeline.end
    if device is None:
        spans = [end - start for start, end in timeline.device_span]
        device = max(range(instance.devices), key=lambda d: spans[d])
    mine = sorted((starts[q], ends[q], q) for q in starts if instance.device_of(q[0]) == device)
    first, last = mine[0][0], max(end for _, end, _ in mine)
    first_b = min(start for start, _, q in mine if q[2] == "B")
    last_f = max(start for start, _, q in mine if q[2] == "F")

    def idle(a: float, b: float) -> float:
        return (b - a) - sum(max(0.0, min(end, b) - max(start, a)) for start, end, _ in mine)

    stages = instance.stages_of(device)
    later = min(start for start, _, q in mine if q[2] == "F" and q[0] == stages[1])
    ahead = sum(1 for start, _, q in mine if q[2] == "F" and q[0] == stages[0] and start < later)
    return {"device": device, "span": timeline.span, "ramp": idle(first, first_b),
            "middle": idle(first_b, last_f), "drain": idle(last_f, last), "ahead": ahead}


def _row(label: str, parts: dict, bound: float) -> str:
    total = parts["ramp"] + parts["middle"] + parts["drain"]
    gap = (parts["span"] - bound) / parts["span"]
    return (f"| {label} | {parts['span']:,.1f} | {gap:.3%} | {parts['device']} | "
            f"{parts['ramp']:,.1f} | {parts['middle']:,.1f} | {parts['drain']:,.1f} | "
            f"{total:,.1f} | {parts['ahead']} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--out", default=str(ROOT / "results" / "ramp.md"))
    args = parser.parse_args()
    if args.runs < 0 or not args.time_limit > 0:
        print("error: --runs takes a count >= 0 and --time-limit a positive number of seconds",
              file=sys.stderr)
        return 2
    instance = next(inst for label, cap, inst in reach_runs()
                    if (label, cap) == ("interleaved p8 m32", "1p"))
    name, bound = bounds.best_lower_bound(instance)
    loads = bounds.device_loads(instance)
    critical = max(range(instance.devices),
                   key=lambda d: bounds.device_bound(instance, d) - loads[d])
    bound_idle = bounds.device_bound(instance, critical) - loads[critical]
    bound_ramp = bounds.ramp_idle(instance, critical)
    load = os.getloadavg()[0]
    lines = ["# Where the interleaved 1p gap lies", "",
             f"Written by `benchmarks/bench_ramp.py` (see its docstring). Command: `python "
             f"benchmarks/bench_ramp.py --runs {args.runs} --time-limit {args.time_limit:g}` "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.machine()}, "
             f"{os.cpu_count()} cores, load average {load:.1f} at the start).", "",
             f"Instance: interleaved, 2 chunks, p=8, m=32, cap 1p, the 1.5B costs with per-chunk "
             f"costs halved (results/solver.md, reach). Bound {bound:,.0f} ({name}): device "
             f"{critical}'s load {loads[critical]:,.0f} plus {bound_idle:,.1f} of idle, "
             f"{bound_ramp:,.1f} before its first B and {bound_idle - bound_ramp:,.1f} after its "
             f"last F. Idle of the critical device (the one whose span is the schedule's), in "
             f"the instance's time units; `ahead` = forwards of its first stage before the first "
             f"forward of its later stage (with {instance.devices}, that forward can start as "
             f"soon as it arrives).", "",
             "| schedule | span | gap | critical device | idle before first B | middle | "
             "after last F | total idle | ahead |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
             f"| bound ({name}) | {bound:,.1f} | 0.000% | {critical} | {bound_ramp:,.1f} | 0.0 | "
             f"{bound_idle - bound_ramp:,.1f} | {bound_idle:,.1f} | - |"]

    print("[bench_ramp] the greedy grid ...", file=sys.stderr, flush=True)
    top = _engine.Topology(instance)
    by_ramp: dict[float, list[tuple[float, dict]]] = defaultdict(list)
    for policy in interleaved_zb.grid(instance):
        outcome = _engine.simulate(instance, policy, top, bound=math.inf)
        if outcome is None:
            continue
        schedule = Schedule(tuple(tuple((q,) for q in order) for order in outcome.orders))
        timeline = evaluate(instance, schedule)
        if timeline.fits_cap:
            parts = phases(instance, timeline)
            by_ramp[round(parts["ramp"], 1)].append((timeline.span, parts))
    for ramp in sorted(by_ramp):
        span, parts = min(by_ramp[ramp], key=lambda x: x[0])
        lines.append(_row(f"interleaved-zb grid, shortest of the {len(by_ramp[ramp])} points "
                          f"with this ramp", parts, bound))

    print("[bench_ramp] the policy search ...", file=sys.stderr, flush=True)
    seconds = POLICY_SHARE * args.time_limit
    tuned = policy_search.improve(instance, math.inf, time.perf_counter() + seconds,
                                  patience=POLICY_PATIENCE)
    if tuned is not None:
        lines.append(_row(f"policy search ({seconds:g} s, as solve() runs it)",
                          phases(instance, tuned), bound))

    for run in range(args.runs):
        print(f"[bench_ramp] solve() cpsat-lns {args.time_limit:g} s, run {run + 1} of "
              f"{args.runs} ...", file=sys.stderr, flush=True)
        result = solve(instance, solver="cpsat-lns", time_limit=args.time_limit, threads=2)
        lines.append(_row(f"solve() cpsat-lns {args.time_limit:g} s, run {run + 1}",
                          phases(instance, result.timeline), bound))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"[bench_ramp] wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
