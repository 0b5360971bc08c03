"""zbopt methods: every registered method (families, heuristics, solver backends)."""

from __future__ import annotations

from rich.table import Table

from ._common import console, print_json

KINDS = ("handwritten", "heuristic", "solver")


def register(sub) -> None:
    parser = sub.add_parser("methods", help="list the schedule families, heuristics and solvers")
    parser.add_argument("--kind", choices=KINDS, help="only methods of this kind")
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.set_defaults(func=run)


def rows(kind: str | None = None) -> list[dict]:
    from ..registry import methods
    found = methods(kind).values()
    return [{"name": m.name, "kind": m.kind,
             "placements": list(m.placements) if m.kind != "solver" else ["any"],
             "description": m.description}
            for m in sorted(found, key=lambda m: (KINDS.index(m.kind) if m.kind in KINDS
                                                  else len(KINDS), m.name))]


def run(args) -> int:
    listed = rows(args.kind)
    if args.json:
        print_json(listed)
        return 0
    table = Table("name", "kind", "placement", "description")
    for row in listed:
        table.add_row(row["name"], row["kind"], ", ".join(row["placements"]), row["description"])
    out = console()
    out.print(table)
    out.print("[dim]A family or heuristic on another placement runs on a contiguous instance "
              "re-placed for it; a solver takes the instance's own placement. Use a name with "
              "compare --methods, simulate --schedule or solve --solver.[/]")
    return 0
