"""The layer split a plan file carries: which layers (module names) each pipeline stage runs.

A plan file is a schedule file whose JSON also holds "partition": {"sizes": [...], "stages":
[[layer names of stage 0], ...]} and "model": the layered model. A schedule file without them is
still a valid input: it has no split (None).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ZboptError
from .schedule_file import ScheduleFile


def _plan_keys(loaded: ScheduleFile) -> tuple[Any, Any]:
    partition, model = loaded.meta.get("partition"), loaded.meta.get("model")
    if partition is None and loaded.meta.get("path"):
        # a reader that does not yet surface the plan keys: take them from the file itself
        try:
            doc = json.loads(Path(loaded.meta["path"]).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            doc = {}
        partition, model = doc.get("partition"), doc.get("model")
    return partition, model


def plan_model(loaded: ScheduleFile) -> dict[str, Any] | None:
    """The plan's layered model dict, if it has one."""
    model = _plan_keys(loaded)[1]
    return model if isinstance(model, dict) else None


def stage_layer_names(loaded: ScheduleFile) -> list[list[str]] | None:
    """Layer names per pipeline stage, in stage order; None for a plain schedule file."""
    partition, model = _plan_keys(loaded)
    if partition is None:
        return None
    source = loaded.meta.get("path", "plan")
    if not isinstance(partition, dict):
        raise ZboptError(f"{source}: 'partition' must be an object with 'sizes' and 'stages'")
    stages = partition.get("stages")
    if stages is None and isinstance(model, dict) and partition.get("sizes") is not None:
        from ..layers import LayeredModel
        layered = LayeredModel.from_dict(model, source=f"{source}: model")
        stages = [[layer.name for layer in group]
                  for group in layered.stage_layers(partition["sizes"])]
    if not (isinstance(stages, list) and stages and all(
            isinstance(g, list) and g and all(isinstance(n, str) and n for n in g)
            for g in stages)):
        raise ZboptError(f"{source}: 'partition' needs 'stages', a list with the layer names of "
                         f"each stage (or 'sizes' and the 'model')")
    if len(stages) != loaded.instance.num_stages:
        raise ZboptError(f"{source}: the partition has {len(stages)} stages but the schedule "
                         f"runs {loaded.instance.num_stages}: re-plan the model")
    return stages
