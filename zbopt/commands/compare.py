"""zbopt compare [INSTANCE]: every family and heuristic that applies, side by side."""

from __future__ import annotations

from rich.table import Table

from ..registry import run as run_method
from ._common import add_instance_arguments, console, fmt, load, print_json


def register(sub) -> None:
    parser = sub.add_parser("compare", help="compare every schedule family on an instance")
    add_instance_arguments(parser)
    add_method_arguments(parser)
    parser.add_argument("--plot", metavar="DIR", help="write one Gantt chart per method to DIR")
    parser.add_argument("--force", action="store_true",
                        help="overwrite charts already in the --plot directory")
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.set_defaults(func=run)


def add_method_arguments(parser) -> None:
    """Which methods to run and the optional solver row (compare and report share them)."""
    parser.add_argument("--methods", default=None,
                        help="comma-separated method names (default: all registered)")
    parser.add_argument("--chunks", type=int, default=0,
                        help="chunks per device when re-placing for interleaved families")
    parser.add_argument("--solve", action="store_true", help="add an exact solver's row")
    parser.add_argument("--solver", default="cpsat",
                        help="solver backend with --solve (default cpsat; `zbopt methods` lists them)")
    parser.add_argument("--objective", default="span", choices=("span", "makespan"))
    parser.add_argument("--time-limit", type=float, default=60.0, help="solver seconds")
    parser.add_argument("--threads", type=int, default=2, help="solver threads")


def rows_for(instance, args) -> list:
    """The Results `compare` shows: every schedule method (or --methods), and with --solve the
    solver's (compare and report share this)."""
    from ..compare import compare
    rows = compare(instance, args.methods.split(",") if args.methods else None,
                   chunks=args.chunks, objective=args.objective)
    if args.solve:
        rows.append(run_method(args.solver, instance, objective=args.objective,
                               time_limit=args.time_limit, threads=args.threads))
    return rows


def run(args) -> int:
    instance = load(args)
    rows = rows_for(instance, args)
    if args.plot:
        from ..report.gantt import write_compare_plots
        write_compare_plots([_named(r) for r in rows if r.applies], args.plot, force=args.force)
    if args.json:
        print_json([r.to_dict() for r in rows])
        return 0
    out = console()
    cap = instance.cap
    out.print(f"[bold]{instance.name or 'instance'}[/]: p={instance.devices} "
              f"m={instance.microbatches} placement={instance.placement} "
              f"cap={'unlimited' if cap is None else instance.memory_cap} "
              f"({'-' if cap is None else fmt(max(cap))})")
    table = Table("method", "placement", "makespan", "span", "bubble", "peak memory (max)",
                  "fits cap", "gap to bound")
    applied = sorted((r for r in rows if r.applies), key=lambda r: r.timeline.span)
    for r in applied:
        tl = r.timeline
        table.add_row(r.method, f"{r.instance.placement}"
                      + (f"/{r.instance.chunks}" if r.instance.placement == "interleaved" else ""),
                      fmt(tl.makespan), fmt(tl.span), f"{tl.bubble_rate:.2%}",
                      fmt(max(tl.peak_memory)), "yes" if tl.fits_cap else "[red]no[/]",
                      "-" if r.gap is None else f"{r.gap:.2%}")
    out.print(table)
    out.print("[dim]gap to bound: (span - best lower bound of zbopt.bounds) / span, for "
              "schedules within the cap on their own placement[/]")
    for r in rows:
        if not r.applies:
            out.print(f"[dim]{r.method}: does not apply: {r.message}[/]")
    return 0


def _named(result):
    """The result's timeline with the method's name on its schedule (a solver's says which)."""
    from dataclasses import replace
    name = f"{result.method} ({result.status})" if result.kind == "solver" else result.method
    return replace(result.timeline, schedule=replace(result.timeline.schedule, method=name))
