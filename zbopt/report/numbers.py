"""Numbers as people read them in tables and verdicts (no plotting imports: compare loads it)."""

from __future__ import annotations


def number(x: float) -> str:
    """A readable number: 1,281,520 rather than 1.28152e+06, 28.5, 0.333."""
    if float(x).is_integer():
        return f"{int(x):,}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.4g}"
