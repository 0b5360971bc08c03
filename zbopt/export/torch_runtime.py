"""The runtime proof: run an exported CSV in real PyTorch processes and check what it computes.

`verify_torch(instance, schedule)` exports the schedule as a torch compute-only CSV, checks it
with torch's own validators, then launches one process per device on the CPU (gloo backend,
file:// rendezvous in a temporary directory). Each process builds the same tiny deterministic
model (S stages, each a float64 Linear + tanh), wraps its stages (all the stages the placement
gives its device, e.g. two for V) in `PipelineStage`s, loads the CSV into
`_PipelineScheduleRuntime` and runs one training step. The per-micro-batch losses and every
parameter gradient are compared with a single-process reference on the same model and batch.

A bad export cannot pass quietly: torch's validators reject it before the launch, or a rank
raises or hangs (caught by the timeout), or the gradients differ (a NaN loss or gradient
counts as differing); and each rank reports the compute order torch actually ran, which must
equal its CSV row (so a silently substituted default order would fail too). torch is imported
inside the functions: it is an optional extra.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import ZboptError, reason
from ..instance import Instance
from ..report.numbers import counted
from ..schedule import Schedule
from .torch_csv import csv_text, torch_check, torch_rows

DEFAULT_ATOL = 1e-6
# what this runtime runs in place of the plan's model, said with every result
STAND_IN = ("the model is zbopt's float64 stand-in ({stages}, each a Linear + tanh of width "
            "{hidden}), not the plan's model: this checks that torch runs the order and computes "
            "the loss and gradients of one process (--runtime torchtitan runs a shipped preset's "
            "own model when the plan was profiled from one)")


@dataclass(frozen=True)
class ModelSpec:
    """The tiny model and batch every process rebuilds identically from the seed."""

    num_stages: int
    microbatches: int
    hidden: int = 8
    rows_per_microbatch: int = 2
    seed: int = 0


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of one runtime proof. `ok` means losses and all gradients match within `atol`."""

    ok: bool
    method: str
    ranks: int
    num_stages: int
    microbatches: int
    loss: float | None  # mean over micro-batches, as torch ran it
    reference_loss: float | None
    max_loss_error: float | None
    max_grad_error: float | None
    worst_parameter: str
    parameters: int  # parameter tensors compared
    atol: float
    seconds: float
    message: str = ""
    runtime: str = "torch"  # "torch": _PipelineScheduleRuntime; "torchtitan": its pipeline builder
    notes: tuple[str, ...] = ()  # what the run could not exercise, and why

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _require_torch():
    try:
        import torch  # noqa: F401
        import torch.distributed as dist
    except ImportError as err:
        raise ZboptError(f"verify-torch needs torch (pip install 'zbopt[torch]'): {err}") from None
    if not dist.is_available() or not dist.is_gloo_available():
        raise ZboptError("verify-torch needs torch.distributed with the gloo backend")


def build_model(spec: ModelSpec):
    """One module per stage, created in stage order from one seed (same in every process)."""
    import torch
    from torch import nn

    torch.manual_seed(spec.seed)
    return [nn.Sequential(nn.Linear(spec.hidden, spec.hidden, dtype=torch.float64), nn.Tanh())
            for _ in range(spec.num_stages)]


def build_batch(spec, dtype=None):
    """Inputs and targets of every micro-batch, drawn from the spec's seed (float64 unless
    `dtype` says otherwise); any spec with seed, microbatches, rows_per_microbatch, hidden."""
    import torch

    dtype = torch.float64 if dtype is None else dtype
    generator = torch.Generator().manual_seed(spec.seed + 1)
    rows = spec.microbatches * spec.rows_per_microbatch
    x = torch.randn(rows, spec.hidden, dtype=dtype, generator=generator)
    y = torch.randn(rows, spec.hidden, dtype=dtype, generator=generator)
    return x, y


def _loss(output, target):
    import torch.nn.functional as F
    return F.mse_loss(output, target)


def reference(spec: ModelSpec) -> tuple[list[float], dict[str, Any]]:
    """Per-micro-batch losses and gradients of the mean loss, in one process, no pipeline."""
    import torch

    stages = build_model(spec)
    x, y = build_batch(spec)
    losses = []
    total = None
    for xs, ys in zip(torch.chunk(x, spec.microbatches), torch.chunk(y, spec.microbatches)):
        out = xs
        for module in stages:
            out = module(out)
        loss = _loss(out, ys)
        losses.append(loss.item())
        total = loss if total is None else total + loss
    # torch's schedule scales gradients by 1/n_microbatches (scale_grads=True): the mean loss
    (total / spec.microbatches).backward()
    grads = {f"{s}.{name}": param.grad.detach().clone()
             for s, module in enumerate(stages) for name, param in module.named_parameters()}
    return losses, grads


@dataclass(frozen=True)
class _Job:
    """One schedule to run: its CSV, model and the stages of every rank."""

    csv_path: str
    spec: ModelSpec
    rank_stages: tuple[tuple[int, ...], ...]


def _run_job(rank: int, job: _Job, out_path: str) -> None:
    """One pipeline rank of one job: build its stages, one step from the CSV, save the results."""
    import torch
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    spec = job.spec
    modules = build_model(spec)
    mine = job.rank_stages[rank]
    stages = [PipelineStage(modules[s], s, spec.num_stages, torch.device("cpu")) for s in mine]
    schedule = _PipelineScheduleRuntime(stages, n_microbatches=spec.microbatches,
                                        loss_fn=_loss, scale_grads=True)
    schedule._load_csv(job.csv_path)
    x, y = build_batch(spec)
    has_first, has_last = 0 in mine, spec.num_stages - 1 in mine
    losses: list = []
    args = (x,) if has_first else ()
    schedule.step(*args, target=y if has_last else None, losses=losses if has_last else None)
    grads = {}
    for s in mine:
        for name, param in modules[s].named_parameters():
            grads[f"{s}.{name}"] = None if param.grad is None else param.grad.detach().clone()
    # what torch actually ran on this rank, to prove it ran our order and not a default one
    executed = [str(a) for a in schedule.pipeline_order_with_comms[rank] if a.is_compute_op]
    torch.save({"losses": [float(v.detach()) for v in losses] if has_last else None,
                "grads": grads, "executed": executed}, out_path)


def _worker(rank: int, world: int, workdir: str, jobs: list[_Job], timeout: float) -> None:
    """One process: join the gloo group once, then run every job (all share the world size)."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # p processes on a small machine: no oversubscription
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rendezvous", rank=rank,
                            world_size=world, timeout=timedelta(seconds=timeout))
    try:
        for k, job in enumerate(jobs):
            _run_job(rank, job, os.path.join(workdir, f"job{k}-rank{rank}.pt"))
            dist.barrier()  # the next job's messages must not meet this one's
    finally:
        dist.destroy_process_group()


class OutOfMemory(ZboptError):
    """A rank could not allocate its model: the sizes asked for do not fit this machine.
    Callers name the flags that set the sizes."""


# called on every poll of the waiting ranks with (seconds waited, ranks finished, ranks)
_WATCHERS: list = []


@contextmanager
def watching(callback):
    """Within the block, every launch reports to `callback(elapsed, finished, world)` about
    twice a second while it waits for its ranks (a command's progress line)."""
    _WATCHERS.append(callback)
    try:
        yield
    finally:
        _WATCHERS.remove(callback)


def machine_memory() -> int | None:
    """The machine's physical memory in bytes (None where the system does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def check_memory(values: int, itemsize: int, sizes: str, remedy: str) -> None:
    """Refuse before any launch a run whose `values` numbers of `itemsize` bytes (at least
    what the ranks hold together) exceed the machine's memory: `sizes` says which flags make
    the model, `remedy` what to change."""
    total = machine_memory()
    need = values * itemsize
    if total and need > total:
        shown = f"{need:.3g}" if need < 10 ** 300 else "more than 1e300"
        raise ZboptError(f"{sizes} needs at least {shown} bytes of memory, more than this "
                         f"machine's {total:.3g}: {remedy}")


def _out_of_memory(text: str) -> bool:
    return "can't allocate memory" in text or "MemoryError" in text \
        or "not enough memory" in text


# lists that collect what the ranks of each launch wrote on stderr (rank_output)
_COLLECTORS: list = []


@contextmanager
def rank_output():
    """Within the block, what every rank writes on stderr (torch's warnings, ...) is collected
    in the list yielded, as (rank, text), instead of reaching this process's stderr; the caller
    shows it or not (e.g. only when the run fails)."""
    collected: list[tuple[int, str]] = []
    _COLLECTORS.append(collected)
    try:
        yield collected
    finally:
        _COLLECTORS.remove(collected)


def _rank_main(rank: int, worker, log_dir: str, *args) -> None:
    """One rank: its stderr (file descriptor 2, and Python's sys.stderr) goes to a file the
    launcher reads, then `worker(rank, *args)` runs."""
    import sys
    fd = os.open(os.path.join(log_dir, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                 0o600)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115  the process's stderr
    worker(rank, *args)


def _hand_on(log_dir: str, world: int) -> None:
    """What the ranks wrote on stderr: to the active rank_output collectors, else (no caller
    asked for it) to this process's stderr, as if the ranks had written it there."""
    import sys
    found = []
    for rank in range(world):
        try:
            text = Path(log_dir, f"rank{rank}.log").read_text(errors="replace")
        except OSError:
            continue
        if text.strip():
            found.append((rank, text))
    for collected in _COLLECTORS:
        collected.extend(found)
    if not _COLLECTORS:
        for _, text in found:
            sys.stderr.write(text)


def _run_processes(world: int, args: tuple, timeout: float, worker=None) -> str:
    """Spawn the ranks of `worker` (default: one verify job list) and wait; '' on success,
    else a one-line reason (hang, crash). OutOfMemory when a rank could not allocate. What the
    ranks write on stderr is handed on after they end (rank_output)."""
    with tempfile.TemporaryDirectory(prefix="zbopt-ranks-") as log_dir:
        try:
            return _spawn_and_wait(world, (worker or _worker, log_dir) + tuple(args), timeout)
        finally:
            _hand_on(log_dir, world)


def _spawn_and_wait(world: int, args: tuple, timeout: float) -> str:
    import logging

    import torch.multiprocessing as mp
    from torch.multiprocessing import ProcessRaisedException

    context = mp.start_processes(_rank_main, args=args, nprocs=world, join=False,
                                 start_method="spawn")
    started = time.monotonic()
    deadline = started + timeout
    # torch logs a warning for every sibling it terminates after a rank fails: the failure
    # itself is our report, in one line
    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    level = spawn_log.level
    spawn_log.setLevel(logging.ERROR)
    try:
        while not context.join(timeout=0.5):
            if _WATCHERS:
                finished = sum(not p.is_alive() for p in context.processes)
                for watch in _WATCHERS:
                    watch(time.monotonic() - started, finished, world)
            if time.monotonic() > deadline:
                return (f"the ranks did not finish within {timeout:g} s: the runtime hangs on "
                        f"this order (or raise --timeout)")
    except ProcessRaisedException as err:
        lines = [ln for ln in str(err).strip().splitlines() if ln.strip()]
        if _out_of_memory(str(err)):
            raise OutOfMemory("a rank could not allocate the memory its model needs") from None
        return "a rank raised: " + (lines[-1].strip() if lines else "unknown error")
    except Exception as err:  # a rank exited with a signal or a non-zero code
        return f"a rank failed: {reason(err)}"
    finally:
        spawn_log.setLevel(level)
        for process in context.processes:
            if process.is_alive():  # only the ranks we started, after a hang
                process.kill()
    return ""


@dataclass(frozen=True)
class Comparison:
    """Torch's outputs against the single-process reference."""

    ok: bool
    loss: float | None  # mean of torch's micro-batch losses
    reference_loss: float
    max_loss_error: float | None
    max_grad_error: float
    worst_parameter: str  # the parameter with the largest gradient error
    parameters: int
    message: str  # what differs, '' when ok


def _worse(error: float, worst: float) -> bool:
    """`error` beats the worst so far; a NaN (a loss or gradient that is not a number) beats
    everything, so it is the one reported and fails the check."""
    return not math.isnan(worst) and (math.isnan(error) or error > worst)


def check_atol(atol: float, name: str = "--atol") -> None:
    """The tolerance is a finite number >= 0 (NaN would pass every comparison, inf anything)."""
    if isinstance(atol, bool) or not isinstance(atol, (int, float)) \
            or not (math.isfinite(atol) and atol >= 0):
        raise ZboptError(f"{name} must be a finite number >= 0, got {atol!r}")


def compare_outputs(spec: ModelSpec, per_rank: list[dict], atol: float) -> Comparison:
    """Compare the ranks' saved losses and gradients with `reference(spec)`."""
    ref_losses, ref_grads = reference(spec)
    return compare_with(ref_losses, ref_grads, spec.microbatches, per_rank, atol)


def compare_with(ref_losses: list[float], ref_grads: dict[str, Any], microbatches: int,
                 per_rank: list[dict], atol: float) -> Comparison:
    """Compare the ranks' saved losses and gradients with a reference's."""
    import torch

    losses = next((r["losses"] for r in per_rank if r["losses"] is not None), None)
    grads: dict[str, Any] = {}
    for result in per_rank:
        grads.update(result["grads"])
    problems = []
    loss_error = None
    if losses is None or len(losses) != microbatches:
        problems.append(f"expected {microbatches} micro-batch losses, got "
                        f"{0 if losses is None else len(losses)}")
    else:
        loss_error = 0.0
        for a, b in zip(losses, ref_losses):
            if _worse(abs(a - b), loss_error):
                loss_error = abs(a - b)
    missing = sorted(name for name in ref_grads if grads.get(name) is None)
    if missing:
        problems.append(f"no gradient for {', '.join(missing)}")
    grad_error, worst = 0.0, ""
    for name, expected in ref_grads.items():
        if grads.get(name) is None:
            continue
        error = float(torch.max(torch.abs(grads[name] - expected)))
        if _worse(error, grad_error) or not worst:
            grad_error, worst = error, name
    if loss_error is not None and math.isnan(loss_error):
        problems.append("a micro-batch loss is NaN")
    elif loss_error is not None and loss_error > atol:
        problems.append(f"loss differs by {loss_error:.3g} > {atol:g}")
    if math.isnan(grad_error):
        problems.append(f"the gradient of {worst} holds NaN")
    elif grad_error > atol:
        problems.append(f"gradient of {worst} differs by {grad_error:.3g} > {atol:g}")
    return Comparison(
        ok=not problems, loss=sum(losses) / len(losses) if losses else None,
        reference_loss=sum(ref_losses) / len(ref_losses), max_loss_error=loss_error,
        max_grad_error=grad_error, worst_parameter=worst, parameters=len(ref_grads),
        message="; ".join(problems))


def verify_torch(instance: Instance, schedule: Schedule, atol: float = DEFAULT_ATOL,
                 timeout: float = 120.0, hidden: int = 8, seed: int = 0) -> VerifyResult:
    """Run `schedule` for one training step in real torch processes; see the module doc.

    ZboptError if the schedule cannot be exported or torch's validators reject it; otherwise a
    VerifyResult (ok False with the reason when the run hangs, crashes or computes wrong).
    """
    return verify_many([(instance, schedule)], atol, timeout, hidden, seed)[0]


def verify_many(runs: list[tuple[Instance, Schedule]], atol: float = DEFAULT_ATOL,
                timeout: float = 120.0, hidden: int = 8, seed: int = 0) -> list[VerifyResult]:
    """verify_torch for several schedules on the same number of devices, in one launch.

    Starting torch processes dominates the cost, so the ranks are started once and run every
    schedule in turn (a barrier between them). If the launch fails, the schedules that did not
    finish report the failure.
    """
    check_atol(atol, "atol")
    _require_torch()
    if not runs:
        return []
    world = runs[0][0].devices
    if any(inst.devices != world for inst, _ in runs):
        raise ZboptError("verify_many runs schedules on one number of devices at a time")
    all_rows = []
    for inst, sched in runs:
        rows = torch_rows(inst, sched)
        torch_check(rows, inst.num_stages, inst.microbatches)
        all_rows.append(rows)
    started = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="zbopt-verify-") as workdir:
        jobs = []
        for k, ((inst, _), rows) in enumerate(zip(runs, all_rows)):
            csv_path = Path(workdir) / f"schedule{k}.csv"
            csv_path.write_text(csv_text(rows))
            spec = ModelSpec(inst.num_stages, inst.microbatches, hidden=hidden, seed=seed)
            jobs.append(_Job(str(csv_path), spec,
                             tuple(inst.stages_of(d) for d in range(world))))
        failure = _run_processes(world, (world, workdir, jobs, timeout), timeout * len(jobs))
        seconds = time.monotonic() - started
        import torch
        for k, ((inst, sched), job) in enumerate(zip(runs, jobs)):
            common = dict(method=sched.method, ranks=world, num_stages=inst.num_stages,
                          microbatches=inst.microbatches, atol=atol, seconds=seconds,
                          notes=(STAND_IN.format(stages=counted(inst.num_stages, "stage"),
                                                 hidden=hidden),))
            files = [Path(workdir) / f"job{k}-rank{r}.pt" for r in range(world)]
            if not all(f.exists() for f in files):
                results.append(VerifyResult(False, loss=None, reference_loss=None,
                                            max_loss_error=None, max_grad_error=None,
                                            worst_parameter="", parameters=0,
                                            message=failure or "a rank wrote no result",
                                            **common))
                continue
            per_rank = [torch.load(f, weights_only=True) for f in files]
            found = compare_outputs(job.spec, per_rank, atol)
            ok, message = found.ok, found.message
            # the same losses could come from torch's default order: check it ran ours
            if [r.get("executed") for r in per_rank] != [list(row) for row in all_rows[k]]:
                ok = False
                message = "; ".join(filter(None, [message, "torch ran another order than the "
                                                  "exported CSV"]))
            results.append(VerifyResult(
                ok, loss=found.loss, reference_loss=found.reference_loss,
                max_loss_error=found.max_loss_error, max_grad_error=found.max_grad_error,
                worst_parameter=found.worst_parameter, parameters=found.parameters,
                message=message, **common))
    return results
