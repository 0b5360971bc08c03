"""A self-contained HTML report: comparison table, instance, charts, interactive timelines.

One file that needs no network to view: the CSS and JS are inlined from this package, the
charts are base64 PNGs, the timelines are drawn in the page from JSON embedded in it. Every
number comes from evaluate()'s timelines (through compare()'s rows); nothing is re-timed here.
"""

from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import replace
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Callable, Sequence

from ..instance import Instance
from ..result import Result
from ..schedule import Timeline
from .gantt import (
    IDLE_COLOUR,
    KIND_COLOURS,
    KIND_NAMES,
    drawn,
    is_overlapped,
    label_colour,
    pass_colour,
    plot_schedule,
    plot_stacked,
)
from .numbers import exact, figure, gap_text
from .verdict import objective_of, order_key, over_cap, verdict

# The columns of a timeline's passes in the page's JSON (timeline.js reads them by name), in
# the devices' execution order: "gap" is a pass's start less the previous pass's end on its
# device (0 for back-to-back passes, so mostly one digit), "dur" its end less its start. The
# colour, label ink, device and path step of a pass follow from its stage and kind, so they are
# sent once per stage and kind; box geometry follows from the blocks (see timeline_data).
PASS_FIELDS = ("stage", "mb", "kind", "gap", "dur")
KIND_INDEX = {"F": 0, "B": 1, "W": 2}


def _asset(name: str) -> str:
    return resources.files("zbopt.report").joinpath(name).read_text(encoding="utf-8")


def _compact(x: float) -> float | int:
    # integral times as ints keep the embedded JSON small and readable
    return int(x) if float(x).is_integer() else round(float(x), 6)


def path_step(instance: Instance, stage: int, kind: str) -> int:
    """A pass's position on its micro-batch's path: F in forward stage order, then B back;
    -1 for W, which hangs off its B and leads nowhere."""
    chain = instance.chain_of_stage(stage)
    position = chain.index(stage)
    if kind == "F":
        return position
    if kind == "B":
        return 2 * len(chain) - 1 - position
    return -1


def timeline_data(timeline: Timeline, name: str, xmax: float) -> dict:
    """What timeline.js draws for one method.

    passes: one column per PASS_FIELDS entry (kind as one string, a letter per pass), in the
    devices' execution order; stage_device, colour, ink and step: per stage (and kind);
    blocks: every multi-pass item as [start, end, overlapped (0/1), pass indices...] (an
    overlapped F&B block draws its passes as stacked bands over the whole block);
    memory: per device the evaluator's step curve as [time steps, level steps], each the
    difference from the point before (from 0 for the first)."""
    instance = timeline.instance
    columns: dict[str, list] = {f: [] for f in PASS_FIELDS}
    blocks = []
    for d, order in enumerate(timeline.schedule.orders):
        previous = 0
        for item, (t0, t1) in zip(order, timeline.item_times[d]):
            first = len(columns["stage"])
            for stage, mb, kind in item:
                p = (stage, mb, kind)
                start, end = _compact(timeline.start[p]), _compact(timeline.end[p])
                columns["stage"].append(stage)
                columns["mb"].append(mb)
                columns["kind"].append(kind)
                columns["gap"].append(start - previous)
                columns["dur"].append(end - start)
                previous = end
            if len(item) > 1:
                blocks.append([_compact(t0), _compact(t1), int(is_overlapped(item)),
                               *range(first, first + len(item))])
    columns["kind"] = "".join(columns["kind"])
    for key in ("stage", "mb", "gap", "dur"):
        columns[key] = _coded(columns[key])
    stages = range(instance.num_stages)
    cap = instance.cap
    top = max([*timeline.peak_memory, *(cap or ())])
    return {"method": name, "devices": instance.devices, "makespan": _compact(timeline.makespan),
            "xmax": _compact(xmax), "time_unit": instance.time_unit, "passes": columns,
            "blocks": blocks,
            "stage_device": [instance.device_of(s) for s in stages],
            "colour": [[pass_colour(timeline, s, k) for s in stages] for k in "FBW"],
            "ink": [[label_colour(timeline, s, k) for s in stages] for k in "FBW"],
            "step": [[path_step(instance, s, k) for s in stages] for k in "FBW"],
            "memory": [[_coded(_steps(t for t, _ in curve)),
                        _coded(_steps(level for _, level in curve))]
                       for curve in timeline.memory_curve],
            "peak": [_compact(x) for x in timeline.peak_memory],
            "cap": [_compact(x) for x in cap] if cap is not None else None,
            "memory_top": _compact(top)}


CODE = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _coded(values: list) -> list | dict:
    """A column with few distinct values as {"values": [...], "code": "0120..."} (one character
    per entry: the index of its value), else the list itself; timeline.js decodes both."""
    distinct = sorted(set(values), key=values.index)
    if len(distinct) > len(CODE) or len(values) < 8:
        return list(values)
    index = {v: CODE[i] for i, v in enumerate(distinct)}
    return {"values": distinct, "code": "".join(index[v] for v in values)}


def _steps(values) -> list:
    """Differences from the previous value (the first from 0): small numbers in the JSON."""
    out, previous = [], 0
    for value in values:
        value = _compact(value)
        out.append(value - previous)
        previous = value
    return out


def _png(figure, dpi: int = 84, colours: int = 32) -> str:
    """The figure as a base64 PNG with a palette of `colours`: a chart has few colours, so this
    keeps every chart in the report at a fifth of a true-colour PNG's size. At 84 dpi the
    charts' 7-8 pt labels are 8-9 px at 1:1, and the default report stays under a megabyte."""
    from PIL import Image
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")
    small = image.quantize(colors=colours, method=Image.Quantize.MEDIANCUT,
                           dither=Image.Dither.NONE)
    out = io.BytesIO()
    small.save(out, format="PNG", optimize=True)
    return base64.b64encode(out.getvalue()).decode("ascii")


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _named(row: Result) -> Timeline:
    """The row's timeline labelled with the row's name (a solver row's schedule may be unnamed)."""
    timeline = row.timeline
    if timeline.schedule.method == row.method:
        return timeline
    return replace(timeline, schedule=replace(timeline.schedule, method=row.method))


def comparison_table(rows: Sequence[Result]) -> str:
    objective = objective_of(rows)
    applied = sorted((r for r in rows if r.applies), key=order_key(objective))
    fitting = [r for r in applied if r.timeline.fits_cap]
    best = min((r.timeline.objective(objective) for r in fitting), default=None)
    first = applied[0].instance if applied else None
    t = f" ({_e(first.time_unit)})" if first is not None and first.time_unit else ""
    m = f" ({_e(first.memory_unit)})" if first is not None and first.memory_unit else ""
    head = (f"<tr><th>method</th><th>kind</th><th>placement</th><th>status</th>"
            f"<th>makespan{t}</th><th>span{t}</th><th>ideal{t}</th><th>bubble rate</th>"
            f"<th>peak memory{m} (max)</th><th>cap{m} (max)</th><th>fits cap</th>"
            f"<th>gap to bound{'' if objective == 'span' else f' ({objective})'}</th></tr>")
    body = []
    for r in applied:
        tl = r.timeline
        placement = r.instance.placement + (f"/{r.instance.chunks}"
                                            if r.instance.placement == "interleaved" else "")
        fits = "yes" if tl.fits_cap else f'<span class="over">no</span> ({_e(over_cap(tl))})'
        # a row made on another instance (a caller's own) shows the cap it was judged by
        cap = "unlimited" if tl.instance.cap is None else figure(max(tl.instance.cap))
        css = ' class="best"' if tl.fits_cap and tl.objective(objective) == best else ""
        body.append(
            f"<tr{css}><td>{_e(r.method)}</td><td>{_e(r.kind)}</td><td>{_e(placement)}</td>"
            f"<td>{_e(r.status)}</td>"
            f'<td class="num">{figure(tl.makespan)}</td><td class="num">{figure(tl.span)}</td>'
            f'<td class="num">{figure(tl.ideal)}</td><td class="num">{tl.bubble_rate:.2%}</td>'
            f'<td class="num">{figure(max(tl.peak_memory))}</td>'
            f'<td class="num">{cap}</td><td>{fits}</td>'
            f'<td class="num">{gap_text(r.gap)}'
            '</td></tr>')
    for r in rows:
        if not r.applies:
            why = "no schedule" if r.kind == "solver" else "does not apply"
            body.append(f'<tr class="na"><td>{_e(r.method)}</td><td>{_e(r.kind)}</td>'
                        f'<td colspan="10">{why}: {_e(r.message)}</td></tr>')
    note = (f'<p class="sub">Sorted by {objective}; the bold row is the best that fits the memory '
            f'cap. span = max over devices of (last end - first start); makespan = the latest '
            f'end of any pass; bubble rate = (span - ideal) / span; gap to bound = ({objective} '
            f'- the best lower bound on the {objective} of zbopt.bounds) / {objective}, for '
            f'schedules within the cap. Every method is judged against the same absolute cap per '
            f'device, resolved on the instance as written.</p>')
    # a narrow window scrolls the table inside its box rather than widening the page
    return f'<div class="wide"><table>{head}{"".join(body)}</table></div>{note}'


def instance_table(instance: Instance) -> str:
    rows = [(key, value) for key, value in instance.to_dict().items()]
    rows.append(("stages", f"{instance.num_stages} ({instance.chunks} per device)"))
    cap = instance.cap
    rows.append(("memory cap per device", "unlimited" if cap is None else
                 ", ".join(figure(c) for c in cap)))
    cells = "".join(f"<tr><th>{_e(k)}</th><td>{_e(_list_text(v))}</td></tr>" for k, v in rows)
    return f"<table>{cells}</table>"


def _list_text(value) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(exact(x) if isinstance(x, (int, float)) else str(x) for x in value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return exact(value)
    return str(value)


def _legend() -> str:
    items = [(KIND_COLOURS[k], f"{k} {KIND_NAMES[k]}") for k in "FBW"]
    items.append((IDLE_COLOUR, "idle"))
    spans = "".join(f'<span><i style="background:{c}"></i>{_e(t)}</span>' for c, t in items)
    return (f'<p class="legend">{spans}<span>lighter shade: a device\'s later chunk '
            f'(or DualPipe\'s reverse direction); outlined: one atomic block '
            f'(fused B+W side by side, overlapped F&amp;B stacked)</span></p>')


def render_report(instance: Instance, rows: Sequence[Result], title: str = "",
                  charts: bool = True, progress: Callable[[str], None] | None = None,
                  jobs: int = 1) -> str:
    """The whole report as one HTML string (see the module doc); `progress(text)` hears of
    each chart as it is drawn (they take seconds each); `jobs` processes draw them (see
    zbopt.report.gantt.drawn: the same page either way)."""
    tell = progress or (lambda text: None)
    objective = objective_of(rows)
    applied = sorted((r for r in rows if r.applies), key=order_key(objective))
    timelines = [_named(r) for r in applied]
    title = title or f"zbopt report: {instance.name or 'instance'}"
    xmax = max((t.makespan for t in timelines), default=1.0)
    data = {"timelines": [timeline_data(t, r.method, xmax) for t, r in zip(timelines, applied)]}
    # "</" inside a script element would end it early
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_asset('report.css')}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="sub">p={instance.devices}, m={instance.microbatches}, placement '
        f'{_e(instance.placement)}, generated by zbopt on '
        f'{datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}</p>',
        "<h2>Comparison</h2>",
        "".join(f'<p class="verdict">{_e(line)}</p>' for line in verdict(instance, rows)),
        comparison_table(rows),
        "<h2>Instance</h2>", instance_table(instance),
    ]
    if timelines:
        parts += ["<h2>Interactive timelines</h2>",
                  '<p class="sub">Hover a pass for its stage, micro-batch, kind, start and end; '
                  'click it to highlight its micro-batch\'s path through the devices. Under each '
                  'device: its memory level over time, the dashed line its cap. All methods '
                  'share one time axis unless "own time axis" is ticked; zoom with the + and '
                  '&minus; buttons or Ctrl + mouse wheel, drag to pan when zoomed in.</p>',
                  _legend()]
        for i, (t, r) in enumerate(zip(timelines, applied)):
            parts.append(f'<h3 id="method-{i}">{_e(r.method)}: span {figure(t.span)}, bubble '
                         f'{t.bubble_rate:.1%}, peak memory {figure(max(t.peak_memory))}'
                         f'{"" if t.fits_cap else " <span class=over>(over the cap)</span>"}'
                         f'</h3><div class="zb-timeline" data-timeline="{i}">'
                         f'<div class="zb-status"></div></div>')
        if charts:
            pngs = drawn(len(timelines) + 1, lambda i: _png(
                plot_stacked(timelines) if i == 0 else plot_schedule(timelines[i - 1])),
                lambda i: "all methods stacked" if i == 0 else timelines[i - 1].schedule.method,
                tell, jobs, 2 * sum(t.instance.num_passes for t in timelines))
            parts += ["<h2>Charts</h2>", "<h3>All methods on one time axis</h3>",
                      f'<img class="chart" alt="all methods stacked" '
                      f'src="data:image/png;base64,{pngs[0]}">']
            for t, png in zip(timelines, pngs[1:]):
                parts.append(f"<details><summary>{_e(t.schedule.method)}: Gantt chart and "
                             f"memory per device</summary><img class=\"chart\" alt=\""
                             f"{_e(t.schedule.method)}\" src=\"data:image/png;base64,"
                             f"{png}\"></details>")
    else:
        parts.append('<p class="over">No method applies to this instance.</p>')
    parts += ['<div id="zb-tooltip" role="tooltip"></div>',
              f'<script type="application/json" id="zb-data">{payload}</script>',
              f"<script>{_asset('timeline.js')}</script>", "</body></html>"]
    return "\n".join(parts)


def write_report(path: str | Path, instance: Instance, rows: Sequence[Result],
                 force: bool = False, title: str = "",
                 progress: Callable[[str], None] | None = None, jobs: int = 1) -> Path:
    """Write render_report() to `path`, whole or not at all; never overwrites an existing file
    without force. The target is checked before the charts are drawn."""
    from ..export.outputs import check_targets, write_file
    check_targets([path], force)
    text = render_report(instance, rows, title, progress=progress, jobs=jobs)
    return write_file(path, text, force)
