"""Does `--time-limit` bound solve()'s whole wall time? And how long does compare take at scale?

For p in {16, 32, 64}, m in {128, 256}, caps 1p, 2p and 3p (contiguous, the 1.5B model's costs),
solve() with CP-SAT and the given limit (default 10 s, 2 threads): the wall time of the whole
call (bounds, warm start, search, checks) against the limit, and what it returned (or the
refusal when the instance is too large for the limit). Target: wall <= 1.1 x limit + 5 s.
Then compare() at p=64, m=256, cap 2p: total wall time and the slowest methods.

`--only backends`: solve() with every registered solver backend (one whose optional dependency
is missing is skipped, and the table says so) at one limit (default 20 s) on instances with
uneven per-stage costs (the 1.5B model's, each stage's drawn from 0.8x to 1.2x of them, seeded)
and prove_with_bounds=False (the backend's own limit is what is timed):
p=8, m=32 and p=16, m=64 contiguous, and p=8, 2 chunks, m=32 interleaved, all at cap 1p. Each
section of the output file is replaced on its own (backends: one per limit): a run keeps the
sections it did not run.

Usage: python benchmarks/bench_time_limits.py [--only cpsat|backends|all] [--time-limit S]
                                              [--threads N] [--out results/time_limits.md]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import random
import sys
import time
from pathlib import Path

from zbopt.compare import compare
from zbopt.errors import ZboptError
from zbopt.instance import Instance
from zbopt.registry import methods
from zbopt.solvers import solve

ROOT = Path(__file__).resolve().parents[1]
COSTS_15B = dict(t_f=18513, t_b=18086, t_w=9331, comm=626, m_b=201216, m_w=73728)


def instance(p: int, m: int, cap: str) -> Instance:
    return Instance(devices=p, microbatches=m, name=f"p{p}-m{m}", **COSTS_15B).with_cap(cap)


def solve_row(p: int, m: int, cap: str, limit: float, threads: int) -> dict:
    began = time.perf_counter()
    try:
        result = solve(instance(p, m, cap), time_limit=limit, threads=threads)
    except ZboptError as err:
        return {"p": p, "m": m, "cap": cap, "wall": time.perf_counter() - began,
                "outcome": f"refused: {err}"}
    wall = time.perf_counter() - began
    gap = f"{100 * result.gap:.3f}%" if result.gap is not None else "-"
    searched = "search ran" if result.backend_status else (result.message or "no search")
    return {"p": p, "m": m, "cap": cap, "wall": wall,
            "outcome": f"{result.status}, gap {gap}, warm start {result.warm_start}; {searched}"}


# ----- sections of the output file ------------------------------------------------------------

BACKENDS_HEADING = "## Every solver backend on uneven per-stage costs"


def sections(text: str) -> tuple[str, list[str]]:
    """The text before its first "## " heading, and each "## " section (heading to the next)."""
    head, found = [], []
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            found.append(line)
        elif found:
            found[-1] += line
        else:
            head.append(line)
    return "".join(head), found


def with_section(text: str, heading: str, body: str) -> str:
    """`text` with its section under `heading` replaced by `body` (a whole section, its heading
    included), or with `body` appended where it has none."""
    head, found = sections(text)
    body = body.rstrip("\n") + "\n"
    if not any(s.startswith(heading) for s in found):
        found.append(body)
    found = [body if s.startswith(heading) else s for s in found]
    return head + "".join(s.rstrip("\n") + "\n\n" for s in found[:-1]) + found[-1]


def with_backends(text: str, old: str) -> str:
    """`text` (a CP-SAT run's) with every backends section of `old` (one per limit) kept."""
    for kept in sections(old)[1]:
        if kept.startswith(BACKENDS_HEADING):
            text = with_section(text, kept.splitlines()[0], kept)
    return text


def load_note(loads: list[float]) -> str:
    return (f"Machine: {platform.machine()}, {os.cpu_count()} cores, 1-minute load average "
            f"{min(loads):.1f} to {max(loads):.1f} during the run"
            + (" (other work shared the CPU: wall times are upper estimates)."
               if max(loads) > 1.5 else " (a quiet machine)."))


# ----- every backend on uneven costs ---------------------------------------------------------

# the module each backend needs beyond zbopt's dependencies (CBC comes with PuLP)
OPTIONAL = {"highs": "highspy", "scip": "pyscipopt"}
SEED = 7


def uneven(p: int, m: int, placement: str = "contiguous", chunks: int = 0) -> Instance:
    """The 1.5B model's costs, each stage's time drawn from 0.8x to 1.2x of them, cap 1p."""
    draw = random.Random(f"{SEED}-{p}-{m}-{placement}-{chunks}")
    stages = p * (chunks or 1)

    def times(base: int) -> list[int]:
        return [round(base * draw.uniform(0.8, 1.2)) for _ in range(stages)]

    costs = {**COSTS_15B, **{k: times(COSTS_15B[k]) for k in ("t_f", "t_b", "t_w")}}
    name = f"p{p}-m{m}" + (f"-{placement}{chunks}" if placement != "contiguous" else "")
    return Instance(devices=p, microbatches=m, placement=placement, chunks=chunks, name=name,
                    time_unit="us", **costs).with_cap("1p")


def uneven_instances() -> list[Instance]:
    return [uneven(8, 32), uneven(16, 64), uneven(8, 32, "interleaved", 2)]


def missing(solver: str) -> str:
    """Why `solver` cannot run here ("" when it can)."""
    module = OPTIONAL.get(solver)
    if module and importlib.util.find_spec(module) is None:
        return f"skipped: {module} is not installed"
    return ""


def backend_row(instance: Instance, solver: str, limit: float, threads: int) -> dict:
    row = {"instance": instance.name, "solver": solver, "wall": None}
    why = missing(solver)
    if why:
        row["outcome"] = why
        return row
    began = time.perf_counter()
    try:
        # the backend searches even where the bounds prove the warm start: its limit is timed
        result = solve(instance, solver=solver, time_limit=limit, threads=threads,
                       prove_with_bounds=False)
    except ZboptError as err:
        row["wall"] = time.perf_counter() - began
        row["outcome"] = (f"skipped: {err}" if "not available" in str(err)
                          else f"refused: {err}")
        return row
    row["wall"] = time.perf_counter() - began
    gap = f"{100 * result.gap:.3f}%" if result.gap is not None else "-"
    head = (result.message or "").replace("|", "/")
    head = head if len(head) <= 140 else head[:137] + "..."
    row["outcome"] = f"{result.status}, gap {gap}, backend {result.backend_status or '-'}" \
                     + (f"; {head}" if head else "")
    return row


def backends_section(limit: float, threads: int, command: str) -> str:
    solvers = list(methods("solver"))
    loads = [os.getloadavg()[0]]
    rows = []
    for instance in uneven_instances():
        for solver in solvers:
            print(f"{instance.name} {solver}: solving ...", file=sys.stderr, flush=True)
            row = backend_row(instance, solver, limit, threads)
            rows.append(row)
            loads.append(os.getloadavg()[0])
            wall = "-" if row["wall"] is None else f"{row['wall']:.1f} s"
            print(f"{instance.name} {solver}: {wall}; {row['outcome']}", file=sys.stderr,
                  flush=True)
    allowed = 1.1 * limit + 5
    lines = [f"{BACKENDS_HEADING} ({limit:g} s limit)", "",
             f"Written by `{command}`. solve() with each registered solver backend, "
             f"{threads} threads, limit {limit:g} s, prove_with_bounds=False (the backend "
             f"searches even where the bounds prove the warm start); wall = the whole call "
             f"(bounds, warm start, model build, search, checks). Allowed: 1.1 x limit + 5 s = {allowed:g} s. "
             f"Costs: the 1.5B model's with each stage's F, B and W times drawn from 0.8x to "
             f"1.2x of them (seed {SEED}); cap 1p. {load_note(loads)}", "",
             "| instance | solver | wall (s) | within | outcome |", "|---|---|---:|---|---|"]
    for r in rows:
        if r["wall"] is None:
            lines.append(f"| {r['instance']} | {r['solver']} | - | - | {r['outcome']} |")
            continue
        within = "yes" if r["wall"] <= allowed else "NO"
        lines.append(f"| {r['instance']} | {r['solver']} | {r['wall']:.1f} | {within} "
                     f"| {r['outcome']} |")
    return "\n".join(lines) + "\n"


# ----- CP-SAT at scale and compare -----------------------------------------------------------

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=("cpsat", "backends", "all"), default="cpsat",
                        help="cpsat: CP-SAT at scale and compare (the default); backends: "
                             "every solver backend on uneven costs; all: both")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds (default 10 for cpsat, 20 for backends)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "results" / "time_limits.md"))
    args = parser.parse_args(argv)
    methods()  # import every method once, outside the timed calls
    command = ("python benchmarks/bench_time_limits.py " + " ".join(
        argv if argv is not None else sys.argv[1:])).strip()
    out = Path(args.out)
    if args.only in ("cpsat", "all"):
        text = cpsat_sections(args.time_limit or 10.0, args.threads, command)
        out.write_text(with_backends(text, out.read_text() if out.exists() else ""))
    if args.only in ("backends", "all"):
        limit = args.time_limit or 20.0
        section = backends_section(limit, args.threads, command)
        old = out.read_text() if out.exists() else "# Honest time limits\n\n"
        # one section per limit: a run at 5 s keeps the one at 20 s
        out.write_text(with_section(old, f"{BACKENDS_HEADING} ({limit:g} s limit)", section))
    print(f"wrote {out}", file=sys.stderr)
    return 0


def cpsat_sections(limit: float, threads: int, command: str) -> str:
    """The title, CP-SAT's rows at p=16..64 and the compare section."""
    loads = [os.getloadavg()[0]]
    rows = []
    for p in (16, 32, 64):
        for m in (128, 256):
            for cap in ("1p", "2p", "3p"):  # 3p: where the bounds do not settle it, the search runs
                row = solve_row(p, m, cap, limit, threads)
                rows.append(row)
                print(f"p={p} m={m} {cap}: {row['wall']:.1f} s; {row['outcome']}", file=sys.stderr,
                      flush=True)
    loads.append(os.getloadavg()[0])
    big = instance(64, 256, "2p")
    began = time.perf_counter()
    results = compare(big)
    compare_wall = time.perf_counter() - began
    slowest = sorted(results, key=lambda r: r.runtime or 0, reverse=True)[:6]
    allowed = 1.1 * limit + 5
    lines = ["# Honest time limits", "",
             f"Written by `{command}`. solve() with CP-SAT, {threads} threads, "
             f"limit {limit:g} s; wall = the whole call (bounds, warm start, search, checks). "
             f"Allowed: 1.1 x limit + 5 s = {allowed:g} s. Contiguous placement, the 1.5B "
             f"model's costs. {load_note(loads)}", "",
             "| p | m | cap | wall (s) | within | outcome |", "|---:|---:|---|---:|---|---|"]
    for r in rows:
        within = "yes" if r["wall"] <= allowed else "NO"
        lines.append(f"| {r['p']} | {r['m']} | {r['cap']} | {r['wall']:.1f} | {within} "
                     f"| {r['outcome']} |")
    walls = sorted(r["wall"] / limit for r in rows)
    lines += ["", f"Median wall / limit: {walls[len(walls) // 2]:.2f}; "
                  f"largest: {walls[-1]:.2f}.", "",
              f"## compare at p=64, m=256, cap 2p: {compare_wall:.1f} s in all (target < 10 s)",
              "", "`compare()` in this one process (the command's `--jobs 2` default is timed in "
              "results/compare.md). Slowest methods (each includes evaluate() and the row's "
              "lower bound):", "",
              "| method | kind | seconds |", "|---|---|---:|"]
    lines += [f"| {r.method} | {r.kind} | {r.runtime:.1f} |" for r in slowest]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
