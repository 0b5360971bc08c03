"""Numbers as people read them in tables and verdicts (no plotting imports: compare loads it)."""

from __future__ import annotations

from ..instance import finite, near_whole


def number(x: float) -> str:
    """An axis tick: 1,281,520 rather than 1.28152e+06, 237.5, 28.5, 0.333 (at most one decimal
    from 100 up, none when it is 0: a tick's float error is not shown). Tables, headings and
    verdicts print figure()."""
    if float(x).is_integer():
        return f"{int(x):,}"
    if abs(x) >= 100:
        text = f"{x:,.1f}"
        return text[:-2] if text.endswith(".0") else text
    return f"{x:.4g}"


def exact(x: float) -> str:
    """A number as written in an instance (t_f = 1.2345 stays 1.2345), with thousands
    separators."""
    if isinstance(x, float) and x.is_integer():
        return f"{int(x):,}"
    return f"{x:,}"


def figure(x: float | None, digits: int = 1) -> str:
    """A span, bound or memory figure as tables and verdicts print it: whole numbers with
    thousands separators, others with `digits` decimals (1,186,022.5); "-" for None."""
    if x is None:
        return "-"
    if float(x).is_integer():
        return f"{int(x):,}"
    if near_whole(x):  # float noise: 8.000000000000002 is 8
        return f"{round(x):,}"
    return f"{x:,.{digits}f}"


def gap_text(gap: float | None) -> str:
    """A gap as tables and verdicts print it, to two decimals of a percent; a positive gap
    below 0.005% prints "<0.01%" (not "0.00%", which reads as proven optimal); "-" for None
    or anything that is not a finite number (a sweep record read back may hold anything)."""
    if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not finite(gap):
        return "-"
    if 0 < gap < 0.00005:
        return "<0.01%"
    return f"{gap if gap > 0 else 0.0:.2%}"


def counted(n: int, word: str, plural: str = "") -> str:
    """`n` and the noun it counts: "1 rank", "2 ranks", "1 micro-batch", "8 micro-batches"
    (`plural` where adding "es" after ch, sh, s or x, else "s", is wrong)."""
    if n == 1:
        return f"1 {word}"
    if not plural:
        plural = word + ("es" if word.endswith(("ch", "sh", "s", "x")) else "s")
    return f"{n:,} {plural}"
