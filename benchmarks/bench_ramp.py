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

A second table holds the search to p forwards (--held-limit seconds, 0 skips it). On the same
pipeline with m=10 (small enough for the neighbourhoods to reach the head), cpsat-lns runs three
times from the grid's shortest point of each kind: from the nine-forward point; from the
eight-forward point; and from the eight-forward point with F(8, 0) held before F(0, 8) (the
backend's "precede" option), so device 0 keeps p forwards ahead.

A third table does the same at m=32 within --pipeline-limits seconds each (empty skips it): the
policy search as solve() runs it; F(p + d, 0) swapped before F(d, p) on every device where it
came after; one neighbourhood on the head (the passes starting in its first 30% of the span,
HEAD_SECONDS, the backend's "sweep" options); then cpsat-lns held to F(p + d, 0) before F(d, p)
on every device until the limit.

Usage:
  python benchmarks/bench_ramp.py [--runs N] [--time-limit S] [--held-limit S]
                                  [--pipeline-limits S,S] [--out results/ramp.md]
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
from bench_solver import COSTS_15B, reach_runs  # noqa: E402

from zbopt import bounds  # noqa: E402
from zbopt.heuristics import _engine, interleaved_zb, policy_search  # noqa: E402
from zbopt.instance import Instance  # noqa: E402
from zbopt.result import relative_gap  # noqa: E402
from zbopt.schedule import Schedule, Timeline, evaluate  # noqa: E402
from zbopt.solvers.api import (  # noqa: E402
    POLICY_PATIENCE,
    POLICY_SHARE,
    _hint_starts,
    _schedule_from_starts,
    run_backend,
    scaled_instance,
    solve,
)

ROOT = Path(__file__).resolve().parents[1]
HEAD = (0.0, 0.3)  # the head neighbourhood of the m=32 pipeline, as shares of the span
HEAD_SECONDS = 15.0
# the tables of the m=32 instance
HEADER = ["| schedule | span | gap | critical device | idle before first B | middle | "
          "after last F | total idle | ahead |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]


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
    gap = relative_gap(parts["span"], bound)
    return (f"| {label} | {parts['span']:,.1f} | {gap:.3%} | {parts['device']} | "
            f"{parts['ramp']:,.1f} | {parts['middle']:,.1f} | {parts['drain']:,.1f} | "
            f"{total:,.1f} | {parts['ahead']} |")


def grid_timelines(instance: Instance):
    """Every point of interleaved-zb's grid() whose schedule fits the cap, as a timeline (the
    grid these tables were measured on; interleaved_zb.sequenced() came later)."""
    top = _engine.Topology(instance)
    for policy in interleaved_zb.grid(instance):
        outcome = _engine.simulate(instance, policy, top, bound=math.inf)
        if outcome is None:
            continue
        timeline = evaluate(instance, Schedule(tuple(tuple((q,) for q in order)
                                                     for order in outcome.orders)))
        if timeline.fits_cap:
            yield timeline


def grid_by_ahead(instance: Instance) -> dict[int, Timeline]:
    """The shortest point of interleaved-zb's grid for each count of forwards ahead."""
    best: dict[int, Timeline] = {}
    for timeline in grid_timelines(instance):
        ahead = phases(instance, timeline, 0)["ahead"]
        if ahead not in best or timeline.span < best[ahead].span:
            best[ahead] = timeline
    return best


def lns_from(instance: Instance, start: Timeline, seconds: float, precede=(),
             **options) -> Timeline:
    """cpsat-lns (2 threads) from `start` alone, with the backend's "precede" pairs and
    other options."""
    scaled, scale, _ = scaled_instance(instance)
    hint, again = _hint_starts(scaled, start)
    if precede:
        options["precede"] = list(precede)
    raw = run_backend("cpsat-lns", scaled, objective="span", time_limit=seconds, threads=2,
                      hint=hint, horizon=int(round(again.span)), options=options)
    return evaluate(instance, _schedule_from_starts(instance, scaled, raw.starts, "span",
                                                    scale, "cpsat-lns"))


def held_rows(seconds: float) -> list[str]:
    """The table of the search held to p forwards ahead (module doc)."""
    instance = Instance(devices=8, microbatches=10, name="p8-m10-1.5b", **COSTS_15B
                        ).with_cap("1p").with_placement("interleaved", 2)
    name, bound = bounds.best_lower_bound(instance)
    p = instance.devices
    best = grid_by_ahead(instance)
    lines = ["", f"## Held to {p} forwards ahead: m=10", "",
             f"The same pipeline with m=10: bound {bound:,.0f} ({name}). cpsat-lns for "
             f"{seconds:g} s (2 threads) from the grid's shortest point with {p + 1} and with "
             f"{p} forwards ahead; `held` keeps F({p}, 0) before F(0, {p}) in every model.", "",
             "| start | search | span | gap | critical device | idle before first B | middle | "
             "after last F | total idle | ahead |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    runs = [(p + 1, "free", ()), (p, "free", ()), (p, "held", [((p, 0, "F"), (0, p, "F"))])]
    for ahead, search, precede in runs:
        if ahead not in best:
            continue
        print(f"[bench_ramp] m=10 from the {ahead}-forward point, {search} ...",
              file=sys.stderr, flush=True)
        timeline = lns_from(instance, best[ahead], seconds, precede)
        lines.append(_row(f"grid, {ahead} ahead ({best[ahead].span:,.1f}) | {search}",
                          phases(instance, timeline), bound))
    return lines


def eight_ahead(instance: Instance, timeline: Timeline) -> Timeline:
    """The schedule with F(p + d, 0) and F(d, p) swapped on every device d where F(d, p) came
    first: each device then runs p forwards of its first stage before its later stage's first."""
    p = instance.devices
    orders = [list(order) for order in timeline.schedule.orders]
    for d, order in enumerate(orders):
        early, late = order.index(((d, p, "F"),)), order.index(((p + d, 0, "F"),))
        if early < late:
            order[early], order[late] = order[late], order[early]
    return evaluate(instance, Schedule(tuple(tuple(order) for order in orders), "eight ahead"))


def tuned_as_solve(instance: Instance, limit: float) -> Optional[Timeline]:
    """The policy search as solve() runs it within a time limit of `limit` seconds."""
    return policy_search.improve(instance, math.inf, time.perf_counter() + POLICY_SHARE * limit,
                                 patience=POLICY_PATIENCE)


def pipeline(instance: Instance, seconds: float) -> Timeline:
    """The m=32 pipeline of the module doc within `seconds`."""
    p = instance.devices
    began = time.perf_counter()
    tuned = tuned_as_solve(instance, seconds)
    pairs = [((p + d, 0, "F"), (d, p, "F")) for d in range(p)]
    headed = lns_from(instance, eight_ahead(instance, tuned), HEAD_SECONDS + 1, pairs,
                      sweep=[HEAD], sweep_seconds=HEAD_SECONDS)
    return lns_from(instance, headed, seconds - (time.perf_counter() - began), pairs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--held-limit", type=float, default=120.0)
    parser.add_argument("--pipeline-limits", default="60,180")
    parser.add_argument("--out", default=str(ROOT / "results" / "ramp.md"))
    args = parser.parse_args()
    try:
        limits = [float(x) for x in args.pipeline_limits.split(",") if x]
    except ValueError:
        limits = [0.0]
    if args.runs < 0 or not args.time_limit > 0 or not args.held_limit >= 0 or \
            any(not x > 2 * HEAD_SECONDS for x in limits):
        print(f"error: --runs takes a count >= 0, --time-limit a positive number of seconds, "
              f"--held-limit one >= 0 and --pipeline-limits a comma-separated list of seconds "
              f"above {2 * HEAD_SECONDS:g}", file=sys.stderr)
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
             f"benchmarks/bench_ramp.py --runs {args.runs} --time-limit {args.time_limit:g} "
             f"--held-limit {args.held_limit:g} --pipeline-limits {args.pipeline_limits}` "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.machine()}, "
             f"{os.cpu_count()} cores, load average {load:.1f} at the start).", "",
             f"Instance: interleaved, 2 chunks, p=8, m=32, cap 1p, the 1.5B costs with per-chunk "
             f"costs halved (results/solver.md, reach). Bound {bound:,.0f} ({name}): device "
             f"{critical}'s load {loads[critical]:,.0f} plus {bound_idle:,.1f} of idle, "
             f"{bound_ramp:,.1f} before its first B and {bound_idle - bound_ramp:,.1f} after its "
             f"last F. Idle of the critical device (the one whose span is the schedule's), in "
             f"the instance's time units; `ahead` = forwards of its first stage before the first "
             f"forward of its later stage (with {instance.devices}, that forward can start as "
             f"soon as it arrives).", "", *HEADER,
             f"| bound ({name}) | {bound:,.1f} | 0.000% | {critical} | {bound_ramp:,.1f} | 0.0 | "
             f"{bound_idle - bound_ramp:,.1f} | {bound_idle:,.1f} | - |"]

    print("[bench_ramp] the greedy grid ...", file=sys.stderr, flush=True)
    by_ramp: dict[float, list[tuple[float, dict]]] = defaultdict(list)
    for timeline in grid_timelines(instance):
        parts = phases(instance, timeline)
        by_ramp[round(parts["ramp"], 1)].append((timeline.span, parts))
    for ramp in sorted(by_ramp):
        span, parts = min(by_ramp[ramp], key=lambda x: x[0])
        lines.append(_row(f"interleaved-zb grid, shortest of the {len(by_ramp[ramp])} points "
                          f"with this ramp", parts, bound))

    print("[bench_ramp] the policy search ...", file=sys.stderr, flush=True)
    seconds = POLICY_SHARE * args.time_limit
    tuned = tuned_as_solve(instance, args.time_limit)
    if tuned is not None:
        lines.append(_row(f"policy search ({seconds:g} s, as solve() runs it)",
                          phases(instance, tuned), bound))

    for run in range(args.runs):
        print(f"[bench_ramp] solve() cpsat-lns {args.time_limit:g} s, run {run + 1} of "
              f"{args.runs} ...", file=sys.stderr, flush=True)
        result = solve(instance, solver="cpsat-lns", time_limit=args.time_limit, threads=2)
        lines.append(_row(f"solve() cpsat-lns {args.time_limit:g} s, run {run + 1}",
                          phases(instance, result.timeline), bound))
    if args.held_limit > 0:
        lines += held_rows(args.held_limit)
    if limits:
        lines += ["", f"## Held to {instance.devices} forwards ahead: m=32", "",
                  f"The first table's instance. The policy search, the swap to "
                  f"{instance.devices} ahead on every device, {HEAD_SECONDS:g} s on the head "
                  f"(the passes starting in the first {HEAD[1]:.0%} of the span) and cpsat-lns "
                  f"held to {instance.devices} ahead until the limit (module doc).", "",
                  *HEADER]
        for seconds in limits:
            print(f"[bench_ramp] m=32 held pipeline, {seconds:g} s ...", file=sys.stderr,
                  flush=True)
            lines.append(_row(f"held pipeline, {seconds:g} s", phases(
                instance, pipeline(instance, seconds)), bound))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"[bench_ramp] wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
