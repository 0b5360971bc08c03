"""Sweep reports from results.jsonl alone: results.csv, results.md and plots (matplotlib Agg).

Nothing here recomputes a metric: every number is copied from the records, which came from the
one evaluator. The "certified gap" of an instance is (best span that fits - best proven lower
bound) / best span, over every method of the sweep.
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

from ..errors import ZboptError
from .store import ResultStore

CSV_COLUMNS = (
    "instance_name", "devices", "microbatches", "placement", "memory_cap", "cap", "cap_p",
    "method", "kind", "status", "run_placement", "run_chunks", "makespan", "span", "ideal",
    "bubble_rate", "peak_memory", "fits_cap", "solver_status", "lower_bound", "gap",
    "solver_runtime", "runtime", "note", "key",
)


def load_records(directory: str | Path) -> list[dict[str, Any]]:
    store = ResultStore(Path(directory))
    if not store.path.exists():
        raise ZboptError(f"{store.path} not found: run `zbopt sweep SPEC --out {directory}` first")
    return list(store.records().values())


def note(record: dict[str, Any]) -> str:
    return record.get("error") or record.get("reason") or ""


def usable(record: dict[str, Any]) -> bool:
    """A result that counts: evaluated and within the memory cap."""
    return record.get("status") == "ok" and bool(record.get("fits_cap"))


# ----- CSV ---------------------------------------------------------------------------------------

def csv_text(records: Iterable[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    for record in records:
        row = {k: record.get(k) for k in CSV_COLUMNS}
        row["note"] = note(record).replace("\n", " ")
        if isinstance(row["memory_cap"], list):
            row["memory_cap"] = "/".join(str(x) for x in row["memory_cap"])
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return buffer.getvalue()


# ----- per-instance summary ----------------------------------------------------------------------

@dataclass(frozen=True)
class InstanceSummary:
    instance_name: str
    devices: int
    microbatches: int
    memory_cap: Any
    best_method: Optional[str]
    best_span: Optional[float]
    best_bubble: Optional[float]
    lower_bound: Optional[float]  # the best proven bound among the solver records

    @property
    def gap(self) -> Optional[float]:
        if self.best_span is None or self.lower_bound is None or not self.best_span:
            return None
        return max(0.0, (self.best_span - self.lower_bound) / self.best_span)


def group_by_instance(records: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        groups[_instance_id(record)].append(record)
    return dict(groups)


def _instance_id(record: dict[str, Any]) -> str:
    import json
    return json.dumps(record.get("instance", {}), sort_keys=True)


def summarize(records: list[dict[str, Any]]) -> InstanceSummary:
    first = records[0]
    fitting = [r for r in records if usable(r)]
    best = min(fitting, key=lambda r: r["span"]) if fitting else None
    bounds = [r["lower_bound"] for r in records
              if r.get("kind") == "solver" and r.get("lower_bound") is not None]
    return InstanceSummary(
        first.get("instance_name", ""), first.get("devices"), first.get("microbatches"),
        first.get("memory_cap"), best["method"] if best else None,
        best["span"] if best else None, best["bubble_rate"] if best else None,
        max(bounds) if bounds else None)


# ----- Markdown ----------------------------------------------------------------------------------

def _num(x: Any, digits: int = 1) -> str:
    if x is None or x == "":
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float) and not x.is_integer():
        return f"{x:,.{digits}f}"
    return f"{int(x):,}" if isinstance(x, (int, float)) else str(x)


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2%}"


def _cap(record: dict[str, Any]) -> str:
    cap = record.get("memory_cap")
    return "unlimited" if cap is None else str(cap)


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def markdown_text(records: list[dict[str, Any]], title: str = "Sweep results",
                  plots: Iterable[str] = ()) -> str:
    statuses = defaultdict(int)
    for r in records:
        statuses[r.get("status", "?")] += 1
    groups = group_by_instance(records)
    out = [f"# {title}\n\n",
           f"{len(records)} jobs on {len(groups)} instances: "
           + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) + ".\n\n",
           "Spans and bubble rates are from zbopt's evaluator; a schedule over the memory cap "
           "does not count as best. Gap = (best span - best proven lower bound) / best span.\n\n",
           "## Best per instance\n\n"]
    rows = []
    for recs in groups.values():
        s = summarize(recs)
        rows.append([s.instance_name, str(s.devices), str(s.microbatches), _cap(recs[0]),
                     s.best_method or "-", _num(s.best_span), _pct(s.best_bubble),
                     _num(s.lower_bound), _pct(s.gap)])
    out.append(_table(["instance", "p", "m", "cap", "best method", "span", "bubble",
                       "lower bound", "gap"], rows))
    for name in plots:
        out.append(f"\n![{name}]({name})\n")
    out.append("\n## Every job\n")
    for recs in groups.values():
        first = recs[0]
        out.append(f"\n### {first.get('instance_name') or 'instance'} "
                   f"(p={first.get('devices')}, m={first.get('microbatches')}, "
                   f"placement={first.get('placement')}, cap={_cap(first)})\n\n")
        ordered = sorted(recs, key=lambda r: (not usable(r), r.get("span") or 0, r["method"]))
        out.append(_table(
            ["method", "status", "span", "bubble", "peak memory", "fits cap", "lower bound",
             "gap", "note"],
            [[r["method"], r.get("solver_status") or r.get("status", "?"), _num(r.get("span")),
              _pct(r.get("bubble_rate")), _num(r.get("peak_memory")), _num(r.get("fits_cap")),
              _num(r.get("lower_bound")), _pct(r.get("gap")), _short(note(r))]
             for r in ordered]))
    return "".join(out)


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ----- plots -------------------------------------------------------------------------------------

def series(records: Iterable[dict[str, Any]], x_field: str, ignore: tuple[str, ...]
           ) -> dict[str, list[tuple[float, float]]]:
    """Bubble rate against `x_field`, one series per method and per setting of the instance
    keys (other than `ignore`) that vary between records; only results within the cap."""
    points = [r for r in records if usable(r) and r.get(x_field) is not None]
    keys = sorted({k for r in points for k in r.get("instance", {})} - set(ignore) - {"name"})
    varying = [k for k in keys
               if len({repr(r.get("instance", {}).get(k)) for r in points}) > 1]
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in points:
        setting = ", ".join(f"{k}={_label_value(r['instance'].get(k))}" for k in varying)
        label = r["method"] + (f" ({setting})" if setting else "")
        out[label].append((r[x_field], r["bubble_rate"]))
    return {label: sorted(pts) for label, pts in sorted(out.items())}


def _label_value(value: Any) -> str:
    if isinstance(value, list):
        return "/".join(str(x) for x in value) if len(set(map(str, value))) > 1 else str(value[0])
    return "none" if value is None else str(value)


def plot_bubble_against(records: list[dict[str, Any]], x_field: str, xlabel: str,
                        ignore: tuple[str, ...], ax=None):
    """One line per method (and setting): bubble rate against `x_field`. Returns the Axes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 5.5))
    for label, pts in series(records, x_field, ignore).items():
        xs, ys = zip(*pts)
        ax.plot(xs, [100 * y for y in ys], marker="o", markersize=3, linewidth=1, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("bubble rate (%)")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return ax


_PLOTS = (
    # file, x field, axis label, instance keys the x field stands for
    ("bubble_vs_m.png", "microbatches", "micro-batches m", ("microbatches",)),
    ("bubble_vs_cap.png", "cap_p", "memory cap (multiples of p)", ("memory_cap",)),
)


def write_plots(records: list[dict[str, Any]], directory: Path) -> list[str]:
    """The plots whose x axis takes at least two values among usable results."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    written = []
    for name, x_field, xlabel, ignore in _PLOTS:
        xs = {r.get(x_field) for r in records if usable(r) and r.get(x_field) is not None}
        if len(xs) < 2:
            continue
        fig, ax = plt.subplots(figsize=(10, 5.5))
        plot_bubble_against(records, x_field, xlabel, ignore, ax=ax)
        ax.set_title(f"bubble rate against {xlabel}")
        fig.tight_layout()
        fig.savefig(directory / name, dpi=110)
        plt.close(fig)
        written.append(name)
    return written


def write_report(directory: str | Path, title: str | None = None) -> list[Path]:
    """Regenerate results.csv, results.md and the plots in `directory` from results.jsonl."""
    directory = Path(directory)
    records = load_records(directory)
    plots = write_plots(records, directory)
    (directory / "results.csv").write_text(csv_text(records))
    (directory / "results.md").write_text(
        markdown_text(records, title or f"Sweep results: {directory.name}", plots))
    return [directory / "results.csv", directory / "results.md"] + [directory / p for p in plots]
