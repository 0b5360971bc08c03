"""zbopt verify-torch FILE.json: run the schedule in real PyTorch processes and check the result."""

from __future__ import annotations

from ._common import console, print_json


def register(sub) -> None:
    parser = sub.add_parser(
        "verify-torch", help="run a schedule file in real PyTorch processes (CPU, gloo) and "
                             "check loss and gradients against a single-process reference",
        description="Exports the schedule as a PyTorch CSV, starts one process per device on "
                    "the CPU (gloo), runs one training step of a tiny float64 model with "
                    "_PipelineScheduleRuntime and compares the loss and every parameter "
                    "gradient with a single-process run. Exit status 0: match, 1: mismatch, "
                    "2: the schedule cannot be exported or torch rejects it.")
    parser.add_argument("file", metavar="FILE.json", help="schedule file (zbopt.schedule/1)")
    parser.add_argument("--atol", type=float, default=1e-6, help="tolerance (default 1e-6)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds before a hanging run is declared failed")
    parser.add_argument("--hidden", type=int, default=8, help="width of the tiny model")
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..errors import ZboptError
    from ..export.schedule_file import read_schedule_file
    from ..export.torch_runtime import verify_torch

    if args.hidden < 1 or args.timeout <= 0 or args.atol < 0:
        raise ZboptError("--hidden must be >= 1, --timeout > 0 and --atol >= 0")
    loaded = read_schedule_file(args.file)
    loaded.evaluate()  # a deadlocking or malformed order is reported by our evaluator first
    result = verify_torch(loaded.instance, loaded.schedule, atol=args.atol,
                          timeout=args.timeout, hidden=args.hidden)
    if args.json:
        print_json(result.as_dict())
    else:
        out = console()
        verdict = "[green]PASS[/]" if result.ok else "[red]FAIL[/]"
        out.print(f"{verdict} {result.method or 'schedule'}: {result.ranks} ranks, "
                  f"{result.num_stages} stages, {result.microbatches} micro-batches, "
                  f"{result.seconds:.1f} s")
        if result.loss is not None:
            out.print(f"loss {result.loss:.12g} (reference {result.reference_loss:.12g}, max "
                      f"micro-batch error {result.max_loss_error:.3g}); max gradient error "
                      f"{result.max_grad_error:.3g} over {result.parameters} parameter tensors "
                      f"(atol {result.atol:g})")
        if result.message:
            out.print(result.message)
    return 0 if result.ok else 1
