"""How far the exact relaxations reach on the two rows whose targets are still open.

Both open rows (results/solver.md: interleaved p=8, m=32 at 1p; results/plan.md: the 32-block
v128k model at the tight cap on p=8, m=32) have a gap that lies on the bound's side as much as on
the schedule's. This benchmark measures whether the relaxations zbopt already has would close it
given more time or more labels, so that the next step is not spent there.

Part `interleaved`: interleaved placements (2 chunks, the 1.5B costs, per-chunk costs halved) at
1p, from tiny pipelines up to the open row. For each: the analytic bound (zbopt.bounds), the
exact one-device relaxation of the device whose analytic bound is highest
(zbopt.solvers.chunk_relaxation.orders_optimum, with --relax-limit seconds; '-' when it does
not finish), and on the pipelines of at most 4 devices solve() with cpsat for --solver-limit
seconds (its bound includes that relaxation), which shows where the optimum lies.

Part `window`: the plan split 3-4-4-4-4-5-5-5 of the v128k model at the tight cap (the row of
results/plan.md whose certified gap is above 1%). The window relaxations of zbopt.plan
.window_bound on the devices that hold the fewest activations (6-7, and 5-7), with growing label
limits: the value, whether it is the window's exact optimum (no labels merged), and the time.

Part `v`: V and two-chunk interleaved splits of the estimated 32-block models (p=8, m=32, 32k
and 128k vocabularies, tight and mid caps), each the split the cheap guide of zbopt.plan.moves
leads to from the load-balanced split. For each: the analytic bound (zbopt.bounds), the
programme over orders of zbopt.solvers.chunk_relaxation on every device (--device-limit seconds
each; the best, and on how many devices it finished), and solve() (cpsat-lns, --v-solver-limit
seconds, 2 threads) as it is and told to skip that relaxation (the peer: how solve() ran on
these splits before the relaxation ran beyond MAX_PASSES), one after the other.

Usage:
  python benchmarks/bench_relaxations.py [--only interleaved,window,v] [--relax-limit S]
                                         [--solver-limit S] [--device-limit S]
                                         [--v-solver-limit S] [--out results/relaxations.md]

A run of some parts keeps the other parts' sections of --out as they are.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_plan import LLAMA3_8B, cap_levels, estimated  # noqa: E402
from bench_solver import COSTS_15B  # noqa: E402

from zbopt import bounds  # noqa: E402
from zbopt.instance import Instance  # noqa: E402
from zbopt.plan.window_bound import _Window  # noqa: E402
from zbopt.solvers.api import solve  # noqa: E402
from zbopt.solvers.chunk_relaxation import orders_optimum  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("interleaved", "window", "v")
# (p, m) of the interleaved part; the solver runs on those with at most SOLVER_DEVICES devices
PIPELINES = ((2, 4), (2, 6), (3, 6), (4, 8), (8, 8), (8, 10), (8, 12), (8, 32))
SOLVER_DEVICES = 4
# the v128k plan split and its windows (first device, size) with the label limits tried
SPLIT = (3, 4, 4, 4, 4, 5, 5, 5)
WINDOWS = (((6, 2), (16, 64)), ((5, 3), (16, 64, 256)))


def interleaved(p: int, m: int) -> Instance:
    return Instance(devices=p, microbatches=m, name=f"interleaved-p{p}-m{m}", **COSTS_15B
                    ).with_cap("1p").with_placement("interleaved", 2)


def relaxation_row(instance: Instance, relax_limit: float, solver_limit: float) -> dict:
    """The analytic bound, the one-device relaxation (None if unfinished) and, when
    solver_limit > 0, solve()'s status, span and bound."""
    device = max(range(instance.devices), key=lambda d: bounds.device_bound(instance, d))
    analytic = bounds.best_lower_bound(instance)[1]
    began = time.perf_counter()
    exact = orders_optimum(instance, device, began + relax_limit)
    row = {"device": device, "analytic": analytic, "relaxation": exact,
           "relax_seconds": time.perf_counter() - began}
    if solver_limit > 0:
        result = solve(instance, solver="cpsat", time_limit=solver_limit, threads=2)
        row.update(status=result.status, span=result.span, bound=result.lower_bound)
    return row


def window_row(instance: Instance, first: int, size: int, labels: int, limit: float) -> dict:
    """The window relaxation of devices first..first + size - 1 keeping at most `labels` labels
    per state: its value (None if unfinished within `limit` s), whether nothing was merged, and
    its time."""
    began = time.perf_counter()
    value, exact = _Window(instance, first, size).least_span(labels, began + limit)
    return {"value": value, "exact": exact, "seconds": time.perf_counter() - began}


def _num(x) -> str:
    return "-" if x is None else f"{x:,.1f}"


def part_interleaved(args) -> list[str]:
    lines = ["## interleaved: the one-device relaxation against the analytic bound", "",
             f"Interleaved, 2 chunks, cap 1p, the 1.5B costs (per-chunk costs halved). "
             f"Relaxation: the exact one-device relaxation of the device with the highest "
             f"analytic bound ({args.relax_limit:g} s; '-': unfinished). Solver: solve() with "
             f"cpsat, {args.solver_limit:g} s, 2 threads, on pipelines of at most "
             f"{SOLVER_DEVICES} devices; its bound includes the relaxation.", "",
             "| p | m | device | analytic bound | relaxation | above analytic | relaxation s | "
             "solver status | solver span | solver bound | span above relaxation |",
             "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    for p, m in PIPELINES:
        print(f"[bench_relaxations] interleaved p={p} m={m} ...", file=sys.stderr, flush=True)
        limit = args.solver_limit if p <= SOLVER_DEVICES else 0.0
        row = relaxation_row(interleaved(p, m), args.relax_limit, limit)
        relaxed = row["relaxation"]
        above = "-" if relaxed is None else f"{(relaxed - row['analytic']) / row['analytic']:.3%}"
        solved = ("-", "-", "-", "-")
        if "span" in row:
            floor = max(row["analytic"], relaxed or 0.0)
            solved = (row["status"], _num(row["span"]), _num(row["bound"]),
                      f"{(row['span'] - floor) / row['span']:.3%}")
        lines.append(f"| {p} | {m} | {row['device']} | {_num(row['analytic'])} | "
                     f"{_num(relaxed)} | {above} | {row['relax_seconds']:.1f} | "
                     + " | ".join(solved) + " |")
    return lines + [""]


def part_window(args) -> list[str]:
    model = estimated(LLAMA3_8B, 128256, 8, 32)
    instance = model.with_settings(memory_cap=cap_levels(model)["tight"]).instance(SPLIT)
    analytic = bounds.best_lower_bound(instance)[1]
    lines = ["## window: window relaxations on the v128k plan split", "",
             f"Llama-3-8B shape, 32 blocks, vocabulary 128,256, p=8, m=32, tight cap; split "
             f"{'-'.join(map(str, SPLIT))}. Analytic bound {analytic:,.0f}. Each window "
             f"relaxation had at most {args.window_limit:g} s ('-': unfinished); exact = no "
             f"labels merged, so the value is the window's optimum.", "",
             "| devices | labels | value | exact | seconds |", "|---|---:|---:|---|---:|"]
    for (first, size), limits in WINDOWS:
        for labels in limits:
            print(f"[bench_relaxations] window {first}-{first + size - 1}, {labels} labels ...",
                  file=sys.stderr, flush=True)
            row = window_row(instance, first, size, labels, args.window_limit)
            lines.append(f"| {first}-{first + size - 1} | {labels} | {_num(row['value'])} | "
                         f"{'yes' if row['exact'] else 'no'} | {row['seconds']:.1f} |")
    return lines + [""]


def guided_split(model, placement: str) -> tuple[int, ...]:
    """Where zbopt.plan.moves.descend leads from the load-balanced split (no time limit)."""
    from zbopt.plan.moves import Guide, descend
    from zbopt.plan.search import _balanced, placed
    on = placed(model, placement)
    return descend(Guide(on), _balanced(on), math.inf)


def part_v(args) -> list[str]:
    from unittest import mock

    import zbopt.solvers.api as api
    from zbopt.plan.search import placed
    from zbopt.solvers.chunk_relaxation import PROBE_GROWTH, PROBE_MICROBATCHES, chunk_relaxation, probe_order
    lines = ["## v: the one-device relaxation on V and interleaved at m = 32", "",
             f"Command: `python benchmarks/bench_relaxations.py --only v --device-limit "
             f"{args.device_limit:g} --v-solver-limit {args.v_solver_limit:g}` "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average "
             f"{os.getloadavg()[0]:.1f} at the start).", "",
             f"Llama-3-8B shape, 32 blocks, p=8, m=32 (192 passes a device, beyond "
             f"MAX_PASSES), the split the guide leads to from the load-balanced one. "
             f"`relaxation`: the best over the devices of the programme over orders "
             f"({args.device_limit:g} s each; `-` where none finished); `solve`: cpsat-lns, "
             f"{args.v_solver_limit:g} s, 2 threads, as it is "
             f"and told to skip the relaxation (peer). Gaps are (span - bound) / span.", "",
             "| model | cap | placement | split | analytic | relaxation (device) | "
             "finished | solve bound | from | span | gap | peer bound | peer span | peer gap |",
             "|---|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    gains, growths = [], []
    for vocab in (32000, 128256):
        model = estimated(LLAMA3_8B, vocab, 8, 32)
        for cap_name in ("tight", "mid"):
            capped = model.with_settings(memory_cap=cap_levels(model)[cap_name])
            for placement in ("v", "interleaved"):
                sizes = guided_split(capped, placement)
                if sizes is None:
                    continue
                instance = placed(capped, placement).instance(sizes)
                print(f"[bench_relaxations] v {model.name} {cap_name} {placement} ...",
                      file=sys.stderr, flush=True)
                analytic = bounds.best_lower_bound(instance)[1]
                best, which, finished = 0.0, None, 0
                for device in range(instance.devices):
                    probe = probe_order(instance, [device], math.inf)[1].get(device)
                    began = time.perf_counter()
                    value = chunk_relaxation(instance, device, args.device_limit,
                                             programme_only=True)
                    if value > 0:
                        finished += 1
                        if probe:
                            growths.append((time.perf_counter() - began) / probe)
                        if value > best:
                            best, which = value, device
                runs = []
                for skip in (False, True):
                    with mock.patch.object(api, "_chunk_bound", lambda *a: None) if skip \
                            else contextlib.nullcontext():
                        runs.append(solve(instance, solver="cpsat-lns",
                                          time_limit=args.v_solver_limit, threads=2))
                mine, peer = runs
                gap = (mine.span - mine.lower_bound) / mine.span
                peer_gap = (peer.span - peer.lower_bound) / peer.span
                gains.append(peer_gap - gap)
                lines.append(
                    f"| {model.name} | {cap_name} | {placement} | {'-'.join(map(str, sizes))} | "
                    f"{analytic:,.0f} | "
                    + (f"{best:,.0f} ({which})" if which is not None else "-")
                    + f" | {finished} of {instance.devices} | {mine.lower_bound:,.0f} | "
                    f"{mine.bound_name} | {mine.span:,.0f} | {gap:.2%} | "
                    f"{peer.lower_bound:,.0f} | {peer.span:,.0f} | {peer_gap:.2%} |")
                print(lines[-1], file=sys.stderr, flush=True)
    if gains:
        lines += ["", f"Certified gap of solve(), peer minus with the relaxation: median "
                  f"{statistics.median(gains):.2%} points, max {max(gains):.2%}, min "
                  f"{min(gains):.2%} over {len(gains)} splits."]
    if growths:
        lines += ["", f"The programme's time over its probe's (chunk_relaxation.probe_order: the "
                  f"programme on {PROBE_MICROBATCHES} micro-batches), on the devices probed where "
                  f"both finish: median {statistics.median(growths):.1f}, min {min(growths):.1f}, "
                  f"max {max(growths):.1f} over {len(growths)} devices (solve() gives a probed "
                  f"device {PROBE_GROWTH} times its probe's time where that is left)."]
    return lines + [""]


def _merged(path: Path, header: list[str], sections: dict[str, list[str]]) -> list[str]:
    """The file at `path` with the sections run now (by their `## name:` heading) replaced or
    appended and the others kept; the header only when the file is new or all parts ran."""
    if not path.exists() or set(sections) == set(PARTS):
        return header + [line for part in PARTS if part in sections for line in sections[part]]
    old, current, kept = path.read_text().split("\n"), None, {}
    top: list[str] = []
    for line in old:
        if line.startswith("## "):
            current = line[3:].split(":")[0]
            kept[current] = []
        (top if current is None else kept[current]).append(line)
    kept.update(sections)
    return top + [line for part in PARTS if part in kept for line in kept[part]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=",".join(PARTS))
    parser.add_argument("--relax-limit", type=float, default=120.0)
    parser.add_argument("--solver-limit", type=float, default=60.0)
    parser.add_argument("--window-limit", type=float, default=300.0)
    parser.add_argument("--device-limit", type=float, default=5.0)
    parser.add_argument("--v-solver-limit", type=float, default=60.0)
    parser.add_argument("--out", default=str(ROOT / "results" / "relaxations.md"))
    args = parser.parse_args()
    parts = [p for p in args.only.split(",") if p]
    if not parts or any(p not in PARTS for p in parts):
        print(f"error: --only takes a comma-separated list of {', '.join(PARTS)}",
              file=sys.stderr)
        return 2
    if not (args.relax_limit > 0 and args.solver_limit >= 0 and args.window_limit > 0
            and args.device_limit > 0 and args.v_solver_limit > 0):
        print("error: --relax-limit, --window-limit, --device-limit and --v-solver-limit take "
              "a positive number of seconds, --solver-limit one >= 0", file=sys.stderr)
        return 2
    command = "python benchmarks/bench_relaxations.py" + \
        ("" if parts == list(PARTS) else f" --only {','.join(parts)}")
    lines = ["# How far the exact relaxations reach on the open rows", "",
             f"Written by `benchmarks/bench_relaxations.py` (see its docstring). Command: "
             f"`{command}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
             f"{platform.machine()}, {os.cpu_count()} cores, load average "
             f"{os.getloadavg()[0]:.1f} at the start).", ""]
    runners = {"interleaved": part_interleaved, "window": part_window, "v": part_v}
    sections = {part: runners[part](args) for part in PARTS if part in parts}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(_merged(out, lines, sections)))
    print(f"[bench_relaxations] wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
