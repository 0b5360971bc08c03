"""Helpers shared by the subcommands: loading instances, caps, output."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from ..errors import ZboptError
from ..instance import Instance, default_instance_path, load_instance


def add_instance_arguments(parser: argparse.ArgumentParser, optional: bool = True) -> None:
    if optional:
        parser.add_argument("instance", nargs="?", default=None,
                            help="instance file (.toml/.json); default: the shipped "
                                 "Zero Bubble 1.5B p=8 m=24 setting")
    else:
        parser.add_argument("instance", help="instance file (.toml/.json)")
    parser.add_argument("--mem", default=None, metavar="CAP",
                        help="memory cap overriding the file's: a number, '1p', '1.5p', 'none'")


def parse_cap(text: str) -> Any:
    if text.lower() in ("none", "unlimited", "inf"):
        return None
    try:
        value = float(text)
    except ValueError:
        return text  # "kp"; Instance validates it
    if not math.isfinite(value):
        return None
    return int(value) if value == int(value) else value


def load(args: argparse.Namespace) -> Instance:
    path = args.instance if getattr(args, "instance", None) else default_instance_path()
    instance = load_instance(path)
    if getattr(args, "mem", None) is not None:
        instance = instance.with_cap(parse_cap(args.mem))
    return instance


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=1, default=_json_default)
    sys.stdout.write("\n")


def _json_default(x: Any):
    if isinstance(x, tuple):
        return list(x)
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def console() -> Console:
    # a pipe or a file gets wide tables rather than rich's 80-column default
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def fmt(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and x.is_integer():
        return f"{int(x):,}"
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:,.{digits}f}"


def refuse_overwrite(path: str | Path, force: bool) -> Path:
    path = Path(path)
    if path.exists() and not force:
        raise ZboptError(f"{path} exists: choose another name or pass --force to overwrite it")
    return path


def print_timeline(out: Console, timeline) -> None:
    """The metrics line and the per-device table of one evaluated schedule."""
    from rich.table import Table
    inst = timeline.instance
    out.print(f"makespan {fmt(timeline.makespan)}  span {fmt(timeline.span)}  "
              f"ideal {fmt(timeline.ideal)}  bubble rate {timeline.bubble_rate:.2%}  "
              f"fits cap: {'yes' if timeline.fits_cap else 'NO'}")
    table = Table("device", "first start", "last end", "busy", "idle", "peak memory", "cap")
    for d, (s, e) in enumerate(timeline.device_span):
        table.add_row(str(d), fmt(s), fmt(e), fmt(timeline.busy[d]), fmt(timeline.idle[d]),
                      fmt(timeline.peak_memory[d]), fmt(inst.cap[d]) if inst.cap else "-")
    out.print(table)
