"""zbopt profile: measure a PyTorch model layer by layer and write a layered model file."""

from __future__ import annotations

import datetime
import math
import sys
from pathlib import Path

from ..errors import ZboptError
from ..progress import wanted
from ..sizes import as_bytes
from ._common import (
    add_progress_arguments,
    brief,
    check_output,
    console,
    defer_note,
    fmt,
    nonempty,
    print_json,
)


def register(sub) -> None:
    parser = sub.add_parser(
        "profile", help="measure a PyTorch model layer by layer (F, B, W, activations, static "
                        "memory) and write a layered model file")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--hf-config", metavar="FILE",
                        help="a transformers decoder config (config.json, its directory, or a "
                             ".toml with the same keys): random weights, nothing downloaded")
    source.add_argument("--preset", help="a shipped model: llama-tiny or gpt2-tiny")
    source.add_argument("--module", metavar="PKG.MOD:FUNCTION",
                        help="a function returning (layers, make_input); see docs/profile.md")
    parser.add_argument("--microbatch-size", type=int, default=1, metavar="B",
                        help="sequences per micro-batch (default 1)")
    parser.add_argument("--seq-len", type=int, default=128, metavar="S",
                        help="tokens per sequence (default 128)")
    parser.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    parser.add_argument("--device", default="auto", help="auto (CUDA if present, default), cpu or cuda")
    parser.add_argument("--warmup", type=int, default=3, help="unrecorded repetitions per layer (default 3)")
    parser.add_argument("--repeat", type=int, default=10,
                        help="recorded repetitions per layer; the file keeps the median (default 10)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads while measuring (default 1: steadier)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall: elapsed time (default); cpu: this thread's CPU time, which "
                             "other processes on a shared CPU do not inflate (CPU, --threads 1)")
    parser.add_argument("--bytes-per-param", type=float, default=16.0, metavar="N",
                        help="static memory per parameter: weights, gradients and optimizer "
                             "states (default 16: mixed-precision Adam)")
    parser.add_argument("--naming", choices=("hf", "torchtitan"), default=None,
                        help="layer names: hf module FQNs, or torchtitan's llama3 names "
                             "(default: torchtitan for llama-tiny, hf otherwise)")
    parser.add_argument("--each-block", action="store_true",
                        help="one layer per block with its own medians (default: identical "
                             "blocks pooled into one layer with a count)")
    parser.add_argument("--devices", type=int, default=2, help="pipeline devices in the file (default 2)")
    parser.add_argument("--microbatches", type=int, default=8,
                        help="micro-batches in the file (default 8)")
    parser.add_argument("--comm", type=float, default=0.0, metavar="US",
                        help="time to send an activation between devices, in microseconds, for "
                             "the file (not measured; default 0)")
    parser.add_argument("--mem", default=None, metavar="CAP",
                        help="memory cap per device in bytes (e.g. 80e9, 16GiB; default none)")
    parser.add_argument("--out", metavar="FILE", help="write the layered model (.toml or .json)")
    parser.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    add_progress_arguments(parser)
    parser.set_defaults(func=run)


def parse_bytes(text: str | None):
    """A cap in bytes: a number, or with a unit (GB = 1e9, GiB = 2**30), or none."""
    if text is None or text.strip().lower() in ("none", "unlimited", "inf"):
        return None
    value = as_bytes(text)
    if math.isnan(value):
        raise ZboptError(f"--mem {brief(text)!r}: give bytes per device, e.g. 80e9, 80GB or 16GiB "
                         f"(a layered model's cap is absolute, not a multiple of p)")
    if not math.isfinite(value) or value <= 0:
        raise ZboptError(f"--mem {brief(text)!r}: the cap must be a positive finite number of "
                         f"bytes, or 'none' for no cap")
    return int(value) if value.is_integer() else value


def check_numbers(args) -> None:
    for flag, value, low in (("--microbatch-size", args.microbatch_size, 1), ("--seq-len", args.seq_len, 1),
                             ("--warmup", args.warmup, 0), ("--repeat", args.repeat, 1),
                             ("--threads", args.threads, 1), ("--devices", args.devices, 1),
                             ("--microbatches", args.microbatches, 1)):
        if value < low:
            raise ZboptError(f"{flag} must be an integer >= {low}, got {value}")
    if not math.isfinite(args.comm) or args.comm < 0:
        raise ZboptError(f"--comm must be a finite number of microseconds >= 0, got {args.comm}")
    if not math.isfinite(args.bytes_per_param) or args.bytes_per_param < 0:
        raise ZboptError(f"--bytes-per-param must be a finite number >= 0, got {args.bytes_per_param}")


def inputs_of(args) -> list:
    """The files profile reads (never to be replaced by --out): the --hf-config file, or
    config.json in its directory; refuses an empty --hf-config, --preset or --module."""
    for flag, value, remedy in (
            ("--hf-config", args.hf_config, "a transformers config.json or its directory"),
            ("--preset", args.preset, "llama-tiny or gpt2-tiny"),
            ("--module", args.module, "PKG.MOD:FUNCTION")):
        if value is not None:
            nonempty(value, flag, remedy)
    if args.hf_config is None:
        return []
    return [args.hf_config, Path(args.hf_config) / "config.json"]


def check_out(path: str | None, force: bool, inputs=()) -> Path | None:
    """--out, checked before any measuring (outputs.check_targets)."""
    if path is None:
        return None
    return check_output(path, force, (".toml", ".json"), "layered model", inputs)


def build(args, dtype, device):
    from ..errors import escaped
    from ..profile import function_model, hf_model, preset_model, read_config
    if args.preset:
        return preset_model(args.preset, args.microbatch_size, args.seq_len, dtype, device, args.naming)
    if args.hf_config is not None:
        config = read_config(args.hf_config, defer_note)
        return hf_model(config, args.microbatch_size, args.seq_len, dtype, device,
                        naming=args.naming or "hf", name=escaped(Path(args.hf_config).stem),
                        source=args.hf_config)
    if args.naming:
        raise ZboptError("--naming applies to --preset and --hf-config; a --module names its own layers")
    return function_model(args.module, args.microbatch_size, args.seq_len, dtype, device)


def check_settings(model, args, cap) -> None:
    """Before the minutes of measuring: the pipeline settings must accept this many layers,
    and --comm and --bytes-per-param must keep the totals within zbopt's limits (the layers'
    parameters are known now; their times and saved bytes, yet to be measured, only add)."""
    from ..instance import TooLarge
    from ..layers import Layer, LayeredModel
    from ..profile.measure import parameter_count
    from ..profile.profiler import MEMORY_UNIT, TIME_UNIT, _static
    if args.devices > len(model.layers):  # the model's own message would not name the flag
        raise ZboptError(f"--devices {args.devices}: the model has {len(model.layers)} "
                         f"layer(s) and every stage needs one: give --devices "
                         f"{len(model.layers)} or fewer")
    try:
        LayeredModel(layers=tuple(
            Layer(name=spec.name, t_f=1, t_b=1, t_w=1,
                  static=_static(parameter_count(spec.module), args.bytes_per_param))
            for spec in model.layers), devices=args.devices, microbatches=args.microbatches,
            memory_cap=cap, comm=args.comm, time_unit=TIME_UNIT, memory_unit=MEMORY_UNIT)
    except TooLarge as err:  # profile fixes the units: the flag is what to change
        flag = "--comm" if err.kind == "time" else "--bytes-per-param"
        raise ZboptError(f"{err.reason}: give a smaller {flag}") from None


def run(args) -> int:
    check_numbers(args)
    cap = parse_bytes(args.mem)
    inputs = inputs_of(args)
    out = check_out(args.out, args.force, inputs)  # before any measuring
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ZboptError("zbopt profile needs torch: pip install 'zbopt[torch]'") from None
    from ..profile.profiler import resolve_device, resolve_dtype
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    model = build(args, dtype, device)
    check_settings(model, args, cap)
    settings = {"microbatch_size": args.microbatch_size, "seq_len": args.seq_len, "dtype": args.dtype,
                "bytes_per_param": args.bytes_per_param}
    result = _measure(model, args, device, settings)
    layered = result.layered_model(args.devices, args.microbatches, cap, args.bytes_per_param,
                                   pool=not args.each_block).with_settings(comm=args.comm)
    if out is not None:
        # a TOML file opens with the provenance as comments: the layered format has no key for it
        layered.save(out, overwrite=args.force, inputs=inputs, header=header(result, layered))
    clamped = [t.name for t in result.layers if t.m_w > t.m_b]
    if args.json:
        print_json({"model": layered.to_dict(), "layers": result.summary(), "settings": result.settings,
                    "naming": result.naming, "m_w_clamped": clamped, "out": str(out) if out else None})
        return 0
    _print(result, layered, clamped, out)
    return 0


def _measure(model, args, device, settings):
    """profile() with progress on stderr: a bar on a terminal; with --progress elsewhere one line
    per repetition round; nothing with --quiet."""
    from ..profile.profiler import profile
    rounds = args.warmup + args.repeat
    if not wanted(args):
        return profile(model, args.warmup, args.repeat, device, args.threads, settings, clock=args.clock)
    if not sys.stderr.isatty():
        from ..progress import Progress
        with Progress(True) as lines:
            def report(name: str, done: int, total: int) -> None:
                # one line per round over the layers (warm-up rounds first)
                lines.update(f"profile: round {done * rounds // total + 1} of {rounds} over "
                             f"{len(model.layers)} layers" if done < total else
                             f"profile: {rounds} rounds over {len(model.layers)} layers done")

            return profile(model, args.warmup, args.repeat, device, args.threads, settings, report,
                           clock=args.clock)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    total = len(model.layers) * rounds
    columns = (TextColumn("profile {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(model.layers[0].name, total=total)

        def progress(name: str, done: int, _total: int) -> None:
            bar.update(task, completed=done, description=name)

        return profile(model, args.warmup, args.repeat, device, args.threads, settings, progress,
                       clock=args.clock)


def header(result, layered) -> str:
    """The provenance comments of a TOML file. Every line is escaped (`zbopt.errors.escaped`):
    a newline in a name (a --module layer's is refused, but a model's name comes from
    a file name or the user's ModelSpec) would end the comment and leave the file unreadable."""
    from ..errors import escaped
    s = result.settings
    lines = [
        f"written by `zbopt profile` on {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"model {result.name}: layer names use {result.naming} module names",
        f"micro-batch {s['microbatch_size']} x {s['seq_len']} tokens, {s['dtype']} on {s['device']}, "
        f"{s['threads']} torch thread(s), torch {s['torch']}, {s['machine']}",
        f"times: median of {s['repeat']} repetitions after {s['warmup']} warm-up, round-robin over the "
        f"layers, {s['clock']} clock, microseconds; F, B (stage_backward_input), W (stage_backward_weight)",
        "m_b: bytes saved for backward by F; m_w: bytes still held after B (capped at m_b)",
        f"static: parameters x {s['bytes_per_param']:g} bytes",
        "per measured layer: name, F, B, W, full backward (median us), m_w as measured:",
    ]
    for row in result.summary():
        lines.append(f"  {row['name']}: {row['t_f']:.1f} {row['t_b']:.1f} {row['t_w']:.1f} "
                     f"{row['t_full']:.1f} m_w={row['m_w_measured']}")
    return "".join(f"# {escaped(line)}\n" for line in lines) + "\n"


def _print(result, layered, clamped, out) -> None:
    from rich.table import Table
    con = console()
    con.print(f"[bold]{layered.name}[/]: {layered.num_layers} layers, times in us (median), memory in bytes")
    table = Table("layer", "count", "t_f", "t_b", "t_w", "m_b", "m_w", "static")
    for layer in layered.layers:
        table.add_row(layer.name, str(layer.count), fmt(layer.t_f), fmt(layer.t_b), fmt(layer.t_w),
                      fmt(layer.m_b), fmt(layer.m_w), fmt(layer.static))
    con.print(table)
    split = sum(r["t_b"] + r["t_w"] for r in result.summary())
    full = sum(r["t_full"] for r in result.summary())
    if full:
        con.print(f"B + W against a full backward measured in the same run: {split / full:.2f}x")
    if clamped:
        con.print(f"m_w measured above m_b for {len(clamped)} layer(s) (torch keeps the graph to W; "
                  f"written as m_w = m_b): {', '.join(clamped[:4])}{' ...' if len(clamped) > 4 else ''}")
    if out is not None:
        con.print(f"wrote {out}")
    else:
        con.print("(no --out: nothing written)")
