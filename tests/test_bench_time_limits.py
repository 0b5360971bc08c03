"""benchmarks/bench_time_limits.py's output file: a run rewrites its own sections only."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_time_limits import BACKENDS_HEADING, sections, with_backends  # noqa: E402


def test_a_cpsat_run_keeps_the_backends_section_of_every_limit():
    old = ("# Honest time limits\n\nold rows\n\n## compare\n\nold\n\n"
           f"{BACKENDS_HEADING} (20 s limit)\n\ntwenty\n\n"
           f"{BACKENDS_HEADING} (5 s limit)\n\nfive\n")
    new = "# Honest time limits\n\nnew rows\n\n## compare\n\nnew\n"
    text = with_backends(new, old)
    found = sections(text)[1]
    assert [s.splitlines()[0] for s in found] == [
        "## compare", f"{BACKENDS_HEADING} (20 s limit)", f"{BACKENDS_HEADING} (5 s limit)"]
    assert "twenty" in text and "five" in text and "new rows" in text and "old rows" not in text
