"""zb-greedy against the Zero Bubble authors' greedy auto-scheduler, row by row; zb-v and
v-greedy against the authors' ZB-V scheduler.

Reference values: the paper's Table 5 settings (zb_1p_heuristic, zb_2p_heuristic; instances in
instances/paper/) and the unit-cost grid (zb_1p, zb_1.5p, zb_2p, zb_3p; t_f=t_b=t_w=1, comm 0,
m_b=2, m_w=1, cap k*p*m_b). Every span is evaluate()'s, within the cap (checked here).
Writes results/greedy_vs_reference.md.

Usage: python benchmarks/greedy_vs_reference.py [--reference DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from zbopt.families import generate
from zbopt.instance import Instance, load_instance
from zbopt.schedule import evaluate, validate

ROOT = Path(__file__).resolve().parents[1]


def judged(instance: Instance, method: str = "zb-greedy"):
    schedule = generate(method, instance)
    problems = validate(instance, schedule)
    if problems:
        raise SystemExit(f"{method} on {instance.name or instance}: {problems[0]}")
    return evaluate(instance, schedule)


def verdict(ours: float, reference: float) -> str:
    if ours < reference:
        return f"**beats** by {reference - ours:,.0f} ({(reference - ours) / reference:.3%})"
    if ours == reference:
        return "equal"
    return f"WORSE by {ours - reference:,.0f}"


def paper_section(reference: dict) -> tuple[list[str], list[int]]:
    lines = ["## Paper Table 5 settings (profiled costs in us; instances/paper/)", "",
             "| setting | cap | zb-greedy span | authors' heuristic | ZB-H1 | ZB-H2 | verdict |",
             "|---|---|---|---|---|---|---|"]
    tally = [0, 0, 0]  # beats, equal, worse
    for row in reference["rows"]:
        name = f"zb-{row['model'].lower()}-p{row['p']}-m{row['m']}"
        instance = load_instance(ROOT / "instances" / "paper" / f"{name}.toml")
        for cap, key in (("1p", "zb_1p_heuristic"), ("2p", "zb_2p_heuristic")):
            capped = instance.with_cap(cap)
            timeline = judged(capped)
            assert timeline.fits_cap, (name, cap)
            ref = row[key]
            tally[0 if timeline.span < ref else 1 if timeline.span == ref else 2] += 1
            lines.append(f"| {name} | {cap} | {timeline.span:,.0f} | {ref:,} | {row['zb_h1']:,} | "
                         f"{row['zb_h2']:,} | {verdict(timeline.span, ref)} |")
    return lines, tally


def unit_section(reference: dict) -> tuple[list[str], list[int]]:
    lines = ["## Unit-cost grid (t_f = t_b = t_w = 1, comm 0, m_b = 2, m_w = 1; cap k*p*m_b)", "",
             "Each cell: zb-greedy span / the authors' heuristic.", "",
             "| p | m | 1p | 1.5p | 2p | 3p | verdict |", "|---|---|---|---|---|---|---|"]
    tally = [0, 0, 0]
    columns = reference["columns"]
    for values in reference["rows"]:
        row = dict(zip(columns, values))
        base = Instance(devices=row["p"], microbatches=row["m"], t_f=1, t_b=1, t_w=1, comm=0,
                        m_b=2, m_w=1)
        cells, verdicts = [], []
        for k in ("1p", "1.5p", "2p", "3p"):
            timeline = judged(base.with_cap(k))
            assert timeline.fits_cap, (row, k)
            ref = row[f"zb_{k}"]
            tally[0 if timeline.span < ref else 1 if timeline.span == ref else 2] += 1
            cells.append(f"{timeline.span:g} / {ref}")
            if timeline.span != ref:
                verdicts.append(f"{k}: {verdict(timeline.span, ref)}")
        lines.append(f"| {row['p']} | {row['m']} | " + " | ".join(cells) + " | "
                     + ("; ".join(verdicts) or "equal") + " |")
    return lines, tally


# The authors' ZB-V scheduler (their zerobubble/scheduler/zbv.py), run outside this repository
# on each setting with m_b = 2, m_w = 1 and its default memory (1F1B's); its order timed by
# evaluate(). The same numbers are checked in tests/test_reference.py.
AUTHORS_ZBV = [((4, 12, 3, 4, 2, 0), 226), ((3, 2, 2, 1, 1, 1), 31), ((6, 10, 1, 3, 1, 0), 119),
               ((8, 24, 18522, 18086, 9337, 601), 2346803), ((16, 48, 3, 4, 2, 1), 1010),
               ((16, 64, 5, 6, 4, 1), 2064)]


def zbv_section() -> list[str]:
    lines = ["## ZB-V (placement v, cap 1p): zb-v and v-greedy against the authors' scheduler", "",
             "| p | m | t_f, t_b, t_w | comm | authors' ZB-V | zb-v | v-greedy |",
             "|---|---|---|---|---|---|---|"]
    for (p, m, t_f, t_b, t_w, comm), authors in AUTHORS_ZBV:
        instance = Instance(devices=p, microbatches=m, placement="v", t_f=t_f, t_b=t_b, t_w=t_w,
                            comm=comm, m_b=2, m_w=1, memory_cap="1p")
        zbv, greedy = judged(instance, "zb-v"), judged(instance, "v-greedy")
        assert zbv.fits_cap and greedy.fits_cap
        lines.append(f"| {p} | {m} | {t_f}, {t_b}, {t_w} | {comm} | {authors:,} | "
                     f"{zbv.span:,.0f} | {greedy.span:,.0f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", default=str(ROOT / "tests" / "data"),
                        help="folder with zb_paper_table5.json and unit_cost_grid.json")
    parser.add_argument("--out", default=str(ROOT / "results" / "greedy_vs_reference.md"))
    args = parser.parse_args()
    folder = Path(args.reference)
    paper, paper_tally = paper_section(json.loads((folder / "zb_paper_table5.json").read_text()))
    unit, unit_tally = unit_section(json.loads((folder / "unit_cost_grid.json").read_text()))
    total = [a + b for a, b in zip(paper_tally, unit_tally)]
    lines = [
        "# zb-greedy against the Zero Bubble authors' auto-scheduler",
        "",
        "Our `zb-greedy` (zbopt/heuristics/zb_greedy.py) at the same caps as the authors' "
        "greedy auto-scheduler; smaller span is better. Spans are evaluate()'s per-device span "
        "(docs/model.md) and every schedule fits its cap.",
        "",
        f"Summary: {total[0]} rows beat the reference, {total[1]} equal it, {total[2]} are worse "
        f"(paper settings: {paper_tally[0]} beat, {paper_tally[1]} equal; unit grid: "
        f"{unit_tally[0]} beat, {unit_tally[1]} equal).",
        "",
        "Where it only equals the reference there is little or nothing left: the exact solver "
        "(results/solver.md) proves the paper settings' 1p rows optimal (ZB-H1 is) and "
        "zb-1.5b-p8-m24 at 2p optimal at 1,152,599, and the unit grid's 2p and 3p columns "
        "equal the ideal 3m (zero bubble). The 2p rows where we beat the authors are within "
        "0.2% of the solver's best.",
        "",
        *paper,
        "",
        *unit,
        "",
        *zbv_section(),
        "",
        "zb-v reproduces the authors' ZB-V scheduler: its orders matched theirs pass for pass on "
        "600 random settings (p <= 8, costs 0..9, comm 0..4, m up to 4p+3), run outside the "
        "repository. v-greedy replays zb-v's order as one of its candidates, so it is never "
        "longer where zb-v fits the cap.",
        "",
        "Command: `python benchmarks/greedy_vs_reference.py`",
        "",
    ]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
