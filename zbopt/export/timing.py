"""Predicted against measured: run a plan's order for N timed steps and compare with its costs.

`time_plan(instance, schedule, spec)` exports the order as a torch CSV, starts one gloo process
per device (one thread each) and runs `warmup` untimed then `steps` timed training steps of the
stand-in model (zbopt.export.fqn_model) with `_PipelineScheduleRuntime`. Every compute action
is timed where torch runs it (the stage's forward / backward-input / backward-weight calls), so
each device reports its busy time per pass kind and the span of its actions. The measured span
of a step is the Zero Bubble span (max over devices of last end - first start, one monotonic
clock shared by the processes); the prediction is `evaluate()` on the instance's costs.
The prediction is only as good as the costs: they must come from profiling the model that runs.
"""

from __future__ import annotations

import os
import re
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import ZboptError
from ..instance import Instance
from ..schedule import Schedule, evaluate
from .chrome_trace import time_scale
from .torch_csv import csv_text, torch_check, torch_rows
from .torch_runtime import _require_torch, _run_processes

KINDS = ("F", "B", "W")
# the title `zbopt profile` gives a layered model: "<name> b=<B> s=<S> <dtype> <device> <threads>
# thread(s) <clock> clock"; <name> is the preset's for --preset, a config file's stem for
# --hf-config: the title alone does not tell a preset from a user's model saved under its name
_PROFILE_TITLE = re.compile(r"^(?P<preset>\S+) b=(?P<b>\d+) s=(?P<s>\d+) (?P<dtype>\w+) "
                            r"(?P<device>\w+) \d+ thread\(s\)(?: \S+ clock)?$")


@dataclass(frozen=True)
class PresetSpec:
    """The profiled preset model itself, rebuilt from its shipped config in every process."""

    preset: str
    microbatches: int
    microbatch_size: int = 1
    seq_len: int = 128
    dtype: str = "float32"
    naming: str | None = None  # the layer naming profiled with (None: the preset's default)


def profiled_microbatch_size(model: dict | None) -> int | None:
    """The micro-batch size (rows) a plan's layered model was profiled at, from the title
    `zbopt profile` writes; None for a model that does not record one."""
    match = _PROFILE_TITLE.match(str(model.get("name", ""))) if isinstance(model, dict) else None
    return int(match["b"]) if match and int(match["b"]) >= 1 else None


def preset_of(model: dict | None, microbatches: int) -> PresetSpec | None:
    """The preset a plan's layered model was profiled from, if zbopt ships it; None for any
    other model (see preset_match)."""
    return preset_match(model, microbatches)[0]


def preset_match(model: dict | None, microbatches: int) -> tuple[PresetSpec | None, str]:
    """(the preset, '') when a plan's layered model is a profile of a shipped preset: its title
    is the one `zbopt profile --preset` writes, its layers are the preset's (names, counts) and
    their static memory is in proportion to the preset's parameters per layer. Else (None, why
    not) where the title names a preset (a model of the user's under a preset's name), and
    (None, '') for any other model."""
    if not isinstance(model, dict):
        return None, ""
    match = _PROFILE_TITLE.match(str(model.get("name", "")))
    if not match:
        return None, ""
    try:
        from ..profile.models import NAMINGS, PRESETS
    except ImportError:
        return None, ""
    name = match["preset"]
    if name not in PRESETS:
        return None, ""
    layers = _expanded(model.get("layers"))
    if layers is None:
        return None, f"its layers cannot be read as preset {name}'s"
    namings = [PRESETS[name]] + [n for n in NAMINGS if n != PRESETS[name]]
    shipped = {}
    for naming in namings:
        try:
            shipped[naming] = _preset_layers(name, naming)
        except Exception:  # noqa: BLE001  a naming the preset has not (gpt2: only hf)
            pass
    if not shipped:
        return None, f"preset {name} cannot be built here to compare (is transformers installed?)"
    names = [n for n, _ in layers]
    naming = next((n for n in shipped if [x for x, _ in shipped[n]] == names), None)
    if naming is None:
        ours = [x for x, _ in next(iter(shipped.values()))]
        if len(ours) != len(names):
            return None, f"it has {len(names)} layers and preset {name} {len(ours)}"
        k = next(k for k, (a, b) in enumerate(zip(names, ours)) if a != b)
        return None, f"its layer {k} is {names[k]!r}, preset {name}'s {ours[k]!r}"
    params = [count for _, count in shipped[naming]]
    statics = [static for _, static in layers]
    base = next((k for k, c in enumerate(params) if c > 0), None)
    ratio = statics[base] / params[base] if base is not None else 0.0
    if not ratio > 0 or any(abs(st - c * ratio) > 1e-6 * max(abs(st), 1.0)
                            for st, c in zip(statics, params)):
        return None, (f"its layers' static memory is not in proportion to preset {name}'s "
                      f"parameters (another model with the preset's layer names)")
    return PresetSpec(name, microbatches, int(match["b"]), int(match["s"]), match["dtype"],
                      naming), ""


def _expanded(layers) -> list[tuple[str, float]] | None:
    """(name, static) of every layer of a layered model's dict, counts expanded as
    LayeredModel does; None when they are not a list of such layers."""
    if not isinstance(layers, list):
        return None
    out = []
    for layer in layers:
        if not isinstance(layer, dict) or not isinstance(layer.get("name"), str):
            return None
        count, static = layer.get("count", 1), layer.get("static", 0)
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 10_000 \
                or isinstance(static, bool) or not isinstance(static, (int, float)):
            return None
        out += [(layer["name"] if count == 1 else f"{layer['name']}.{i}", float(static))
                for i in range(count)]
    return out


@lru_cache(maxsize=None)
def _preset_layers(name: str, naming: str) -> tuple[tuple[str, int], ...]:
    """(layer name, parameters) of a shipped preset under `naming`, built on torch's meta
    device (shapes only)."""
    import torch

    from ..profile.measure import parameter_count
    from ..profile.models import preset_model
    built = preset_model(name, 1, 8, torch.float32, torch.device("meta"), naming)
    return tuple((layer.name, parameter_count(layer.module)) for layer in built.layers)


def _scalar_loss(output, target):
    return output  # the preset's last layer returns the loss itself


def _stage_modules(job: "_TimedJob", mine: tuple[int, ...]):
    """{stage: module}, the whole batch, the targets and the loss function of the job's model."""
    import torch
    from torch import nn

    spec = job.spec
    if isinstance(spec, PresetSpec):
        from ..profile.models import preset_model
        built = preset_model(spec.preset, spec.microbatch_size, spec.seq_len,
                             getattr(torch, spec.dtype), torch.device("cpu"), spec.naming)
        by_name = {layer.name: layer.module for layer in built.layers}
        missing = [n for part in job.stage_layers for n in part if n not in by_name]
        if missing:
            raise ZboptError(f"the plan's layer {missing[0]!r} is not a layer of preset "
                             f"{spec.preset}")
        modules = {s: nn.Sequential(*(by_name[n] for n in job.stage_layers[s])) for s in mine}
        one = built.make_input()
        x = torch.cat([one] * spec.microbatches)
        y = torch.zeros(spec.microbatches, 1)
        return modules, x, y, _scalar_loss
    from .fqn_model import FqnModel, build_batch, mse, split
    model = FqnModel(spec)
    x, y = build_batch(spec)
    return {s: split(model, job.stage_fqns[s]) for s in mine}, x, y, mse


@dataclass(frozen=True)
class _TimedJob:
    csv_paths: tuple[str, ...]  # one per schedule; their steps alternate
    spec: Any  # FqnSpec (stand-in) or PresetSpec (the profiled model)
    stage_fqns: tuple[tuple[str, ...], ...]
    stage_layers: tuple[tuple[str, ...], ...]  # layer names per stage (PresetSpec)
    rank_stages: tuple[tuple[int, ...], ...]
    steps: int
    warmup: int


def _timed(events: list, stage: int, method, kind_of):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        out = method(*args, **kwargs)
        events.append((kind_of(kwargs), stage, t0, time.perf_counter()))
        return out
    return wrapper


def _timed_rank(rank: int, job: _TimedJob, out_path: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    num_stages = len(job.stage_fqns)
    mine = job.rank_stages[rank]
    modules, x, y, loss_fn = _stage_modules(job, mine)
    # one set of stages and one runtime per schedule, all on the same modules
    runs = []
    for csv_path in job.csv_paths:
        events: list = []
        stages = []
        for s in mine:
            stage = PipelineStage(modules[s], s, num_stages, torch.device("cpu"))
            stage.forward_one_chunk = _timed(events, s, stage.forward_one_chunk,
                                             lambda kw: "F")
            # a full backward (torch B) is our fused B,W block: kept apart as "BW"
            stage.backward_one_chunk = _timed(
                events, s, stage.backward_one_chunk,
                lambda kw: "BW" if kw.get("full_backward", True) else "B")
            stage.backward_weight_one_chunk = _timed(events, s, stage.backward_weight_one_chunk,
                                                     lambda kw: "W")
            stages.append(stage)
        schedule = _PipelineScheduleRuntime(stages, n_microbatches=job.spec.microbatches,
                                            loss_fn=loss_fn, scale_grads=True)
        schedule._load_csv(csv_path)
        runs.append((schedule, events, []))
    has_first, has_last = 0 in mine, num_stages - 1 in mine
    for k in range(job.warmup + job.steps):
        # schedules alternate step by step, so drifting machine load touches all alike
        for schedule, events, steps in runs:
            for module in modules.values():
                module.zero_grad(set_to_none=True)
            events.clear()
            dist.barrier()
            t0 = time.perf_counter()
            schedule.step(*((x,) if has_first else ()), target=y if has_last else None,
                          losses=[] if has_last else None, return_outputs=False)
            t1 = time.perf_counter()
            if k >= job.warmup:
                steps.append({"start": t0, "end": t1, "events": list(events)})
    torch.save({"runs": [steps for _, _, steps in runs]}, out_path)


def _timed_worker(rank: int, world: int, workdir: str, job: _TimedJob, timeout: float) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # one thread per process: the plan's devices are the processes
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rendezvous", rank=rank,
                            world_size=world, timeout=timedelta(seconds=timeout))
    try:
        _timed_rank(rank, job, os.path.join(workdir, f"timed-rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@dataclass(frozen=True)
class DeviceTiming:
    """One device: busy seconds per pass kind per step, measured (median) and predicted."""

    device: int
    measured: dict[str, float]  # "F", "B", "W", and "BW" for fused backward blocks
    predicted: dict[str, float]
    measured_span: float  # median over steps of this device's last end - first start


@dataclass(frozen=True)
class Timing:
    """Measured against predicted, in seconds."""

    method: str
    devices: int
    microbatches: int
    steps: int
    predicted_span: float
    measured_spans: tuple[float, ...]  # per timed step
    measured_steps: tuple[float, ...]  # per timed step: wall time of step() (max over ranks)
    per_device: tuple[DeviceTiming, ...]
    seconds: float
    notes: tuple[str, ...] = field(default=())

    @property
    def measured_span(self) -> float:
        return statistics.median(self.measured_spans)

    @property
    def error(self) -> float:
        """(measured - predicted) / predicted, on the median span."""
        return (self.measured_span - self.predicted_span) / self.predicted_span

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(measured_span=self.measured_span, error=self.error)
        return out


def predicted_busy(instance: Instance, device: int, seconds_per_unit: float,
                   fused: bool) -> dict[str, float]:
    m = instance.microbatches
    out = {}
    for kind in KINDS:
        out[kind] = m * sum(instance.cost(s, kind) for s in instance.stages_of(device)) \
            * seconds_per_unit
    if fused:
        out["BW"] = out.pop("B") + out.pop("W")
    return out


def time_plan(instance: Instance, schedule: Schedule, spec, stage_fqns, steps: int = 5,
              warmup: int = 2, timeout: float = 600.0, stage_layers=None) -> Timing:
    """Run the order for `warmup` + `steps` steps on `spec`'s model; see the module doc."""
    return time_many([(instance, schedule)], spec, stage_fqns, steps, warmup, timeout,
                     stage_layers)[0]


def time_many(runs: list[tuple[Instance, Schedule]], spec, stage_fqns, steps: int = 5,
              warmup: int = 2, timeout: float = 600.0, stage_layers=None) -> list[Timing]:
    """time_plan for several schedules of one split in one launch, their steps alternating."""
    if steps < 1 or warmup < 0:
        raise ZboptError("--steps must be >= 1 and --warmup >= 0")
    instance = runs[0][0]
    if any(inst.devices != instance.devices or inst.num_stages != instance.num_stages
           or inst.placement != instance.placement for inst, _ in runs):
        raise ZboptError("time_many compares schedules of one placement and split")
    from .titan_runtime import check_world
    check_world(instance.devices)
    _require_torch()
    scale, known = time_scale(instance.time_unit)
    if not known:
        found = (f"the instance's time unit {instance.time_unit!r} is not one of s, ms, us, ns"
                 if instance.time_unit.strip() else "the instance has no time unit")
        raise ZboptError(f"{found}, and a prediction in seconds needs one: set time_unit "
                         f"(e.g. \"us\") in the instance or model the schedule was made from "
                         f"and write the schedule again")
    seconds_per_unit = scale * 1e-6
    all_rows = []
    for inst, schedule in runs:
        rows = torch_rows(inst, schedule)
        torch_check(rows, inst.num_stages, inst.microbatches)
        all_rows.append(rows)
    started = time.monotonic()
    import torch
    with tempfile.TemporaryDirectory(prefix="zbopt-timed-") as workdir:
        paths = []
        for k, rows in enumerate(all_rows):
            csv_path = Path(workdir) / f"schedule{k}.csv"
            csv_path.write_text(csv_text(rows))
            paths.append(str(csv_path))
        job = _TimedJob(tuple(paths), spec, tuple(tuple(p) for p in stage_fqns),
                        tuple(tuple(p) for p in (stage_layers or stage_fqns)),
                        tuple(instance.stages_of(d) for d in range(instance.devices)),
                        steps, warmup)
        failure = _run_processes(instance.devices, (instance.devices, workdir, job, timeout),
                                 timeout * len(runs), worker=_timed_worker)
        files = [Path(workdir) / f"timed-rank{r}.pt" for r in range(instance.devices)]
        if failure or not all(f.exists() for f in files):
            raise ZboptError(f"the timed run failed: {failure or 'a rank wrote no result'}")
        per_rank = [torch.load(f, weights_only=False)["runs"] for f in files]
    seconds = time.monotonic() - started
    return [_timing(inst, schedule, [r[j] for r in per_rank], steps, seconds_per_unit, seconds)
            for j, (inst, schedule) in enumerate(runs)]


def _timing(instance: Instance, schedule: Schedule, ranks: list, steps: int,
            seconds_per_unit: float, seconds: float) -> Timing:
    """One schedule's Timing from every rank's recorded steps."""
    predicted = evaluate(instance, schedule)
    spans, walls = [], []
    busy: list[dict[str, list[float]]] = [{} for _ in ranks]
    own_spans: list[list[float]] = [[] for _ in ranks]
    for k in range(steps):
        for d, rank_steps in enumerate(ranks):
            events = rank_steps[k]["events"]
            own_spans[d].append(max(e[3] for e in events) - min(e[2] for e in events))
            totals: dict[str, float] = {}
            for kind, _, t0, t1 in events:
                totals[kind] = totals.get(kind, 0.0) + (t1 - t0)
            for kind, value in totals.items():
                busy[d].setdefault(kind, []).append(value)
        spans.append(max(own_spans[d][-1] for d in range(len(ranks))))
        walls.append(max(r[k]["end"] for r in ranks) - min(r[k]["start"] for r in ranks))
    per_device = []
    for d in range(instance.devices):
        fused = "BW" in busy[d] and "B" not in busy[d]
        per_device.append(DeviceTiming(
            device=d, measured={k: statistics.median(v) for k, v in busy[d].items()},
            predicted=predicted_busy(instance, d, seconds_per_unit, fused),
            measured_span=statistics.median(own_spans[d])))
    return Timing(method=schedule.method, devices=instance.devices,
                  microbatches=instance.microbatches, steps=steps,
                  predicted_span=predicted.span * seconds_per_unit, measured_spans=tuple(spans),
                  measured_steps=tuple(walls), per_device=tuple(per_device), seconds=seconds)
