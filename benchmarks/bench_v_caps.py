"""The V placement below 1F1B's memory: what v-greedy gives at caps from 1p down to a third of
it, against the handwritten V orders, the contiguous placement and CP-SAT.

Per instance (the Zero Bubble paper's 1.5B and 6.2B costs, p=8, m=24 and 32, placed on V) and
cap (1p, 0.75p, 0.5p, 0.4p, 0.34p):
- grid: v-greedy with zb-v as its only handwritten candidate (as before every handwritten V
  order was replayed in its grid), improvement step on;
- v-greedy: as registered (every handwritten V order that fits among its candidates);
- the best handwritten V order that fits (zb-v, dualpipev, v-half-block, v-min-block), if any;
- zb-greedy on the contiguous placement at the same cap (the instance's own placement);
- the per-device policy search from v-greedy (zbopt.heuristics.policy_search.improve, as solve()
  runs it before the backend: --policy-seconds, 12 by default, solve()'s share of a 60 s limit,
  and 12 stale climbs at most) without and with the improvement step it now ends with on V
  (refine.py, in the last tenth of its time);
- CP-SAT (cpsat-lns, --time-limit seconds, 2 threads) through solve(), which runs that search
  first (with the step) for a fifth of its limit: its span and the best lower bound it certifies.
Gains are (grid - v-greedy) / grid and (search without the step - with it) / without; "to
CP-SAT" is (v-greedy - CP-SAT's span) / v-greedy, how much the solver still finds. Spans from
evaluate(), all within the cap.

Usage: python benchmarks/bench_v_caps.py [--time-limit S] [--policy-seconds S] [--no-solver]
                                         [--out results/v_caps.md]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

from zbopt.heuristics import policy_search, v_greedy
from zbopt.instance import load_instance
from zbopt.registry import run
from zbopt.solvers.api import solve

ROOT = Path(__file__).resolve().parents[1]
INSTANCES = ("zb-1.5b-p8-m24", "zb-1.5b-p8-m32", "zb-6.2b-p8-m24", "zb-6.2b-p8-m32")
CAPS = ("1p", "0.75p", "0.5p", "0.4p", "0.34p")


def fitting_span(result):
    return result.span if result.fits() else None


ALL_HANDWRITTEN = v_greedy.handwritten_v


def grid_only():
    """v-greedy's candidates as before: zb-v the only handwritten order."""
    return [m for m in ALL_HANDWRITTEN() if m.name == "zb-v"]


def searched(instance, span: float, seconds: float, step: bool):
    """policy_search.improve() from `span` for `seconds` (12 stale climbs at most, as solve()
    runs it), with or without its improvement step; its span, or None when nothing shorter."""
    without = mock.patch.object(policy_search, "refine", lambda i, schedule, a: schedule)
    with contextlib.nullcontext() if step else without:
        found = policy_search.improve(instance, span, time.perf_counter() + seconds, patience=12)
    return found.span if found is not None and found.fits_cap else None


def row(name: str, cap: str, time_limit: float, solver: bool, policy_seconds: float) -> dict:
    base = load_instance(name)
    instance = base.with_placement("v").with_cap(cap)
    with mock.patch.object(v_greedy, "handwritten_v", grid_only):
        grid = run("v-greedy", instance)
    began = time.perf_counter()
    new = run("v-greedy", instance)
    seconds = time.perf_counter() - began
    handwritten = [(fitting_span(run(m.name, instance)), m.name) for m in v_greedy.handwritten_v()]
    handwritten = [h for h in handwritten if h[0] is not None]
    contiguous = run("zb-greedy", base.with_cap(cap))
    out = {"instance": name, "cap": cap, "grid": fitting_span(grid), "new": fitting_span(new),
           "seconds": seconds, "handwritten": min(handwritten) if handwritten else None,
           "contiguous": fitting_span(contiguous), "cpsat": None, "bound": None,
           "search": searched(instance, new.span, policy_seconds, step=False),
           "stepped": searched(instance, new.span, policy_seconds, step=True)}
    if solver:
        result = solve(instance, solver="cpsat-lns", time_limit=time_limit, threads=2)
        out["cpsat"], out["bound"] = result.span, result.lower_bound
    return out


def _fmt(x) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--policy-seconds", type=float, default=12.0)
    parser.add_argument("--no-solver", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "results" / "v_caps.md"))
    args = parser.parse_args()
    load = os.getloadavg()[0]
    rows = []
    for name in INSTANCES:
        for cap in CAPS:
            print(f"[bench_v_caps] {name} cap {cap} ...", file=sys.stderr, flush=True)
            rows.append(row(name, cap, args.time_limit, not args.no_solver, args.policy_seconds))
    lines = [
        "# The V placement below 1F1B's memory",
        "",
        "Written by `benchmarks/bench_v_caps.py` (`python benchmarks/bench_v_caps.py "
        f"--time-limit {args.time_limit:g} --policy-seconds {args.policy_seconds:g}"
        f"{' --no-solver' if args.no_solver else ''}`); "
        "see its docstring for the columns. Spans in us.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load average {load:.1f} at the start (shared with other "
        "work: the v-greedy seconds and what CP-SAT reaches in its limit are noisy).",
        "",
        "| instance | cap | grid (zb-v only) | v-greedy | gain | best handwritten V that fits | "
        "contiguous zb-greedy | policy search | + step | step's gain | CP-SAT | its bound | "
        "v-greedy to CP-SAT | v-greedy s |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    gains, behind, steps = [], [], []
    for r in rows:
        gain = (r["grid"] - r["new"]) / r["grid"] if r["grid"] and r["new"] else None
        # nothing shorter than v-greedy found: the search's result is v-greedy's span
        alone, stepped = r["search"] or r["new"], r["stepped"] or r["new"]
        step = (alone - stepped) / alone if alone and stepped else None
        if step is not None:
            steps.append(step)
        to_solver = (r["new"] - r["cpsat"]) / r["new"] if r["cpsat"] and r["new"] else None
        if gain is not None:
            gains.append(gain)
        if to_solver is not None:
            behind.append((r["cap"], to_solver))
        hand = "-" if r["handwritten"] is None else f"{_fmt(r['handwritten'][0])} ({r['handwritten'][1]})"
        lines.append(f"| {r['instance']} | {r['cap']} | {_fmt(r['grid'])} | {_fmt(r['new'])} | "
                     f"{_pct(gain)} | {hand} | {_fmt(r['contiguous'])} | {_fmt(r['search'])} | "
                     f"{_fmt(r['stepped'])} | {_pct(step)} | {_fmt(r['cpsat'])} | "
                     f"{_fmt(r['bound'])} | {_pct(to_solver)} | {r['seconds']:.2f} |")
    lines.append("")
    if gains:
        lines.append(f"Gain of replaying every handwritten V order: median {_pct(statistics.median(gains))}, "
                     f"largest {_pct(max(gains))}, {sum(g > 0 for g in gains)} of {len(gains)} rows improved.")
    if steps:
        lines.append(f"The policy search's improvement step: median {_pct(statistics.median(steps))}, "
                     f"largest {_pct(max(steps))}, {sum(g > 0 for g in steps)} of {len(steps)} rows "
                     "shorter (a search that found nothing shorter than v-greedy counts as v-greedy's "
                     "span; '-' in its column).")
    for cap in CAPS:
        at = [b for c, b in behind if c == cap]
        if at:
            lines.append(f"At {cap}: CP-SAT's span below v-greedy's by median {_pct(statistics.median(at))} "
                         f"(largest {_pct(max(at))}).")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
