"""Helpers shared by the subcommands: loading instances, caps, argument types, output paths,
progress."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Iterable

from rich.console import Console

from ..errors import ZboptError
from ..instance import Instance, check_file_keys, default_instance_path, read_table, resolve_instance
from ..progress import Progress
from ..sizes import as_bytes, in_unit


def add_instance_arguments(parser: argparse.ArgumentParser, optional: bool = True,
                           mem: bool = True) -> None:
    if optional:
        parser.add_argument("instance", nargs="?", default=None,
                            help="instance file (.toml/.json) or a shipped instance's name "
                                 "(`zbopt instances`); default: the shipped Zero Bubble 1.5B "
                                 "p=8 m=24 setting")
    else:
        parser.add_argument("instance", help="instance file (.toml/.json) or a shipped "
                                             "instance's name (`zbopt instances`)")
    if mem:
        parser.add_argument("--mem", default=None, metavar="CAP",
                            help="memory cap overriding the file's: a number, '1p', '1.5p', "
                                 "'none', or a size such as 80GB where the file's memory unit "
                                 "is a byte size")


def byte_count(text: str) -> float:
    """An argparse type: a positive number of bytes, plain or with its unit ("80e9", "80GB")."""
    size = as_bytes(text)
    if not math.isfinite(size) or size <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of bytes (e.g. "
                                         f"80e9, 80GB or 16GiB)")
    return size


def parse_cap(text: str, unit: str = "", per_stage: bool = True) -> Any:
    """A --mem value: None for no cap, a positive finite number, or a "kp" string (Instance
    checks it). A size with a byte unit ("80GB") is converted to the memory unit `unit` when
    that names a byte size, and refused otherwise. Messages do not name the flag: callers
    prefix it ("--mem X: ...")."""
    if text.strip().lower() in ("none", "unlimited", "inf"):
        return None
    value = in_unit(text, unit, per_stage)
    if value is None:
        try:
            value = float(text)
        except ValueError:
            return text  # "kp"; Instance validates it
        value = int(value) if math.isfinite(value) and value == int(value) else value
    if not math.isfinite(value):
        raise ZboptError("not a finite number: give a finite cap, or 'none' for no cap")
    if value <= 0:
        raise ZboptError("a cap must be above 0: give a positive cap, or 'none' for no cap")
    return value


def load(args: argparse.Namespace) -> Instance:
    """The command's instance (a file, a shipped name, or the default), with --mem applied.

    A layered model file is evaluated with the even partition of its layers, said on stderr;
    a schedule or plan file (zbopt.schedule/1) gives the instance it was made for."""
    return load_with_schedule(args)[0]


def load_with_schedule(args: argparse.Namespace):
    """load(), and the schedule or plan file read (its ScheduleFile; None for other inputs)."""
    instance, stored, _ = load_input(args)
    return instance, stored


def load_input(args: argparse.Namespace):
    """load_with_schedule(), and the layers per stage of a layered model's even split (None for
    other inputs), the input read once."""
    given = getattr(args, "instance", None)
    if given is not None:  # "" (an unset shell variable) is not the default instance
        nonempty(given, "the instance", "an instance file or a shipped instance's name (`zbopt "
                                        "instances`), or leave it out for the default")
    path = resolve_instance(given) if given is not None else default_instance_path()
    data = read_table(path)
    stored, note, sizes = None, None, None
    if "layers" in data:
        instance, sizes, note = _even_partition(data, path)
    elif isinstance(data.get("format"), str) and data["format"].startswith("zbopt.schedule/"):
        from ..export.schedule_file import read_schedule_file, schedule_from_document
        # a schedule file is JSON: its document is read already (a TOML one is refused)
        stored = schedule_from_document(data, str(path)) \
            if path.suffix.lower() == ".json" or not path.is_file() else read_schedule_file(path)
        instance = stored.instance
    else:
        check_file_keys(data, str(path))
        instance = Instance.from_dict(data, source=str(path))
    if getattr(args, "mem", None) is not None:
        instance = with_mem(instance, args.mem)
    if note:
        defer_note(note)
    return instance, stored, sizes


# Notes on how the input was taken (a layered model on its even split), printed on stderr when the
# command has run (zbopt.cli.main): an error found later in the run (a method that does not
# apply, a cap refused) is then the one line bad input gets.
_NOTES: list[str] = []


def defer_note(text: str) -> None:
    _NOTES.append(text)


def take_notes() -> list[str]:
    """The notes deferred so far, and none left."""
    notes = list(_NOTES)
    _NOTES.clear()
    return notes


def with_mem(instance: Instance, text: str) -> Instance:
    """`instance` under the cap --mem `text` gives; its errors name the flag."""
    if "," in text:  # Instance's message offers "a list per device", which a file gives
        raise ZboptError(f"--mem {brief(text)}: give one cap for every device (a number, a "
                         f"multiple of p such as 1.5p, or 'none'); a cap per device goes in the "
                         f"instance file, as memory_cap = [...]")
    try:
        return instance.with_cap(parse_cap(text, instance.memory_unit))
    except ZboptError as err:
        raise ZboptError(f"--mem {brief(text)}: {err}") from None


def brief(text: str, limit: int = 40) -> str:
    """A flag's value as an error line quotes it: whole up to `limit` characters, else its
    start and its length (a 400-digit number would fill the line)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _even_partition(data: dict, path: Path) -> tuple[Instance, list[int], str]:
    """The layered model on plan's even split (zbopt.plan.baselines.default_split), the split,
    and the note that says so."""
    from ..layers import LayeredModel
    from ..plan.baselines import default_split
    model = LayeredModel.from_dict(data, source=str(path))
    sizes, how = default_split(model)
    note = (f"zbopt: note: {path} is a layered model of {model.num_layers} layers: using {how}, "
            f"{'+'.join(map(str, sizes))} layers per stage (`zbopt plan` searches for a better "
            f"one)")
    return model.instance(sizes), list(sizes), note


# ----- argument types (a bad value is one line and exit 2 through the parser) --------------------

SOLVER_HELP = ("solver backend: auto (default: cpsat-lns on interleaved and V instances of "
               "1,000 passes or more, else cpsat) or a name `zbopt methods` lists")


def check_solver(name: str) -> None:
    """An unknown --solver is refused before any work."""
    from ..registry import get_method
    from ..solvers import AUTO
    if name != AUTO:
        get_method(name, "solver")


def solver_for(name: str, instance: Instance) -> str:
    """--solver, with auto resolved for `instance` (zbopt.solvers.default_solver)."""
    from ..solvers import AUTO, default_solver
    return default_solver(instance) if name == AUTO else name


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def solver_threads(text: str) -> int:
    """--threads: a positive integer; more than the CPUs this process may run on is taken, with
    a note: the threads then share them (`zbopt solve zb-6.2b-p8-m32 --mem 0.7p --time-limit
    10` with 1,000 threads on 2 CPUs: 2.4 GB and 16.5 s, and a longer schedule than with 2
    threads, 0.25 GB and 10.6 s; one run each)."""
    value = positive_int(text)
    note_threads(value)
    return value


def note_threads(value: int) -> None:
    """solver_threads' note, for a command whose solver runs only on a flag (compare --solve)."""
    import os
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if cpus and value > cpus:
        defer_note(f"zbopt: note: --threads {value} is more than the {cpus} CPUs this process may "
                   f"run on: threads beyond them only share the CPUs (--threads {cpus} or fewer is "
                   f"usually as fast)")


def chunk_count(text: str) -> int:
    """--chunks: an interleaved placement has at least 2 chunks per device."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 2:
        raise argparse.ArgumentTypeError(f"{text!r}: interleaved placements need 2 or more "
                                         f"chunks per device")
    return value


def check_chunks(chunks: int, instance: Instance, names: Iterable[str]) -> None:
    """--chunks re-places a contiguous instance for the interleaved methods among `names`;
    where it would change nothing it is refused rather than silently ignored."""
    if not chunks:
        return
    from ..registry import get_method
    if instance.placement != "contiguous":
        raise ZboptError(f"--chunks {chunks}: the instance is already on the "
                         f"{instance.placement} placement with {instance.chunks} chunk(s) per "
                         f"device, which --chunks does not change: drop --chunks")
    if not any(get_method(n).placement == "interleaved" and get_method(n).kind != "solver"
               for n in names):
        shown = ", ".join(f"{n} on {get_method(n).placement}" for n in names)
        raise ZboptError(f"--chunks {chunks} re-places the instance for interleaved schedules, "
                         f"and none is asked for ({shown}): drop --chunks or ask for one "
                         f"(e.g. interleaved-1f1b)")


def add_progress_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--progress", action="store_true",
                        help="report progress on stderr even when it is not a terminal")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def progress(args: argparse.Namespace) -> Progress:
    return Progress.from_args(args)


def check_input(path: str | Path, what: str) -> Path:
    """A file the command reads: a directory, a missing file or bytes that are not UTF-8 text
    are said in one line (before a parser meets them)."""
    path = Path(path)
    if path.is_dir():
        raise ZboptError(f"{path} is a directory: give the {what} itself")
    if not path.is_file():
        raise ZboptError(f"{what} {path} not found")
    try:
        path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise ZboptError(f"{path}: not a text file (byte {err.start} is not UTF-8): give a "
                         f"{what}") from None
    return path


# ----- output paths: all checked before any work ------------------------------------------------

def nonempty(text: str, what: str, remedy: str) -> str:
    """`text`, refused when empty or blank (an unset shell variable): what is empty, and what
    to give instead."""
    if not str(text).strip():
        raise ZboptError(f"{what} is empty: give {remedy}")
    return text


def check_output(path: str | Path, force: bool, suffixes: tuple[str, ...] = (),
                 what: str = "output", inputs: Iterable[str | Path] = (),
                 flag: str = "--out") -> Path:
    """A file the command will write: refused now (not after the work) if it cannot be: an
    empty name, a directory, another suffix, an existing file without --force, a folder that is
    missing or where no file can be created, or one of `inputs` (outputs.check_targets)."""
    from ..export.outputs import check_targets
    path = Path(nonempty(path, flag, f"a file name for the {what}"))
    if path.is_dir():
        raise ZboptError(f"{path} is a directory: give a file name for the {what}")
    if suffixes and path.suffix.lower() not in suffixes:
        raise ZboptError(f"cannot write the {what} to {path}: use a name ending in "
                         f"{' or '.join(suffixes)}")
    parent = path.parent  # an existing file, or one of `inputs`, is refused by check_targets
    if not parent.exists():
        raise ZboptError(f"directory {parent} does not exist: create it first")
    if not parent.is_dir():
        raise ZboptError(f"{parent} is a file, not a directory: give another path")
    return check_targets([path], force, inputs)[0]


def own_inputs(args) -> list[str]:
    """The instance file the command reads (not a shipped instance's name), for check_output's
    `inputs`: a command never writes over what it reads, --force or not."""
    given = getattr(args, "instance", None)
    return [given] if given and Path(given).exists() else []


def file_stem(text: str, default: str = "instance") -> str:
    """`text` (an instance's name, which a file may set to anything) as a file name in the
    output folder: letters, digits, '.', '_' and '-' kept, runs of the rest as one '-', no
    leading dots or dashes (so no '..' or '/' can leave the folder)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).lstrip(".-") or default


def check_output_dir(path: str | Path, names: list[str], force: bool,
                     flag: str = "-o") -> list[Path]:
    """Files `names` the command will write into directory `path` (created on writing if
    absent; its parent must exist): every one checked before any is written."""
    from ..export.outputs import check_targets
    folder = Path(nonempty(path, flag, "a directory"))
    if folder.exists() and not folder.is_dir():
        raise ZboptError(f"{folder} is a file, not a directory: give a directory")
    refuse_directories([folder / n for n in names])
    existing = [folder / n for n in names if (folder / n).exists()]
    if existing and not force:
        raise ZboptError(f"{existing[0]} exists: choose another directory or pass --force to "
                         f"overwrite it")
    return check_targets([folder / n for n in names], True, new_dirs=[folder])


def refuse_directories(paths: Iterable[Path]) -> None:
    """Refuse files to write into a folder when one of them is a directory (even --force
    cannot replace it): before the first is written, so nothing is left half done."""
    for path in paths:
        if path.is_dir():
            raise ZboptError(f"{path} is a directory where a file is to be written: remove it "
                             f"or choose another directory")


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=1, default=_json_default)
    sys.stdout.write("\n")


def _json_default(x: Any):
    if isinstance(x, tuple):
        return list(x)
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich exits with status 1 when the reader of stdout has gone (`zbopt methods | head`);
        # zbopt.cli.main takes the error as the end of the output, status 0
        self.quiet = True
        raise BrokenPipeError


def console() -> Console:
    # a pipe or a file gets wide tables rather than rich's 80-column default
    return _Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def fmt(x: float | None, digits: int = 1) -> str:
    """A figure as every table prints it (zbopt.report.numbers.figure, which verdicts use too)."""
    from ..report.numbers import figure
    return figure(x, digits)



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
