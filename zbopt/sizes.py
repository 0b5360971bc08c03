"""Memory sizes written with a byte unit ("80GB", "16GiB") and their value in a file's
memory_unit: what `--mem`, `--caps`, `--hbm-bytes` and the explorer's cap accept besides plain
numbers (which are in the file's unit)."""

from __future__ import annotations

import math
import re
from typing import Optional

from .errors import ZboptError

# 80GB, 80 GB, 80G, 16GiB, 512MB, 100B, 2e9 bytes: k, M, G, T are powers of 1000, Ki, Mi, Gi, Ti
# powers of 1024
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(?:([kmgt]i?)b?|b|bytes?)\s*$",
                   re.IGNORECASE)
_PREFIX = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
           "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def bytes_with_unit(text: str) -> Optional[float]:
    """The bytes a size written with its unit means ("80GB", "16GiB"), None for anything else
    (a plain number included: its unit is the file's)."""
    match = _SIZE.match(text)
    return None if match is None else float(match.group(1)) * _PREFIX[(match.group(2) or "").lower()]


def as_bytes(text: str) -> float:
    """A number of bytes written plain ("80e9") or with its unit ("80GB"); NaN when it is
    neither (the caller says what to change)."""
    size = bytes_with_unit(text)
    if size is not None:
        return size
    try:
        return float(text)
    except ValueError:
        return math.nan


def byte_unit(unit: str) -> Optional[float]:
    """Bytes per unit of a memory_unit naming a byte size ("B", "bytes", "MB", "GiB"), None for
    any other ("sb", or none named)."""
    return bytes_with_unit("1" + unit) if unit.strip() else None


def in_unit(text: str, unit: str, per_stage: bool = True) -> Optional[float]:
    """A size written with a byte unit, in the memory unit `unit` (an int where whole); None
    when `text` is not such a size. ZboptError when it is one and `unit` names no byte size
    (naming the "kp" caps a per-stage instance takes, unless `per_stage` is False: a layered
    model's cap is absolute)."""
    size = bytes_with_unit(text)
    if size is None:
        return None
    per = byte_unit(unit)
    if per is None:
        named = f"is {unit!r}" if unit.strip() else "is not named"
        also = " (a per-stage instance also takes a multiple of p such as '1p')" \
            if per_stage else ""
        raise ZboptError(f"{text.strip()!r} is in bytes but the memory unit {named}: give the "
                         f"cap as a plain number in the file's unit or 'none'{also}")
    value = size / per
    return int(value) if value.is_integer() else value


def readable(value: float, unit: str, at_least: bool = False) -> str:
    """`value` in the memory unit `unit` for a message: from 1000 up a whole number with
    thousands separators (below, six significant digits as :g shows them), the unit,
    and for a byte unit also in KB, MB, GB or TB to three digits ("60,600,090,624 B (60.6 GB)").
    at_least rounds the number up (a cap to raise to: never below `value`), else to the
    nearest."""
    if abs(value) >= 1000:
        text = f"{math.ceil(value) if at_least else round(value):,}"
    elif at_least and value > 0:  # six significant digits, as :g shows them, rounded up
        step = 10.0 ** (math.floor(math.log10(value)) - 5)
        text = f"{math.ceil(value / step - 1e-9) * step:g}"
    else:
        text = f"{value:g}"
    text += f" {unit}" if unit.strip() else ""
    per = byte_unit(unit)
    size = value * (per or 0)
    for name, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if size >= scale:  # (in the file's own unit already: nothing to add)
            return text if scale == per else f"{text} ({size / scale:.3g} {name})"
    return text
