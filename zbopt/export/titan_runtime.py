"""The torchtitan proof: build a plan's pipeline with torchtitan's own code and check one step.

`verify_titan(loaded)` exports the plan exactly as `zbopt export --torchtitan` does (CSV and
job-config fragment, in a temporary directory), then starts one gloo process per rank on the
CPU. Each process reads the fragment into torchtitan's ParallelismConfig and TrainingConfig,
builds its mesh with torchtitan's ParallelDims, and calls torchtitan's pipeline entry point
(`pipeline_llm`): torchtitan splits the model by `module_fqns_per_model_part`, maps stages to
ranks by the schedule name, and builds the schedule from the CSV (`_build_pipeline_schedule`).
The model is the profiled preset itself when the plan was profiled from one (`zbopt profile
--preset`: its layers placed at the plan's module names), else a stand-in with those names
(zbopt.export.fqn_model); float64 either way, so the losses and every gradient can be compared
with a single-process run at atol 1e-6.

What does not run here, and why, is listed in the result's notes: torchtitan's per-part
parallelize function (FSDP, tensor parallel, compile, activation checkpointing: CUDA-oriented)
is the identity, and where the installed torch lacks the step API torchtitan's trainer calls,
the schedule torchtitan built is stepped with torch's own signature.
"""

from __future__ import annotations

import inspect
import os
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import ZboptError
from ..report.numbers import counted
from .torch_runtime import (
    DEFAULT_ATOL,
    VerifyResult,
    _require_torch,
    _run_processes,
    check_atol,
    compare_with,
)
from .torchtitan import TOML_NAME, check_pipelined, read_fragment, require_torchtitan, titan_export

NOT_RUN_PARALLELIZE = ("torchtitan's parallelize function (FSDP, tensor parallel, torch.compile, "
                       "activation checkpointing) is replaced by the identity: it targets CUDA "
                       "and is not part of the pipeline split or schedule")
NOT_RUN_STEP = ("torchtitan's Trainer.pp_forward_backward_step calls schedule.step(arg_mbs=..., "
                "target_mbs=...), which torch {torch} lacks: the schedule torchtitan built is "
                "stepped as step(inputs, target=..., losses=...)")
NOT_RUN_MODEL = ("the model is zbopt's float64 stand-in with the plan's module names, not the "
                 "profiled model's own code")


@dataclass(frozen=True)
class _TitanJob:
    toml_path: str
    fqns_by_stage: tuple[tuple[str, ...], ...]
    spec: Any  # FqnSpec: the stand-in; used when `preset` is None
    preset: Any = None  # PresetSpec: the profiled preset model itself


def _titan_scalar_loss(output, target):
    return output, None  # the preset's last layer returns the loss itself


def _model_and_batch(job: _TitanJob):
    """The whole model (modules at the plan's FQNs), the batch, targets and loss function."""
    import torch

    from .fqn_model import FqnModel, build_batch, layer_pairs
    if job.preset is None:
        x, y = build_batch(job.spec)
        return FqnModel(job.spec), x, y, _titan_loss
    from ..profile.models import preset_model
    preset = job.preset
    built = preset_model(preset.preset, preset.microbatch_size, preset.seq_len,
                         getattr(torch, preset.dtype), torch.device("cpu"), preset.naming)
    model = FqnModel(pairs=layer_pairs([(layer.name, layer.module) for layer in built.layers]))
    x = torch.cat([built.make_input()] * preset.microbatches)
    return model, x, torch.zeros(x.shape[0], 1), _titan_scalar_loss


def preset_reference(job: _TitanJob) -> tuple[list[float], dict[str, Any]]:
    """Per-micro-batch losses and gradients of their sum for the preset model, one process."""
    import torch
    model, x, _, _ = _model_and_batch(job)
    losses, total = [], None
    for chunk in torch.chunk(x, job.preset.microbatches):
        loss = model(chunk)
        losses.append(loss.item())
        total = loss if total is None else total + loss
    total.backward()
    return losses, {name: p.grad.detach().clone() for name, p in model.named_parameters()
                    if p.grad is not None}


def _identity(model, **_):
    return model


def _titan_loss(output, target):
    from .fqn_model import mse
    return mse(output, target), None  # torchtitan's loss functions return (loss, extra)


def _titan_rank(rank: int, world: int, job: _TitanJob, workdir: str, out_path: str) -> None:
    from types import SimpleNamespace

    import torch
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed.pipeline_parallel import pipeline_llm

    from .fqn_model import stage_modules

    fragment = read_fragment(job.toml_path)
    fragment["parallelism"].pop("expert_parallel_degree", None)  # the stand-in is dense
    parallelism = ParallelismConfig(**fragment["parallelism"])
    training = TrainingConfig(**fragment["training"])
    dims = ParallelDims.from_config(parallelism, world)
    dims.build_mesh()
    all_fqns = [f for part in job.fqns_by_stage for f in part]
    model, x, y, loss_fn = _model_and_batch(job)
    schedule, parts, has_first, has_last = pipeline_llm(
        model, parallel_dims=dims, training=training, parallelism=parallelism,
        compile_config=CompileConfig(), ac_config=None, dump_folder=workdir,
        device=torch.device("cpu"), model_config=SimpleNamespace(layers=all_fqns),
        parallelize_fn=_identity, loss_fn=loss_fn)
    losses: list = []
    if "arg_mbs" in inspect.signature(schedule.step).parameters:  # torchtitan's trainer form
        n = job.spec.microbatches
        schedule.step(arg_mbs=[(c,) for c in torch.chunk(x, n)] if has_first else None,
                      kwarg_mbs=[{} for _ in range(n)],
                      target_mbs=list(torch.chunk(y, n)) if has_last else None,
                      losses=losses if has_last else None, return_outputs=False)
    else:
        schedule.step(*((x,) if has_first else ()), target=y if has_last else None,
                      losses=losses if has_last else None, return_outputs=False)
    grads = {name: None if p.grad is None else p.grad.detach().clone()
             for part in parts for name, p in part.named_parameters()}
    torch.save({
        "losses": [float(v.detach()) for v in losses] if has_last else None,
        "grads": grads,
        "executed": [str(a) for a in schedule.pipeline_order_with_comms[rank] if a.is_compute_op],
        "schedule_class": type(schedule).__name__,
        "stages": {stage.stage_index: stage_modules(part, all_fqns)
                   for stage, part in zip(schedule._stages, parts)},
        "step_form": "trainer" if "arg_mbs" in inspect.signature(schedule.step).parameters
        else "torch",
    }, out_path)


def _titan_worker(rank: int, world: int, workdir: str, job: _TitanJob, timeout: float) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rendezvous", rank=rank,
                            world_size=world, timeout=timedelta(seconds=timeout))
    try:
        _titan_rank(rank, world, job, workdir, os.path.join(workdir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


PROCESS_MEMORY = 400 * 2**20  # a torch + gloo process on the CPU, measured at about 300 MB


def max_processes() -> int:
    """Ranks this machine can start for a run: bounded by its per-user process limit and by the
    memory one torch process needs."""
    import resource
    limits = []
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY and soft > 0:
        limits.append(max(0, soft - 64))  # leave room for what already runs
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        limits.append(int(free // PROCESS_MEMORY))
    except (ValueError, OSError):
        pass
    return min(limits) if limits else 1024


def check_world(devices: int) -> None:
    limit = max_processes()
    if devices > limit:
        raise ZboptError(f"the plan has {counted(devices, 'device')} but this machine can start "
                         f"at most {counted(limit, 'process')} for a run: verify a plan with "
                         f"fewer devices")


def verify_titan(loaded, atol: float = DEFAULT_ATOL, timeout: float = 120.0, hidden: int = 8,
                 microbatch_size: int | None = None, seed: int = 0, model: str = "profiled"
                 ) -> VerifyResult:
    """One training step of the plan through torchtitan's pipeline builder; see the module doc.
    The fragment is the one `zbopt export --torchtitan` writes with the same `microbatch_size`
    (None: the size the plan was profiled at, else 1)."""
    import torch

    from .fqn_model import FqnSpec, reference
    from .outputs import write_all
    from .plan_parts import plan_model, stage_layer_names
    from .timing import preset_match
    from .torch_csv import torch_check, torch_rows

    check_atol(atol, "atol")
    instance = loaded.instance
    check_pipelined(instance.devices, "verify-torch --runtime torch")
    check_world(instance.devices)
    _require_torch()
    require_torchtitan()
    rows = torch_rows(instance, loaded.schedule)
    torch_check(rows, instance.num_stages, instance.microbatches)
    notes = [NOT_RUN_PARALLELIZE]
    preset, why_not = preset_match(plan_model(loaded), instance.microbatches) \
        if model == "profiled" else (None, "")
    if preset is not None and stage_layer_names(loaded) is not None:
        # float64 so that the pipeline's gradients can match one process to 1e-6
        profiled_dtype, preset = preset.dtype, replace(preset, dtype="float64")
        if microbatch_size is not None:  # the fragment's rows per micro-batch, as export's
            preset = replace(preset, microbatch_size=microbatch_size)
        notes.append(f"the model is the profiled preset {preset.preset} (micro-batch "
                     f"{preset.microbatch_size} x {preset.seq_len} tokens) in float64, not "
                     f"{profiled_dtype} as profiled, for exact gradients")
    else:
        preset = None
        notes.append(NOT_RUN_MODEL + (f" (the plan's model is named like a shipped preset, but "
                                      f"{why_not})" if why_not else ""))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="zbopt-titan-") as workdir:
        stage_layers = stage_layer_names(loaded)
        if stage_layers is None:
            stage_layers = [[f"layers.{s}"] for s in range(instance.num_stages)]
            notes.insert(0, "the plan has no partition: one stand-in layer per stage "
                            "(layers.0 ..), given to torchtitan as module_fqns_per_model_part")
        export = titan_export(loaded, Path(workdir) / "export", microbatch_size, stage_layers)
        write_all(export.texts, new_dirs=[export.directory])
        fqns = export.settings.module_fqns
        notes.append(f"the fragment is the one `zbopt export --torchtitan` writes: "
                     f"pipeline_parallel_microbatch_size {export.settings.microbatch_size}, "
                     f"local_batch_size {export.settings.local_batch_size}")
        if export.settings.expert_parallel > 1:
            notes.append(f"expert_parallel_degree {export.settings.expert_parallel} is left "
                         f"out of the run: the model run here is dense and has one rank per "
                         f"pipeline rank")
        spec = FqnSpec(fqns=tuple(f for part in fqns for f in part),
                       microbatches=instance.microbatches, hidden=hidden,
                       rows_per_microbatch=export.settings.microbatch_size, seed=seed)
        job = _TitanJob(str(export.directory / TOML_NAME), fqns, spec, preset)
        failure = _run_processes(instance.devices, (instance.devices, workdir, job, timeout),
                                 timeout, worker=_titan_worker)
        seconds = time.monotonic() - started
        common = dict(method=loaded.schedule.method, ranks=instance.devices,
                      num_stages=instance.num_stages, microbatches=instance.microbatches,
                      atol=atol, seconds=seconds, runtime="torchtitan")
        files = [Path(workdir) / f"rank{r}.pt" for r in range(instance.devices)]
        if not all(f.exists() for f in files):
            return VerifyResult(False, loss=None, reference_loss=None, max_loss_error=None,
                                max_grad_error=None, worst_parameter="", parameters=0,
                                message=failure or "a rank wrote no result", notes=tuple(notes),
                                **common)
        per_rank = [torch.load(f, weights_only=True) for f in files]
    # torchtitan builds the schedule with scale_grads=False: gradients of the summed loss
    ref_losses, ref_grads = reference(spec, mean=False) if preset is None \
        else preset_reference(job)
    found = compare_with(ref_losses, ref_grads, spec.microbatches, per_rank, atol)
    problems = [found.message] if found.message else []
    if [r["executed"] for r in per_rank] != [list(row) for row in rows]:
        problems.append("torchtitan ran another order than the exported CSV")
    split = {int(k): v for r in per_rank for k, v in r["stages"].items()}
    wrong = [s for s in range(instance.num_stages) if split.get(s) != list(fqns[s])]
    if wrong:
        problems.append(f"torchtitan's split of stage {wrong[0]} holds {split.get(wrong[0])}, "
                        f"the plan {list(fqns[wrong[0]])}")
    placed = {int(k): rank for rank, r in enumerate(per_rank) for k in r["stages"]}
    misplaced = [s for s in range(instance.num_stages) if placed.get(s) != instance.device_of(s)]
    if misplaced:
        problems.append(f"torchtitan put stage {misplaced[0]} on rank {placed.get(misplaced[0])}"
                        f", the plan on {instance.device_of(misplaced[0])}")
    if any(r["step_form"] == "torch" for r in per_rank):
        notes.append(NOT_RUN_STEP.format(torch=torch.__version__))
    notes.append(f"torchtitan built {per_rank[0]['schedule_class']} from the CSV; gradients "
                 f"compared are those of the summed micro-batch loss (torchtitan's "
                 f"scale_grads=False)")
    return VerifyResult(not problems, loss=found.loss, reference_loss=found.reference_loss,
                        max_loss_error=found.max_loss_error, max_grad_error=found.max_grad_error,
                        worst_parameter=found.worst_parameter, parameters=found.parameters,
                        message="; ".join(problems), notes=tuple(notes), **common)
