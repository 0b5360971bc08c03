"""Layered models: a model as an ordered list of layers, and a partition of its layers into
stages that turns it into an Instance (per-stage costs, activations and static memory).

File format (TOML or JSON; docs/formats.md): the instance keys without the per-stage cost keys
(t_f, t_b, t_w, m_b, m_w, static_memory), plus an ordered `[[layers]]` array, first to last:

    [[layers]]
    name = "block"
    t_f = 10.0      # forward time of one micro-batch
    t_b = 10.0      # input-gradient (B) time
    t_w = 8.0       # weight-gradient (W) time
    m_b = 4.0       # activation held from F to B
    m_w = 1.0       # part of it still held from B to W (m_w <= m_b)
    static = 12.0   # parameter, gradient and optimizer memory it pins on its device
    count = 16      # optional: that many identical layers

With layers, `memory_cap` is absolute per device (a number or a list per device: what the
accelerator holds, static memory included).
"""

from __future__ import annotations

import json
import numbers
from dataclasses import dataclass, field, replace
from itertools import accumulate
from pathlib import Path
from typing import Any, Iterable, Sequence

from .errors import ZboptError
from .instance import (
    COST_KEYS,
    MAX_TOTAL,
    Instance,
    _is_number,
    check_chunks,
    check_integers,
    check_keys,
    check_table,
    check_total_memory,
    check_total_time,
    construct,
    finite,
    listed,
    plain,
    read_table,
    refuse_other_inputs,
    resolve_instance,
    shown,
    to_toml,
)

LAYER_KEYS = ("name", "t_f", "t_b", "t_w", "m_b", "m_w", "static", "count")
_LAYER_NUMBERS = ("t_f", "t_b", "t_w", "m_b", "m_w", "static")
MODEL_KEYS = ("name", "devices", "microbatches", "placement", "chunks", "time_unit", "comm",
              "overlap", "memory_unit", "memory_cap", "expert_parallel", "layers")
# keys of a per-stage instance that a layered file must not carry (the layers give them)
STAGE_KEYS = ("t_f", "t_b", "t_w", "m_b", "m_w", "static_memory")
# most layers a model may expand to (counts included): real models have at most a few hundred,
# and every command holds each expanded layer (and plan's bounds are quadratic in them)
MAX_LAYERS = 4096


def _number(source: str, key: str, value: Any) -> float:
    if not _is_number(value) or not finite(value) or value < 0:
        raise ZboptError(f"{source}: {key} must be a finite number >= 0, got {shown(value)}")
    return plain(value)


def require_model(x: Any, where: str) -> "LayeredModel":
    """`x` if it is a LayeredModel, else ZboptError saying how to get one (`where`: the
    function that was given it, e.g. "plan()")."""
    if isinstance(x, LayeredModel):
        return x
    if isinstance(x, Instance):
        hint = "an Instance has its stages fixed already; load a model with [[layers]] with " \
               "zbopt.layers.load_model(path or shipped name)"
    elif isinstance(x, (str, Path)):
        hint = f"load one with zbopt.layers.load_model({str(x)!r})"
    elif isinstance(x, dict):
        hint = "build one with LayeredModel.from_dict(...)"
    else:
        hint = "load one with zbopt.layers.load_model(path or shipped name)"
    raise ZboptError(f"{where}: expected a zbopt LayeredModel, got {type(x).__name__}: {hint}")


@dataclass(frozen=True)
class Layer:
    name: str
    t_f: float
    t_b: float
    t_w: float
    m_b: float = 0.0
    m_w: float = 0.0
    static: float = 0.0
    count: int = 1

    def __post_init__(self) -> None:
        """A layer built directly is held to the rules of one read from a file."""
        if not isinstance(self.name, str) or not self.name:
            raise ZboptError(f"every layer needs a name (a non-empty string), got "
                             f"{shown(self.name)}")
        if not self.name.isprintable():  # it is a module FQN, printed in the plan's tables
            raise ZboptError(f"layer name {self.name!r} has a control character or line break: "
                             f"a layer's name is its module name (FQN); give a printable name")
        where = f"layer {self.name!r}"
        for key in _LAYER_NUMBERS:
            object.__setattr__(self, key, _number(where, key, listed(getattr(self, key), key)))
        if self.m_w > self.m_b:
            raise ZboptError(f"{where}: m_w ({self.m_w}) exceeds m_b ({self.m_b}): m_w is the "
                             f"part of m_b kept for W")
        count = listed(self.count, "count")
        if not isinstance(count, numbers.Integral) or isinstance(count, bool) or count < 1:
            raise ZboptError(f"{where}: count must be an integer >= 1, got {shown(count)}")
        object.__setattr__(self, "count", int(count))

    @classmethod
    def from_dict(cls, data: Any, source: str) -> "Layer":
        if not isinstance(data, dict):
            raise ZboptError(f"{source}: a layer is a table of keys, got {data!r}")
        unknown = sorted(set(data) - set(LAYER_KEYS))
        if unknown:
            raise ZboptError(f"{source}: unknown key(s) {', '.join(unknown)}; a layer has "
                             f"{', '.join(LAYER_KEYS)}")
        name = data.get("name")
        if not isinstance(name, str) or not name:
            raise ZboptError(f"{source}: every layer needs a name (a non-empty string)")
        where = f"{source}: layer {name!r}"
        missing = [k for k in ("t_f", "t_b", "t_w") if k not in data]
        if missing:
            raise ZboptError(f"{where} has no {', '.join(missing)}: give every layer its "
                             f"t_f, t_b and t_w")
        try:  # __post_init__ checks the numbers, m_w against m_b and the count
            return cls(name=name, count=data.get("count", 1),
                       **{k: data.get(k, 0) for k in _LAYER_NUMBERS})
        except ZboptError as err:
            raise ZboptError(f"{source}: {err}") from None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        for key in _LAYER_NUMBERS:
            out[key] = getattr(self, key)
        if self.count != 1:
            out["count"] = self.count
        return out


@dataclass(frozen=True)
class LayeredModel:
    """A model as layers plus the pipeline settings; `instance(partition)` gives the problem."""

    layers: tuple[Layer, ...]  # as written (a layer may have count > 1)
    devices: int
    microbatches: int
    placement: str = "contiguous"
    chunks: int = 0
    comm: float = 0
    overlap: float = 0.0
    memory_cap: Any = None  # None, a number, or one number per device (absolute)
    name: str = ""
    time_unit: str = ""
    memory_unit: str = ""
    # devices sharing each stage's routed experts, as the costs were estimated (zbopt estimate
    # --expert-parallel); the plan does not read it, export --torchtitan passes it on
    expert_parallel: int = 1
    expanded: tuple[Layer, ...] = field(default=(), init=False, compare=False)

    def __post_init__(self) -> None:
        if not self.layers:
            raise ZboptError("a layered model needs at least one layer")
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen dataclass)
        if not isinstance(self.layers, (list, tuple)):
            raise ZboptError(f"layers must be a list of zbopt.layers.Layer, got "
                             f"{type(self.layers).__name__}")
        odd = sorted({type(x).__name__ for x in self.layers if not isinstance(x, Layer)})
        if odd:
            raise ZboptError(f"layers must hold zbopt.layers.Layer only (Layer(name=..., t_f=..., "
                             f"t_b=..., t_w=...) or Layer.from_dict), got {', '.join(odd)}")
        set_("layers", tuple(self.layers))
        for key in ("memory_cap", "comm", "overlap"):
            set_(key, listed(getattr(self, key), key))
        if isinstance(self.memory_cap, (list, tuple)):
            set_("memory_cap", tuple(map(plain, self.memory_cap)))
        else:
            set_("memory_cap", plain(self.memory_cap))
        for key in ("comm", "overlap"):  # checked by the probe instance below
            set_(key, plain(getattr(self, key)))
        for key, value in check_integers(devices=self.devices, microbatches=self.microbatches,
                                         chunks=self.chunks,
                                         expert_parallel=self.expert_parallel).items():
            set_(key, value)
        if self.expert_parallel < 1:
            raise ZboptError(f"expert_parallel must be at least 1 (devices sharing a stage's "
                             f"experts), got {self.expert_parallel}: write 1 for a dense model "
                             f"or leave the key out")
        total = self._check_size()
        # before the probe below, which holds a list per stage
        if self.num_parts > total:
            fewer = "fewer devices or chunks" if self.placement == "interleaved" \
                else "fewer devices"
            other = "" if self.placement in ("contiguous", None) else \
                f", or another placement (with zbopt plan, drop {self.placement!r} from " \
                f"--placements)"
            raise ZboptError(f"{self.num_parts} stages but only {total} layers on placement "
                             f"{self.placement!r} with {self.devices} devices: every stage needs "
                             f"at least one layer; use {fewer}{other}")
        self._check_totals()
        object.__setattr__(self, "expanded", tuple(
            replace(layer, count=1, name=layer.name if layer.count == 1 else f"{layer.name}.{i}")
            for layer in self.layers for i in range(layer.count)))
        # validates devices, microbatches, placement, chunks, comm and overlap
        self._instance_for([1.0] * self.num_parts, [0.0] * self.num_parts,
                           [0.0] * self.devices, cap=None)
        if sum(x.t_f + x.t_b + x.t_w for x in self.expanded) <= 0:
            raise ZboptError("every layer's t_f, t_b and t_w are zero: give the layers their "
                             "times")
        seen: set[str] = set()
        for layer in self.expanded:
            if layer.name in seen:
                raise ZboptError(f"two layers are named {layer.name!r}: a layer's name is its "
                                 f"module name, so each names one layer")
            seen.add(layer.name)
        self._check_cap()
        for key in ("name", "time_unit", "memory_unit"):
            if not isinstance(getattr(self, key), str):
                raise ZboptError(f"{key} must be a string, got {getattr(self, key)!r}")

    def _check_size(self) -> int:
        """The number of layers once counts are expanded, refused past MAX_LAYERS before
        anything is expanded."""
        total = sum(layer.count for layer in self.layers)
        if total <= MAX_LAYERS:
            return total
        big = max(self.layers, key=lambda layer: layer.count)  # the first of equal counts
        size = f"{total:,}" if total < 10**21 else shown(total)
        limit = f"beyond zbopt's limit of {MAX_LAYERS:,} layers (real models have at most a few " \
                f"hundred)"
        rest = total - big.count
        if big.count > 1 and rest < MAX_LAYERS:
            count = f"{big.count:,}" if big.count < 10**21 else shown(big.count)
            raise ZboptError(f"layer {big.name!r} has count {count}, which makes {size} layers, "
                             f"{limit}: lower its count to at most {MAX_LAYERS - rest:,}")
        raise ZboptError(f"the layers make {size} (counts included), {limit}: use fewer, larger "
                         f"layers")

    def _check_totals(self) -> None:
        """Instance's limit on totals (MAX_TOTAL), for every partition at once: the passes'
        total time is the same whatever the split (every micro-batch runs every layer once),
        and no device holds more than all the layers' static memory (twice on dualpipe, whose
        devices hold two parts) plus every micro-batch's activations of all the layers. The
        message names the layer and figure that contribute most."""
        m, comm = self.microbatches, self.comm
        if self.devices < 1 or m < 1 or not isinstance(comm, (int, float)) \
                or isinstance(comm, bool) or not finite(comm) or comm < 0:
            return  # the probe instance says what is wrong with these
        passes = 3 * self.num_parts * m  # dualpipe: 2p stages, m/2 micro-batches each

        def total(key: str) -> float:
            return sum(layer.count * getattr(layer, key) for layer in self.layers)

        def named(key: str) -> tuple[str, float]:
            """(the label, the value) of the layer whose `key` adds most (counts included;
            the first of equals)"""
            layer = max(self.layers, key=lambda x: x.count * getattr(x, key))
            return f"layer {layer.name!r}: {key}", getattr(layer, key)

        time = {key: m * total(key) for key in COST_KEYS}
        time["comm"] = comm * passes
        key = max(time, key=time.__getitem__)
        if sum(time.values()) > MAX_TOTAL:
            label, value = ("comm", comm) if key == "comm" else named(key)
            check_total_time(label, value, sum(time.values()))
        copies = 2 if self.placement == "dualpipe" else 1
        memory = {"static": copies * total("static"), "m_b": m * total("m_b")}
        if sum(memory.values()) > MAX_TOTAL:
            key = max(memory, key=memory.__getitem__)
            label, value = named(key)
            check_total_memory(label, value, sum(memory.values()), "a device with every layer")

    def _check_cap(self) -> None:
        cap = self.memory_cap
        if cap is None:
            return
        if isinstance(cap, str):
            raise ZboptError(f"memory_cap {cap!r}: a layered model's cap is absolute per device "
                             f"(what the accelerator holds, static memory included), not a "
                             f"multiple of p")
        values = cap if isinstance(cap, (list, tuple)) else (cap,)
        if isinstance(cap, (list, tuple)) and len(cap) != self.devices:
            raise ZboptError(f"memory_cap lists {len(cap)} values but there are {self.devices} "
                             f"devices: give one number, or one per device")
        for x in values:
            if not _is_number(x) or not finite(x) or x <= 0:
                raise ZboptError(f"memory_cap must be a positive number (or one per device), "
                                 f"got {shown(x)}")

    @property
    def num_stages(self) -> int:
        implied = {"contiguous": 1, "v": 2, "dualpipe": 2}.get(self.placement)
        return (self.chunks or implied or 2) * self.devices

    @property
    def num_parts(self) -> int:
        """Model stages a partition cuts: one per pipeline stage, except dualpipe, whose two
        directions run two copies of the same p parts."""
        return self.devices if self.placement == "dualpipe" else self.num_stages

    @property
    def num_layers(self) -> int:
        return len(self.expanded)

    def prefix_sums(self, key: str) -> tuple[float, ...]:
        """`key` (t_f, m_b, static...) summed over the expanded layers before each cut: entry i
        is layers 0..i-1's total, so a segment [i, j) has entry j minus entry i."""
        return (0.0, *accumulate(getattr(x, key) for x in self.expanded))

    def with_settings(self, **changes) -> "LayeredModel":
        """The same layers with other pipeline settings (devices, microbatches, memory_cap...)."""
        return replace(self, **changes)

    # ----- partitions --------------------------------------------------------------------------

    def check_partition(self, sizes: Sequence[int]) -> tuple[int, ...]:
        """A partition is the number of (expanded) layers of each stage, in stage order along
        the model: every stage at least one, all layers used. Returned as plain ints."""
        if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Iterable):
            raise ZboptError(f"give a list of layer counts, one per stage, got "
                             f"{type(sizes).__name__}"
                             + (f" {sizes!r}" if isinstance(sizes, str) else ""))
        sizes = tuple(sizes)
        odd = [n for n in sizes if not isinstance(n, numbers.Integral) or isinstance(n, bool)]
        if odd:
            raise ZboptError(f"sizes must be whole numbers (layers per stage), got "
                             f"{shown(plain(odd[0]))}")
        sizes = tuple(map(int, sizes))
        if len(sizes) != self.num_parts:
            raise ZboptError(f"the partition has {len(sizes)} stages, the model "
                             f"{self.num_parts}")
        if any(n < 1 for n in sizes):
            raise ZboptError(f"every stage needs at least one layer, got {list(sizes)}")
        if sum(sizes) != self.num_layers:
            raise ZboptError(f"the partition covers {sum(sizes)} layers, the model has "
                             f"{self.num_layers}")
        return sizes

    def stage_layers(self, sizes: Sequence[int]) -> list[tuple[Layer, ...]]:
        """The layers of each model stage (in model order)."""
        sizes = self.check_partition(sizes)
        out, i = [], 0
        for n in sizes:
            out.append(self.expanded[i:i + n])
            i += n
        return out

    def instance(self, sizes: Sequence[int]) -> Instance:
        """The per-stage Instance of this partition; static memory sums per device."""
        groups = self.stage_layers(sizes)
        # model part k runs as pipeline stage k; dualpipe's second direction runs part k again
        # as stage p + k (on device p-1-k), so each device holds two parts' static memory
        totals = {key: [sum(getattr(x, key) for x in g) for g in groups]
                  for key in ("t_f", "t_b", "t_w", "m_b", "m_w", "static")}
        static = [0.0] * self.devices
        device_of = self.stage_devices()
        copies = (0, self.devices) if self.placement == "dualpipe" else (0,)
        for k, value in enumerate(totals["static"]):
            for offset in copies:
                static[device_of[k + offset]] += value
        return Instance(
            devices=self.devices, microbatches=self.microbatches, placement=self.placement,
            chunks=self.chunks, t_f=totals["t_f"], t_b=totals["t_b"], t_w=totals["t_w"],
            comm=self.comm, overlap=self.overlap, m_b=totals["m_b"], m_w=totals["m_w"],
            static_memory=static, memory_cap=_cap(self.memory_cap), name=self.name,
            time_unit=self.time_unit, memory_unit=self.memory_unit)

    def stage_devices(self) -> tuple[int, ...]:
        """The device of each pipeline stage on this placement (Instance.device_of)."""
        probe = self._instance_for([1.0] * self.num_parts, [0.0] * self.num_parts,
                                   [0.0] * self.devices, cap=None)
        return tuple(probe.device_of(s) for s in range(probe.num_stages))

    def _instance_for(self, t_f, m_b, static, cap) -> Instance:
        return Instance(devices=self.devices, microbatches=self.microbatches,
                        placement=self.placement, chunks=self.chunks, t_f=list(t_f),
                        t_b=0, t_w=0, comm=self.comm, overlap=self.overlap, m_b=list(m_b),
                        m_w=0, static_memory=list(static), memory_cap=cap)

    # ----- files -------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in MODEL_KEYS:
            value = getattr(self, key)
            if key == "layers":
                continue
            if key in ("name", "time_unit", "memory_unit") and not value:
                continue
            if key == "chunks":
                if self.placement != "interleaved":
                    continue
                value = self.num_stages // self.devices
            if (key == "overlap" and not value) or (key == "expert_parallel" and value == 1):
                continue
            if key == "memory_cap":
                if value is None:
                    continue
                value = list(value) if isinstance(value, tuple) else value
            out[key] = value
        out["layers"] = [layer.to_dict() for layer in self.layers]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "model") -> "LayeredModel":
        check_table(data, source)
        stage_keys = sorted(set(data) & set(STAGE_KEYS))
        if stage_keys:
            raise ZboptError(f"{source}: a layered file takes its costs from [[layers]]; remove "
                             f"the per-stage key(s) {', '.join(stage_keys)}")
        check_keys(data, source, MODEL_KEYS)
        check_chunks(data, source)
        layers = data.get("layers")
        if not isinstance(layers, list) or not layers:
            raise ZboptError(f"{source}: [[layers]] must be a non-empty array of tables")
        parsed = tuple(Layer.from_dict(x, f"{source}: layers[{i}]") for i, x in enumerate(layers))
        settings = {k: v for k, v in data.items() if k != "layers"}
        if isinstance(settings.get("memory_cap"), list):
            settings["memory_cap"] = tuple(settings["memory_cap"])
        return construct(cls, source, layers=parsed, **settings)

    def save(self, path: str | Path, overwrite: bool = False, inputs: Sequence[str | Path] = (),
             header: str = "") -> Path:
        """Write the model as JSON (.json) or TOML, whole or not at all; never over an
        existing file without `overwrite`, nor over one of `inputs`. `header` (comment lines)
        opens a TOML file."""
        from .export.outputs import require_path, write_file
        data = self.to_dict()
        if require_path(path, "save()'s path").suffix.lower() == ".json":
            text = json.dumps(data, indent=1) + "\n"
        else:
            layers = data.pop("layers")
            text = header + to_toml(data) + "".join("\n[[layers]]\n" + to_toml(layer)
                                                    for layer in layers)
        return write_file(path, text, overwrite, inputs, force_flag="overwrite=True")


def _cap(spec: Any) -> Any:
    if isinstance(spec, tuple):
        return list(spec)
    return spec


def is_layered(data: dict[str, Any]) -> bool:
    return isinstance(data, dict) and "layers" in data


def load_model(path: str | Path) -> LayeredModel:
    """Read a layered model file (.toml or .json), or a shipped one by name."""
    path = resolve_instance(path)
    data = read_table(path, "layered model")
    kind = data.get("format")
    if isinstance(kind, str) and kind.startswith("zbopt."):  # a file zbopt wrote, not a model
        schedule = kind.startswith("zbopt.schedule/")
        raise ZboptError(f"{path} is {'a schedule or plan' if schedule else 'a ' + kind} file, "
                         f"not a layered model: plan takes a layered model file (.toml or .json "
                         f"with [[layers]])" + ("; evaluate, solve or export this one as it is"
                                                if schedule else ""))
    if not is_layered(data):
        refuse_other_inputs(data, str(path), "a layered model")
        raise ZboptError(f"{path}: no [[layers]] array: this is a per-stage instance, not a "
                         f"layered model; give a file with [[layers]] (zbopt estimate or zbopt "
                         f"profile writes one; blocks16-p4 is shipped), or solve or compare this one "
                         f"as it is")
    return LayeredModel.from_dict(data, source=str(path))


def even_partition(model: LayeredModel) -> tuple[int, ...]:
    """Equal numbers of layers per stage (the first stages take the remainder)."""
    stages, layers = model.num_parts, model.num_layers
    base, extra = divmod(layers, stages)
    return tuple(base + (1 if k < extra else 0) for k in range(stages))

