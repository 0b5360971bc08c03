"""Sweep reports from results.jsonl alone: results.csv, results.md and plots (matplotlib Agg).

Nothing here recomputes a metric: every number is copied from the records, which came from the
one evaluator. The "certified gap" of an instance is (best span that fits - best proven lower
bound) / best span, over every method of the sweep.
"""

from __future__ import annotations

import csv
import io
import textwrap
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

from ..errors import ZboptError
from ..export.outputs import check_targets, write_all
from ..instance import finite
from ..report.numbers import gap_text
from ..result import relative_gap
from .store import ResultStore

CSV_COLUMNS = (
    "instance_name", "devices", "microbatches", "instance_placement", "cap_spec", "cap_p",
    "label", "method", "kind", "status", "placement", "chunks", "makespan", "span", "ideal",
    "bubble_rate", "peak_memory", "memory_cap", "fits_cap", "lower_bound", "bound_name", "gap",
    "backend_status", "runtime", "note", "key",
)
# statuses of a record that holds an evaluated schedule
SCHEDULED = ("optimal", "feasible", "heuristic")


def load_records(directory: str | Path) -> list[dict[str, Any]]:
    if Path(directory).is_file():
        raise ZboptError(f"{directory} is a file: give the sweep's --out folder (the one holding "
                         f"results.jsonl)")
    store = ResultStore(Path(directory))
    if not store.path.exists():
        raise ZboptError(f"{store.path} not found: run `zbopt sweep SPEC --out {directory}` first")
    return sorted((normalize(r) for r in store.records().values()), key=record_order)


def record_order(record: dict[str, Any]) -> tuple:
    """Where a record goes in the CSV and the tables: by instance (name, p, m, cap), then
    method label; never by the order of results.jsonl, which parallel workers shuffle."""
    return instance_order(record) + (_natural(record.get("label")), str(record.get("key")))


def instance_order(record: dict[str, Any]) -> tuple:
    return (_natural(record.get("instance_name")), _sortable(record.get("devices")),
            _sortable(record.get("microbatches")), _sortable(record.get("cap_spec")),
            _instance_id(record))


def _natural(text: Any) -> tuple:
    """"u-m10" after "u-m4", "cap1p" before "cap1.5p": the numbers of a name (digit runs,
    with a decimal part) compared as numbers."""
    import re
    return tuple((0, float(part), "") if part[0].isdigit() else (1, 0, part)
                 for part in re.split(r"(\d+(?:\.\d+)?)", "" if text is None else str(text))
                 if part)


def normalize(record: dict[str, Any]) -> dict[str, Any]:
    """A record in the current shape (a Result's dict plus the job's fields); a record stored
    before sweeps kept Results (status "ok", "run_placement", ...) is read into that shape."""
    if "label" in record:
        return {**record, "label": str(record["label"])}
    spec = record.get("method_spec") if isinstance(record.get("method_spec"), dict) else {}
    out = dict(record)
    out["label"] = str(record.get("method"))
    out["method"] = spec.get("name", record.get("method"))
    out["instance_placement"] = record.get("placement")
    out["placement"] = record.get("run_placement", record.get("placement"))
    out["chunks"] = record.get("run_chunks")
    out["cap_spec"] = record.get("memory_cap")
    out["memory_cap"] = None
    peak = record.get("peak_memory")
    out["peak_memory"] = [peak] if isinstance(peak, (int, float)) else peak
    out["message"] = record.get("error") or record.get("reason") or ""
    if record.get("status") == "ok":
        out["status"] = record.get("solver_status") or "heuristic"
    elif record.get("status") == "no-schedule":
        out["status"] = record.get("solver_status") or "infeasible"
    return out


def note(record: dict[str, Any]) -> str:
    return record.get("message") or ""


def usable(record: dict[str, Any]) -> bool:
    """A result that counts: evaluated (with its numbers) and within the memory cap."""
    return record.get("status") in SCHEDULED and record.get("fits_cap") is True \
        and _is_number(record.get("span")) and _is_number(record.get("bubble_rate"))


def _is_number(x: Any) -> bool:
    """A number a report can use (an integer too large for a float, in a hand-edited record,
    is not)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and finite(x)


def peak(record: dict[str, Any]) -> Optional[float]:
    """The largest per-device peak of a record (None without a schedule)."""
    values = record.get("peak_memory")
    if isinstance(values, list) and values and all(_is_number(v) for v in values):
        return max(values)
    return None


def _plain(value: Any) -> Any:
    return "/".join(f"{x:g}" if isinstance(x, float) else str(x) for x in value) \
        if isinstance(value, list) else value


# ----- CSV ---------------------------------------------------------------------------------------

def csv_text(records: Iterable[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    for record in sorted(records, key=record_order):
        row = {k: _plain(record.get(k)) for k in CSV_COLUMNS}
        row["note"] = note(record).replace("\n", " ")
        row["peak_memory"] = peak(record)
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return buffer.getvalue()


# ----- per-instance summary ----------------------------------------------------------------------

@dataclass(frozen=True)
class InstanceSummary:
    """Best results of one instance. `best_*` is over methods on the instance's own placement
    (the problem the solver's lower bound is for); `any_*` over every placement (a family
    that re-places the model solves a different problem, so it is never compared with the
    bound)."""

    instance_name: str
    devices: int
    microbatches: int
    cap_spec: Any
    best_method: Optional[str]
    best_span: Optional[float]
    best_bubble: Optional[float]
    lower_bound: Optional[float]  # the best proven bound among the solver records
    any_method: Optional[str] = None
    any_placement: Optional[str] = None
    any_span: Optional[float] = None

    @property
    def gap(self) -> Optional[float]:
        """(best span - lower bound) / best span, at least 0 as Result.gap is (a stored bound a
        rounding error above the span is no negative gap)."""
        if self.best_span is None or self.lower_bound is None or not self.best_span:
            return None
        return max(0.0, relative_gap(self.best_span, self.lower_bound))


def group_by_instance(records: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """{instance: its records}, instances and records in record_order."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in sorted(records, key=record_order):
        groups[_instance_id(record)].append(record)
    return dict(groups)


def _instance_id(record: dict[str, Any]) -> str:
    import json
    return json.dumps(record.get("instance", {}), sort_keys=True)


def _rank(record: dict[str, Any]) -> tuple:
    # on a tie the family/heuristic gets the credit: a solver that returns its warm start
    # did not find that schedule; then the method's label, so the best of methods that tie
    # does not depend on the order of results.jsonl
    return (record["span"], record.get("kind") == "solver") + record_order(record)[-2:]


def summarize(records: list[dict[str, Any]]) -> InstanceSummary:
    first = records[0]
    fitting = [r for r in records if usable(r)]
    home = [r for r in fitting if _home(r)]
    best = min(home, key=_rank) if home else None
    anywhere = min(fitting, key=_rank) if fitting else None
    # a lower bound proves something about the instance's own placement only
    bounds = [r["lower_bound"] for r in records
              if _home(r) and _is_number(r.get("lower_bound"))
              and r.get("objective_name", "span") == "span"]
    return InstanceSummary(
        first.get("instance_name", ""), first.get("devices"), first.get("microbatches"),
        first.get("cap_spec"), best["label"] if best else None,
        best["span"] if best else None, best["bubble_rate"] if best else None,
        max(bounds) if bounds else None,
        anywhere["label"] if anywhere else None,
        anywhere.get("placement") if anywhere else None,
        anywhere["span"] if anywhere else None)


def _home(record: dict[str, Any]) -> bool:
    return record.get("placement") == record.get("instance_placement")


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
    return f"{x:.2%}" if _is_number(x) else "-"


def _cap(record: dict[str, Any]) -> str:
    """The cap as the spec gave it, a per-device list as the CSV writes it (20000/25000)."""
    cap = record.get("cap_spec")
    return "unlimited" if cap is None else str(_plain(cap))


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def markdown_text(records: list[dict[str, Any]], title: str = "Sweep results",
                  plots: Iterable[str] = ()) -> str:
    statuses = defaultdict(int)
    for r in records:
        statuses[str(r.get("status", "?"))] += 1
    groups = group_by_instance(records)
    counts = ": " + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) if records else ""
    out = [f"# {title}\n\n",
           f"{len(records)} jobs on {len(groups)} instances{counts}.\n\n",
           "Spans and bubble rates are from zbopt's evaluator; a schedule over the memory cap "
           "does not count as best. Best = shortest span within the cap on the instance's own "
           "placement; gap = (best span - best proven lower bound) / best span. A family that "
           "re-places the model (more, smaller stages) solves another problem: it is listed "
           "apart when shorter, never compared with the bound.\n\n",
           "## Best per instance\n\n"]
    rows = []
    for recs in groups.values():
        s = summarize(recs)
        elsewhere = "-" if s.any_span is None or s.any_span >= (s.best_span or float("inf")) \
            else f"{_num(s.any_span)} ({s.any_method}, {s.any_placement})"
        rows.append([s.instance_name, str(s.devices), str(s.microbatches), _cap(recs[0]),
                     s.best_method or "-", _num(s.best_span), _pct(s.best_bubble),
                     _num(s.lower_bound), gap_text(s.gap), elsewhere])
    out.append(_table(["instance", "p", "m", "cap", "best method", "span", "bubble",
                       "lower bound", "gap", "shorter on another placement"], rows))
    out.append("\n## Runtime per method\n\n")
    out.append(_table(["method", "jobs", "median s", "max s"], runtime_rows(records)))
    for name in plots:
        out.append(f"\n![{name}]({name})\n")
        if name == "bubble_vs_cap.png" and _cap_note(records):
            out.append(f"\n{name}: {_cap_note(records)}.\n")
    out.append("\n## Every job\n")
    for recs in groups.values():
        first = recs[0]
        out.append(f"\n### {first.get('instance_name') or 'instance'} "
                   f"(p={first.get('devices')}, m={first.get('microbatches')}, "
                   f"placement={first.get('instance_placement')}, cap={_cap(first)})\n\n")
        ordered = sorted(recs, key=lambda r: (not usable(r), r["span"] if usable(r) else 0)
                         + record_order(r)[-2:])
        out.append(_table(
            ["method", "placement", "status", "span", "bubble", "peak memory", "fits cap",
             "lower bound", "gap", "note"],
            [[r["label"], _placement(r), str(r.get("status", "?")), _num(r.get("span")),
              _pct(r.get("bubble_rate")), _num(peak(r)), _num(r.get("fits_cap")),
              _num(r.get("lower_bound")), gap_text(r.get("gap")), _short(note(r))]
             for r in ordered]))
    return "".join(out)


def _placement(record: dict[str, Any]) -> str:
    """The placement a job ran on (a family may re-place the model), as in the CSV."""
    placement, chunks = record.get("placement"), record.get("chunks")
    if placement is None:
        return "-"
    return f"{placement} ({_plain(chunks)} chunks)" if chunks not in (None, 1, [1]) \
        and placement != "contiguous" else str(placement)


def runtime_rows(records: Iterable[dict[str, Any]]) -> list[list[str]]:
    """Wall seconds of each job in its worker (median and max per method)."""
    import statistics
    times: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if _is_number(r.get("runtime")):
            times[str(r.get("label"))].append(r["runtime"])
    return [[method, str(len(ts)), f"{statistics.median(ts):.3f}", f"{max(ts):.3f}"]
            for method, ts in sorted(times.items())]


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ----- plots -------------------------------------------------------------------------------------

# Instance keys that split results into panels (costs and comm do not: points measured with
# different profiled costs still belong on one line, as bubble rates)
SETTING_KEYS = ("devices", "microbatches", "placement", "chunks", "memory_cap", "m_b", "m_w",
                "static_memory", "overlap")
MAX_PANELS = 12


def panels(records: Iterable[dict[str, Any]], x_field: str, ignore: tuple[str, ...]
           ) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """{panel title: {method: [(x, bubble rate)]}} over results within the cap; one panel per
    setting of the instance keys (other than `ignore`) that vary between records."""
    points = [r for r in records if usable(r) and _is_number(r.get(x_field))
              and isinstance(r.get("instance"), dict)
              and not (x_field == "cap_p" and per_device_cap(r))]
    keys = [k for k in SETTING_KEYS if k not in ignore]
    varying = [k for k in keys
               if len({repr(r.get("instance", {}).get(k)) for r in points}) > 1]
    out: dict[tuple, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for r in points:
        setting = tuple((k, _hashable(r["instance"].get(k))) for k in varying)
        out[setting][r["label"]].append((r[x_field], r["bubble_rate"]))
    ordered = sorted(out.items(), key=lambda item: [_sortable(v) for _, v in item[0]])
    return {(", ".join(f"{k}={_label_value(v)}" for k, v in setting) or "all"):
            {method: sorted(pts) for method, pts in sorted(lines.items())}
            for setting, lines in ordered}


def per_device_cap(record: dict[str, Any]) -> bool:
    """A record whose cap was given per device, with different values: its cap_p (the
    largest, in multiples of p) is no point on a uniform cap's axis."""
    cap = record.get("cap_spec")
    return isinstance(cap, list) and len({repr(c) for c in cap}) > 1


def _cap_note(records: list[dict[str, Any]]) -> str:
    """What the cap plot leaves out: results under per-device caps."""
    caps = {repr(r.get("cap_spec")) for r in records if usable(r) and per_device_cap(r)}
    return (f"left out: {len(caps)} per-device cap(s), which no uniform cap stands for"
            if caps else "")


def _hashable(value: Any) -> Any:
    """A setting's value as a dict key: a per-stage list (m_b, static_memory) as a tuple, a
    table (only in a hand-edited record) as its text."""
    if isinstance(value, list):
        return tuple(map(_hashable, value))
    return repr(value) if isinstance(value, dict) else value


def _sortable(value: Any) -> tuple:
    if isinstance(value, (int, float)):
        return (0, value, "")
    if isinstance(value, str) and value.endswith("p"):
        try:
            return (1, float(value[:-1]), "")
        except ValueError:
            pass
    return (2, 0, repr(value))


def _label_value(value: Any) -> str:
    if isinstance(value, tuple) and value:
        return "/".join(str(x) for x in value) if len(set(map(str, value))) > 1 else str(value[0])
    return "none" if value is None else str(value)


TITLE_WIDTH = 55  # characters a panel's title line holds at its font size


def plot_bubble_against(lines: dict[str, list[tuple[float, float]]], xlabel: str, title: str,
                        ax=None, colors: dict[str, Any] | None = None):
    """One line per method: bubble rate against x. Returns the Axes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    for method, pts in lines.items():
        xs, ys = zip(*pts)
        ax.plot(xs, [100 * y for y in ys], marker="o", markersize=3, linewidth=1, label=method,
                color=(colors or {}).get(method))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("bubble rate (%)")
    # a panel's setting may list per-stage values: wrapped, it stays within its panel's width
    ax.set_title(textwrap.fill(title, TITLE_WIDTH, break_on_hyphens=False), fontsize=8)
    ax.grid(True, alpha=0.3)
    return ax


_PLOTS = (
    # file, x field, axis label, instance keys the x field stands for
    ("bubble_vs_m.png", "microbatches", "micro-batches m", ("microbatches",)),
    ("bubble_vs_cap.png", "cap_p", "memory cap (multiples of p)", ("memory_cap",)),
)


# every file a report may write (a plot only when its x axis takes two values)
REPORT_FILES = ("results.csv", "results.md") + tuple(name for name, *_ in _PLOTS)


def check_report_targets(directory: Path, hint: str = "") -> None:
    """Refuse, before anything is written (before a sweep runs a job), a report file that cannot
    be written: a folder of its name, or a folder `directory` that is not writable."""
    for name in REPORT_FILES:
        if (directory / name).is_dir():
            raise ZboptError(f"{directory / name} is a folder, where the sweep's report writes "
                             f"its {name}: move or rename it{hint}")
    check_targets([directory / name for name in REPORT_FILES], force=True)


def legend_inches(fig, legend) -> float:
    """How wide `legend` is drawn, in inches."""
    renderer = fig.canvas.get_renderer()
    return legend.get_window_extent(renderer).width / fig.dpi


def render_plots(records: list[dict[str, Any]]) -> dict[str, bytes]:
    """{file name: PNG} of the plots whose x axis takes at least two values among usable
    results."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pngs = {}
    for name, x_field, xlabel, ignore in _PLOTS:
        fig = plot_figure(records, x_field, xlabel, ignore)
        if fig is None:
            continue
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=110)
        plt.close(fig)
        pngs[name] = png.getvalue()
    return pngs


def plot_figure(records: list[dict[str, Any]], x_field: str, xlabel: str,
                ignore: tuple[str, ...]):
    """One plot of render_plots (a pyplot figure; the caller closes it), None where its x axis
    takes fewer than two values."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    xs = {r.get(x_field) for r in records if usable(r) and _is_number(r.get(x_field))
          and not (x_field == "cap_p" and per_device_cap(r))}
    if len(xs) < 2:
        return None
    groups = list(panels(records, x_field, ignore).items())[:MAX_PANELS]
    methods = sorted({m for _, lines in groups for m in lines})
    cmap = plt.get_cmap("tab20")
    colors = {m: cmap(i % 20) for i, m in enumerate(methods)}
    cols = min(3, len(groups))
    rows = -(-len(groups) // cols)
    note = _cap_note(records) if x_field == "cap_p" else ""
    height = 3.3 * rows + (0.3 if note else 0)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols + 2.2, height),
                             squeeze=False, sharey=True)
    for ax, (title, lines) in zip(axes.flat, groups):
        plot_bubble_against(lines, xlabel, title, ax=ax, colors=colors)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    handles = [plt.Line2D([], [], color=colors[m], marker="o", markersize=3) for m in methods]
    legend = fig.legend(handles, methods, loc="center right", fontsize=7)
    # the figure widened by what the legend takes: long labels never cover the panels
    legend_width = legend_inches(fig, legend) + 0.3
    width = 4.2 * cols + legend_width
    fig.set_size_inches(width, height)
    fig.suptitle(f"bubble rate against {xlabel} (schedules within the cap)", fontsize=10)
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.3 / height if note else 0, 1 - legend_width / width, 0.96))
    return fig


def write_report(directory: str | Path, title: str | None = None) -> list[Path]:
    """Regenerate results.csv, results.md and the plots in `directory` from results.jsonl;
    every file is made (in memory) and every target checked before any is written, and they
    are written all or none (export.outputs.write_all)."""
    directory = Path(directory)
    records = load_records(directory)
    plots = render_plots(records)
    texts = {"results.csv": csv_text(records),
             "results.md": markdown_text(records, title or f"Sweep results: {directory.name}",
                                         plots)}
    check_report_targets(directory)
    return write_all({directory / name: content
                      for name, content in {**texts, **plots}.items()}, force=True)
