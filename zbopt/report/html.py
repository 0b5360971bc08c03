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
from typing import Sequence

from ..errors import ZboptError
from ..instance import Instance
from ..result import Result
from ..schedule import Timeline
from .gantt import (
    IDLE_COLOUR,
    KIND_COLOURS,
    KIND_NAMES,
    label_colour,
    number,
    pass_boxes,
    pass_colour,
    plot_schedule,
    plot_stacked,
)

# The order of the per-pass arrays in the page's JSON (timeline.js unpacks them by name).
PASS_FIELDS = ("device", "stage", "mb", "kind", "start", "end", "x0", "x1", "band", "bands",
               "item_start", "item_end", "item_size", "colour", "ink", "step")


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
    """What timeline.js draws for one method: every pass as an array in PASS_FIELDS order."""
    instance = timeline.instance
    rows = []
    for box in pass_boxes(timeline):
        box = dict(box, colour=pass_colour(timeline, box["stage"], box["kind"]),
                   ink=label_colour(timeline, box["stage"], box["kind"]),
                   step=path_step(instance, box["stage"], box["kind"]))
        rows.append([_compact(box[f]) if isinstance(box[f], float) else box[f]
                     for f in PASS_FIELDS])
    cap = instance.cap
    top = max([*timeline.peak_memory, *(cap or ())])
    return {"method": name, "devices": instance.devices, "makespan": _compact(timeline.makespan),
            "xmax": _compact(xmax), "time_unit": instance.time_unit, "passes": rows,
            "memory": [[[_compact(t), _compact(level)] for t, level in curve]
                       for curve in timeline.memory_curve],
            "peak": [_compact(x) for x in timeline.peak_memory],
            "cap": [_compact(x) for x in cap] if cap is not None else None,
            "memory_top": _compact(top)}


def _png(figure, dpi: int = 80) -> str:
    # a lower resolution than the chart files: the report stays a few MB for many methods
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _named(row: Result) -> Timeline:
    """The row's timeline labelled with the row's name (a solver row's schedule may be unnamed)."""
    timeline = row.timeline
    if timeline.schedule.method == row.method:
        return timeline
    return replace(timeline, schedule=replace(timeline.schedule, method=row.method))


def comparison_table(rows: Sequence[Result]) -> str:
    applied = sorted((r for r in rows if r.applies), key=lambda r: r.timeline.span)
    fitting = [r for r in applied if r.timeline.fits_cap]
    best = min((r.timeline.span for r in fitting), default=None)
    head = ("<tr><th>method</th><th>kind</th><th>placement</th><th>makespan</th><th>span</th>"
            "<th>ideal</th><th>bubble rate</th><th>peak memory (max)</th><th>cap (max)</th>"
            "<th>fits cap</th><th>gap to bound</th></tr>")
    body = []
    for r in applied:
        tl = r.timeline
        placement = r.instance.placement + (f"/{r.instance.chunks}"
                                            if r.instance.placement == "interleaved" else "")
        fits = "yes" if tl.fits_cap else '<span class="over">no</span>'
        # a re-placed method's "kp" cap resolves on its own placement, so it can differ per row
        cap = "unlimited" if tl.instance.cap is None else number(max(tl.instance.cap))
        css = ' class="best"' if tl.fits_cap and tl.span == best else ""
        body.append(
            f"<tr{css}><td>{_e(r.method)}</td><td>{_e(r.kind)}</td><td>{_e(placement)}</td>"
            f'<td class="num">{number(tl.makespan)}</td><td class="num">{number(tl.span)}</td>'
            f'<td class="num">{number(tl.ideal)}</td><td class="num">{tl.bubble_rate:.2%}</td>'
            f'<td class="num">{number(max(tl.peak_memory))}</td>'
            f'<td class="num">{cap}</td><td>{fits}</td>'
            f'<td class="num">{"-" if r.gap is None else f"{r.gap:.2%}"}'
            '</td></tr>')
    for r in rows:
        if not r.applies:
            why = "no schedule" if r.kind == "solver" else "does not apply"
            body.append(f'<tr class="na"><td>{_e(r.method)}</td><td>{_e(r.kind)}</td>'
                        f'<td colspan="9">{why}: {_e(r.message)}</td></tr>')
    note = ('<p class="sub">Sorted by span; the bold row is the best that fits the memory cap. '
            'span = max over devices of (last end - first start); bubble rate = '
            '(span - ideal) / span; gap to bound = (span - the best lower bound of '
            'zbopt.bounds) / span, for schedules within the cap. A cap given as a multiple of '
            'p ("1p") is resolved on each method\'s own placement.</p>')
    return f"<table>{head}{''.join(body)}</table>{note}"


def instance_table(instance: Instance) -> str:
    rows = [(key, value) for key, value in instance.to_dict().items()]
    rows.append(("stages", f"{instance.num_stages} ({instance.chunks} per device)"))
    cap = instance.cap
    rows.append(("memory cap per device", "unlimited" if cap is None else
                 ", ".join(number(c) for c in cap)))
    cells = "".join(f"<tr><th>{_e(k)}</th><td>{_e(_list_text(v))}</td></tr>" for k, v in rows)
    return f"<table>{cells}</table>"


def _list_text(value) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(number(x) if isinstance(x, (int, float)) else str(x) for x in value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return number(value)
    return str(value)


def _legend() -> str:
    items = [(KIND_COLOURS[k], f"{k} {KIND_NAMES[k]}") for k in "FBW"]
    items.append((IDLE_COLOUR, "idle"))
    spans = "".join(f'<span><i style="background:{c}"></i>{_e(t)}</span>' for c, t in items)
    return (f'<p class="legend">{spans}<span>lighter shade: a device\'s later chunk '
            f'(or DualPipe\'s reverse direction); outlined: one atomic block '
            f'(fused B+W side by side, overlapped F&amp;B stacked)</span></p>')


def render_report(instance: Instance, rows: Sequence[Result], title: str = "",
                  charts: bool = True) -> str:
    """The whole report as one HTML string (see the module doc)."""
    applied = sorted((r for r in rows if r.applies), key=lambda r: r.timeline.span)
    timelines = [_named(r) for r in applied]
    title = title or f"zbopt report: {instance.name or 'instance'}"
    xmax = max((t.makespan for t in timelines), default=1.0)
    data = {"fields": list(PASS_FIELDS),
            "timelines": [timeline_data(t, r.method, xmax) for t, r in zip(timelines, applied)]}
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
        "<h2>Comparison</h2>", comparison_table(rows),
        "<h2>Instance</h2>", instance_table(instance),
    ]
    if timelines:
        parts += ["<h2>Interactive timelines</h2>",
                  '<p class="sub">Hover a pass for its stage, micro-batch, kind, start and end; '
                  'click it to highlight its micro-batch\'s path through the devices. Under each '
                  'device: its memory level over time, the dashed line its cap. All methods '
                  'share one time axis.</p>', _legend()]
        for i, (t, r) in enumerate(zip(timelines, applied)):
            parts.append(f'<h3 id="method-{i}">{_e(r.method)}: span {number(t.span)}, bubble '
                         f'{t.bubble_rate:.1%}, peak memory {number(max(t.peak_memory))}'
                         f'{"" if t.fits_cap else " <span class=over>(over the cap)</span>"}'
                         f'</h3><div class="zb-timeline" data-timeline="{i}">'
                         f'<div class="zb-status"></div></div>')
        if charts:
            parts += ["<h2>Charts</h2>", "<h3>All methods on one time axis</h3>",
                      f'<img class="chart" alt="all methods stacked" '
                      f'src="data:image/png;base64,{_png(plot_stacked(timelines))}">']
            for t in timelines:
                parts.append(f"<details><summary>{_e(t.schedule.method)}: Gantt chart and "
                             f"memory per device</summary><img class=\"chart\" alt=\""
                             f"{_e(t.schedule.method)}\" src=\"data:image/png;base64,"
                             f"{_png(plot_schedule(t))}\"></details>")
    else:
        parts.append('<p class="over">No method applies to this instance.</p>')
    parts += ['<div id="zb-tooltip" role="tooltip"></div>',
              f'<script type="application/json" id="zb-data">{payload}</script>',
              f"<script>{_asset('timeline.js')}</script>", "</body></html>"]
    return "\n".join(parts)


def write_report(path: str | Path, instance: Instance, rows: Sequence[Result],
                 force: bool = False, title: str = "") -> Path:
    """Write render_report() to `path`; never overwrites an existing file without force."""
    path = Path(path)
    if path.exists() and not force:
        raise ZboptError(f"{path} exists: choose another name or pass --force to overwrite it")
    if not path.parent.exists():
        raise ZboptError(f"directory {path.parent} does not exist: create it first")
    text = render_report(instance, rows, title)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise ZboptError(f"cannot write {path}: {err.strerror}") from None
    return path
