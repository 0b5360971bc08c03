"""zbopt instances: the instances shipped with zbopt, usable by name in every command."""

from __future__ import annotations

from rich.table import Table

from ._common import console, print_json


def register(sub) -> None:
    parser = sub.add_parser("instances", help="list the shipped instances (use them by name)")
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.set_defaults(func=run)


def rows() -> list[dict]:
    from ..instance import default_instance_path, load_instance, shipped_instances
    default = default_instance_path().resolve()
    out = []
    for name, path in shipped_instances().items():
        inst = load_instance(path)
        out.append({"name": name, "group": path.parent.name, "devices": inst.devices,
                    "microbatches": inst.microbatches, "placement": inst.placement,
                    "memory_cap": inst.memory_cap, "time_unit": inst.time_unit,
                    "default": path.resolve() == default, "path": str(path)})
    return out


def run(args) -> int:
    listed = rows()
    if args.json:
        print_json(listed)
        return 0
    table = Table("name", "group", "p", "m", "placement", "cap", "time unit")
    for row in listed:
        table.add_row(row["name"] + (" (default)" if row["default"] else ""), row["group"],
                      str(row["devices"]), str(row["microbatches"]), row["placement"],
                      "unlimited" if row["memory_cap"] is None else str(row["memory_cap"]),
                      row["time_unit"] or "-")
    out = console()
    out.print(table)
    out.print("[dim]paper: the Zero Bubble paper's profiled settings; unit: unit-cost problems. "
              "Use a name in place of a file, e.g. `zbopt compare zb-6.2b-p8-m32`.[/]")
    return 0
