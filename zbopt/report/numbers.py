"""Numbers as people read them in tables and verdicts (no plotting imports: compare loads it)."""

from __future__ import annotations


def number(x: float) -> str:
    """A readable number: 1,281,520 rather than 1.28152e+06, 28.5, 0.333."""
    if float(x).is_integer():
        return f"{int(x):,}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.4g}"


def figure(x: float | None, digits: int = 1) -> str:
    """A span, bound or memory figure as tables and verdicts print it: whole numbers with
    thousands separators, others with `digits` decimals (1,186,022.5); "-" for None."""
    if x is None:
        return "-"
    if isinstance(x, float) and x.is_integer():
        return f"{int(x):,}"
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:,.{digits}f}"
