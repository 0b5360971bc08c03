"""Progress on stderr for long commands: phases, and during a solve the incumbent, bound and gap.

On a terminal one line is rewritten in place (with the elapsed time kept ticking); when stderr
is a pipe or a file nothing is printed unless asked (`--progress`), and then one line per
change. `--quiet` silences it. stdout is never touched, so `--json` output stays clean.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Optional, TextIO

from .report.numbers import gap_text


def _num(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{int(x):,}" if float(x).is_integer() else f"{x:,.1f}"


def describe_solver(info: dict[str, Any], unit: str = "") -> str:
    """One line for a solve(progress=...) report: phase, and incumbent / bound / gap."""
    unit = f" {unit}" if unit else ""
    parts = [str(info.get("phase", ""))]
    if info.get("incumbent") is not None:
        parts.append(f"incumbent {_num(info['incumbent'])}{unit}")
    if info.get("bound") is not None:
        parts.append(f"bound {_num(info['bound'])}{unit}")
    if info.get("gap") is not None:
        parts.append(f"gap {gap_text(info['gap'])}")
    if info.get("status"):
        parts.append(str(info["status"]))
    return "  ".join(parts)


class Progress:
    """A status line on stderr. `enabled=False` makes every call a no-op."""

    def __init__(self, enabled: bool, stream: Optional[TextIO] = None, tick: float = 1.0):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.live = enabled and _isatty(self.stream)  # rewrite one line in place
        self.began = time.monotonic()
        self.text = ""
        self.printed = ""
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.ticker: Optional[threading.Thread] = None
        if self.live:
            # keeps the elapsed time moving while a solver is silent between improvements
            self.ticker = threading.Thread(target=self._tick, args=(tick,), daemon=True)
            self.ticker.start()

    @classmethod
    def from_args(cls, args: Any, stream: Optional[TextIO] = None) -> "Progress":
        stream = stream if stream is not None else sys.stderr
        return cls(wanted(args, stream), stream)

    def update(self, text: str) -> None:
        """Show `text` as the current state (printed only if it changed)."""
        if not self.enabled:
            return
        with self.lock:
            self.text = text
            self._write()

    def solver(self, label: str, unit: str = ""):
        """A callback for solve(progress=...): the solver's phase and numbers as they improve."""
        def report(info: dict[str, Any]) -> None:
            self.update(f"{label}: {describe_solver(info, unit)}")
        return report

    def done(self) -> None:
        """Clear the live line (the command's own output follows)."""
        self.stop.set()
        if self.ticker is not None:
            self.ticker.join(timeout=2)
        if self.live and self.printed:
            with self.lock:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
        self.printed = ""

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.done()

    def _line(self) -> str:
        return f"zbopt: {self.text}  [{time.monotonic() - self.began:.0f} s]"

    def _write(self) -> None:
        if self.live:
            line = self._line()
            self.stream.write("\r\x1b[K" + line)
            self.printed = line
        elif self.text != self.printed:
            self.stream.write(self._line() + "\n")
            self.printed = self.text
        self.stream.flush()

    def _tick(self, every: float) -> None:
        while not self.stop.wait(every):
            with self.lock:
                if self.text:
                    self._write()


def wanted(args: Any, stream: Optional[TextIO] = None) -> bool:
    """Whether a command shows progress: not with --quiet; with --progress, or on a terminal."""
    if getattr(args, "quiet", False):
        return False
    return bool(getattr(args, "progress", False)) or _isatty(stream if stream is not None else sys.stderr)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
