"""zbopt frontier INSTANCE --caps 1p:3p:0.25p: optimal span at each memory cap, proven."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table

from ._common import console, load, print_json, refuse_overwrite


def register(sub) -> None:
    parser = sub.add_parser(
        "frontier", help="optimal span at each memory cap beside the greedy and the families",
        description="Solve the instance at every cap (span objective): the proven optimum and "
                    "its certified gap, the zb-greedy heuristic and every family that fits.")
    parser.add_argument("instance", nargs="?", default=None,
                        help="instance file (.toml/.json); default: the shipped Zero Bubble "
                             "1.5B p=8 m=24 setting")
    parser.add_argument("--caps", default="1p:3p:0.25p",
                        help="START:STOP:STEP or a comma list (default 1p:3p:0.25p)")
    parser.add_argument("--solver", default="cpsat", help="cpsat, cbc or highs")
    parser.add_argument("--time-limit", type=float, default=30.0, help="solver seconds per cap")
    parser.add_argument("--threads", type=int, default=1, help="solver threads")
    parser.add_argument("-o", "--out", metavar="DIR",
                        help="write NAME-frontier.{md,json,png} to DIR")
    parser.add_argument("--force", action="store_true", help="overwrite files in DIR")
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..frontier import (
        FRONTIER_HEADER,
        frontier,
        frontier_markdown,
        frontier_rows,
        parse_caps,
        plot_frontier,
    )
    instance = load(args)
    caps = parse_caps(args.caps)
    name = instance.name or "instance"
    targets = {}
    if args.out:  # check before hours of solving, not after
        out = Path(args.out)
        targets = {ext: refuse_overwrite(out / f"{name}-frontier.{ext}", args.force)
                   for ext in ("md", "json", "png")}
    out_console = console()
    report = None if args.json else (
        lambda p: out_console.print(f"[dim]cap {p.cap}: {p.solver_status} "
                                    f"span {p.span} gap {p.gap if p.gap is None else f'{p.gap:.2%}'}[/]"))
    points = frontier(instance, caps, solver=args.solver, time_limit=args.time_limit,
                      threads=args.threads, progress=report)
    if targets:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        targets["md"].parent.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(figsize=(11, 5))
        plot_frontier(points, f"{name}: bubble rate against the memory cap "
                              f"({args.solver}, {args.time_limit:g} s per cap)", ax=ax)
        fig.tight_layout()
        fig.savefig(targets["png"], dpi=110)
        plt.close(fig)
        targets["md"].write_text(frontier_markdown(points, instance, args.solver,
                                                   args.time_limit, targets["png"].name))
        targets["json"].write_text(json.dumps(
            {"instance": instance.to_dict(), "solver": args.solver,
             "time_limit": args.time_limit, "threads": args.threads,
             "points": [p.to_dict() for p in points]}, indent=1) + "\n")
    if args.json:
        print_json([p.to_dict() for p in points])
        return 0
    table = Table(*FRONTIER_HEADER, title=f"{name}: memory-bubble frontier")
    for row in frontier_rows(points):
        table.add_row(*row)
    out_console.print(table)
    for path in targets.values():
        out_console.print(f"wrote {path}")
    return 0
