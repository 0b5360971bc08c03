"""Instance: the problem data (devices, micro-batches, placement, costs, memory), validated and immutable.

File format (TOML, or JSON with the same keys): docs/formats.md; unknown keys are an error.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator

from .errors import ZboptError, reason
from .sizes import bytes_with_unit, in_unit, readable

PLACEMENTS = ("contiguous", "interleaved", "v", "dualpipe")
KINDS = ("F", "B", "W")
COST_KEYS = ("t_f", "t_b", "t_w")

# the evaluator holds every pass in memory: past this an instance would exhaust it
MAX_PASSES = 20_000_000

# the most any total of times or of memory may come to: the passes' total time (each pass's
# cost plus comm) and what a device could hold at once (static memory plus every activation
# it holds). Below 2**53, so sums of integer figures stay exact floats (1e17 + 1 is 1e17), and
# far from float overflow however the evaluator, bounds and solvers combine them.
MAX_TOTAL = 10**15
MAX_TOTAL_TEXT = "10^15"

_CAP_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*p\s*$")

# Keys accepted in instance files, in the order they are written.
FILE_KEYS = (
    "name", "devices", "microbatches", "placement", "chunks",
    "time_unit", "t_f", "t_b", "t_w", "comm", "overlap",
    "memory_unit", "m_b", "m_w", "memory_cap", "static_memory",
)


def near_whole(x: float) -> bool:
    """Whether `x` is a whole number up to float noise (8.000000000000002 is 8)."""
    return abs(x - round(x)) <= 1e-9 * max(1.0, abs(x))


def cap_limit(cap: float) -> float:
    """The highest memory level within_cap lets fit under `cap`: a relative tolerance for float
    data."""
    return cap + 1e-9 * max(1.0, abs(cap))


def within_cap(level: float, cap: float) -> bool:
    """Whether a memory level is within a cap, with a relative tolerance for float data."""
    return level <= cap_limit(cap)


def _is_number(x: Any) -> bool:
    """A real number, bool excluded: int and float, and numpy's scalars or a Fraction too
    (numbers.Real), which plain() turns into int or float."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def plain(x: Any) -> Any:
    """A number as a plain int (numbers.Integral) or float (any other numbers.Real), so that
    nothing past construction sees numpy's scalars; anything else as it is."""
    if type(x) is int or type(x) is float or isinstance(x, bool) \
            or not isinstance(x, numbers.Real):
        return x
    if isinstance(x, numbers.Integral):
        return int(x)
    try:
        return float(x)
    except OverflowError:  # a Fraction beyond a float: as unusable as an infinite value
        return math.inf if x > 0 else -math.inf


def cap_spec_fits_some_instance(spec: Any) -> bool:
    """Whether `spec` is a memory cap some instance could take: None, a positive finite number,
    a multiple of p ("1.5p"), or a list of those (one per device: how many is the instance's
    to say). Byte sizes ("80GB") are for the command line's --mem."""
    spec = listed(spec, "memory_cap")
    items = spec if isinstance(spec, (list, tuple)) else (spec,)
    return spec is None or all(
        (_is_number(x) and finite(x) and x > 0) or (isinstance(x, str) and _CAP_RE.match(x))
        for x in items)


def listed(x: Any, name: str) -> Any:
    """A numpy array (or anything else with `ndim` and `tolist`) as its plain values: a tuple
    for one dimension, the number for none; anything else as it is. Arrays of more dimensions
    are refused by name, so a per-stage or per-device value may come straight from numpy."""
    ndim, tolist = getattr(x, "ndim", None), getattr(x, "tolist", None)
    if not isinstance(ndim, int) or not callable(tolist) or isinstance(x, (list, tuple)):
        return x
    if ndim == 0:
        return tolist()
    if ndim == 1:
        return tuple(tolist())
    raise ZboptError(f"{name} must be a number or a list of numbers, got an array of "
                     f"{ndim} dimensions: give one value per stage (or device)")


def require_instance(x: Any, where: str) -> "Instance":
    """`x` if it is an Instance, else ZboptError saying how to get one (`where`: the function
    that was given it, e.g. "run()"): a public entry point's first check, a cheap isinstance."""
    if isinstance(x, Instance):
        return x
    if isinstance(x, (str, os.PathLike)):
        hint = f"load one with zbopt.instance.load_instance({str(x)!r})"
    elif isinstance(x, dict):
        hint = "build one with Instance.from_dict(...) or Instance(devices=..., microbatches=...)"
    elif type(x).__name__ == "LayeredModel":
        hint = "a layered model gives one per partition: model.instance(sizes)"
    else:
        hint = "load one with zbopt.instance.load_instance(path or shipped name), or build " \
               "one with Instance(devices=..., microbatches=...)"
    raise ZboptError(f"{where}: expected a zbopt Instance, got {type(x).__name__}: {hint}")


def finite(x: Any) -> bool:
    """Whether a number is finite; an integer too large for a float is as unusable as an
    infinite one (math.isfinite would raise OverflowError on it)."""
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def shown(x: Any) -> str:
    """`x` as a message quotes it: repr (str for a float, numpy's included), except an integer
    of more than 20 digits, which is described by its length rather than spelt out."""
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 10**21:
        return f"{'a negative' if x < 0 else 'an'} integer of {len(str(abs(x)))} digits"
    return str(x) if isinstance(x, float) else repr(x)


def check_integers(**values: Any) -> dict[str, int]:
    """Counts (devices, microbatches, chunks) must be integers (numbers.Integral: numpy's
    included), returned as plain ints by key; a whole float such as 2.0 is refused too, with
    the integer to write instead. Shared by Instance and LayeredModel."""
    out = {}
    for key, value in values.items():
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            whole = _is_number(value) and finite(value) and float(value).is_integer()
            fix = f"write {key} = {int(value)}" if whole else "give a whole number"
            raise ZboptError(f"{key} must be an integer, got {shown(plain(value))}: {fix}")
        out[key] = int(value)
    return out


def _total_text(total: float) -> str:
    return f"{total:.3g}" if math.isfinite(total) else "more than 1e308"


class TooLarge(ZboptError):
    """A total past MAX_TOTAL; `kind` says which: "time" or "memory", and `reason` is the
    message without its advice (a larger unit), so that a caller which scaled the figures, as
    the exact solvers do, or derived them from its own flags, as estimate does, can say what to
    change in its own terms."""

    def __init__(self, reason: str, kind: str):
        super().__init__(f"{reason}: give the {'times' if kind == 'time' else 'memory'} in a "
                         f"larger unit")
        self.reason = reason
        self.kind = kind

    def __reduce__(self):  # pickled with its kind (compare's worker processes send errors back)
        return type(self), (self.reason, self.kind)


def check_total_time(key: str, value: Any, total: float) -> None:
    """The passes' total time must stay at or below MAX_TOTAL; `key` is the figure that
    contributes most, `value` its largest value (both named in the message). Shared by Instance
    and LayeredModel."""
    if total > MAX_TOTAL:
        raise TooLarge(f"{key} ({shown(value)}) is too large: it makes the passes' total time "
                       f"(every pass's time, plus comm once per pass) {_total_text(total)}, "
                       f"and zbopt's limit is {MAX_TOTAL_TEXT} (past it sums lose precision)",
                       "time")


def check_total_memory(key: str, value: Any, total: float, where: str) -> None:
    """What one device could hold (static memory plus every activation it holds) must stay at
    or below MAX_TOTAL; `where` says which device. Shared by Instance and LayeredModel."""
    if total > MAX_TOTAL:
        raise TooLarge(f"{key} ({shown(value)}) is too large: with it {where} could hold "
                       f"{_total_text(total)} at once (static memory plus the activations of "
                       f"every micro-batch), and zbopt's limit is {MAX_TOTAL_TEXT} (past it "
                       f"sums lose precision)", "memory")


def _stage_values(name: str, value: Any, stages: int, parts: int | None = None) -> tuple:
    """Broadcast a scalar to every stage, or check a per-stage list (non-negative, finite)."""
    if _is_number(value):
        values = (plain(value),) * stages
    elif isinstance(value, (list, tuple)):
        values = tuple(map(plain, value))
        if parts is not None and len(values) == parts and parts != stages:
            # dualpipe: one value per model part, shared by both copies (stage p+k is part k)
            values = values + values
        if len(values) != stages:
            raise ZboptError(
                f"{name} has {len(values)} values but the instance has {stages} stages: "
                f"give one value per stage or a single number")
        if not all(_is_number(x) for x in values):
            raise ZboptError(f"{name} must hold numbers only, got {list(value)!r}")
    else:
        raise ZboptError(f"{name} must be a number or a list of numbers, got {value!r}")
    for x in values:
        if not finite(x) or x < 0:
            raise ZboptError(f"{name} must be finite and >= 0, got {shown(x)}: fix the cost in "
                             f"the instance")
    return values


@dataclass(frozen=True)
class Instance:
    """A pipeline-parallel scheduling problem.

    Scalars given for per-stage fields are broadcast to every stage on construction.
    `memory_cap` keeps the user's spec (None, a number, "kp", or a list per device);
    `cap` is the resolved absolute cap per device (None = unlimited).
    """

    devices: int
    microbatches: int
    placement: str = "contiguous"
    chunks: int = 0  # 0: implied by the placement (1, or 2 for "v" and "dualpipe")
    t_f: Any = 1
    t_b: Any = 1
    t_w: Any = 1
    comm: float = 0
    m_b: Any = 1
    m_w: Any = 0
    memory_cap: Any = None
    static_memory: Any = 0
    overlap: float = 0.0
    name: str = ""
    time_unit: str = ""
    memory_unit: str = ""
    cap: tuple | None = field(default=None, init=False, compare=False)

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen dataclass)
        for key in ("t_f", "t_b", "t_w", "m_b", "m_w", "memory_cap", "static_memory", "comm",
                    "overlap"):
            set_(key, listed(getattr(self, key), key))
        for key, value in check_integers(devices=self.devices, microbatches=self.microbatches,
                                         chunks=self.chunks).items():
            set_(key, value)
        if self.devices < 1:
            raise ZboptError(f"devices must be >= 1, got {self.devices}")
        if self.microbatches < 1:
            raise ZboptError(f"microbatches must be >= 1, got {self.microbatches}")
        if self.placement not in PLACEMENTS:
            raise ZboptError(
                f"unknown placement {self.placement!r}: use one of {', '.join(PLACEMENTS)}")
        implied = {"contiguous": 1, "v": 2, "dualpipe": 2}.get(self.placement)
        chunks = self.chunks or implied or 2
        if implied is not None and chunks != implied:
            raise ZboptError(
                f"placement {self.placement!r} takes chunks = {implied}, got {chunks}: "
                f"drop chunks or use placement 'interleaved'")
        if self.placement == "interleaved" and chunks < 2:
            raise ZboptError(f"placement 'interleaved' needs chunks >= 2, got {chunks}: "
                             f"use placement 'contiguous' for one chunk")
        if self.placement == "dualpipe" and self.microbatches % 2:
            raise ZboptError(f"placement 'dualpipe' splits micro-batches between two directions: "
                             f"microbatches must be even, got {self.microbatches}")
        set_("chunks", chunks)
        stages = chunks * self.devices
        size = 3 * stages * self.microbatches
        if size > MAX_PASSES:
            raise ZboptError(
                f"{size:,} passes (3 x {self.devices} devices x {chunks} chunks x "
                f"{self.microbatches} micro-batches) is beyond zbopt's limit of {MAX_PASSES:,}: "
                f"every pass is held in memory; use fewer devices or micro-batches")
        parts = self.devices if self.placement == "dualpipe" else None
        for key in ("t_f", "t_b", "t_w", "m_b", "m_w"):
            set_(key, _stage_values(key, getattr(self, key), stages, parts))
        for key in ("comm", "overlap"):
            value = getattr(self, key)
            if not _is_number(value) or not finite(value) or value < 0:
                raise ZboptError(f"{key} must be a finite number >= 0, got {shown(value)}")
            set_(key, plain(value))
        if self.overlap > 1:
            raise ZboptError(f"overlap is a fraction in [0, 1], got {self.overlap}")
        for s in range(stages):
            if self.m_w[s] > self.m_b[s]:
                raise ZboptError(
                    f"m_w ({shown(self.m_w[s])}) exceeds m_b ({shown(self.m_b[s])}) on stage {s}: "
                    f"m_w is the part of m_b kept for W, so it must be <= m_b")
        if sum(self.t_f) + sum(self.t_b) + sum(self.t_w) <= 0:
            raise ZboptError("all pass costs are zero: give t_f, t_b or t_w a positive value")
        static = self.static_memory
        if _is_number(static):
            static = (plain(static),) * self.devices
        elif isinstance(static, (list, tuple)) and len(static) == self.devices \
                and all(_is_number(x) for x in static):
            static = tuple(map(plain, static))
        else:
            raise ZboptError(f"static_memory must be a number or a list with one number per "
                             f"device ({self.devices}), got {self.static_memory!r}")
        bad = [x for x in static if not finite(x) or x < 0]
        if bad:
            raise ZboptError(f"static_memory must be finite and >= 0, got {shown(bad[0])}")
        set_("static_memory", static)
        self._check_totals()
        if isinstance(self.memory_cap, (list, tuple)):
            set_("memory_cap", tuple(map(plain, self.memory_cap)))
        else:
            set_("memory_cap", plain(self.memory_cap))
        set_("cap", self._resolve_cap(self.memory_cap))
        for name in ("name", "time_unit", "memory_unit"):
            if not isinstance(getattr(self, name), str):
                raise ZboptError(f"{name} must be a string, got {getattr(self, name)!r}")

    # ----- structure -------------------------------------------------------------------------

    @property
    def num_stages(self) -> int:
        return self.chunks * self.devices

    def device_of(self, stage: int) -> int:
        p = self.devices
        if self.placement in ("contiguous", "interleaved"):
            return stage % p
        return stage if stage < p else 2 * p - 1 - stage  # "v" and "dualpipe"

    def stages_of(self, device: int) -> tuple[int, ...]:
        """The stages on `device`, ascending (none for a device not in the instance)."""
        return self._stages_by_device.get(device, ())

    @cached_property
    def _stages_by_device(self) -> dict[int, tuple[int, ...]]:
        """Device -> its stages, built once in one pass over the stages (cached_property writes
        the instance's __dict__ directly, so it works on this frozen dataclass)."""
        out: dict[int, list[int]] = {d: [] for d in range(self.devices)}
        for s in range(self.num_stages):
            out[self.device_of(s)].append(s)
        return {d: tuple(stages) for d, stages in out.items()}

    @property
    def chains(self) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
        """(stages in forward order, micro-batches that run through them), one per pipeline.

        One chain through every stage, except dualpipe: micro-batches 0..m/2-1 run through
        stages 0..p-1 (devices 0..p-1), micro-batches m/2..m-1 through stages p..2p-1
        (devices p-1..0).
        """
        m, p = self.microbatches, self.devices
        if self.placement == "dualpipe":
            return ((tuple(range(p)), tuple(range(m // 2))),
                    (tuple(range(p, 2 * p)), tuple(range(m // 2, m))))
        return ((tuple(range(self.num_stages)), tuple(range(m))),)

    def chain_of_stage(self, stage: int) -> tuple[int, ...]:
        for stages, _ in self.chains:
            if stage in stages:
                return stages
        raise ZboptError(f"stage {stage} is not in this instance (0..{self.num_stages - 1})")

    def microbatches_of(self, stage: int) -> tuple[int, ...]:
        for stages, mbs in self.chains:
            if stage in stages:
                return mbs
        raise ZboptError(f"stage {stage} is not in this instance (0..{self.num_stages - 1})")

    def passes(self) -> Iterator[tuple[int, int, str]]:
        for stages, mbs in self.chains:
            for s in stages:
                for j in mbs:
                    for kind in KINDS:
                        yield (s, j, kind)

    @property
    def num_passes(self) -> int:
        return sum(3 * len(stages) * len(mbs) for stages, mbs in self.chains)

    def cost(self, stage: int, kind: str) -> float:
        return {"F": self.t_f, "B": self.t_b, "W": self.t_w}[kind][stage]

    # ----- magnitudes --------------------------------------------------------------------------

    def _check_totals(self) -> None:
        """The passes' total time and each device's most memory stay at or below MAX_TOTAL;
        the message names the figure that contributes most."""
        time: dict[str, float] = {}
        runs = [0] * self.num_stages  # micro-batches through each stage
        for stages, mbs in self.chains:
            for s in stages:
                runs[s] = len(mbs)
        for key in COST_KEYS:
            values = getattr(self, key)
            time[key] = sum(runs[s] * values[s] for s in range(self.num_stages))
        time["comm"] = self.comm * self.num_passes
        key = max(time, key=time.__getitem__)  # the first of equal contributions
        largest = self.comm if key == "comm" else max(getattr(self, key))
        check_total_time(key, largest, sum(time.values()))
        for d in range(self.devices):
            stages = self.stages_of(d)
            held = sum(runs[s] * self.m_b[s] for s in stages)
            static = self.static_memory[d]
            if static + held > MAX_TOTAL:
                key, value = ("static_memory", static) if static >= held else \
                    ("m_b", max(self.m_b[s] for s in stages))
                check_total_memory(key, value, static + held, f"device {d}")

    # ----- memory ----------------------------------------------------------------------------

    @cached_property
    def activation_unit(self) -> float:
        """Activation of one micro-batch over all layers of device 0: the unit of a "kp" cap.

        On dualpipe a micro-batch runs through one of the two copies only, so the unit is the
        larger of device 0's two stages, and "1p" is the same memory as 1F1B's peak there.
        Computed once (a cap resolves it for every device).
        """
        mine = self.stages_of(0)
        return max(sum(self.m_b[s] for s in mine if s in stages) for stages, _ in self.chains)

    def cap_in_p(self) -> float | None:
        """The cap as a multiple of p: the most any device holds above its static memory, in
        units of p times activation_unit (None without a cap or a unit)."""
        unit = self.devices * self.activation_unit
        if not self.cap or not unit:
            return None
        return max(c - s for c, s in zip(self.cap, self.static_memory)) / unit

    def _resolve_cap(self, spec: Any) -> tuple | None:
        p = self.devices
        if spec is None:
            return None
        if isinstance(spec, (list, tuple)):
            if len(spec) != p:
                raise ZboptError(f"memory_cap lists {len(spec)} values but there are {p} devices: "
                                 f"give one per device, a number, or a 'kp' string")
            caps = tuple(self._one_cap(x, d) for d, x in enumerate(spec))
        else:
            caps = tuple(self._one_cap(spec, d) for d in range(p))
        self._check_room(caps)
        return caps

    def _check_room(self, caps: tuple) -> None:
        """Every device's cap must hold its static memory plus one micro-batch's activation.
        Of the devices that fall short the message names the one that needs the most, so that
        a uniform cap raised to the figure it quotes is enough."""
        need = [self.static_memory[d] + max(self.m_b[s] for s in self.stages_of(d))
                for d in range(self.devices)]
        short = [d for d in range(self.devices) if not within_cap(need[d], caps[d])]
        if not short:
            return
        d = max(short, key=lambda k: need[k])  # the first of equal needs
        what = "static memory plus one activation" if self.static_memory[d] else "one activation"
        others = ""
        if len(short) > 1 and len({caps[k] for k in short}) > 1:  # raising d's alone won't do
            others = f"; {len(short) - 1} other device(s) fall short too"
        unit = self.memory_unit
        raise ZboptError(f"memory_cap {readable(caps[d], unit)} on device {d} is below {what} "
                         f"(needs at least {readable(need[d], unit, at_least=True)}{others}): "
                         f"raise memory_cap")

    def _one_cap(self, x: Any, device: int) -> float:
        """An absolute cap as given; "kp" is k * p * activation_unit above the device's static
        memory (what 1F1B holds there at k = 1). A cap above MAX_TOTAL binds nothing (no device
        can hold that much: _check_totals) and is taken as MAX_TOTAL, so that sums with a cap
        stay far from overflow."""
        if _is_number(x):
            if x == 0 and not self._holds_memory(device):
                return 0  # what "kp" comes to there: rebuilding the instance keeps it
            if not finite(x) or x <= 0:
                raise ZboptError(f"memory_cap must be a positive finite number, got {shown(x)}")
            return min(x, MAX_TOTAL)
        if isinstance(x, str):
            match = _CAP_RE.match(x)
            if match:
                k = float(match.group(1))  # inf for 400 digits: a cap that binds nothing
                unit = self.devices * self.activation_unit
                value = min((k * unit if unit else 0) + self.static_memory[device], MAX_TOTAL)
                return int(value) if value == int(value) else value
            if bytes_with_unit(x) is not None:
                raise ZboptError(self._byte_cap_message(x))
        raise ZboptError(f"memory_cap {x!r} is not a number, a list per device, "
                         f"or a multiple of p such as '1p', '1.5p', '2p'")

    def _holds_memory(self, device: int) -> bool:
        """Whether anything can occupy the device: static memory or an activation."""
        return bool(self.static_memory[device]
                    or any(self.m_b[s] for s in self.stages_of(device)))

    def _byte_cap_message(self, text: str) -> str:
        """Why a cap written in bytes ("80GB") is refused here: the command line's --mem reads
        byte sizes; in Python the cap is a number in the memory unit (the number it comes to
        when the unit names a byte size)."""
        unit = self.memory_unit if isinstance(self.memory_unit, str) else ""
        which = "the instance's memory unit"
        if unit.strip():
            try:
                value = in_unit(text, unit)
            except ZboptError:  # the unit names no byte size: nothing to convert to
                value = None
            which += f" ({unit!r}" + (f": memory_cap={value!r})" if value is not None else ")")
        return (f"memory_cap {text.strip()!r}: byte sizes such as {text.strip()} are read by the "
                f"command line's --mem; in Python give the cap as a number in {which}, a list "
                f"per device, or a multiple of p such as '1p'")

    def with_cap(self, memory_cap: Any) -> "Instance":
        return replace(self, memory_cap=memory_cap)

    # ----- derived placements ---------------------------------------------------------------

    def with_placement(self, placement: str, chunks: int = 0) -> "Instance":
        """The same model on another placement: each device's layers re-split into chunks.

        Only from a contiguous instance: device d's stage cost and activation are divided evenly
        among its chunks (interleaved, v), or kept per model part (dualpipe: two copies).
        The cap is resolved once, on the instance as written: the re-placed instance carries
        its absolute per-device numbers, so "1p" means the same memory on every placement.
        """
        if placement == self.placement and (chunks in (0, self.chunks)):
            return self
        if self.placement != "contiguous":
            raise ZboptError(f"can only re-place a contiguous instance, this one is "
                             f"{self.placement!r}")
        p = self.devices
        cap = list(self.cap) if self.cap is not None else None
        if placement == "dualpipe":
            return replace(self, placement="dualpipe", chunks=0, memory_cap=cap,
                           **{k: tuple(getattr(self, k)) for k in ("t_f", "t_b", "t_w", "m_b", "m_w")})
        if placement == "contiguous":
            return self
        v = 2 if placement == "v" else (chunks or 2)
        target = Instance(devices=p, microbatches=self.microbatches, placement=placement, chunks=v)
        values = {}
        for key in ("t_f", "t_b", "t_w", "m_b", "m_w"):
            per_device = getattr(self, key)
            values[key] = tuple(_divide(per_device[target.device_of(s)], v)
                                for s in range(target.num_stages))
        return replace(self, placement=placement, chunks=v, memory_cap=cap, **values)

    # ----- files ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in FILE_KEYS:
            value = getattr(self, key)
            if key in ("t_f", "t_b", "t_w", "m_b", "m_w") or key == "static_memory":
                value = value[0] if len(set(value)) == 1 else list(value)
                if key == "static_memory" and value == 0:
                    continue
            elif key == "memory_cap":
                if value is None:
                    continue
                value = list(value) if isinstance(value, tuple) else value
            elif key == "chunks" and self.placement != "interleaved":
                continue
            elif key == "overlap" and value == 0:
                continue
            elif key in ("name", "time_unit", "memory_unit") and not value:
                continue
            out[key] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "instance") -> "Instance":
        check_keys(data, source)
        return construct(cls, source, **data)

    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write the instance as JSON (.json) or TOML, whole or not at all; never over an
        existing file without `overwrite`."""
        from .export.outputs import require_path, write_file
        data = self.to_dict()
        text = json.dumps(data, indent=1) + "\n" \
            if require_path(path, "save()'s path").suffix.lower() == ".json" else to_toml(data)
        return write_file(path, text, overwrite, force_flag="overwrite=True")


def check_table(data: Any, source: str) -> None:
    """What from_dict reads must be a dict of keys (a file's table)."""
    if not isinstance(data, dict):
        raise ZboptError(f"{source}: expected a table (dict) of keys, got {type(data).__name__}")


def check_keys(data: dict[str, Any], source: str, allowed: tuple[str, ...] = FILE_KEYS) -> None:
    """Unknown keys are an error (a typo must not change the problem); devices and
    microbatches are required. Shared by instance and layered model files."""
    check_table(data, source)
    unknown = sorted(set(map(str, data)) - set(allowed))
    if unknown:
        raise ZboptError(f"{source}: unknown key(s) {', '.join(unknown)}; "
                         f"allowed keys are {', '.join(allowed)}")
    for key in ("devices", "microbatches"):
        if key not in data:
            raise ZboptError(f"{source}: missing required key {key!r}")


def _divide(value: float, v: int) -> float:
    if isinstance(value, int) and value % v == 0:
        return value // v
    return value / v


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in value) + "]"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def to_toml(data: dict[str, Any]) -> str:
    """TOML for a flat dict of strings, numbers and lists (all an instance file holds)."""
    return "".join(f"{key} = {_toml_value(value)}\n" for key, value in data.items())



def construct(cls, source: str, **values):
    """cls(**values), with any error a file can cause said as one line naming the file."""
    try:
        return cls(**values)
    except (ZboptError, TypeError) as err:
        raise ZboptError(f"{source}: {err}") from None


def unreadable_integer(err: BaseException) -> str:
    """"an integer of N digits cannot be read" when `err` is Python refusing to read an
    integer of more than 4,300 digits (int(), json and tomllib alike), else ""."""
    digits = re.search(r"has (\d+) digits", str(err))
    return f"an integer of {digits.group(1)} digits cannot be read" if digits else ""


def too_long_integer(source: Any, err: ValueError) -> ZboptError:
    """The one line for Python's refusal to read an integer of more than 4,300 digits (its
    limit on converting text to int), naming `source` (the file, or a place in it; None: the
    caller names it)."""
    what = unreadable_integer(err) or f"{reason(err)} cannot be read"
    where = "" if source is None else f"{source}: "
    return ZboptError(f"{where}{what}: give every value as a finite number of sensible size")


def read_table(path: str | Path, what: str = "instance") -> dict[str, Any]:
    """The keys of a TOML or JSON file (.json is JSON, .toml TOML, any other name JSON when it
    begins with "{" and TOML otherwise; a leading UTF-8 byte-order mark is skipped; a named pipe
    is read once); every problem with the file itself (missing, a directory, not
    text, not parseable) raises ZboptError, calling the file `what` ("an instance file")."""
    path = Path(path)
    if path.is_dir():
        raise ZboptError(f"{path} is a directory: give {article(what)} {what} file (.toml or .json)")
    if not path.exists():  # a named pipe, /dev/stdin or <(...) is read like a file
        hint = "; `zbopt instances` lists the shipped ones" if not path.suffix else ""
        raise ZboptError(f"{what} file {path} not found{hint}")
    try:
        text = path.read_bytes().decode("utf-8-sig")  # some editors write a byte-order mark
    except UnicodeDecodeError as err:
        raise ZboptError(f"{path}: not a text file (byte {err.start} is not UTF-8): give a "
                         f".toml or .json {what} file") from None
    except OSError as err:
        raise ZboptError(f"cannot read {path}: {err.strerror}") from None
    # a TOML document cannot begin with "{": without a .toml name (a pipe) that is JSON
    suffix = path.suffix.lower()
    kind = "JSON" if suffix == ".json" or (suffix != ".toml" and text.lstrip().startswith("{")) \
        else "TOML"
    try:
        data = json.loads(text) if kind == "JSON" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, RecursionError) as err:
        raise ZboptError(f"{path}: not valid {kind}: {reason(err)}") from None
    except ValueError as err:  # Python refuses to read an integer of more than 4,300 digits
        raise too_long_integer(path, err) from None
    if not isinstance(data, dict):
        raise ZboptError(f"{path}: expected a table of keys, got {type(data).__name__}")
    return data


def article(word: str) -> str:
    """'an' before a vowel, else 'a'."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def refuse_other_inputs(data: dict[str, Any], source: str, wanted: str) -> None:
    """A transformers config or a sweep spec given where `wanted` (an instance, a layered
    model) belongs: what it is and which command takes it, rather than its unknown keys."""
    if isinstance(data.get("model_type"), str) and "t_f" not in data:
        raise ZboptError(f"{source} is a transformers config, not {wanted}: make a layered model "
                         f"of it with zbopt estimate {source} --out model.toml (or zbopt profile "
                         f"--hf-config {source}) and plan that")
    if ("methods" in data or "axes" in data) and "t_f" not in data and "layers" not in data:
        raise ZboptError(f"{source} is a sweep spec, not {wanted}: run it with zbopt sweep "
                         f"{source} --out FOLDER")


def check_file_keys(data: dict[str, Any], source: str) -> None:
    """What a file must say that the Instance constructor lets code leave out: every cost key
    (a missing one would silently cost 1), and no `chunks = 0` (it would silently mean 2)."""
    if "layers" in data:
        raise ZboptError(f"{source} is a layered model ([[layers]]), not a per-stage instance: "
                         f"`zbopt plan` partitions it into stages")
    refuse_other_inputs(data, source, "an instance")
    check_keys(data, source)
    missing = [key for key in COST_KEYS if key not in data]
    if missing:
        raise ZboptError(f"{source}: missing cost key(s) {', '.join(missing)}: give each pass "
                         f"kind's time (a number, or one per stage); 0 if it costs nothing")
    check_chunks(data, source)


def check_chunks(data: dict[str, Any], source: str) -> None:
    """A file's (or a sweep point's) `chunks` below 1, which the classes read as "as the
    placement implies" (2 on interleaved, 1 otherwise), is refused: a file says a count."""
    chunks = data.get("chunks")
    if chunks is not None and _is_number(chunks) and chunks < 1:
        raise ZboptError(f"{source}: chunks = {chunks} is not a chunk count: give chunks >= 2 "
                         f"for placement 'interleaved', or drop the key")


def shipped_instances() -> dict[str, Path]:
    """The instances installed with zbopt, by name (file name without .toml)."""
    folder = Path(__file__).parent / "data" / "instances"
    return {p.stem: p for p in sorted(folder.glob("*/*.toml"))}


def resolve_instance(name: str | Path) -> Path:
    """A path as given if it exists, else a shipped instance of that name, else the path (so
    that reading it says it is not found). Anything but a str or a path is a ZboptError."""
    if not isinstance(name, (str, os.PathLike)):
        raise ZboptError(f"give a file path or a shipped name (a str or a pathlib.Path), "
                         f"got {type(name).__name__}"
                         + (": decode it to a str" if isinstance(name, bytes) else ""))
    path = Path(name)
    if path.exists():
        return path
    shipped = shipped_instances()
    return shipped.get(str(name), shipped.get(path.stem if path.suffix == ".toml" else "", path))


def load_instance(path: str | Path) -> Instance:
    """Read an instance file (.toml or .json), or a shipped instance by name. Every problem
    raises ZboptError."""
    path = resolve_instance(path)
    data = read_table(path)
    check_file_keys(data, str(path))
    return Instance.from_dict(data, source=str(path))


def default_instance_path() -> Path:
    """The shipped default instance: the Zero Bubble 1.5B p=8 m=24 setting."""
    return Path(__file__).parent / "data" / "instances" / "paper" / "zb-1.5b-p8-m24.toml"
