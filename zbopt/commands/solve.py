"""zbopt solve [INSTANCE]: a provably optimal (or certified-gap) schedule from an exact solver."""

from __future__ import annotations

import sys

from ..errors import ZboptError
from ..report.numbers import gap_text
from ._common import (
    SOLVER_HELP,
    add_instance_arguments,
    add_progress_arguments,
    check_output,
    check_solver,
    console,
    fmt,
    load_with_schedule,
    own_inputs,
    positive_seconds,
    print_json,
    progress,
    solver_for,
    solver_threads,
)


def register(sub) -> None:
    parser = sub.add_parser("solve", help="find an optimal schedule with an exact solver")
    add_instance_arguments(parser)
    parser.add_argument("--solver", default="auto", help=SOLVER_HELP)
    parser.add_argument("--objective", default="span", choices=("span", "makespan"),
                        help="span (default, the Zero Bubble paper's cost) or makespan")
    parser.add_argument("--time-limit", type=positive_seconds, default=60.0, metavar="S",
                        help="solver time limit in seconds (default 60)")
    parser.add_argument("--threads", type=solver_threads, default=2, help="solver threads (default 2)")
    parser.add_argument("--no-warm-start", action="store_true",
                        help="do not hint the solver with the best known schedule (by default "
                             "the best registered method's, or a schedule or plan file's own "
                             "when it is better)")
    parser.add_argument("--no-symmetry", action="store_true",
                        help="do not assume micro-batch order per stage and kind (slower)")
    parser.add_argument("--out", metavar="FILE", help="write the schedule file (zbopt.schedule/1)")
    parser.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    add_progress_arguments(parser)
    parser.set_defaults(func=run)


def summary(result) -> dict:
    """The JSON document of a solver Result: Result.to_dict() plus the gain over the best
    registered method."""
    gain = gain_percent = None
    if result.objective is not None and result.best_heuristic_objective is not None:
        gain = result.best_heuristic_objective - result.objective
        gain_percent = 100.0 * gain / result.best_heuristic_objective \
            if result.best_heuristic_objective else None
    return {**result.to_dict(), "gain": gain, "gain_percent": gain_percent}


def _fitting(schedule, instance, source):
    """`schedule` if it is a valid schedule of `instance` within its cap, else None (said on
    stderr when there was one: a hand-edited order may deadlock, --mem may tighten the cap)."""
    from ..schedule import evaluate, validate
    if schedule is None:
        return None
    problems = validate(instance, schedule)
    if not problems and evaluate(instance, schedule).fits_cap:
        return schedule
    why = problems[0] if problems else "it does not fit this cap"
    print(f"zbopt: note: the schedule in {source} is not used as a warm start: {why}",
          file=sys.stderr)
    return None


def run(args) -> int:
    from ..registry import run as run_method
    check_solver(args.solver)  # an unknown solver is refused before any work
    if args.out is not None:  # before spending the time limit
        check_output(args.out, args.force, (".json",), "schedule file", own_inputs(args))
    instance, stored = load_with_schedule(args)  # notes (a layered file's split) once it is good
    # a plan file solved again keeps its split (export --torchtitan needs it)
    from ..export.schedule_file import kept_entries
    kept, why = kept_entries(stored, instance) if args.out and stored is not None else ({}, "")
    stored = stored.schedule if stored is not None else None
    args.solver = solver_for(args.solver, instance)
    # a schedule or plan file's own schedule is a candidate warm start, if it is valid and fits
    # the cap (which --mem may have tightened)
    warm = False if args.no_warm_start else \
        (_fitting(stored, instance, args.instance) or True)
    with progress(args) as report:
        result = run_method(args.solver, instance, objective=args.objective,
                            time_limit=args.time_limit, threads=args.threads,
                            warm_start=warm, symmetry=not args.no_symmetry,
                            progress=report.solver(args.solver, instance.time_unit))
    if result.status == "infeasible":
        if args.json:
            print_json(summary(result))
            return 2
        raise ZboptError(f"infeasible: {result.message}")
    if args.out and result.timeline is not None:
        from ..export.schedule_file import write_schedule_file
        write_schedule_file(args.out, result.timeline, result=result, force=args.force, **kept)
    data = summary(result)
    if args.json:
        print_json(data)
        return 0
    out = console()
    unit = f" {instance.time_unit}" if instance.time_unit else ""
    out.print(f"[bold]{instance.name or 'instance'}[/]: p={instance.devices} "
              f"m={instance.microbatches} placement={instance.placement} "
              f"cap={'unlimited' if instance.cap is None else instance.memory_cap}")
    gap = gap_text(result.gap)
    scope = f" among {instance.placement} schedules of single passes" \
        if result.status == "optimal" else ""
    out.print(f"status      {result.status}{scope}")
    out.print(f"{result.objective_name:<11} {fmt(result.objective)}{unit}")
    out.print(f"lower bound {fmt(result.lower_bound)}{unit}")
    out.print(f"gap         {gap}")
    out.print(f"time        {result.runtime:.1f} s ({result.solver}, {args.threads} threads)")
    if result.best_heuristic is not None:
        gain = data["gain"]
        pct = f"{data['gain_percent']:.2f}%" if data["gain_percent"] is not None else "-"
        out.print(f"best known  {result.best_heuristic}: {fmt(result.best_heuristic_objective)}"
                  f"{unit}; gain {fmt(gain)}{unit} ({pct})")
    else:
        out.print("best known  no registered schedule fits the cap")
    if result.message:
        out.print(f"[dim]{result.message}[/]")
    if args.out:
        out.print(f"wrote {args.out}{why}")
    return 0
