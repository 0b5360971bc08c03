"""The layer split a plan file carries: which layers (module names) each pipeline stage runs.

A plan file is a schedule file that also records "partition" ({"sizes", "stages": [[layer
names of stage 0], ...]}) and "model" (the layered model); `read_schedule_file` checks both and
keeps them in `meta`. A schedule file without them is still a valid input: it has no split.
"""

from __future__ import annotations

from typing import Any

from ..errors import ZboptError
from .schedule_file import ScheduleFile

# why a dualpipe plan has no runtime export, and what to do instead
NO_RUNTIME_FORM = ("placement 'dualpipe' runs two copies of each model part in opposite "
                   "directions, which PyTorch's pipelining and torchtitan cannot run: re-plan "
                   "with --placements contiguous,v,interleaved for a plan they run (export "
                   "--chrome-trace still draws this one)")


def refuse_dualpipe_plan(loaded: ScheduleFile, source: str) -> None:
    """A dualpipe plan (a file with a partition) has no runtime form: say what to re-plan over
    (a plain dualpipe schedule file gets torch_csv's own message)."""
    if loaded.instance.placement == "dualpipe" and loaded.meta.get("partition") is not None:
        raise ZboptError(f"{source}: {NO_RUNTIME_FORM}")


def plan_model(loaded: ScheduleFile) -> dict[str, Any] | None:
    """The plan's layered model dict, if it has one."""
    model = loaded.meta.get("model")
    return model if isinstance(model, dict) else None


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
        raise ZboptError(f"{source}: {NO_RUNTIME_FORM}")
    if len(stages) != loaded.instance.num_stages:
        raise ZboptError(f"{source}: the partition has {len(stages)} model parts but the "
                         f"schedule runs {loaded.instance.num_stages} stages: a runtime needs "
                         f"one part per stage")
    return [list(g) for g in stages]
