"""Fuzz every registered method on random instances of every placement; count invalid results.

    python benchmarks/fuzz_schedules.py                       # 10,000 instances, seed 0
    python benchmarks/fuzz_schedules.py --instances 500 --seed 3 --solver-every 50

Each instance (random placement, per-stage costs with zeros, comm, static memory, a cap that is
absent, a "kp" string or a per-device list at or above the least feasible cap, overlap on
dualpipe) runs every family and heuristic through zbopt.registry.run; every `--solver-every`-th
instance also runs each solver backend (tiny instances, `--solver-seconds` each). A result is
invalid when `problems()` finds anything: a schedule that does not validate, numbers that
differ from a re-evaluation, a fits_cap claim that is wrong, a cap other than the instance's,
a capped heuristic over its cap, a not-applicable without a reason, or a solver status that
disagrees with its bound. The counts go to results/fuzz.md, in its `schedules` section.
"""

from __future__ import annotations

import argparse
import platform
import random
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zbopt.bounds import min_feasible_cap  # noqa: E402
from zbopt.errors import ZboptError  # noqa: E402
from zbopt.instance import Instance, within_cap  # noqa: E402
from zbopt.registry import methods, run  # noqa: E402
from zbopt.result import Result  # noqa: E402
from zbopt.schedule import evaluate, validate  # noqa: E402

RESULTS = ROOT / "results" / "fuzz.md"
BEGIN, END = "<!-- schedules -->", "<!-- /schedules -->"
# heuristics that schedule for the instance's own cap (the others pick their own: 1p, 2p, ...)
AT_INSTANCE_CAP = ("zb-greedy", "v-greedy", "interleaved-zb")
SOLVER_STATUSES = ("optimal", "feasible", "infeasible")


def random_instance(rng: random.Random, max_p: int = 4, max_m: int = 8) -> Instance:
    placement = rng.choice(("contiguous", "interleaved", "v", "dualpipe"))
    p = rng.randint(1, max_p)
    chunks = rng.randint(2, 3) if placement == "interleaved" else 0
    m = rng.randint(1, max_m)
    if placement == "dualpipe":
        m = 2 * max(1, m // 2)
    stages = p * (chunks or (1 if placement == "contiguous" else 2))
    parts = p if placement == "dualpipe" else stages

    def per_stage(values):
        return rng.choice(values) if rng.random() < 0.4 else [rng.choice(values) for _ in range(parts)]

    costs = {k: per_stage((0, 0, 1, 2, 3, 5, 0.5)) for k in ("t_f", "t_b", "t_w")}
    if all((v == 0 if not isinstance(v, list) else not any(v)) for v in costs.values()):
        costs["t_b"] = 1
    m_b = per_stage((1, 2, 3, 0.5))
    m_w = [rng.choice((0, x / 2, x)) for x in (m_b if isinstance(m_b, list) else [m_b] * parts)]
    fields = dict(devices=p, microbatches=m, placement=placement, chunks=chunks, **costs,
                  comm=rng.choice((0, 0, 1, 0.5)), m_b=m_b, m_w=m_w,
                  static_memory=rng.choice((0, 0, 1, [rng.randint(0, 2) for _ in range(p)])),
                  overlap=rng.choice((0.0, 0.5, 1.0)) if placement == "dualpipe" else 0.0)
    base = Instance(**fields)
    need = min_feasible_cap(base)
    kind = rng.random()
    if kind < 0.25:
        cap = None
    elif kind < 0.5:
        cap = rng.choice(("1p", "1.5p", "2p", "0.5p"))
    else:
        cap = [n + rng.choice((0, 0, 1, 2.5, 4)) * max(base.m_b) for n in need]
    try:
        return base.with_cap(cap)
    except ZboptError:  # "0.5p" below one activation: keep the least feasible cap instead
        return base.with_cap(list(need))


def problems(instance: Instance, result: Result) -> list[str]:
    """What is wrong with one method's result on `instance` (empty: nothing)."""
    name = result.method
    if result.status == "not-applicable":
        return [] if result.message.strip() else [f"{name}: not-applicable without a reason"]
    if result.status == "error":
        return [f"{name}: error: {result.message}"]
    if result.kind == "solver":
        return _solver_problems(instance, result)
    if result.status != "heuristic" or result.timeline is None:
        return [f"{name}: status {result.status} without a schedule"]
    return _schedule_problems(instance, result)


def _schedule_problems(instance: Instance, result: Result) -> list[str]:
    name, placed, schedule = result.method, result.instance, result.schedule
    found = [f"{name}: {p}" for p in validate(placed.with_cap(None), schedule)]
    if found:
        return found
    again = evaluate(placed, schedule)
    if (again.span, again.makespan, again.peak_memory) != \
            (result.span, result.makespan, result.peak_memory):
        found.append(f"{name}: its numbers differ from a re-evaluation")
    caps = instance.cap
    if placed.cap != caps:
        found.append(f"{name}: judged against cap {placed.cap}, the instance's is {caps}")
    truth = caps is None or all(within_cap(pk, c) for pk, c in zip(again.peak_memory, caps))
    if result.fits_cap != truth:
        found.append(f"{name}: claims fits_cap={result.fits_cap}, the peaks say {truth}")
    if name in AT_INSTANCE_CAP and not truth:
        found.append(f"{name}: a capped heuristic over the instance's cap")
    if result.lower_bound is not None and result.span + 1e-6 < result.lower_bound:
        found.append(f"{name}: span {result.span} below its lower bound {result.lower_bound}")
    return found


def _solver_problems(instance: Instance, result: Result) -> list[str]:
    name = result.method
    if result.status not in SOLVER_STATUSES:
        return [f"{name}: status {result.status}"]
    if result.status == "infeasible":
        return [] if result.timeline is None else [f"{name}: infeasible with a schedule"]
    found = [f"{name}: {p}" for p in validate(instance, result.schedule)]
    value, bound = result.objective, result.lower_bound
    if bound is None:
        return found + [f"{name}: {result.status} without a lower bound"]
    tolerance = 1e-9 * max(1.0, abs(value))
    if value + tolerance < bound:
        found.append(f"{name}: objective {value} below its own bound {bound}")
    if (result.status == "optimal") != (value <= bound + tolerance):
        found.append(f"{name}: status {result.status} with objective {value} and bound {bound}")
    return found


def check_instance(instance: Instance, solvers: tuple[str, ...] = (),
                   solver_seconds: float = 1.0) -> tuple[list[Result], list[str]]:
    """Every schedule method (and the given solvers) on `instance`: results and problems."""
    results, found = [], []
    for name in methods("schedule"):
        result = run(name, instance)
        results.append(result)
        found += problems(instance, result)
    for name in solvers:
        result = run(name, instance, time_limit=solver_seconds, threads=1)
        results.append(result)
        found += problems(instance, result)
    return results, found


def write_section(text: str, path: Path = RESULTS) -> None:
    """Replace (or add) our delimited section of results/fuzz.md, keeping everything else."""
    old = path.read_text() if path.exists() else ""
    section = f"{BEGIN}\n{text.rstrip()}\n{END}"
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        new = head + section + rest.split(END, 1)[1]
    else:
        new = (old.rstrip() + "\n\n" if old.strip() else "") + section + "\n"
    path.write_text(new)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--solver-every", type=int, default=100,
                        help="run the solver backends on every N-th instance")
    parser.add_argument("--solver-seconds", type=float, default=1.0)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    solvers = tuple(methods("solver"))
    statuses: Counter = Counter()
    placements: Counter = Counter()
    invalid: list[str] = []
    solver_runs = 0
    began = time.perf_counter()
    for i in range(args.instances):
        instance = random_instance(rng)
        placements[instance.placement] += 1
        small = instance.devices <= 2 and instance.microbatches <= 4
        use = solvers if args.solver_every and i % args.solver_every == 0 and small else ()
        solver_runs += len(use)
        results, found = check_instance(instance, use, args.solver_seconds)
        for r in results:
            statuses[(r.kind, r.status)] += 1
        invalid += [f"instance {i}: {f}" for f in found]
        if (i + 1) % 500 == 0:
            print(f"{i + 1}/{args.instances} instances, {len(invalid)} problems, "
                  f"{time.perf_counter() - began:.0f} s", file=sys.stderr)
    elapsed = time.perf_counter() - began
    runs = sum(statuses.values())
    lines = [
        "## Schedules: every method on random instances\n",
        f"Command: `python benchmarks/fuzz_schedules.py --instances {args.instances} --seed "
        f"{args.seed} --solver-every {args.solver_every} --solver-seconds "
        f"{args.solver_seconds:g}` ({elapsed:.0f} s on {platform.machine()}, Python "
        f"{platform.python_version()}; other work shared the 2 cores).\n",
        f"{args.instances:,} instances ({', '.join(f'{n:,} {k}' for k, n in sorted(placements.items()))}); "
        f"{runs:,} method runs, {solver_runs} of them solver runs (instances with p <= 2, "
        f"m <= 4). A run is invalid when its schedule does not validate, its numbers differ from "
        f"a re-evaluation, its fits_cap claim is wrong, it is judged against another cap, a "
        f"heuristic at the instance's cap goes over it, a not-applicable has no reason, or a "
        f"solver's status disagrees with its bound.\n",
        f"**Invalid results: {len(invalid)}.**\n",
        "| kind | status | runs |", "|---|---|---|",
        *[f"| {k} | {s} | {n:,} |" for (k, s), n in sorted(statuses.items())],
    ]
    if invalid:
        lines += ["", "First problems:", *[f"- {x}" for x in invalid[:20]]]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        write_section(text)
        print(f"wrote the schedules section of {RESULTS}", file=sys.stderr)
    if invalid:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
