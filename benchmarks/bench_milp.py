"""Can CBC, HiGHS and SCIP prove p=4, m=8 optimal within the limit? Time the MILP backends; write
results/milp.md.

Instances: p=4, m=8, m_b=2, m_w=1, unit costs (comm 0) and t_f/t_b/t_w = 5/6/4 with comm 1,
caps 1p and 2p, span objective, 2 threads, 60 s limit. Configurations, per backend:
- default: warm start from the best family/heuristic schedule (split into single passes, as
  solve() does), symmetry breaking, bound cuts from zbopt.bounds;
- no bound cuts: the formulation on its own (warm start, symmetry);
- cold: no warm start (horizon from default_horizon), bound cuts on.
Every schedule returned is rebuilt from the solver's orders, validated and evaluated; the
table quotes evaluate()'s span. CP-SAT's optimum is listed for reference.

A second table runs caps where the warm start is not optimal (the solver must improve it).

Usage: python benchmarks/bench_milp.py [--repeats N] [--time-limit S] [--out results/milp.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from importlib import metadata
from pathlib import Path

import pulp

from zbopt.instance import Instance
from zbopt.schedule import evaluate, validate
from zbopt.solvers.api import _schedule_from_starts, backend_inputs, run_backend
from zbopt.solvers.milp import default_horizon

BACKENDS = ("cbc", "highs", "scip")

COSTS = {"unit": dict(t_f=1, t_b=1, t_w=1, comm=0),
         "5/6/4 comm 1": dict(t_f=5, t_b=6, t_w=4, comm=1)}
CAPS = ("1p", "2p")
CONFIGS = {  # name -> (warm start, bound cuts)
    "default": (True, True),
    "no bound cuts": (True, False),
    "cold": (False, True),
}


# Beyond the target: caps where the best family/heuristic schedule is not optimal, so the
# solver has to find a better schedule, not only prove the warm start.
EXTRA = (("1.25p", "span"), ("1.25p", "makespan"), ("1.5p", "makespan"))


def warm_start(instance: Instance, objective: str = "span"):
    """(warm start method, hint, horizon) exactly as solve() hands them to a backend."""
    from zbopt.solvers.api import _warm_start
    name, _, _, _ = _warm_start(instance, objective)
    scaled, _, hint, horizon = backend_inputs(instance, objective)
    return name, scaled, hint, horizon


def judged(instance: Instance, scaled: Instance, raw, objective: str) -> float:
    schedule = _schedule_from_starts(instance, scaled, raw.starts, objective, 1, "milp",
                                     raw.orders)
    problems = validate(instance, schedule)
    assert not problems, problems
    return evaluate(instance, schedule).objective(objective)


def one_run(instance, scaled, backend, warm, cuts, hint, horizon, time_limit, objective="span"):
    t0 = time.perf_counter()
    raw = run_backend(backend, scaled, objective=objective, time_limit=time_limit, threads=2,
                      hint=hint if warm else None, symmetry=True,
                      horizon=horizon if warm else default_horizon(scaled),
                      options={"bound_cuts": cuts})
    seconds = time.perf_counter() - t0
    value = judged(instance, scaled, raw, objective) if raw.starts is not None else None
    return raw, seconds, value


def cpsat_optimum(scaled, hint, horizon, objective="span"):
    raw = run_backend("cpsat", scaled, objective=objective, time_limit=60, threads=2, hint=hint,
                      symmetry=True, horizon=horizon)
    return f"{raw.objective:g} ({raw.status})"


def fmt(x) -> str:
    return "-" if x is None else f"{x:g}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=1, help="runs of the default config")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results"
                                             / "milp.md"))
    args = parser.parse_args()
    lines = [
        "# MILP backends (PuLP: CBC, HiGHS, SCIP): proving p=4, m=8", "",
        f"Span objective, m_b=2, m_w=1, {args.time_limit:g} s limit, 2 threads. Seconds are "
        f"wall time of `solve_milp` (model build + solve), median (min-max) of {args.repeats} "
        f"runs for `default`, one run for the other configurations. The machine is shared "
        f"({os.cpu_count()} cores, other jobs running), so times are noisy.",
        f"Python {platform.python_version()}, PuLP {pulp.__version__} (bundled CBC), highspy "
        f"{metadata.version('highspy')}, pyscipopt {metadata.version('pyscipopt')}. The three "
        f"backends solve the same model (zbopt/solvers/milp.py); SCIP runs one thread.", "",
        "`span` is evaluate()'s value of the returned schedule; `bound` the solver's proven "
        "lower bound; `status` the solver's own status (CBC's log, HiGHS' model status).", "",
        "| costs | cap | warm start (span) | CP-SAT | backend | config | status | span | bound "
        "| seconds | binaries |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
    proved_all = True
    summary: dict[tuple[str, str], list] = {}
    for cost_name, costs in COSTS.items():
        for cap in CAPS:
            instance = Instance(devices=4, microbatches=8, m_b=2, m_w=1, memory_cap=cap,
                                **costs)
            method, scaled, hint, horizon = warm_start(instance)
            reference = cpsat_optimum(scaled, hint, horizon)
            for backend in BACKENDS:
                for config, (warm, cuts) in CONFIGS.items():
                    repeats = args.repeats if config == "default" else 1
                    runs = [one_run(instance, scaled, backend, warm, cuts, hint, horizon,
                                    args.time_limit) for _ in range(repeats)]
                    times = [s for _, s, _ in runs]
                    result, _, span = runs[-1]  # span: evaluate()'s value
                    statuses = sorted({r.status for r, _, _ in runs})
                    summary.setdefault((backend, config), []).append(
                        (statuses == ["optimal"], statistics.median(times)))
                    if config == "default" and statuses != ["optimal"]:
                        proved_all = False
                    when = f"{statistics.median(times):.2f}"
                    if repeats > 1:
                        when += f" ({min(times):.2f}-{max(times):.2f})"
                    row = (f"| {cost_name} | {cap} | {method} ({horizon}) | {reference} "
                           f"| {backend} | {config} | {'/'.join(statuses)} | {fmt(span)} "
                           f"| {fmt(result.bound)} | {when} | {result.stats.get('binaries')} |")
                    print(row, flush=True)
                    lines.append(row)
    lines += ["", f"Default configuration proved every case optimal within the limit: "
                  f"{'yes' if proved_all else 'NO'}.", "",
              "Per backend and configuration over the four instances: cases proven optimal, "
              "and the median seconds (a case not proven counts its time to the limit).", "",
              "| backend | config | proven | median seconds |", "|---|---|---:|---:|"]
    for (backend, config), cases in summary.items():
        proven = sum(1 for ok, _ in cases if ok)
        lines.append(f"| {backend} | {config} | {proven}/{len(cases)} "
                     f"| {statistics.median(t for _, t in cases):.2f} |")
    lines += ["",
              "Reading it: with the bound cuts the warm start often already meets the bound, so "
              "the proof is the LP relaxation; `no bound cuts` shows what the disjunctive "
              "formulation proves alone. `cold` and `no bound cuts` are single runs and vary "
              "a lot from run to run (both solvers are nondeterministic with 2 threads, and "
              "the machine is shared): a cold run that proves in seconds in one run can stop "
              "at the limit in the next.", "",
              "## Beyond the target: the warm start is not optimal", "",
              "Same instance with 5/6/4 comm 1, caps where the best family/heuristic schedule "
              "can be improved; default configuration, one run each.", "",
              "| cap | objective | warm start | CP-SAT | backend | status | value | bound "
              "| seconds |", "|---|---|---|---|---|---|---|---|---|"]
    for cap, objective in EXTRA:
        instance = Instance(devices=4, microbatches=8, m_b=2, m_w=1, memory_cap=cap,
                            **COSTS["5/6/4 comm 1"])
        method, scaled, hint, horizon = warm_start(instance, objective)
        reference = cpsat_optimum(scaled, hint, horizon, objective)
        for backend in BACKENDS:
            result, seconds, value = one_run(instance, scaled, backend, True, True, hint,
                                             horizon, args.time_limit, objective)
            row = (f"| {cap} | {objective} | {method} ({horizon}) | {reference} | {backend} "
                   f"| {result.status} | {fmt(value)} | {fmt(result.bound)} | {seconds:.2f} |")
            print(row, flush=True)
            lines.append(row)
    lines += ["",
              f"Command: `python benchmarks/bench_milp.py --repeats {args.repeats} "
              f"--time-limit {args.time_limit:g}`", ""]
    out = Path(args.out)
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
