"""zbopt report [INSTANCE] -o report.html: one self-contained HTML file.

The comparison table, the instance, the charts and an interactive timeline per method.
"""

from __future__ import annotations

from ._common import (
    add_instance_arguments,
    add_progress_arguments,
    check_output,
    load_with_schedule,
    progress,
    solver_for,
)
from .compare import add_method_arguments, check_solvable, jobs_of, method_names, rows_for


def register(sub) -> None:
    parser = sub.add_parser("report", help="write a self-contained HTML report comparing methods")
    add_instance_arguments(parser)
    parser.add_argument("-o", "--out", required=True, metavar="FILE.html",
                        help="the report to write")
    add_method_arguments(parser)
    parser.add_argument("--force", action="store_true", help="overwrite FILE.html if it exists")
    add_progress_arguments(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    # every check before the (possibly long) methods and solve
    out = check_output(args.out, args.force, (".html", ".htm"), "report", flag="-o")
    method_names(args)
    instance, stored = load_with_schedule(args)
    args.solver = solver_for(args.solver, instance)
    check_solvable(instance, args)
    from ..report.html import write_report
    with progress(args) as report:
        # the same rows as `zbopt compare`: a schedule or plan file's own schedule first
        rows = rows_for(instance, args, report, stored)
        write_report(out, instance, rows, force=args.force,
                     progress=lambda text: report.update(f"report: {text}"), jobs=jobs_of(args))
    print(f"wrote {out}")
    return 0
