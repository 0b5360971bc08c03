"""zbopt frontier INSTANCE --caps 1p:3p:0.25p: the solver's span at each memory cap, proven
optimal or with its certified gap."""

from __future__ import annotations

import json

from rich.table import Table

from ..errors import ZboptError
from ._common import (
    SOLVER_HELP,
    add_instance_arguments,
    add_progress_arguments,
    brief,
    check_output_dir,
    check_solver,
    console,
    file_stem,
    load,
    positive_seconds,
    print_json,
    progress,
    solver_for,
    solver_threads,
)


def register(sub) -> None:
    parser = sub.add_parser(
        "frontier", help="the solver's span at each memory cap beside the greedy and the families",
        description="Solve the instance at every cap (span objective): the solver's span, proven "
                    "optimal or with its certified gap, the zb-greedy heuristic and every family "
                    "that fits.")
    add_instance_arguments(parser, mem=False)  # the caps come from --caps
    parser.add_argument("--caps", default="1p:3p:0.25p",
                        help="START:STOP:STEP or a comma list (default 1p:3p:0.25p); sizes "
                             "such as 60GB:80GB:5GB where the file's memory unit is a byte size")
    parser.add_argument("--solver", default="auto", help=SOLVER_HELP)
    parser.add_argument("--time-limit", type=positive_seconds, default=30.0,
                        help="solver seconds per cap")
    parser.add_argument("--threads", type=solver_threads, default=1, help="solver threads (default 1)")
    parser.add_argument("-o", "--out", metavar="DIR",
                        help="write NAME-frontier.{md,json,png} to DIR")
    parser.add_argument("--force", action="store_true", help="overwrite files in DIR")
    parser.add_argument("--json", action="store_true",
                        help="print every result (Result.to_dict() with its cap) as JSON")
    add_progress_arguments(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..frontier import (
        capped_instances,
        frontier,
        frontier_header,
        frontier_markdown,
        frontier_rows,
        parse_caps,
        plot_frontier,
    )
    check_solver(args.solver)
    instance = load(args)
    args.solver = solver_for(args.solver, instance)
    caps = parse_caps(args.caps, instance.memory_unit)
    from ..sweep.spec import listed_twice
    twice = listed_twice(caps, "cap(s)")
    if twice:  # each would be solved again, as compare refuses a method listed twice
        raise ZboptError(f"--caps {brief(args.caps)}: {twice}")
    capped_instances(instance, caps)  # every cap checked before any solving
    name = file_stem(instance.name or "instance")  # the file sets it: no path out of --out
    targets = {}
    if args.out is not None:  # check before hours of solving, not after
        paths = check_output_dir(args.out, [f"{name}-frontier.{ext}" for ext in ("md", "json", "png")],
                                 args.force)
        targets = dict(zip(("md", "json", "png"), paths))
    with progress(args) as report:
        def tell(cap, info):
            from ..progress import describe_solver
            report.update(f"frontier: cap {cap} ({caps.index(cap) + 1}/{len(caps)}): "
                          f"{describe_solver(info, instance.time_unit)}")
        points = frontier(instance, caps, solver=args.solver, time_limit=args.time_limit,
                          threads=args.threads, progress=tell)
        if targets:
            report.update("frontier: writing the table, the JSON and the chart")
            _write(targets, points, instance, args, plot_frontier, frontier_markdown, name)
    if args.json:
        print_json([doc for p in points for doc in p.documents()])
        return 0
    out_console = console()
    table = Table(*frontier_header(instance), title=f"{name}: memory-bubble frontier")
    for row in frontier_rows(points):
        table.add_row(*row)
    out_console.print(table)
    out_console.print(f"[dim]solver span: the solver's best schedule; status optimal: proven "
                      f"optimal among {instance.placement} schedules of single passes, otherwise "
                      f"within its gap of the optimum; best family: the fitting family with the "
                      f"shortest span on any placement[/]")
    for path in targets.values():
        out_console.print(f"wrote {path}")
    return 0


def _write(targets, points, instance, args, plot_frontier, frontier_markdown, name) -> None:
    """The chart, the table and the JSON: all written or none (outputs.write_all)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..export.outputs import write_all
    from ..report.gantt import figure_bytes
    fig, ax = plt.subplots(figsize=(11, 5))
    plot_frontier(points, f"{name}: bubble rate against the memory cap "
                          f"({args.solver}, {args.time_limit:g} s per cap)", ax=ax)
    fig.tight_layout()
    chart = figure_bytes(fig, ".png", dpi=110)
    plt.close(fig)
    write_all({
        targets["md"]: frontier_markdown(points, instance, args.solver, args.time_limit,
                                         targets["png"].name),
        targets["json"]: json.dumps(
            {"instance": instance.to_dict(), "solver": args.solver,
             "time_limit": args.time_limit, "threads": args.threads,
             "results": [doc for p in points for doc in p.documents()]}, indent=1) + "\n",
        targets["png"]: chart}, force=args.force, new_dirs=[targets["md"].parent])
