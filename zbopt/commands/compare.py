"""zbopt compare [INSTANCE]: every family and heuristic that applies, side by side, and a verdict."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from ..errors import ZboptError
from ..report.numbers import gap_text
from ._common import (
    SOLVER_HELP,
    add_instance_arguments,
    add_progress_arguments,
    check_chunks,
    check_solver,
    chunk_count,
    console,
    fmt,
    load_with_schedule,
    note_threads,
    positive_int,
    positive_seconds,
    print_json,
    progress,
    refuse_directories,
    solver_for,
)


def legend(objective: str = "span") -> str:
    """The table's note: what each column means, the gap of the objective the rows were
    judged by."""
    return (f"span: last end - first start, the longest device's; bubble rate: (span - ideal) / "
            f"span; fits cap: peak memory within the memory cap on every device; gap to bound: "
            f"({objective} - best lower bound on the {objective}) / {objective}, for schedules "
            f"that fit")



def register(sub) -> None:
    parser = sub.add_parser("compare", help="compare every schedule family on an instance")
    add_instance_arguments(parser)
    add_method_arguments(parser)
    parser.add_argument("--plot", metavar="DIR", help="write one Gantt chart per method to DIR")
    parser.add_argument("--force", action="store_true",
                        help="overwrite charts already in the --plot directory")
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    add_progress_arguments(parser)
    parser.set_defaults(func=run)


def add_method_arguments(parser) -> None:
    """Which methods to run and the optional solver row (compare and report share them)."""
    parser.add_argument("--methods", default=None,
                        help="comma-separated method names (default: all; `zbopt methods`)")
    parser.add_argument("--chunks", type=chunk_count, default=0,
                        help="chunks per device (2 or more) when re-placing for interleaved "
                             "families")
    parser.add_argument("--solve", action="store_true", help="add an exact solver's row")
    parser.add_argument("--solver", default="auto", action=_SolverGiven,
                        help=f"with --solve, the {SOLVER_HELP}")
    parser.add_argument("--objective", default="span", choices=("span", "makespan"))
    parser.add_argument("--time-limit", type=positive_seconds, default=60.0, help="solver seconds")
    parser.add_argument("--threads", type=positive_int, default=2,
                        help="with --solve, the solver's threads (default 2)")
    parser.add_argument("--jobs", type=positive_int, default=None,
                        help="worker processes for the methods of a large instance and for "
                             "its charts (default: 2, or 1 on a single core); the rows and "
                             "charts do not depend on it")


class _SolverGiven(argparse.Action):
    """--solver, remembering that it was given: without --solve it would be ignored."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, values)
        namespace.solver_given = True


def method_names(args) -> list[str]:
    """The methods to run, every name checked (before any work)."""
    from ..registry import methods
    from ..sweep.spec import listed_twice
    if args.solve:
        check_solver(args.solver)
    elif getattr(args, "solver_given", False):
        raise ZboptError(f"--solver {args.solver} names the solver of --solve: add --solve to "
                         f"run it, or drop --solver")
    if args.methods is None:
        return list(methods("schedule"))
    names = [n.strip() for n in args.methods.split(",") if n.strip()]
    registry = methods("schedule")
    if not names:
        raise ZboptError(f"--methods {args.methods!r} names no method: give comma-separated "
                         f"names such as 1f1b,zb-h1 (`zbopt methods`), or drop --methods for "
                         f"all")
    if any(n not in registry for n in names):  # a solver named: only then import the solvers
        registry = methods()
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise ZboptError(f"unknown method(s) {', '.join(unknown)}: choose from "
                         f"{', '.join(sorted(registry))} (`zbopt methods`)")
    duplicates = listed_twice(names)
    if duplicates:
        raise ZboptError(f"--methods {args.methods}: {duplicates}")
    return names


def jobs_of(args) -> int:
    """--jobs, or its default: 2 processes, 1 on a single core."""
    from ..compare import available_cores
    return args.jobs if args.jobs is not None else min(2, available_cores())


def rows_for(instance, args, report=None, stored=None) -> list:
    """The Results `compare` shows: the schedule of the schedule or plan file given as the
    instance (`stored`, its ScheduleFile), every schedule method (or --methods), and with
    --solve the solver's (compare and report share this). `report` is a Progress for stderr."""
    from ..compare import compare
    jobs = jobs_of(args)
    names = method_names(args)
    check_chunks(args.chunks, instance, names)
    rows = [] if stored is None else [file_row(instance, stored, args.instance, args.objective)]
    rows += compare(instance, names, chunks=args.chunks, objective=args.objective,
                    jobs=jobs, progress=report.update if report is not None else None)
    if args.solve:
        callback = None
        if report is not None:
            callback = report.solver(args.solver, instance.time_unit)
        rows.append(_solve(instance, args, callback))
    return rows


def check_solvable(instance, args) -> None:
    """With --solve, an instance too large for --time-limit is refused before the methods run,
    as `zbopt solve` refuses it (solvers.api.check_size), not after them; and --threads above
    the CPUs gets solver_threads' note (without --solve no solver runs: no note)."""
    if args.solve:
        from ..solvers.api import check_size
        check_size(instance, args.time_limit)
        note_threads(args.threads)


def file_row_name(path: str, stored) -> str:
    """The row of a schedule or plan file: its file name and what made the schedule."""
    return f"{Path(path).name} ({stored.method})"


def file_row(instance, stored, path: str, objective: str = "span"):
    """The file's own schedule as a Result on `instance` (the file's, under --mem's cap if
    given), judged by evaluate() like every row. Its lower bound is the best of the instance's
    own and, where the file's solver record still holds (same cap and objective), the bound it
    stored; it is "optimal" where its value meets that bound."""
    import time
    from dataclasses import replace

    from ..registry import schedule_bound
    from ..result import Result
    from ..schedule import evaluate
    began = time.perf_counter()
    name = file_row_name(path, stored)
    try:
        timeline = evaluate(instance, replace(stored.schedule, method=name))
    except ZboptError as err:  # an order that deadlocks: named by its file
        raise ZboptError(f"{path}: {err}") from None
    record = stored.meta.get("solver") or {}
    kind = "solver" if record else "heuristic"
    value = timeline.objective(objective)
    close = 1e-9 * max(1.0, abs(value))  # a stored bound's float error
    bound, bound_name = None, None
    if timeline.fits_cap:
        found = schedule_bound(instance, objective)
        if found is not None:
            bound_name, bound = found
        held = record.get("lower_bound")
        holds = instance.cap == stored.instance.cap \
            and record.get("objective_name", "span") == objective
        # a stored bound above the span found is ignored, as every reader of bounds does
        if holds and isinstance(held, (int, float)) and not isinstance(held, bool) \
                and held <= value + close and (bound is None or held > bound):
            bound, bound_name = min(held, value), f"stored {record.get('solver', 'solver')}"
    status = "optimal" if bound is not None and value <= bound + close \
        else ("feasible" if kind == "solver" else "heuristic")
    return Result(name, kind, status, instance, timeline, lower_bound=bound,
                  bound_name=bound_name, runtime=time.perf_counter() - began,
                  message=f"the schedule of {path}, made by {stored.method}",
                  objective_name=objective)


def _solve(instance, args, callback):
    from ..registry import run as run_method
    try:
        return run_method(args.solver, instance, objective=args.objective,
                          time_limit=args.time_limit, threads=args.threads, progress=callback)
    except ImportError as err:  # the solver backends are optional pieces of the package
        raise ZboptError(f"--solve is not available in this installation ({err}): "
                         f"drop --solve") from None


def run(args) -> int:
    instance, stored = load_with_schedule(args)
    names = method_names(args)
    if stored is not None:
        names = [file_row_name(args.instance, stored)] + names
    args.solver = solver_for(args.solver, instance)
    check_solvable(instance, args)
    plot_dir = None
    if args.plot is not None:  # before any work: a chart that exists is refused now, not after the solve
        from ..report.gantt import check_plot_dir
        if args.solve:
            from ..result import STATUSES
            names = names + [f"{args.solver} ({status})" for status in STATUSES]
        if args.plot.strip():  # a directory where a chart goes is said first, as such
            refuse_directories(_chart_paths(Path(args.plot), names))
        plot_dir = check_plot_dir(args.plot, names, args.force)
    with progress(args) as report:
        rows = rows_for(instance, args, report, stored)
        if plot_dir is not None:
            from ..report.gantt import compare_plot_paths, write_compare_plots
            report.update(f"compare: drawing charts into {plot_dir}")
            timelines = [_named(r) for r in rows if r.applies]
            refuse_directories(compare_plot_paths(timelines, plot_dir))  # the names as written
            write_compare_plots(timelines, plot_dir, force=args.force,
                                progress=lambda text: report.update(f"compare: {text}"),
                                jobs=jobs_of(args))
    if args.json:
        print_json([r.to_dict() for r in rows])
        return 0
    from ..report.verdict import cap_text as cap_of
    from ..report.verdict import objective_of, order_key, over_cap, placement_text
    objective = objective_of(rows)
    out = console()
    cap = instance.cap
    time_unit = f" ({instance.time_unit})" if instance.time_unit else ""
    memory_unit = f" ({instance.memory_unit})" if instance.memory_unit else ""
    unit = f" {instance.memory_unit}" if instance.memory_unit else ""
    cap_text = "unlimited" if cap is None else f"{cap_of(instance)} " \
        f"({'max ' if len(set(cap)) > 1 else ''}{fmt(max(cap))}{unit})"
    out.print(f"[bold]{instance.name or 'instance'}[/]: p={instance.devices} "
              f"m={instance.microbatches} placement={instance.placement} cap={cap_text}")
    gap = "gap to bound" + ("" if objective == "span" else f" ({objective})")
    table = Table("method", "placement", "status", f"makespan{time_unit}", f"span{time_unit}",
                  "bubble rate", f"peak memory{memory_unit}", "fits cap", gap)
    applied = sorted((r for r in rows if r.applies),
                     key=order_key(objective))
    for r in applied:
        tl = r.timeline
        table.add_row(r.method, placement_text(r), r.status,
                      fmt(tl.makespan), fmt(tl.span), f"{tl.bubble_rate:.2%}",
                      fmt(max(tl.peak_memory)),
                      "yes" if tl.fits_cap else f"[red]no[/] ({over_cap(tl)})",
                      gap_text(r.gap))
    out.print(table)
    out.print(f"[dim]{legend(objective)}[/]")
    for r in rows:
        if not r.applies:
            what = "no schedule" if r.kind == "solver" else "does not apply"
            out.print(f"[dim]{r.method}: {what}: {r.message}[/]")
    from ..report.verdict import verdict
    for line in verdict(instance, rows):
        out.print(line.replace("verdict:", "[bold]verdict:[/]", 1), markup=True)
    return 0


def _chart_paths(plot_dir, names: list[str]) -> list:
    """The charts write_compare_plots may write for methods `names` (each row's, the stacked
    PNG and SVG), to check before any work."""
    from ..report.gantt import STACKED_NAME, slug
    stems = [slug(n) for n in names] + [STACKED_NAME]
    return [plot_dir / f"{stem}.png" for stem in stems] + [plot_dir / f"{STACKED_NAME}.svg"]


def _named(result):
    """The result's timeline with the method's name on its schedule (a solver's says which)."""
    from dataclasses import replace
    name = f"{result.method} ({result.status})" if result.kind == "solver" else result.method
    return replace(result.timeline, schedule=replace(result.timeline.schedule, method=name))
