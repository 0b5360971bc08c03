"""A sweep's report does not depend on the order of results.jsonl (parallel workers finish
in any order)."""

from __future__ import annotations

import random
from pathlib import Path

from zbopt.cli import main
from zbopt.sweep.report import summarize

SPEC = """
name = "order"
methods = ["1f1b", "zb-h1", "zb-greedy", "zb-h2"]
[base]
name = "u"
devices = 2
microbatches = 4
m_b = 2
m_w = 1
[axes]
microbatches = [4, 10]
memory_cap = ["1p", "2p"]
"""

REPORT = ("results.csv", "results.md", "bubble_vs_m.png", "bubble_vs_cap.png")


def _report(out: Path) -> dict[str, bytes]:
    assert main(["sweep-report", str(out)]) == 0
    return {name: (out / name).read_bytes() for name in REPORT if (out / name).exists()}


def test_a_shuffled_results_jsonl_gives_a_byte_identical_report(tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--quiet"]) == 0
    before = _report(out)
    assert {"results.csv", "results.md"} <= set(before)
    lines = (out / "results.jsonl").read_bytes().splitlines(keepends=True)
    for seed in range(3):
        shuffled = lines[::-1] if seed == 0 else random.Random(seed).sample(lines, len(lines))
        (out / "results.jsonl").write_bytes(b"".join(shuffled))
        assert _report(out) == before
    # instances in order of m as a number: u-m4 before u-m10
    markdown = before["results.md"].decode()
    assert markdown.index("| u-m4-cap1p |") < markdown.index("| u-m10-cap1p |")


def test_methods_that_tie_give_the_same_best_in_any_order():
    base = {"instance_name": "x", "devices": 2, "microbatches": 4, "cap_spec": "1p",
            "instance_placement": "contiguous", "placement": "contiguous",
            "status": "heuristic", "fits_cap": True, "bubble_rate": 0.1, "span": 20,
            "kind": "heuristic"}
    records = [{**base, "label": label, "key": label} for label in ("zb-h1", "zb-greedy", "b")]
    records.append({**base, "label": "a-solver", "key": "s", "kind": "solver",
                    "status": "optimal"})
    bests = {summarize(order).best_method
             for order in (records, records[::-1], records[1:] + records[:1])}
    assert bests == {"b"}  # the heuristic before the solver, then by label


def test_every_job_table_says_the_placement_each_method_ran_on():
    from zbopt.sweep.report import csv_text, markdown_text
    base = {"instance_name": "x", "devices": 2, "microbatches": 8, "cap_spec": "1p",
            "instance_placement": "contiguous", "status": "heuristic", "fits_cap": True,
            "bubble_rate": 0.0, "instance": {"devices": 2}}
    records = [{**base, "label": "v-greedy", "key": "v", "placement": "v", "chunks": 2,
                "span": 24},
               {**base, "label": "cpsat", "key": "c", "kind": "solver", "status": "optimal",
                "placement": "contiguous", "chunks": 1, "span": 25}]
    markdown = markdown_text(records)
    assert "| method | placement | status | span |" in markdown
    assert "| v-greedy | v (2 chunks) | heuristic | 24 |" in markdown
    assert "| cpsat | contiguous | optimal | 25 |" in markdown
    rows = csv_text(records).splitlines()
    header = rows[0].split(",")
    assert [row.split(",")[header.index("placement")] for row in rows[1:]] == ["contiguous", "v"]
