"""Gantt charts and memory curves of evaluated schedules (matplotlib), one function per picture.

Every picture is drawn from a Timeline, i.e. from evaluate(): the charts never time anything
themselves. Colours follow the seed articles: purple F, orange B, green W, grey idle; a device's
later chunks (and DualPipe's reverse direction) are lighter shades of the same colour.

Figures are built with matplotlib.figure.Figure, not pyplot, so nothing touches a global
backend or figure registry; saving to PNG/SVG goes through Agg/SVG canvases.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Callable, Iterable, Sequence

from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import EngFormatter, FuncFormatter

from ..errors import ZboptError
from ..schedule import Item, Timeline
from .numbers import figure as printed
from .numbers import number

KIND_COLOURS = {"F": "#7b4fc9", "B": "#f28e1c", "W": "#2e9e4f"}
IDLE_COLOUR = "#dcdcdc"
CAP_COLOUR = "#d62728"
MEMORY_COLOUR = "#4a6fa5"
KIND_NAMES = {"F": "forward", "B": "backward (input grad)", "W": "backward (weight grad)"}
PLOT_SUFFIXES = (".png", ".svg", ".pdf")
STACKED_NAME = "stacked"


# ----- colours ----------------------------------------------------------------------------------

def lighten(colour: str, amount: float) -> str:
    """`colour` mixed with white by `amount` in [0, 1]."""
    r, g, b = to_rgb(colour)
    return to_hex((r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount))


def shade_of(timeline: Timeline, stage: int) -> float:
    """How much lighter a stage's blocks are: 0 for a device's first chunk (or DualPipe's
    forward direction), up to 0.5 for its last, so chunks on one row stay distinguishable."""
    instance = timeline.instance
    if instance.placement == "dualpipe":
        return 0.0 if stage < instance.devices else 0.45
    stages = instance.stages_of(instance.device_of(stage))
    if len(stages) < 2:
        return 0.0
    return 0.5 * stages.index(stage) / (len(stages) - 1)


def pass_colour(timeline: Timeline, stage: int, kind: str) -> str:
    return lighten(KIND_COLOURS[kind], shade_of(timeline, stage))


def label_colour(timeline: Timeline, stage: int, kind: str) -> str:
    """White on the dark purple and green, black on orange and on the lighter shades."""
    return "black" if kind == "B" or shade_of(timeline, stage) >= 0.3 else "white"


def is_overlapped(item: Item) -> bool:
    """A DualPipe F&B block (an F run together with another pass), drawn as stacked bands since
    its passes run at the same time; a fused (B, W) is sequential and drawn side by side."""
    return len(item) > 1 and any(k == "F" for _, _, k in item)


# ----- geometry shared with the HTML report ----------------------------------------------------

def pass_boxes(timeline: Timeline) -> list[dict]:
    """Every pass as a box: device, stage, mb, kind, start, end (the evaluator's), the box's
    x0/x1 and its vertical band (index, count) within the row, the item's bounds and size.

    Overlapped blocks give each pass the whole block's width and a band of its height."""
    boxes = []
    for d, order in enumerate(timeline.schedule.orders):
        for item, (t0, t1) in zip(order, timeline.item_times[d]):
            overlapped = is_overlapped(item)
            for band, p in enumerate(item):
                stage, mb, kind = p
                boxes.append({
                    "device": d, "stage": stage, "mb": mb, "kind": kind,
                    "start": timeline.start[p], "end": timeline.end[p],
                    "x0": t0 if overlapped else timeline.start[p],
                    "x1": t1 if overlapped else timeline.end[p],
                    "band": band if overlapped else 0, "bands": len(item) if overlapped else 1,
                    "item_start": t0, "item_end": t1, "item_size": len(item),
                })
    return boxes


def _pixel_scale(ax: Axes) -> float:
    """Pixels per time unit at the axes' current scale (look it up once per chart: asking the
    axes its limits per box is most of a dense chart's drawing time)."""
    x0, x1 = ax.get_xlim()
    return ax.bbox.width / max(x1 - x0, 1e-12)


def edge_width(pixels: float, dpi: float) -> float:
    """The white edge (points) of a pass box `pixels` wide: 0.4 pt where the box is wide,
    thinner as it narrows (at most a tenth of its width), none under 4 pixels, so that the
    colours of a dense chart do not wash out to white."""
    if pixels < 4:
        return 0.0
    return min(0.4, 0.1 * pixels * 72 / dpi)


def _fits(pixels: float, text: str, fontsize: float, dpi: float) -> bool:
    """Whether `text` fits inside a block `pixels` wide."""
    return pixels >= (len(text) * 0.62 + 0.4) * fontsize * dpi / 72


# ----- pictures ---------------------------------------------------------------------------------

def time_formatter(end: float):
    """The time axis's tick labels up to `end`: 1,281,520 (numbers.number) while they stay short
    enough not to run into each other on a chart's width, 5T, 10T past a billion (as the memory
    axis writes its sizes)."""
    if abs(end) >= 1e9:
        return EngFormatter(sep="", places=None)
    return FuncFormatter(lambda x, _: number(x))


def _corners(x0: float, x1: float, y0: float, y1: float) -> tuple:
    """A box's four corners, as a PolyCollection takes them (cheaper than a Rectangle patch each:
    a dense chart has tens of thousands)."""
    return ((x0, y0), (x0, y1), (x1, y1), (x1, y0))


def _new_axes(width: float, height: float) -> Axes:
    figure = Figure(figsize=(width, height), dpi=110)
    return figure.add_subplot()


def plot_gantt(timeline: Timeline, ax: Axes | None = None, devices: Sequence[int] | None = None,
               labels: bool = True, xmax: float | None = None, legend: bool = False,
               boxes: list[dict] | None = None) -> Axes:
    """One row per device: idle time grey, F/B/W blocks coloured, micro-batch numbers on the
    blocks wide enough to hold them, atomic multi-pass blocks outlined.

    `boxes` is pass_boxes(timeline), when a caller drawing row by row already has it."""
    rows = list(range(timeline.instance.devices)) if devices is None else list(devices)
    if ax is None:
        ax = _new_axes(12, 0.45 * len(rows) + 1.2)
    end = xmax if xmax is not None else timeline.makespan
    ax.set_xlim(0, end if end > 0 else 1)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # device 0 on top, as in the seed articles
    row_of = {d: i for i, d in enumerate(rows)}
    height = 0.8
    ax.barh(range(len(rows)), [timeline.makespan] * len(rows), left=0, height=height,
            color=IDLE_COLOUR, linewidth=0)
    boxes = [b for b in (pass_boxes(timeline) if boxes is None else boxes)
             if b["device"] in row_of]
    scale, dpi = _pixel_scale(ax), ax.figure.dpi
    colour_of: dict[tuple[int, str], str] = {}
    corners, colours, edges = [], [], []
    for b in boxes:
        band_height = height / b["bands"]
        y = row_of[b["device"]] - height / 2 + b["band"] * band_height
        corners.append(_corners(b["x0"], b["x1"], y, y + band_height))
        key = (b["stage"], b["kind"])
        if key not in colour_of:
            colour_of[key] = pass_colour(timeline, *key)
        colours.append(colour_of[key])
        edges.append(edge_width((b["x1"] - b["x0"]) * scale, dpi))
    ax.add_collection(PolyCollection(corners, facecolors=colours, edgecolors="white",
                                     linewidths=edges))
    outlines = []
    for d in rows:
        for item, (t0, t1) in zip(timeline.schedule.orders[d], timeline.item_times[d]):
            # at a coarse scale outlines would paint everything black: only where they read
            if len(item) > 1 and (t1 - t0) * scale >= 14:
                outlines.append(_corners(t0, t1, row_of[d] - height / 2, row_of[d] + height / 2))
    if outlines:
        ax.add_collection(PolyCollection(outlines, facecolors="none", edgecolors="#222222",
                                         linewidths=0.9))
    if labels and boxes:
        row_pixels = ax.bbox.height / max(len(rows), 1)
        for b in boxes:
            fontsize = min(8.0, row_pixels * 72 / dpi * 0.55 / b["bands"])
            text = str(b["mb"])
            if fontsize >= 4 and _fits((b["x1"] - b["x0"]) * scale, text, fontsize, dpi):
                y = row_of[b["device"]] - height / 2 + (b["band"] + 0.5) * height / b["bands"]
                ax.text((b["x0"] + b["x1"]) / 2, y, text, ha="center", va="center",
                        fontsize=fontsize, color=label_colour(timeline, b["stage"], b["kind"]),
                        clip_on=True)
    ax.set_yticks(range(len(rows)), [f"device {d}" for d in rows])
    ax.tick_params(axis="y", length=0)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    unit = timeline.instance.time_unit
    ax.set_xlabel(f"time ({unit})" if unit else "time")
    ax.xaxis.set_major_formatter(time_formatter(end))
    if legend:
        ax.legend(handles=legend_handles(timeline), loc="lower left", bbox_to_anchor=(0, 1.0),
                  ncol=6, fontsize=8, frameon=False)
    return ax


def plot_memory(timeline: Timeline, device: int, ax: Axes | None = None,
                xmax: float | None = None) -> Axes:
    """A device's memory level over time (a step curve from timeline.memory_curve), its peak,
    and the cap as a dashed line when the instance has one."""
    if not 0 <= device < timeline.instance.devices:
        raise ZboptError(f"device {device} is not in the instance "
                         f"(0..{timeline.instance.devices - 1})")
    if ax is None:
        ax = _new_axes(12, 2)
    curve = timeline.memory_curve[device]
    end = max(xmax if xmax is not None else timeline.makespan, curve[-1][0])
    times = [t for t, _ in curve] + [end]
    levels = [level for _, level in curve] + [curve[-1][1]]
    ax.fill_between(times, levels, step="post", color=MEMORY_COLOUR, alpha=0.25, linewidth=0)
    ax.step(times, levels, where="post", color=MEMORY_COLOUR, linewidth=1.1)
    cap = timeline.instance.cap[device] if timeline.instance.cap else None
    top = max(levels + ([cap] if cap is not None else []))
    if cap is not None:
        ax.axhline(cap, color=CAP_COLOUR, linestyle="--", linewidth=1.3)
    peak = timeline.peak_memory[device]
    label = f"peak {printed(peak)}" + (f" / cap {printed(cap)}" if cap is not None else "")
    over = cap is not None and peak > cap + 1e-9
    ax.text(1.0, 1.0, label, transform=ax.transAxes, ha="right", va="top", fontsize=7,
            color=CAP_COLOUR if over else "#333333",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1})
    ax.set_xlim(0, end if end > 0 else 1)
    ax.xaxis.set_major_formatter(time_formatter(end))
    # headroom over the curve and the cap for the peak/cap label in the top right corner
    ax.set_ylim(0, top * 1.5 if top > 0 else 1)
    ax.set_yticks([0, top])
    ax.yaxis.set_major_formatter(EngFormatter(sep="", places=None))
    ax.tick_params(axis="y", labelsize=7, length=2)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    unit = timeline.instance.memory_unit
    ax.set_ylabel(f"mem ({unit})" if unit else "mem", fontsize=7)
    return ax


def legend_handles(timeline: Timeline, cap: bool = True,
                   others: Sequence[Timeline] = ()) -> list:
    """Kinds, idle, the lighter shade when some chart uses it, and the cap line if drawn."""
    handles = [Patch(color=KIND_COLOURS[k], label=f"{k} {KIND_NAMES[k]}") for k in "FBW"]
    handles.append(Patch(color=IDLE_COLOUR, label="idle"))
    placements = {t.instance.placement for t in (timeline, *others) if t.instance.chunks > 1}
    if placements:
        meaning = {"dualpipe": "reverse direction"}.get(placements.pop(), "later chunk") \
            if len(placements) == 1 else "later chunk or reverse direction"
        handles.append(Patch(color=lighten(KIND_COLOURS["F"], 0.45), label=f"lighter: {meaning}"))
    if cap and timeline.instance.cap is not None:
        handles.append(Patch(facecolor="none", edgecolor=CAP_COLOUR, linestyle="--",
                             label="memory cap"))
    return handles


def describe(timeline: Timeline) -> str:
    """A one-line headline of a timeline's metrics, from the evaluator's numbers."""
    method = timeline.schedule.method or "schedule"
    cap = "" if timeline.instance.cap is None else (
        "  fits cap" if timeline.fits_cap else "  OVER CAP")
    return (f"{method}: span {printed(timeline.span)}  makespan {printed(timeline.makespan)}  "
            f"bubble {timeline.bubble_rate:.1%}  peak memory "
            f"{printed(max(timeline.peak_memory))}{cap}")


def plot_schedule(timeline: Timeline) -> Figure:
    """One schedule: for every device its Gantt row, and under it its memory level with the cap."""
    p = timeline.instance.devices
    header, footer = 0.8, 0.5  # inches: headline and legend above, time axis below
    height = 0.85 * p + header + footer
    figure = Figure(figsize=(12, height), dpi=110)
    grid = figure.add_gridspec(2 * p, 1, height_ratios=[1.0, 0.7] * p, hspace=0.35,
                               left=0.08, right=0.98, top=1 - header / height,
                               bottom=footer / height)
    first = None
    boxes_of: list[list[dict]] = [[] for _ in range(p)]
    for box in pass_boxes(timeline):
        boxes_of[box["device"]].append(box)
    for d in range(p):
        gantt_ax = figure.add_subplot(grid[2 * d], sharex=first)
        first = first or gantt_ax
        plot_gantt(timeline, gantt_ax, devices=[d], boxes=boxes_of[d])
        memory_ax = figure.add_subplot(grid[2 * d + 1], sharex=first)
        plot_memory(timeline, d, memory_ax, xmax=timeline.makespan)
        gantt_ax.set_xlabel("")
        gantt_ax.tick_params(axis="x", labelbottom=False)
        if d < p - 1:
            memory_ax.tick_params(axis="x", labelbottom=False)
    figure.text(0.01, 1 - 0.12 / height, describe(timeline), ha="left", va="top", fontsize=10,
                weight="bold")
    figure.legend(handles=legend_handles(timeline), loc="upper left", ncol=6, fontsize=8,
                  frameon=False, bbox_to_anchor=(0.005, 1 - 0.36 / height))
    unit = timeline.instance.time_unit
    figure.axes[-1].set_xlabel(f"time ({unit})" if unit else "time")
    return figure


def plot_stacked(timelines: Sequence[Timeline]) -> Figure:
    """Every method's Gantt chart stacked on one shared time axis: bubbles compared at a glance."""
    timelines = list(timelines)
    if not timelines:
        raise ZboptError("no schedule to plot: no method applies to this instance")
    # rows get thinner past ~16 devices so the figure stays a sensible size
    heights = [min(0.28 * t.instance.devices, 4.5) + 0.45 for t in timelines]
    total = sum(heights) + 1.0
    figure = Figure(figsize=(12, total), dpi=110)
    grid = figure.add_gridspec(len(timelines), 1, height_ratios=heights, hspace=0.5 / (
        sum(heights) / len(heights)), left=0.08, right=0.98, top=1 - 0.55 / total,
        bottom=0.45 / total)
    xmax = max(t.makespan for t in timelines)
    first = None
    for i, timeline in enumerate(timelines):
        ax = figure.add_subplot(grid[i], sharex=first)
        first = first or ax
        plot_gantt(timeline, ax, xmax=xmax)
        ax.set_title(describe(timeline), loc="left", fontsize=8.5)
        ax.tick_params(axis="y", labelsize=8)
        if i < len(timelines) - 1:
            ax.set_xlabel("")
            ax.tick_params(axis="x", labelbottom=False)
    figure.legend(handles=legend_handles(timelines[0], cap=False, others=timelines[1:]),
                  loc="upper right", ncol=5, fontsize=8, frameon=False)
    return figure


# ----- drawing many charts ----------------------------------------------------------------------

# Below this many passes between all of a command's charts they are drawn here: a second or
# two of drawing, not worth starting workers for.
CHARTS_PARALLEL_FROM = 5_000


def drawn(count: int, draw: Callable[[int], object], name: Callable[[int], str],
          tell: Callable[[str], None], jobs: int = 1, passes: int = 0,
          first: int = 0) -> list:
    """draw(i) for every chart i < count, each told by `tell` (they take seconds each). With
    jobs > 1 and `passes` (over all the charts) at least CHARTS_PARALLEL_FROM, the charts are
    drawn in that many processes (zbopt.forked), chart `first` (the largest) first; the
    results are the same."""
    from ..forked import can_fork, run_forked
    if jobs > 1 and count > 1 and passes >= CHARTS_PARALLEL_FROM and can_fork():
        out: list = [None] * count
        finished = 0

        def done(i: int, value: object) -> None:
            nonlocal finished
            out[i] = value
            finished += 1
            tell(f"chart {finished}/{count} drawn: {name(i)}")

        order = [first] + [i for i in range(count) if i != first]
        run_forked(order, draw, jobs, done,
                   lambda processes: tell(f"{count} charts in {processes} processes"))
        return out
    out = []
    for i in range(count):
        tell(f"chart {i + 1}/{count}: {name(i)}")
        out.append(draw(i))
    return out


# ----- files ------------------------------------------------------------------------------------

def slug(name: str) -> str:
    """A file-name-safe form of a method name, e.g. 'cpsat (optimal)' -> 'cpsat-optimal'."""
    text = re.sub(r"[^A-Za-z0-9._]+", "-", name).strip("-.")
    return text or "schedule"


def figure_bytes(figure: Figure, suffix: str, dpi: float | None = None) -> bytes:
    """The figure as the bytes of a PNG, SVG or PDF file (by `suffix`, ".png" and so on)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format=suffix.lower().lstrip("."), **({"dpi": dpi} if dpi else {}))
    return buffer.getvalue()


def save_figure(figure: Figure, path: str | Path, force: bool = False) -> Path:
    """Save as PNG, SVG or PDF (by suffix), whole or not at all; never overwrite an existing
    file without force."""
    from ..export.outputs import check_targets, write_file
    path = Path(path)
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise ZboptError(f"cannot write a chart to {path}: use a name ending in "
                         f"{', '.join(PLOT_SUFFIXES)}")
    check_targets([path], force)  # before the drawing
    return write_file(path, figure_bytes(figure, path.suffix), force)


def compare_plot_paths(timelines: Iterable[Timeline], outdir: str | Path) -> list[Path]:
    """Where write_compare_plots puts each method's PNG, then the stacked PNG and SVG."""
    outdir = Path(outdir)
    names: list[str] = []
    for timeline in timelines:
        base = slug(timeline.schedule.method)
        name, n = base, 2
        while name in names or name == STACKED_NAME:  # two rows with one name keep both files
            name, n = f"{base}-{n}", n + 1
        names.append(name)
    return ([outdir / f"{name}.png" for name in names]
            + [outdir / f"{STACKED_NAME}.png", outdir / f"{STACKED_NAME}.svg"])


def check_plot_dir(outdir: str | Path, names: Sequence[str], force: bool = False) -> Path:
    """Refuse now (before any work) a --plot directory that is a file, whose parent is missing,
    where no file can be created, or that holds a chart write_compare_plots would overwrite
    for one of `names` (unless force)."""
    from ..export.outputs import check_targets
    if not str(outdir).strip():
        raise ZboptError("--plot is empty: give a directory for the charts")
    outdir = Path(outdir)
    if outdir.exists() and not outdir.is_dir():
        raise ZboptError(f"{outdir} is a file, not a directory: give a directory for --plot")
    if not force and outdir.is_dir():
        stems = {slug(n) for n in names} | {STACKED_NAME}
        for path in sorted(outdir.iterdir()):
            base = re.sub(r"-\d+$", "", path.stem)
            if path.suffix in (".png", ".svg") and (path.stem in stems or base in stems):
                raise ZboptError(f"{path} exists: choose another directory or pass --force to "
                                 f"overwrite the charts in it")
    check_targets([outdir / f"{STACKED_NAME}.png"], True, new_dirs=[outdir])
    return outdir


def write_compare_plots(timelines: Iterable[Timeline], outdir: str | Path,
                        force: bool = False,
                        progress: Callable[[str], None] | None = None,
                        jobs: int = 1) -> list[Path]:
    """One PNG per method (Gantt + memory per device) and one stacked figure (PNG and SVG),
    all written or none (the directory is created if its parent exists).

    Refuses, before drawing anything, when one of the files exists (unless force).
    `progress(text)` hears of each chart as it is drawn (they take seconds each); `jobs`
    processes draw them (drawn())."""
    from ..export.outputs import check_targets, write_all
    timelines = list(timelines)
    if not timelines:
        raise ZboptError("no schedule to plot: no method applies to this instance")
    outdir = Path(outdir)
    if outdir.exists() and not outdir.is_dir():
        raise ZboptError(f"{outdir} is a file, not a directory: give a directory for --plot")
    paths = compare_plot_paths(timelines, outdir)
    existing = [str(p) for p in paths if p.exists()]
    if existing and not force:
        raise ZboptError(f"{existing[0]} exists: choose another directory or pass --force "
                         f"to overwrite the charts in it")
    check_targets(paths, force, new_dirs=[outdir])
    n = len(timelines)

    def draw(i: int) -> list[bytes]:
        if i < n:
            return [figure_bytes(plot_schedule(timelines[i]), ".png")]
        stacked = plot_stacked(timelines)
        return [figure_bytes(stacked, path.suffix) for path in paths[n:]]

    def name(i: int) -> str:
        return timelines[i].schedule.method if i < n else "all methods stacked"

    pictures = drawn(n + 1, draw, name, progress or (lambda text: None), jobs,
                     sum(t.instance.num_passes for t in timelines) * 2, first=n)
    data = [b for chart in pictures for b in chart]
    return write_all(dict(zip(paths, data)), force, new_dirs=[outdir])
