"""The layer split a plan file carries: which layers (module names) each pipeline stage runs.

A plan file is a schedule file that also records "partition" ({"sizes", "stages": [[layer
names of stage 0], ...]}) and "model" (the layered model); `read_schedule_file` checks both and
keeps them in `meta`. A schedule file without them is still a valid input: it has no split.
"""

from __future__ import annotations

from typing import Any

from ..errors import ZboptError
from .schedule_file import ScheduleFile

# why a dualpipe plan has no runtime export, and what to do instead (no_runtime_form: with the
# placements that can hold the plan's layers)
NO_RUNTIME_FORM = ("placement 'dualpipe' runs two copies of each model part in opposite "
                   "directions, which PyTorch's pipelining and torchtitan cannot run: re-plan "
                   "with --placements contiguous,v,interleaved for a plan they run (export "
                   "--chrome-trace still draws this one)")
RUNTIME_PLACEMENTS = ("contiguous", "v", "interleaved")


def stages_on(placement: str, devices: int, chunks: int = 0) -> int:
    """Pipeline stages of `placement` on `devices` (interleaved: `chunks` per device, 2 unset),
    as zbopt.layers.LayeredModel counts them."""
    per_device = {"contiguous": 1, "v": 2}.get(placement, chunks or 2)
    return per_device * devices


def no_runtime_form(devices: int | None = None, layers: int | None = None,
                    chunks: int = 0) -> str:
    """NO_RUNTIME_FORM, suggesting only the placements whose stages `layers` layers fill (every
    stage needs one) on `devices`; all three when the counts are not known."""
    if devices is None or layers is None:
        return NO_RUNTIME_FORM
    fit = [p for p in RUNTIME_PLACEMENTS if stages_on(p, devices, chunks) <= layers]
    if not fit:  # dualpipe holds a part per device, so contiguous fits: kept for safety
        return NO_RUNTIME_FORM.replace("with --placements contiguous,v,interleaved",
                                       "on fewer devices")
    left = [f"{p} needs {stages_on(p, devices, chunks)} stages" for p in RUNTIME_PLACEMENTS
            if p not in fit]
    why = f"; {' and '.join(left)}, more than the {layers} layers" if left else ""
    return NO_RUNTIME_FORM.replace("contiguous,v,interleaved for a plan they run",
                                   f"{','.join(fit)} for a plan they run{why}")


def refuse_dualpipe_plan(loaded: ScheduleFile, source: str) -> None:
    """A dualpipe plan (a file with a partition) has no runtime form: say what to re-plan over
    (a plain dualpipe schedule file gets torch_csv's own message)."""
    if loaded.instance.placement == "dualpipe" and loaded.meta.get("partition") is not None:
        raise ZboptError(f"{source}: {_plan_no_runtime_form(loaded)}")


def _plan_no_runtime_form(loaded: ScheduleFile) -> str:
    """no_runtime_form for a dualpipe plan: its layers are its partition's sizes."""
    partition = loaded.meta.get("partition")
    sizes = partition.get("sizes") if isinstance(partition, dict) else None
    if not (isinstance(sizes, list) and sizes
            and all(isinstance(n, int) and not isinstance(n, bool) for n in sizes)):
        return NO_RUNTIME_FORM
    model = plan_model(loaded) or {}
    chunks = model.get("chunks", 0)
    chunks = chunks if isinstance(chunks, int) and not isinstance(chunks, bool) else 0
    return no_runtime_form(loaded.instance.devices, sum(sizes), chunks)


def plan_model(loaded: ScheduleFile) -> dict[str, Any] | None:
    """The plan's layered model dict, if it has one."""
    model = loaded.meta.get("model")
    return model if isinstance(model, dict) else None


def plan_experts(loaded: ScheduleFile) -> int:
    """The expert-parallel degree the plan's costs were estimated at (1 when none is recorded)."""
    return (plan_model(loaded) or {}).get("expert_parallel", 1)


def stage_layer_names(loaded: ScheduleFile) -> list[list[str]] | None:
    """Layer names per pipeline stage, in stage order; None for a plain schedule file."""
    partition = loaded.meta.get("partition")
    if partition is None:
        return None
    stages = partition.get("stages") if isinstance(partition, dict) else None
    source = loaded.meta.get("path", "plan")
    if not (isinstance(stages, list) and all(isinstance(g, list) and g for g in stages)):
        raise ZboptError(f"{source}: the partition lists no layer names per stage: re-plan it")
    if loaded.instance.placement == "dualpipe":
        raise ZboptError(f"{source}: {_plan_no_runtime_form(loaded)}")
    if len(stages) != loaded.instance.num_stages:
        raise ZboptError(f"{source}: the partition has {len(stages)} model parts but the "
                         f"schedule runs {loaded.instance.num_stages} stages: a runtime needs "
                         f"one part per stage")
    return [list(g) for g in stages]
