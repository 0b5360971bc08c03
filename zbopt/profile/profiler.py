"""Profile a model layer by layer and turn the measurements into a layered model file."""

from __future__ import annotations

import platform
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ..errors import ZboptError, described, first_line
from ..layers import Layer, LayeredModel
from .measure import CLOCKS, Clock, LayerTimes, Repetition, iqr, median, memory, to_times
from .models import USER_ERRORS, ModelSpec

DTYPES = ("float32", "bfloat16", "float16")
TIME_UNIT = "us"
MEMORY_UNIT = "bytes"
# mixed-precision Adam: bf16 weight and gradient (2 + 2) plus fp32 master weight, m and v (12)
BYTES_PER_PARAM = 16


@dataclass(frozen=True)
class Profile:
    """What one run measured, and how."""

    name: str
    naming: str
    layers: tuple[LayerTimes, ...]
    settings: dict[str, Any] = field(default_factory=dict)

    def layered_model(self, devices: int, microbatches: int, memory_cap: Any = None,
                      bytes_per_param: float = BYTES_PER_PARAM, pool: bool = True) -> LayeredModel:
        return LayeredModel(layers=tuple(to_layers(self.layers, bytes_per_param, pool)),
                            devices=devices, microbatches=microbatches, memory_cap=memory_cap,
                            name=self.title(), time_unit=TIME_UNIT, memory_unit=MEMORY_UNIT)

    def title(self) -> str:
        s = self.settings
        return (f"{self.name} b={s.get('microbatch_size')} s={s.get('seq_len')} {s.get('dtype')} "
                f"{s.get('device')} {s.get('threads')} thread(s) {s.get('clock')} clock")

    def summary(self) -> list[dict[str, Any]]:
        """Per measured layer: medians, IQRs and the full backward peer (microseconds)."""
        rows = []
        for t in self.layers:
            row: dict[str, Any] = {"name": t.name, "parameters": t.parameters, "m_b": t.m_b,
                                   "m_w_measured": t.m_w}
            for kind in ("t_f", "t_b", "t_w", "t_full"):
                samples = getattr(t, kind)
                row[kind] = median(samples)
                row[f"{kind}_iqr"] = iqr(samples)
            rows.append(row)
        return rows


def to_layers(times: tuple[LayerTimes, ...] | list[LayerTimes], bytes_per_param: float,
              pool: bool = True) -> list[Layer]:
    """Layers for the file: medians in microseconds, bytes, static = parameters x bytes per
    parameter. With `pool`, a run of consecutive layers of one group becomes one layer with a
    count, from all their samples together (identical blocks differ only by noise); only a run
    named `group.0` .. `group.N-1` whose layers have the same parameters and saved bytes pools,
    so that the count expands to the names measured."""
    runs: list[list[LayerTimes]] = []
    for t in times:
        if pool and t.group and runs and runs[-1][0].group == t.group:
            runs[-1].append(t)
        else:
            runs.append([t])
    runs = [part for run in runs for part in (
        [run] if _poolable(run) else [[t] for t in run])]
    layers = []
    for run in runs:
        pooled = {kind: tuple(s for t in run for s in getattr(t, kind)) for kind in ("t_f", "t_b", "t_w")}
        first = run[0]
        layers.append(Layer(
            name=first.group if len(run) > 1 else first.name,
            t_f=round(median(pooled["t_f"]), 3), t_b=round(median(pooled["t_b"]), 3),
            t_w=round(median(pooled["t_w"]), 3), m_b=first.m_b, m_w=min(first.m_w, first.m_b),
            static=_static(first.parameters, bytes_per_param), count=len(run)))
    return layers


def _poolable(run: list[LayerTimes]) -> bool:
    shape = lambda t: (t.parameters, t.m_b, t.m_w)  # noqa: E731
    return all(t.name == f"{run[0].group}.{i}" and shape(t) == shape(run[0]) for i, t in enumerate(run))


def _static(parameters: int, bytes_per_param: float) -> float:
    value = parameters * bytes_per_param
    return int(value) if float(value).is_integer() else value


def resolve_device(name: str):
    import torch
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ZboptError(f"--device {name!r}: give auto, cpu or cuda") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ZboptError("--device cuda: no CUDA device here; use --device cpu")
    if device.type not in ("cpu", "cuda"):
        raise ZboptError(f"--device {name!r}: give auto, cpu or cuda")
    return device


def resolve_dtype(name: str, device):
    import torch
    if name not in DTYPES:
        raise ZboptError(f"--dtype {name!r}: choose one of {', '.join(DTYPES)}")
    dtype = getattr(torch, name)
    try:
        a = torch.ones(4, 4, dtype=dtype, device=device, requires_grad=True)
        (a @ a).sum().backward()
    except RuntimeError:
        raise ZboptError(f"--dtype {name} is not supported on {device}: use float32") from None
    return dtype


@contextmanager
def threads(n: int) -> Iterator[None]:
    """torch's intra-op threads for the measurement (one by default: steadier on a shared CPU)."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def cause(err: BaseException) -> str:
    """zbopt.errors.described of `err`, or of what it wraps when it is torch's pipelining
    backward saying only that it failed (`Failed to run stage backward input:`): the layer's
    own error is its cause."""
    while isinstance(err, RuntimeError) and err.__cause__ is not None \
            and first_line(err).startswith("Failed to run stage backward"):
        err = err.__cause__
    return described(err)


def layer_inputs(model: ModelSpec) -> list[Any]:
    """The input of every layer for one micro-batch (a forward without gradients)."""
    import torch
    inputs = []
    with torch.no_grad():
        try:
            x = model.make_input()
        except ZboptError:  # function_model's make_input names the --module
            raise
        except USER_ERRORS as err:
            raise ZboptError(f"make_input() raised {described(err)}") from None
        for layer in model.layers:
            inputs.append(x)
            try:
                x = layer.module(x)
            except USER_ERRORS as err:  # a user's layer may fail in any way, sys.exit() too
                raise ZboptError(f"layer {layer.name!r} failed on its input ({described(err)})") from None
            if not isinstance(x, torch.Tensor):
                raise ZboptError(f"layer {layer.name!r} returned {type(x).__name__}: every layer "
                                 f"returns one tensor")
    return inputs


def profile(model: ModelSpec, warmup: int = 2, repeat: int = 10, device=None, thread_count: int = 1,
            settings: dict[str, Any] | None = None,
            progress: Callable[[str, int, int], None] | None = None, clock: str = "wall") -> Profile:
    """Measure every layer of `model` (already on `device`). Repetitions go round-robin over the
    layers (repetition 1 of every layer, then 2, ...), so a burst of load on a shared machine
    lands on all layers alike rather than on whichever was being measured. `clock`: "wall"
    (elapsed) or "cpu" (this thread's CPU time; CPU, one thread). `progress(layer name,
    done, total)` is called after each layer repetition."""
    import torch
    if warmup < 0 or repeat < 1 or thread_count < 1:
        raise ZboptError("warm-up must be >= 0, repeat and threads >= 1")
    device = device or torch.device("cpu")
    if clock not in CLOCKS:
        raise ZboptError(f"--clock {clock!r}: choose {' or '.join(CLOCKS)}")
    if clock == "cpu" and (device.type != "cpu" or thread_count != 1):
        raise ZboptError("--clock cpu counts this thread's CPU time: use it on the CPU with --threads 1")
    total, done = len(model.layers) * (warmup + repeat), 0
    with threads(thread_count):
        torch.manual_seed(0)
        inputs = layer_inputs(model)
        timer = Clock(device, clock)
        try:
            # the model's first layer has no B (torch's runtime skips it on the first stage)
            memories = [_measured(layer.name, memory, layer.module, x, k == 0)
                        for k, (layer, x) in enumerate(zip(model.layers, inputs))]
            runs = [Repetition(layer.module, x, timer, k == 0)
                    for k, (layer, x) in enumerate(zip(model.layers, inputs))]
            samples: list[list] = [[] for _ in runs]
            for i in range(warmup + repeat):
                for k, (layer, run) in enumerate(zip(model.layers, runs)):
                    result = _measured(layer.name, run.run)
                    if i >= warmup:
                        samples[k].append(result)
                    done += 1
                    if progress is not None:
                        progress(layer.name, done, total)
        finally:
            for layer in model.layers:
                for p in layer.module.parameters():
                    p.grad = None
    measured = tuple(to_times(layer.name, layer.group, layer.module, m_b, m_w, s)
                     for layer, (m_b, m_w), s in zip(model.layers, memories, samples))
    info = {"warmup": warmup, "repeat": repeat, "threads": thread_count, "device": str(device),
            "clock": clock, "torch": torch.__version__, "python": platform.python_version(),
            "machine": platform.machine(), "processor": platform.processor() or platform.machine()}
    return Profile(name=model.name, naming=model.naming, layers=measured,
                   settings={**model.settings, **(settings or {}), **info})


def _measured(name: str, call: Callable[..., Any], *args: Any) -> Any:
    """`call(*args)`, which runs layer `name`'s forward and backward: whatever the layer raises
    (sys.exit() too), or torch raises on what it returns, is one line naming the layer."""
    try:
        return call(*args)
    except USER_ERRORS as err:
        raise ZboptError(f"layer {name!r} cannot be measured ({cause(err)})") from None
