"""zbopt report [INSTANCE] -o report.html: one self-contained HTML file.

The comparison table, the instance, the charts and an interactive timeline per method.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ZboptError
from ._common import add_instance_arguments, load, refuse_overwrite
from .compare import add_method_arguments


def register(sub) -> None:
    parser = sub.add_parser("report", help="write a self-contained HTML report comparing methods")
    add_instance_arguments(parser)
    parser.add_argument("-o", "--out", required=True, metavar="FILE.html",
                        help="the report to write")
    add_method_arguments(parser)
    parser.add_argument("--force", action="store_true", help="overwrite FILE.html if it exists")
    parser.set_defaults(func=run)


def run(args) -> int:
    out = Path(args.out)
    if out.suffix.lower() not in (".html", ".htm"):
        raise ZboptError(f"the report is HTML: give -o a name ending in .html, not {out.name!r}")
    # both checks before the (possibly long) solve
    refuse_overwrite(out, args.force)
    if not out.parent.exists():
        raise ZboptError(f"directory {out.parent} does not exist: create it first")
    if args.time_limit <= 0:
        raise ZboptError(f"--time-limit must be positive, got {args.time_limit:g}")
    instance = load(args)
    # the same rows as `zbopt compare` (methods, chunks, the solver's row with --solve)
    from .compare import rows_for
    try:
        rows = rows_for(instance, args)
    except ImportError as err:  # the solver backends are optional pieces of the package
        raise ZboptError(f"--solve is not available in this installation ({err}): "
                         f"drop --solve") from None
    from ..report.html import write_report
    write_report(out, instance, rows, force=args.force)
    print(f"wrote {out}")
    return 0
