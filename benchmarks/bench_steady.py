"""Steady state of the p=8 plan rows: which side of the certified gap is weak, bound or schedule.

For each p=8, 32-block row of results/plan.md (estimated part) at the caps asked (tight by
default) it takes the plan's split and compares rates over K micro-batches (K = the fewest
activations a device other than one holding a single activation can hold; the first device
holding K is the pacing device):
- the least period of a K-periodic schedule: micro-batch j = qK + r runs every pass at the time
  of residue r's pass plus q periods. A CP-SAT model (below) places the 3K passes of each device
  modulo the period (F and B in micro-batch order per stage, memory as evaluate() counts it, the
  W pending at each forward included), and a bisection on the period finds a short one; each
  probe is "solved", "infeasible" or "unknown" (probe time limit). Feasibility is not monotone
  in the period, so the bisection's result is the least period it found, and "none with period"
  names the largest probe proven to have none with exactly that period (with the costs rounded
  down as well as up, within the model's horizon of the paths plus p + 2 periods);
- the increment of the collision bound (zbopt.plan.collision_bound) from m - K to m micro-batches:
  what that bound charges for K more micro-batches in its steady state;
- the steady state of solve()'s schedule on the split (--solve-limit, CP-SAT, 2 threads): the
  time per K micro-batches between the pacing device's forwards of micro-batch 2K and of the
  last multiple of K at least 2K before the end.
- exact windows of the F/B relaxation (window_optimum: W dropped, F and B in order, one pass at
  a time per device, each device's memory as the rule F(d, j + k_d) after B(d, j)): the least
  time from F(pacing, 0) to the end of B(pacing, n - 1) for n = 1, 2, ... micro-batches alone,
  each window with the shorter ones as cuts, while CP-SAT proves them (--window-limit per window,
  --window-budget per row); "F/B window increment per K" is the growth of the last proven
  window's optimum over its last K micro-batches. This relaxation holds for any in-order
  schedule, so where its increment exceeds the collision bound's, the bound is the weak side by
  the difference per K; what it does not say is how to prove it for all m micro-batches, which
  CP-SAT does not within minutes;
- "F/B bound of the split": what CP-SAT proves of the window of all m micro-batches in
  --whole-limit seconds, the proven windows as cuts, plus the forwards from device 0 to the
  pacing device and the backwards back and device 0's last W (whole_bound): a lower bound on
  the split's span (in-order schedules), next to the plan's bound over all splits;
- "F/B bound over all splits": the least of that bound and, for every other split whose own bound
  (zbopt.plan.bound's segment and pipeline bounds) lies below it, that split's bound, or the
  plan's bound over all splits where that is higher: a lower bound on the joint problem
  (in-order schedules), and the plan's gap against it ((span - bound) / span, as plan reports).
A periodic schedule is one schedule among many, so its period is not a bound; but when the
solver's schedules already run at it in their steady state while the bound charges less per
period, the bound is the side to strengthen. The pattern expanded to m micro-batches (each
device's passes in the order of the pattern's times) is checked by evaluate() and validate()
and its span reported next to the plan's.

At the mid caps devices hold 3 to 7 activations: the probes run out of time well above the
solver's rate and the collision bound charges little, so neither rate says anything there.

Usage:
  python benchmarks/bench_steady.py [--probe-limit S] [--solve-limit S] [--window-limit S]
                                    [--window-budget S] [--caps tight,mid] [--models NAME,...]
                                    [--out results/steady.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import platform
import sys
import time
from pathlib import Path

from ortools.sat.python import cp_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_plan import LLAMA3_8B, cap_levels, estimated  # noqa: E402

from zbopt.bounds import activation_capacity, held_count  # noqa: E402
from zbopt.instance import Instance  # noqa: E402
from zbopt.plan.bound import partitions_below, segment_bounds  # noqa: E402
from zbopt.plan.collision_bound import collision_bound  # noqa: E402
from zbopt.plan.fb_bound import window_optimum  # noqa: E402
from zbopt.plan.memory_bound import held_counts, round_trips  # noqa: E402
from zbopt.result import relative_gap  # noqa: E402
from zbopt.schedule import Schedule, evaluate, validate  # noqa: E402
from zbopt.solvers.api import solve  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCALE = 1000  # time units per integer step of the model (costs rounded up: a pattern stays valid)


def _pending_limit(instance: Instance, device: int, in_flight: int) -> int:
    """W that may be pending at a forward's start with `in_flight` activations held."""
    room = activation_capacity(instance, device) - in_flight * instance.m_b[device]
    return held_count(room, instance.m_w[device], instance.microbatches)


def periodic_pattern(instance: Instance, k: int, period: int, time_limit: float, threads: int = 2,
                     round_up: bool = True):
    """Start times (in 1/SCALE time units) of a K-periodic contiguous schedule with this period:
    ("solved", {kind: [[time per residue] per device]}), ("infeasible", None) or ("unknown", None).
    Costs and comm are rounded up to the grid (a pattern found holds for the true costs) or, with
    round_up=False, down (then "infeasible" holds for the true costs)."""
    p = instance.devices
    if round_up:
        grid = lambda x: math.ceil(x * SCALE - 1e-6)  # noqa: E731
    else:
        grid = lambda x: math.floor(x * SCALE + 1e-6)  # noqa: E731
    cost = {kind: [grid(instance.cost(d, kind)) for d in range(p)] for kind in "FBW"}
    comm = grid(instance.comm)
    horizon = sum(cost["F"]) + sum(cost["B"]) + 2 * p * comm + max(cost["W"]) + (p + 2) * period
    model = cp_model.CpModel()
    start = {kind: [[model.NewIntVar(0, horizon, f"{kind}{d}_{r}") for r in range(k)]
                    for d in range(p)] for kind in "FBW"}
    f, b, w = start["F"], start["B"], start["W"]
    model.Add(f[0][0] == 0)
    counts = held_counts(instance)

    def before(row, r, back):
        """Start of the pass `back` micro-batches before residue r, as an affine expression."""
        rr = (r - back) % k
        return row[rr] + ((r - back - rr) // k) * period

    for r in range(k):
        for d in range(p - 1):
            model.Add(f[d + 1][r] >= f[d][r] + cost["F"][d] + comm)
            model.Add(b[d][r] >= b[d + 1][r] + cost["B"][d + 1] + comm)
        model.Add(b[p - 1][r] >= f[p - 1][r] + cost["F"][p - 1])
        for d in range(p):
            model.Add(w[d][r] >= b[d][r] + cost["B"][d])
    for d in range(p):
        for kind in "FBW":
            row, length = start[kind][d], cost[kind][d]
            for r in range(k):  # micro-batch order per stage and kind, across the period too
                model.Add((row[r + 1] if r + 1 < k else row[0] + period) >= row[r] + length)
        held = counts[d]
        for r in range(k):
            model.Add(f[d][r] >= before(b[d], r, held) + cost["B"][d])
            ended = {}  # ended[a]: B of the micro-batch a before has ended (at most a in flight)
            for a in range(1, held):
                lit = model.NewBoolVar("")
                model.Add(f[d][r] >= before(b[d], r, a) + cost["B"][d]).OnlyEnforceIf(lit)
                model.Add(f[d][r] < before(b[d], r, a) + cost["B"][d]).OnlyEnforceIf(lit.Not())
                ended[a] = lit
            for n in range(1, held + 1):
                when = ([ended[n]] if n < held else []) + ([ended[n - 1].Not()] if n > 1 else [])
                back = n + _pending_limit(instance, d, n)
                model.Add(f[d][r] >= before(w[d], r, back) + cost["W"][d]).OnlyEnforceIf(when)
        # one pass at a time, modulo the period
        passes = [(start[kind][d][r], cost[kind][d]) for kind in "FBW" for r in range(k)]
        wraps = p + 4
        for i in range(len(passes)):
            for j in range(i + 1, len(passes)):
                (x, lx), (y, ly) = passes[i], passes[j]
                n = model.NewIntVar(-wraps, wraps, "")
                model.Add(y - x - n * period >= lx)
                model.Add(y - x - n * period <= period - ly)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = threads
    status = solver.Solve(model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return "solved", {kind: [[solver.Value(v) for v in row] for row in start[kind]] for kind in "FBW"}
    return ("infeasible" if status == cp_model.INFEASIBLE else "unknown"), None


def expand(instance: Instance, times: dict, k: int, period: int) -> Schedule:
    """The schedule of all m micro-batches: each device's passes in the order of the pattern's times."""
    orders = []
    for d in range(instance.devices):
        items = sorted((times[kind][d][j % k] + (j // k) * period, "FBW".index(kind), j, kind)
                       for j in range(instance.microbatches) for kind in "FBW")
        orders.append([(d, j, kind) for *_, j, kind in items])
    return Schedule.build(orders, method=f"periodic-{k}")


def least_period(instance: Instance, k: int, probe_limit: float, log) -> dict:
    """Bisection on the period between the load of the busiest device and a pattern found."""
    p = instance.devices
    low = k * max(sum(math.ceil(instance.cost(d, x) * SCALE - 1e-6) for x in "FBW") for d in range(p)) - 1
    high, found = None, None
    probe = low * 2
    while found is None:  # an upper end: double until a pattern is found
        status, times = periodic_pattern(instance, k, probe, probe_limit)
        log(f"period {probe / SCALE:,.0f}: {status}")
        if status == "solved":
            high, found = probe, times
        else:
            low, probe = probe, probe * 2
    proven_below = None
    while high - low > max(SCALE, high // 2000):
        mid = (low + high) // 2
        status, times = periodic_pattern(instance, k, mid, probe_limit)
        log(f"period {mid / SCALE:,.0f}: {status}")
        if status == "solved":
            high, found = mid, times
        else:
            low = mid
            if status == "infeasible" and \
                    periodic_pattern(instance, k, mid, probe_limit, round_up=False)[0] == "infeasible":
                proven_below = mid  # none with the costs rounded down either
    return {"period": high, "times": found, "proven_below": proven_below}


def steady_rate(timeline, device: int, k: int) -> float:
    """A schedule's time per K micro-batches in its middle: between the forwards on `device` of
    micro-batch 2K and of the last multiple of K at least 2K before the end."""
    m = timeline.instance.microbatches
    first = 2 * k
    last = first + k * ((m - 4 * k) // k)
    if last <= first:
        return math.nan  # fewer than 5K micro-batches: no middle to measure
    start = timeline.start
    return (start[(device, last, "F")] - start[(device, first, "F")]) * k / (last - first)


def window_increment(instance: Instance, e: int, k: int, window_limit: float, budget: float,
                     log) -> tuple[int, float, dict]:
    """(L, increment, known): windows 0..n solved one after the other (window_optimum, each
    with the ones before as cuts) until one is not proven or `budget` seconds are spent; L is
    the last micro-batch of the longest proven window (-1 if none), the increment the growth of
    its optimum over its last K micro-batches (nan when no window of K + 1 is proven) and known
    the proven optima by last micro-batch."""
    known: dict[int, float] = {}
    stop = time.perf_counter() + budget
    last = -1
    while last + 1 < instance.microbatches and time.perf_counter() < stop:
        limit = min(window_limit, stop - time.perf_counter())
        proven, value = window_optimum(instance, e, last + 1, limit, known)
        if not proven:
            break
        last += 1
        known[last] = value
        log(f"window {last + 1}: {value:,.0f}")
    if last < k:
        return last, math.nan, known
    return last, known[last] - known[last - k], known


def whole_bound(instance: Instance, e: int, known: dict, time_limit: float) -> float:
    """A lower bound on the split's span from the F/B relaxation of all m micro-batches: the
    least window from F(e, 0) to the end of B(e, m - 1) as CP-SAT bounds it in `time_limit`
    (window_optimum, the proven shorter windows `known` as cuts), plus R_0 - R_e of
    zbopt.plan.memory_bound (the forwards from device 0 to e before it and the backwards from e
    to device 0 after it) and t_w(0): device 0's first pass is F(0, 0) and its last W follows
    B(0, m - 1) (contiguous, one stage a device)."""
    _, window = window_optimum(instance, e, instance.microbatches - 1, time_limit, known)
    trips = round_trips(instance)
    return window + trips[0] - trips[e] + instance.t_w[0]


def _plan_rows() -> list[dict]:
    """The capped p=8 rows of results/plan.md's estimated part: model, cap, split, span, bound."""
    text = (ROOT / "results" / "plan.md").read_text()
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 17 or not cells[0].startswith("llama-32L") or cells[3] not in ("tight", "mid"):
            continue
        rows.append({"model": cells[0], "cap": cells[3], "span": float(cells[7].split()[0].replace(",", "")),
                     "bound": float(cells[10].replace(",", "")), "gap": cells[11],
                     "split": tuple(int(x) for x in cells[16].split("-"))})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--probe-limit", type=float, default=10.0)
    parser.add_argument("--solve-limit", type=float, default=60.0)
    parser.add_argument("--caps", default="tight")
    parser.add_argument("--window-limit", type=float, default=60.0)
    parser.add_argument("--window-budget", type=float, default=300.0)
    parser.add_argument("--whole-limit", type=float, default=120.0,
                        help="CP-SAT seconds for the window of all m micro-batches")
    parser.add_argument("--models", default="",
                        help="comma-separated model names of results/plan.md to keep (all by default)")
    parser.add_argument("--out", default=str(ROOT / "results" / "steady.md"))
    args = parser.parse_args()
    caps = args.caps.split(",")
    unknown = [cap for cap in caps if cap not in ("tight", "mid")]
    if unknown:
        print(f"error: --caps takes tight and/or mid (comma-separated), not {unknown[0]!r}",
              file=sys.stderr)
        return 2
    models = [name for name in args.models.split(",") if name]
    plan_rows = _plan_rows()
    rows = [row for row in plan_rows if row["cap"] in caps and (not models or row["model"] in models)]
    if not rows and models:
        print(f"error: --models {args.models}: no capped row of results/plan.md has that model; "
              f"name one of {sorted({row['model'] for row in plan_rows})}", file=sys.stderr)
        return 2
    if not rows:
        print("error: no capped llama-32L rows in results/plan.md: run benchmarks/bench_plan.py "
              "--only estimated first", file=sys.stderr)
        return 2
    load = os.getloadavg()[0]
    lines = ["# Steady state of the p=8 plan rows", "",
             f"Written by `benchmarks/bench_steady.py` (see its docstring). Command: `python "
             f"benchmarks/bench_steady.py --probe-limit {args.probe_limit:g} --solve-limit "
             f"{args.solve_limit:g} --window-limit {args.window_limit:g} --window-budget "
             f"{args.window_budget:g} --whole-limit {args.whole_limit:g} --caps {args.caps}"
             f"{f' --models {args.models}' if models else ''}"
             f"{'' if args.out == parser.get_default('out') else f' --out {args.out}'}` "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.machine()}, "
             f"{os.cpu_count()} cores, load average {load:.1f} at the start; CP-SAT 2 threads).", "",
             "Splits, spans and bounds of the plan are those of results/plan.md. The periodic span "
             "is the pattern expanded to m micro-batches and timed by evaluate() (a valid schedule, "
             "not polished). Times in us.", "",
             "| model | cap | split | K | least K-periodic period | per micro-batch | "
             "none with period | collision bound increment per K | period / increment | "
             "F/B windows proven | F/B window increment per K | F/B bound of the split | "
             "other splits below it | F/B bound over all splits | plan gap against it | "
             "solver's steady time per K | solver's span | periodic span | plan span | plan bound | "
             "plan gap |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        vocab = 32000 if "v32k" in row["model"] else 128256
        model = estimated(LLAMA3_8B, vocab, 8, 32)
        capped = model.with_settings(memory_cap=cap_levels(model)[row["cap"]])
        instance = capped.instance(row["split"])
        counts = held_counts(instance)
        k = min(c for c in counts if c > 1)
        label = f"{row['model']} {row['cap']} {'-'.join(map(str, row['split']))}"
        print(f"[bench_steady] {label}: K={k} ...", file=sys.stderr, flush=True)
        found = least_period(instance, k, args.probe_limit,
                             lambda msg: print(f"[bench_steady]   {msg}", file=sys.stderr, flush=True))
        schedule = expand(instance, found["times"], k, found["period"])
        timeline = evaluate(instance, schedule)
        problems = validate(instance, schedule)
        if problems or not timeline.fits_cap:
            raise SystemExit(f"{label}: the expanded pattern is not valid: "
                             f"{(problems or list(timeline.cap_violations))[0]}")
        pacing = counts.index(k)
        solved = solve(instance, time_limit=args.solve_limit)
        rate = steady_rate(solved.timeline, pacing, k)
        m = instance.microbatches
        now = time.perf_counter()
        full = collision_bound(instance, now + 60, math.inf)
        shorter = collision_bound(dataclasses.replace(instance, microbatches=m - k),
                                  time.perf_counter() + 60, math.inf)
        proven, step, known = window_increment(
            instance, pacing, k, args.window_limit, args.window_budget,
            lambda msg: print(f"[bench_steady]   {msg}", file=sys.stderr, flush=True))
        print(f"[bench_steady]   the window of all {m} micro-batches, up to {args.whole_limit:g} s ...",
              file=sys.stderr, flush=True)
        whole = whole_bound(instance, pacing, known, args.whole_limit)
        table = segment_bounds(capped)
        rivals = [table.full_bound(sizes) for sizes in partitions_below(table, whole)
                  if tuple(sizes) != row["split"]]
        rivals = [value for value in rivals if value < whole]
        over_all = max(row["bound"], min([whole, *rivals]))  # the plan's bound holds as well
        period = found["period"] / SCALE
        increment = full - shorter
        below = found["proven_below"]
        lines.append(
            f"| {row['model']} | {row['cap']} | {'-'.join(map(str, row['split']))} | {k} | "
            f"{period:,.0f} | {period / k:,.0f} | "
            f"{'-' if below is None else f'{below / SCALE:,.0f} (proven)'} | {increment:,.0f} | "
            f"{period / increment:.3f} | {proven + 1} | "
            f"{'-' if math.isnan(step) else f'{step:,.0f}'} | {whole:,.0f} | "
            f"{len(rivals)} | {over_all:,.0f} | {100 * relative_gap(row['span'], over_all):.2f}% | "
            f"{'-' if math.isnan(rate) else f'{rate:,.0f}'} | "
            f"{solved.span:,.0f} | {timeline.span:,.0f} | "
            f"{row['span']:,.0f} | "
            f"{row['bound']:,.0f} | {row['gap']} |")
        print(f"[bench_steady] {lines[-1]}", file=sys.stderr, flush=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
