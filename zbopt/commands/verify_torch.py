"""zbopt verify-torch FILE.json: run a schedule or plan in real PyTorch processes and check it."""

from __future__ import annotations

from contextlib import contextmanager

from ..report.numbers import counted
from ._common import console, print_json, progress


def register(sub) -> None:
    parser = sub.add_parser(
        "verify-torch", help="run a schedule or plan file in real PyTorch processes (CPU, gloo): "
                             "check loss and gradients, or time it against the prediction",
        description="Starts one process per device on the CPU (gloo) and runs the schedule. "
                    "--runtime torch (default): PyTorch's _PipelineScheduleRuntime on a tiny "
                    "float64 model; --runtime torchtitan: torchtitan's own pipeline builder "
                    "with the settings `zbopt export --torchtitan` writes and the plan's module "
                    "split. Both compare the loss and every parameter gradient with a "
                    "single-process run. --timed instead runs N timed steps and reports measured "
                    "busy time per pass kind and step span against the prediction. Exit status "
                    "0: match, 1: mismatch, 2: bad input or the schedule cannot run.")
    parser.add_argument("file", metavar="FILE.json", help="schedule or plan file (zbopt.schedule/1)")
    parser.add_argument("--runtime", choices=("torch", "torchtitan"), default="torch",
                        help="which runtime builds the pipeline (default torch)")
    parser.add_argument("--atol", type=float, default=1e-6, help="tolerance (default 1e-6)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds before a hanging run is declared failed")
    parser.add_argument("--hidden", type=int, default=None,
                        help="width of the stand-in model (default 8; --timed: 256)")
    parser.add_argument("--microbatch-size", type=int, default=None, metavar="N",
                        help="torchtitan micro-batch size (rows per micro-batch; default: the "
                             "size the plan was profiled at, else 1, as export writes it)")
    parser.add_argument("--timed", action="store_true",
                        help="time N steps with the plan's order against its predicted span")
    parser.add_argument("--steps", type=int, default=None, help="--timed: timed steps (default 5)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="--timed: untimed steps first (default 2)")
    parser.add_argument("--rows", type=int, default=None,
                        help="--timed: rows per micro-batch of the stand-in model (default 32)")
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.add_argument("--progress", action="store_true",
                        help="phases on stderr even when it is not a terminal")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.set_defaults(func=run)


@contextmanager
def _launch(args, what: str):
    """While the ranks run: a progress line on stderr (--progress/--quiet, or a terminal) with
    what the command waits for, the ranks finished and the time waited; a rank that cannot
    allocate its model is bad input, said with the flags that size it. Yields the list that
    collects what the ranks write on stderr (see _rank_lines)."""
    from ..errors import ZboptError
    from ..export.torch_runtime import OutOfMemory, rank_output, watching

    with progress(args) as shown:
        head = f"verify-torch: {what}"
        shown.update(f"{head}: starting")

        def report(elapsed: float, finished: int, world: int) -> None:
            text = f"{head}: {finished} of {world} finished (timeout {args.timeout:g} s)"
            if not shown.live and elapsed >= 10:  # a line per change, and one per 10 s
                text += f", still waiting after {int(elapsed) // 10 * 10} s"
            shown.update(text)

        try:
            with watching(report), rank_output() as written:
                yield written
        except OutOfMemory as err:
            raise ZboptError(f"{err}: give a smaller {_size_flags(args)}") from None


def _show_rank_output(args, written: list, failed: bool) -> None:
    """What the ranks wrote on stderr (torch's warnings): shown when the run failed, else only
    where progress is shown (a terminal without --quiet, or --progress)."""
    import sys

    from ..progress import wanted
    if not written or not (failed or wanted(args)):
        return
    by_text: dict[str, list[int]] = {}
    for rank, text in written:
        by_text.setdefault(text.rstrip(), []).append(rank)
    for text, ranks in by_text.items():
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
        sys.stderr.write(f"zbopt: {who} wrote on stderr:\n"
                         + "".join(f"  {line}\n" for line in text.splitlines()))
    sys.stderr.flush()


def _size_flags(args) -> str:
    """The flags that size the stand-in model of this run."""
    if args.timed:
        return "--hidden or --rows"
    return "--hidden or --microbatch-size" if args.runtime == "torchtitan" else "--hidden"


def _check_size(args, loaded, hidden: int) -> None:
    """A stand-in model too large for this machine's memory is refused before any launch:
    together the ranks hold at least every stage's weights and gradients and the batch."""
    from ..export.plan_parts import plan_model, stage_layer_names
    from ..export.timing import preset_of, profiled_microbatch_size
    from ..export.torch_runtime import check_memory

    instance = loaded.instance
    layers = stage_layer_names(loaded)
    size = args.microbatch_size or profiled_microbatch_size(plan_model(loaded)) or 1
    if args.runtime == "torchtitan" or args.timed:
        if layers is not None and preset_of(plan_model(loaded), instance.microbatches):
            return  # the profiled preset's model: --hidden is not used
        modules = sum(map(len, layers)) if layers is not None else instance.num_stages
        rows = args.rows if args.timed else size
        weights = modules * 2 * (hidden * hidden + hidden)  # two Linear layers per module
        itemsize = 4 if args.timed else 8
    else:  # every rank builds all the stages (one Linear each) and the whole batch
        modules, rows = instance.num_stages, 2
        weights = instance.devices * modules * (hidden * hidden + hidden)
        itemsize = 8
    values = 2 * weights + 2 * instance.microbatches * rows * hidden
    given = f"--hidden {hidden}"
    if args.timed:
        given += f" and --rows {args.rows}"
    elif args.runtime == "torchtitan":
        given += f" and --microbatch-size {size}"
    check_memory(values, itemsize, f"the stand-in model at {given} ({modules} modules, "
                 f"{instance.devices} processes)", f"give a smaller {_size_flags(args)}")


MAX_TIMEOUT = 1_000_000  # seconds

# the flags only --timed reads, with their defaults (given without --timed they would be ignored)
_TIMED_ONLY = {"steps": 5, "warmup": 2, "rows": 32}


def _check_flags(args, hidden: int) -> None:
    """Every flag's value and combination, before the file is read; one line for the first
    bad one."""
    import math

    from ..errors import ZboptError
    from ..export.torch_runtime import check_atol
    if hidden < 1 or (args.microbatch_size is not None and args.microbatch_size < 1):
        raise ZboptError("--hidden and --microbatch-size must be >= 1")
    if args.microbatch_size is not None and args.runtime != "torchtitan":
        fix = "--timed takes --rows (rows per micro-batch)" if args.timed else \
            "add --runtime torchtitan or drop --microbatch-size"
        raise ZboptError(f"--microbatch-size is read only with --runtime torchtitan: {fix}")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise ZboptError("--timeout must be a positive finite number of seconds")
    if args.timeout > MAX_TIMEOUT:  # torch's process-group timeout overflows far beyond it
        raise ZboptError(f"--timeout {args.timeout:g} is more than {MAX_TIMEOUT:,} seconds "
                         f"(11 days): give a shorter one")
    check_atol(args.atol)
    given = [f"--{name}" for name in _TIMED_ONLY if getattr(args, name) is not None]
    if given and not args.timed:
        named = " and ".join(given)
        raise ZboptError(f"{named} {'is' if len(given) == 1 else 'are'} read only with --timed: "
                         f"add --timed or drop {named}")
    for name, default in _TIMED_ONLY.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.steps < 1 or args.warmup < 0 or args.rows < 1:
        raise ZboptError("--steps and --rows must be >= 1 and --warmup >= 0")


def run(args) -> int:
    from ..errors import ZboptError
    from ..export.schedule_file import read_schedule_file

    hidden = args.hidden if args.hidden is not None else (256 if args.timed else 8)
    _check_flags(args, hidden)
    loaded = read_schedule_file(args.file)
    from ..export.plan_parts import refuse_dualpipe_plan
    refuse_dualpipe_plan(loaded, args.file)
    loaded.evaluate()  # a deadlocking or malformed order is reported by our evaluator first
    from ..export.torch_csv import torch_rows
    torch_rows(loaded.instance, loaded.schedule)  # what torch cannot run is refused before a launch
    if args.timed and args.runtime != "torch":
        raise ZboptError("--timed runs PyTorch's runtime: drop --runtime torchtitan")
    _check_size(args, loaded, hidden)
    if args.timed:
        return _run_timed(args, loaded, hidden)
    what = f"{loaded.instance.devices} gloo processes ({args.runtime} runtime)"
    if args.runtime == "torchtitan":
        from ..export.titan_runtime import verify_titan
        with _launch(args, what) as written:
            result = verify_titan(loaded, atol=args.atol, timeout=args.timeout, hidden=hidden,
                                  microbatch_size=args.microbatch_size)
    else:
        from ..export.titan_runtime import check_world
        from ..export.torch_runtime import verify_torch
        check_world(loaded.instance.devices)
        with _launch(args, what) as written:
            result = verify_torch(loaded.instance, loaded.schedule, atol=args.atol,
                                  timeout=args.timeout, hidden=hidden)
    if args.json:
        print_json(result.as_dict())
    else:
        out = console()
        verdict = "[green]PASS[/]" if result.ok else "[red]FAIL[/]"
        out.print(f"{verdict} {result.method or 'schedule'} ({result.runtime}): "
                  f"{counted(result.ranks, 'rank')}, {counted(result.num_stages, 'stage')}, "
                  f"{counted(result.microbatches, 'micro-batch')}, {result.seconds:.1f} s")
        if result.loss is not None:
            out.print(f"loss {result.loss:.12g} (reference {result.reference_loss:.12g}, max "
                      f"micro-batch error {result.max_loss_error:.3g}); max gradient error "
                      f"{result.max_grad_error:.3g} over {result.parameters} parameter tensors "
                      f"(atol {result.atol:g})")
        if result.message:
            out.print(result.message, markup=False)
        for note in result.notes:
            out.print(f"note: {note}", markup=False, soft_wrap=True)
    _show_rank_output(args, written, failed=not result.ok)
    return 0 if result.ok else 1


def _run_timed(args, loaded, hidden: int) -> int:
    from ..export.fqn_model import FqnSpec
    from ..export.plan_parts import plan_model, stage_layer_names
    from ..export.timing import preset_match, time_plan
    from ..export.torchtitan import split_fqns

    instance = loaded.instance
    layers = stage_layer_names(loaded)
    if layers is None:
        layers = [[f"layers.{s}"] for s in range(instance.num_stages)]
    stage_fqns = [split_fqns(names) for names in layers]
    spec, why_not = preset_match(plan_model(loaded), instance.microbatches)
    if spec is not None and stage_layer_names(loaded) is not None:
        model_line = (f"model: preset {spec.preset} as profiled (micro-batch {spec.microbatch_size}"
                      f" x {spec.seq_len} tokens, {spec.dtype}), split as the plan says")
    else:
        spec = FqnSpec(fqns=tuple(f for part in stage_fqns for f in part),
                       microbatches=instance.microbatches, hidden=hidden,
                       rows_per_microbatch=args.rows, dtype="float32")
        model_line = (f"model: stand-in MLP blocks (width {hidden}, {args.rows} rows per "
                      f"micro-batch) at the plan's module names; the prediction is only "
                      f"meaningful if the plan's costs were profiled on this model")
        if why_not:
            model_line += f" (the plan's model is named like a shipped preset, but {why_not})"
    with _launch(args, f"{instance.devices} gloo processes, {args.warmup} warm-up + "
                       f"{args.steps} timed steps") as written:
        timing = time_plan(instance, loaded.schedule, spec, stage_fqns, steps=args.steps,
                           warmup=args.warmup, timeout=args.timeout, stage_layers=layers)
    _show_rank_output(args, written, failed=False)
    if args.json:
        print_json(timing.as_dict())
        return 0
    from rich.table import Table
    out = console()
    out.print(f"{timing.method or 'schedule'}: {timing.devices} devices, {timing.microbatches} "
              f"micro-batches, {timing.steps} timed steps (one thread per process)")
    out.print(f"step span: measured {timing.measured_span * 1e3:.2f} ms (median; "
              f"{min(timing.measured_spans) * 1e3:.2f}-{max(timing.measured_spans) * 1e3:.2f}), "
              f"predicted {timing.predicted_span * 1e3:.2f} ms, error {timing.error:+.1%}")
    table = Table("device", "kind", "measured ms", "predicted ms", "error")
    for dev in timing.per_device:
        for kind in sorted(set(dev.measured) | set(dev.predicted)):
            got, want = dev.measured.get(kind, 0.0), dev.predicted.get(kind, 0.0)
            error = f"{(got - want) / want:+.1%}" if want else "-"
            table.add_row(str(dev.device), kind, f"{got * 1e3:.2f}", f"{want * 1e3:.2f}", error)
    out.print(table)
    out.print(model_line, markup=False, soft_wrap=True)
    return 0
