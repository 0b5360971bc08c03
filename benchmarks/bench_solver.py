"""Exact-solver benchmarks: does solve() prove optimality within the time limits?

Parts (each a list of runs of zbopt.solve, span objective, 2 threads by default):
- p8:    p=8, m=32, t_f/t_b/t_w = 5/6/4, comm 1, m_b 2, m_w 1, caps 1p, 1.5p, 2p; CP-SAT, 60 s
- p16:   p=16, m=32, same costs, caps 1p, 2p; CP-SAT, 120 s
- paper: instances/paper/*.toml (Zero Bubble Table 5 settings) at 1p and 2p; CP-SAT, 120 s;
         compared with the authors' heuristic (tests/data/zb_paper_table5.json)
- milp:  p=4, m=8, unit costs (comm 0) and 5/6/4 with comm 1, caps 1p and 2p; CBC and HiGHS
         (and CP-SAT cold for reference), 60 s
- reach: the solver-reach table (1.5B costs): interleaved (2 chunks) and v at p=8, m=32, caps
         1p/2p; contiguous p=16 m=64, p=32 m=128 (2p, 3p), p=32 m=256 (2p); the six paper
         settings at 2p; 60 s, with the wall time of the whole call and the earlier figures
- long:  interleaved p=8, m=32 at 1p (the reach row the 60 s limit leaves above 1%) with a
         300 s limit: CP-SAT and the LNS, one after the other in the same run
- spread: the same row with the LNS at the reach limit (60 s), five runs (or --repeats): the
         search is randomised and timed, so one run is one draw; every run's span is kept
Solver labels: plain = solve() as users call it; "search" = the backend must prove the
optimum even when the bounds alone would; "cold" = also without the warm start hint.
Every schedule reported went through evaluate() and validate() inside solve(). `proved_by` says
whether the lower bounds of zbopt.bounds alone already met the warm start ("bounds") or the
backend closed the gap ("solver"). Runtimes are wall-clock medians over --repeats runs on a
machine shared with other work, so they are noisy.

Usage (ZBOPT_REACH_SOLVERS=cpsat,cpsat-lns picks the reach part's solvers; default cpsat):
  python benchmarks/bench_solver.py [--only p8,p16,paper,milp,reach,long,spread] [--time-limit S]
                                    [--threads N] [--repeats N] [--out-dir results]
Rows of the parts run replace their old rows in results/solver.csv; results/solver.md is
rewritten from the whole CSV.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shlex
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path

from zbopt.instance import Instance, load_instance
from zbopt.result import relative_gap
from zbopt.solvers import default_solver, solve

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("p8", "p16", "paper", "milp", "reach", "long", "spread")
DEFAULT_LIMIT = {"p8": 60.0, "p16": 120.0, "paper": 120.0, "milp": 60.0, "reach": 60.0,
                 "long": 300.0, "spread": 60.0}
SPREAD_RUNS = 5
TARGET = {"p8": "proven optimal within 60 s", "p16": "proven optimal within 120 s",
          "paper": "proven or gap <= 0.5% within 120 s; beat the authors' heuristic",
          "milp": "CBC and HiGHS prove optimality within 60 s",
          "reach": "60 s limit, wall at most 75 s; gap <= 1% (interleaved p8 1p/2p, v p8 1p), "
                   "<= 0.1% (contiguous p16/p32), paper settings at 2p proven or <= 0.05%",
          "long": "none (how far the gap closes with five times the reach limit)",
          "spread": "the reach target (gap <= 1%, wall at most 75 s) in most runs"}
COLUMNS = ("part", "instance", "cap", "solver", "status", "objective", "lower_bound", "gap",
           "runtime_median", "runtimes", "proved_by", "backend_status", "best_heuristic",
           "best_heuristic_objective", "gain_percent", "reference_heuristic", "vs_reference",
           "time_limit", "threads", "wall", "peer", "command", "load", "objectives", "walls")


# solver label -> (solver, solve() keywords). "cold": no warm start and no proof by the bounds
# alone, so the backend has to find and prove the optimum itself; "search": warm start, but
# the backend has to prove it.
MODES = {
    "cpsat": ("cpsat", {}),
    "cpsat cold": ("cpsat", {"warm_start": False, "prove_with_bounds": False}),
    "cbc": ("cbc", {}),
    "cbc search": ("cbc", {"prove_with_bounds": False}),
    "highs": ("highs", {}),
    "highs search": ("highs", {"prove_with_bounds": False}),
    "cpsat-lns": ("cpsat-lns", {}),
    "scip": ("scip", {}),
}

# The 1.5B model's costs (Zero Bubble paper, p=8, m=32 profile); on multi-chunk placements
# each chunk costs half (Instance.with_placement).
COSTS_15B = dict(t_f=18513, t_b=18086, t_w=9331, comm=626, m_b=201216, m_w=73728)
# The gap zbopt reached on each row before this benchmark (60 s, 2 threads), and the authors'
# CBC ILP where it ran (contiguous p=4..8, m=12..24: 1.5-14.5% after 60 s)
PEER = {("interleaved p8 m32", "1p"): "zbopt before: 11.7%",
        ("interleaved p8 m32", "2p"): "zbopt before: 3.0%",
        ("v p8 m32", "1p"): "zbopt before: 5.0%",
        ("contiguous p16 m64", "2p"): "zbopt before: 0.39%",
        ("contiguous p16 m64", "3p"): "zbopt before: 0.33%",
        ("contiguous p32 m128", "2p"): "zbopt before: 0.22% (111 s wall)",
        ("contiguous p32 m128", "3p"): "zbopt before: 0.31% (CP-SAT found nothing)",
        ("contiguous p32 m256", "2p"): "zbopt before: 0.11% (121 s wall)"}
PAPER_PEER = "zbopt before: 0.03-0.18% (3 of 6 not proven); authors' CBC ILP: 1.5-14.5% at p=8"


def reach_runs():
    """Every row of the solver-reach table: (label, cap, instance, solver label, peer)."""
    base = Instance(devices=8, microbatches=32, name="p8-m32-1.5b", **COSTS_15B)
    for cap in ("1p", "2p"):
        yield "interleaved p8 m32", cap, base.with_cap(cap).with_placement("interleaved", 2)
    yield "v p8 m32", "1p", base.with_cap("1p").with_placement("v")
    for p, m, caps in ((16, 64, ("2p", "3p")), (32, 128, ("2p", "3p")), (32, 256, ("2p",))):
        contiguous = Instance(devices=p, microbatches=m, name=f"p{p}-m{m}-1.5b", **COSTS_15B)
        for cap in caps:
            yield f"contiguous p{p} m{m}", cap, contiguous.with_cap(cap)
    for path in sorted((ROOT / "instances" / "paper").glob("*.toml")):
        base = load_instance(path)
        yield f"paper {base.name}", "2p", base.with_cap("2p")


def runs(part: str):
    """(instance label, cap, instance, solver label, reference heuristic value or None)."""
    if part in ("p8", "p16"):
        p = 8 if part == "p8" else 16
        base = Instance(devices=p, microbatches=32, t_f=5, t_b=6, t_w=4, comm=1, m_b=2, m_w=1,
                        name=f"p{p}-m32-5-6-4")
        for cap in (("1p", "1.5p", "2p") if p == 8 else ("1p", "2p")):
            for label in ("cpsat", "cpsat cold"):
                yield base.name, cap, base.with_cap(cap), label, None
    elif part == "paper":
        table = json.loads((ROOT / "tests" / "data" / "zb_paper_table5.json").read_text())
        for path in sorted((ROOT / "instances" / "paper").glob("*.toml")):
            base = load_instance(path)
            row = next(r for r in table["rows"]
                       if r["m"] == base.microbatches and r["t_f"] == base.t_f[0]
                       and r["comm"] == base.comm)
            for cap in ("1p", "2p"):
                yield base.name, cap, base.with_cap(cap), "cpsat", row[f"zb_{cap}_heuristic"]
    elif part == "reach":
        solvers = os.environ.get("ZBOPT_REACH_SOLVERS", "cpsat").split(",")
        for label, cap, instance in reach_runs():
            for solver in solvers:
                yield label, cap, instance, solver, None
    elif part in ("long", "spread"):
        label, cap, instance = next(run for run in reach_runs()
                                    if run[:2] == ("interleaved p8 m32", "1p"))
        for solver in ("cpsat", "cpsat-lns") if part == "long" else ("cpsat-lns",):
            yield label, cap, instance, solver, None
    elif part == "milp":
        for label, costs in (("unit", dict(t_f=1, t_b=1, t_w=1, comm=0)),
                             ("5-6-4-comm1", dict(t_f=5, t_b=6, t_w=4, comm=1))):
            base = Instance(devices=4, microbatches=8, m_b=2, m_w=1, name=f"p4-m8-{label}",
                            **costs)
            for cap in ("1p", "2p"):
                for label in ("cbc", "cbc search", "highs", "highs search", "cpsat cold"):
                    yield base.name, cap, base.with_cap(cap), label, None


def measure(part, label, cap, instance, mode, reference, time_limit, threads, repeats):
    solver, options = MODES[mode]
    times, walls, spans, result = [], [], [], None
    for run in range(repeats):
        began = time.perf_counter()
        result = solve(instance, solver=solver, objective="span", time_limit=time_limit,
                       threads=threads, **options)
        walls.append(time.perf_counter() - began)
        times.append(result.runtime)
        spans.append(result.objective)
        if repeats > 1:
            print(f"  run {run + 1} of {repeats}: {result.objective} in {walls[-1]:.1f}s",
                  file=sys.stderr, flush=True)
    gain = None
    if result.best_heuristic_objective and result.objective is not None:
        gain = 100 * (result.best_heuristic_objective - result.objective) \
            / result.best_heuristic_objective
    vs_reference = None
    if reference and result.objective is not None:
        vs_reference = 100 * (reference - result.objective) / reference
    return {
        "part": part, "instance": label, "cap": cap, "solver": mode, "status": result.status,
        "objective": result.objective, "lower_bound": result.lower_bound,
        "gap": result.gap, "runtime_median": statistics.median(times),
        "runtimes": " ".join(f"{t:.2f}" for t in times),
        "proved_by": _proved_by(result),
        "backend_status": result.backend_status or "",
        "best_heuristic": result.best_heuristic,
        "best_heuristic_objective": result.best_heuristic_objective,
        "gain_percent": gain, "reference_heuristic": reference, "vs_reference": vs_reference,
        "time_limit": time_limit, "threads": threads, "wall": statistics.median(walls),
        "peer": PEER.get((label, cap), PAPER_PEER if label.startswith("paper") else ""),
        "load": os.getloadavg()[0],  # other jobs on the machine while this row ran
        "objectives": " ".join(f"{x:.12g}" for x in spans if x is not None),
        "walls": " ".join(f"{w:.1f}" for w in walls),
    }


def _proved_by(result) -> str:
    """Who certified optimality: the bounds alone (no search), the backend's own proof, or
    the backend's schedule meeting zbopt.bounds (backend stopped by its time limit)."""
    if result.status != "optimal":
        return ""
    backend = result.backend_status
    if backend is None:
        return "bounds"
    if backend == "optimal":
        return "solver"
    if result.schedule is not None and result.schedule.method.startswith("solver-"):
        return "solver schedule + bounds"
    return "warm start + bounds"  # the backend found nothing better within its limit


def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(row.get(k)) for k in COLUMNS})


def _cell(x):
    if x is None:
        return ""
    if isinstance(x, float):
        return f"{x:.12g}" if not x.is_integer() else str(int(x))
    return x


def _num(text: str, fmt: str = "{:,.0f}") -> str:
    if text in ("", None):
        return "-"
    value = float(text)
    return fmt.format(value)


def write_markdown(path: Path, rows: list[dict]) -> None:
    lines = ["# Exact solver benchmarks", "",
             "Written by `benchmarks/bench_solver.py`. Span objective; every schedule passed "
             "`evaluate()` and `validate()`. `proved by`: *bounds* = the lower bounds of "
             "`zbopt.bounds` already met the warm start, *solver* = the backend proved it, "
             "*solver schedule + bounds* = the backend stopped at its time limit with a "
             "schedule that meets the bounds, *warm start + bounds* = the backend found "
             "nothing better within its limit and the warm start meets the bounds. "
             "Runtimes are wall-clock medians (seconds) over the repeats listed, on a machine "
             "shared with other developers' jobs, so they are noisy; the time limit is the "
             "solver's, the runtime includes the warm start. Solver labels: plain = `solve()` "
             "as users call it; *search* = `prove_with_bounds=False` (the backend must prove "
             "the optimum itself); *cold* = also `warm_start=False` (no hint: the backend must "
             "find the schedule too).", "",
             f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
             f"Python {platform.python_version()}, ortools {metadata.version('ortools')}, "
             f"pulp {metadata.version('pulp')}, highspy {_version('highspy')}.", ""]
    for part in PARTS:
        mine = [r for r in rows if r["part"] == part]
        if not mine:
            continue
        commands = sorted({r.get("command") or "?" for r in mine})
        lines += [f"## {part}: target {TARGET[part]}", ""]
        lines += [f"Command: `{c}`" for c in commands] + [""]
        if part == "reach":
            lines += _reach_table(mine)
            continue
        if part == "spread":
            lines += _spread_table(mine)
            continue
        lines += ["| instance | cap | solver | status | span | lower bound | gap | runtime (s) "
                  "| proved by | best heuristic | gain vs it | authors' heuristic | gain vs it "
                  "| limit (s) |",
                  "|---|---|---|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|"]
        for r in mine:
            gap = "-" if r["gap"] == "" else f"{100 * float(r['gap']):.3f}%"
            heur = f"{r['best_heuristic']} {_num(r['best_heuristic_objective'])}" \
                if r["best_heuristic"] else "-"
            lines.append(
                f"| {r['instance']} | {r['cap']} | {r['solver']} | {r['status']} "
                f"| {_num(r['objective'], '{:,.1f}')} | {_num(r['lower_bound'], '{:,.1f}')} "
                f"| {gap} | {_num(r['runtime_median'], '{:.1f}')} | {r['proved_by'] or '-'} "
                f"| {heur} | {_num(r['gain_percent'], '{:.2f}%')} "
                f"| {_num(r['reference_heuristic'])} | {_num(r['vs_reference'], '{:.2f}%')} "
                f"| {_num(r['time_limit'])} |")
        lines.append("")
    path.write_text("\n".join(lines) + "\n")


def _row_order(r: dict):
    # reach rows in the table's order (reach_runs), solvers in the order of MODES; the
    # others by name
    if r["part"] == "reach":
        place = {(label, cap): i for i, (label, cap, _) in enumerate(reach_runs())}
        solvers = list(MODES)
        return (PARTS.index(r["part"]), "", float(place.get((r["instance"], r["cap"]), len(place))),
                solvers.index(r["solver"]) if r["solver"] in solvers else len(solvers))
    return (PARTS.index(r["part"]), r["instance"], float(r["cap"].rstrip("p") or 0), r["solver"])


def _reach_target(label: str) -> float:
    """The largest gap the target allows on a reach row (wall time at most 75 s as well)."""
    if label.startswith(("interleaved", "v ")):
        return 0.01
    if label.startswith("contiguous"):
        return 0.001
    return 0.0005  # paper settings: proven or at most 0.05%


def _reach_table(rows: list[dict]) -> list[str]:
    out = ["Wall = the whole solve() call (warm start and bounds included) against the limit. "
           "On interleaved and v, solve() first tunes the greedy per device and stage for up to "
           "20% of the limit (zbopt.heuristics.policy_search); `best heuristic` is the best "
           "registered method, before that search. "
           f"Load = the 1-minute load average when the row finished, on {os.cpu_count()} cores "
           "(above the core count: other jobs shared the CPU; '-': not recorded).", "",
           "| instance | cap | solver | status | span | lower bound | gap | target | met "
           "| wall (s) | limit (s) | load | proved by | best heuristic | peer |",
           "|---|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---|---|---|"]
    for r in rows:
        gap = "-" if r["gap"] == "" else f"{100 * float(r['gap']):.3f}%"
        target = _reach_target(r["instance"])
        met = r["gap"] != "" and float(r["gap"]) <= target + 1e-12 \
            and r.get("wall") not in ("", None) and float(r["wall"]) <= 75
        gap += f" | {100 * target:g}% | {'yes' if met else 'no'}"
        heur = f"{r['best_heuristic']} {_num(r['best_heuristic_objective'])}" \
            if r["best_heuristic"] else "-"
        out.append(f"| {r['instance']} | {r['cap']} | {r['solver']} | {r['status']} "
                   f"| {_num(r['objective'], '{:,.1f}')} | {_num(r['lower_bound'], '{:,.1f}')} "
                   f"| {gap} | {_num(r.get('wall', ''), '{:.1f}')} | {_num(r['time_limit'])} "
                   f"| {_num(r.get('load', ''), '{:.1f}')} | {r.get('proved_by') or '-'} | {heur} "
                   f"| {r.get('peer') or '-'} |")
    def meets(r: dict) -> bool:
        return r["gap"] != "" and float(r["gap"]) <= _reach_target(r["instance"]) + 1e-12 \
            and r.get("wall") not in ("", None) and float(r["wall"]) <= 75

    # the rows of the solver the commands run by default (--solver auto) on each instance
    auto = {(label, cap): default_solver(instance) for label, cap, instance in reach_runs()}
    chosen = [r for r in rows if auto.get((r["instance"], r["cap"])) == r["solver"]]
    out += ["", f"Targets met on {sum(map(meets, rows))} of {len(rows)} rows; with the solver the "
                f"commands run by default (`--solver auto`: cpsat-lns on interleaved and V from "
                f"1,000 passes, cpsat otherwise) on {sum(map(meets, chosen))} of {len(chosen)} "
                f"instances. Every row's span is at most its best "
                "heuristic's and its status follows its bound (optimal exactly when the span "
                "equals it). The earlier zbopt figures are the issue's (paper settings: a 120 s "
                "limit then); the authors' CBC ILP was only run on p=4..8, m=12..24."]
    return out + [""]


def _spread_table(rows: list[dict]) -> list[str]:
    out = ["Every run is solve() as users call it; the gap of each run is (span - bound) / span "
           "against the bound of zbopt.bounds, which is the same in every run.", "",
           "| instance | cap | solver | runs | spans (sorted) | median span | lower bound "
           "| median gap | runs within 1% | wall (s), max | limit (s) |",
           "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        spans = sorted(float(x) for x in r.get("objectives", "").split())
        walls = [float(x) for x in r.get("walls", "").split()]
        if not spans or r["lower_bound"] == "":
            continue
        bound = float(r["lower_bound"])
        median = statistics.median(spans)
        within = sum(1 for x in spans if relative_gap(x, bound) <= _reach_target(r["instance"]) + 1e-12)
        out.append(f"| {r['instance']} | {r['cap']} | {r['solver']} | {len(spans)} "
                   f"| {', '.join(f'{x:,.1f}' for x in spans)} | {median:,.1f} | {bound:,.1f} "
                   f"| {100 * relative_gap(median, bound):.3f}% | {within} of {len(spans)} "
                   f"| {max(walls):.1f} | {_num(r['time_limit'])} |")
    return out + [""]


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=",".join(PARTS),
                        help=f"comma-separated parts among {', '.join(PARTS)}")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="override every part's time limit (seconds)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--filter", default="", help="only runs whose instance name contains it")
    parser.add_argument("--out-dir", default=str(ROOT / "results"))
    args = parser.parse_args(argv)
    parts = [p for p in args.only.split(",") if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}: choose from {', '.join(PARTS)}")
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out / "solver.csv", out / "solver.md"
    rows = read_rows(csv_path)
    command = "python benchmarks/bench_solver.py " + shlex.join(argv if argv is not None
                                                                else sys.argv[1:])
    if os.environ.get("ZBOPT_REACH_SOLVERS"):
        command = f"ZBOPT_REACH_SOLVERS={os.environ['ZBOPT_REACH_SOLVERS']} {command}"
    for part in parts:
        limit = args.time_limit or DEFAULT_LIMIT[part]
        for label, cap, instance, solver, reference in runs(part):
            if args.filter and args.filter not in label:
                continue
            began = time.perf_counter()
            repeats = max(args.repeats, SPREAD_RUNS) if part == "spread" else args.repeats
            row = measure(part, label, cap, instance, solver, reference, limit, args.threads,
                          repeats)
            row["command"] = command.strip()
            print(f"{part} {label} {cap} {solver}: {row['status']} {row['objective']} "
                  f"(bound {row['lower_bound']}, gap {row['gap']}) in "
                  f"{time.perf_counter() - began:.1f}s", flush=True)
            key = (part, label, cap, solver)
            rows = [r for r in rows if (r["part"], r["instance"], r["cap"], r["solver"]) != key]
            rows.append({k: _cell(v) for k, v in row.items()})
            rows.sort(key=_row_order)
            write_csv(csv_path, rows)
            write_markdown(md_path, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
