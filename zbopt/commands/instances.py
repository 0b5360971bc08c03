"""zbopt instances: the instances shipped with zbopt, usable by name in every command."""

from __future__ import annotations

from rich.table import Table

from ._common import console, print_json


def register(sub) -> None:
    parser = sub.add_parser("instances", help="list the shipped instances (use them by name)")
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.set_defaults(func=run)


def rows() -> list[dict]:
    """One row per shipped file; a layered model (group "models") also gives its layer count,
    None for per-stage instances."""
    from ..instance import default_instance_path, load_instance, read_table, shipped_instances
    from ..layers import is_layered, load_model
    default = default_instance_path().resolve()
    out = []
    for name, path in shipped_instances().items():
        layered = is_layered(read_table(path))
        inst = load_model(path) if layered else load_instance(path)
        out.append({"name": name, "group": path.parent.name, "devices": inst.devices,
                    "microbatches": inst.microbatches, "placement": inst.placement,
                    "memory_cap": inst.memory_cap, "time_unit": inst.time_unit,
                    "layers": inst.num_layers if layered else None,
                    "default": path.resolve() == default, "path": str(path)})
    return out


def run(args) -> int:
    listed = rows()
    if args.json:
        print_json(listed)
        return 0
    table = Table("name", "group", "p", "m", "placement", "layers", "cap", "time unit")
    for row in listed:
        table.add_row(row["name"] + (" (default)" if row["default"] else ""), row["group"],
                      str(row["devices"]), str(row["microbatches"]), row["placement"],
                      "-" if row["layers"] is None else str(row["layers"]),
                      "unlimited" if row["memory_cap"] is None else str(row["memory_cap"]),
                      row["time_unit"] or "-")
    out = console()
    out.print(table)
    out.print("[dim]paper: the Zero Bubble paper's profiled settings; unit: unit-cost problems; "
              "models: layered models, whose split `zbopt plan` chooses (other commands use "
              "the even split). Use a name in place of a file, e.g. `zbopt compare "
              "zb-6.2b-p8-m32` or `zbopt plan blocks16-p4`.[/]")
    return 0
