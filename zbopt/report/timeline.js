/* zbopt report: interactive timelines, inlined into the HTML file (no libraries, no network).
 *
 * Reads the JSON in #zb-data (written by zbopt/report/html.py from evaluate()'s timelines) and
 * draws one SVG per method into each .zb-timeline container. Hovering a pass shows its stage,
 * micro-batch, kind, start and end; clicking a pass highlights its micro-batch's path through
 * the devices (F in forward stage order, then B back), clicking it again or the background
 * clears the highlight. Each timeline zooms (the + and - buttons, Ctrl + wheel), pans (drag
 * when zoomed in) and may use its own time axis instead of the one all methods share.
 */
(function () {
  "use strict";
  var SVGNS = "http://www.w3.org/2000/svg";
  var KIND_NAMES = { F: "forward", B: "backward (input gradient)", W: "backward (weight gradient)" };
  var KIND_INDEX = { F: 0, B: 1, W: 2 };
  var LAYOUT = { width: 1200, left: 74, right: 14, top: 6, row: 24, memory: 20, gap: 8,
                 axis: 36 };
  var MAX_ZOOM = 400;  // the narrowest view is the axis divided by this
  var THIN = 4;  // a pass box narrower than this (SVG units: pixels at full width) has no edge

  function make(name, attrs, parent) {
    var node = document.createElementNS(SVGNS, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (parent) { parent.appendChild(node); }
    return node;
  }

  function fmt(x) {
    // integers keep thousands separators; fractions at most 3 decimals; never "-0" (a tick
    // at 0 computed as -0, or a float error a hair below 0)
    var rounded = Math.round(Number(x) * 1000) / 1000 + 0;
    return rounded.toLocaleString("en-US", { maximumFractionDigits: 3 });
  }

  function niceStep(range, ticks) {
    var raw = range / ticks, power = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) {
      if (steps[i] * power >= raw) { return steps[i] * power; }
    }
    return 10 * power;
  }

  function passName(q) { return q.stage + q.kind + q.mb; }

  var CODE = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

  // A column as written by html.py's _coded: a list, or {values, code} with one character
  // (the index of its value) per entry.
  function decode(column) {
    if (Array.isArray(column)) { return column; }
    var out = new Array(column.code.length);
    for (var i = 0; i < column.code.length; i++) {
      out[i] = column.values[CODE.indexOf(column.code.charAt(i))];
    }
    return out;
  }

  // The page's columns back into one object per pass, with what follows from stage and kind
  // (device, colour, label ink, path step) and from the blocks (box and band of a pass).
  function unpack(tl) {
    var cols = { stage: decode(tl.passes.stage), mb: decode(tl.passes.mb), kind: tl.passes.kind,
                 gap: decode(tl.passes.gap), dur: decode(tl.passes.dur) };
    var passes = [], device = -1, previous = 0;
    for (var i = 0; i < cols.stage.length; i++) {
      var stage = cols.stage[i], kind = cols.kind.charAt(i), k = KIND_INDEX[kind];
      if (tl.stage_device[stage] !== device) { device = tl.stage_device[stage]; previous = 0; }
      var start = previous + cols.gap[i], end = start + cols.dur[i];
      previous = end;
      passes.push({ index: i, stage: stage, mb: cols.mb[i], kind: kind,
                    start: start, end: end, x0: start, x1: end,
                    device: device, colour: tl.colour[k][stage],
                    ink: tl.ink[k][stage], step: tl.step[k][stage], band: 0, bands: 1,
                    item_start: start, item_end: end, item_size: 1 });
    }
    tl.blocks.forEach(function (block) {
      var members = block.slice(3), overlapped = block[2] === 1;
      members.forEach(function (index, band) {
        var q = passes[index];
        q.item_start = block[0]; q.item_end = block[1]; q.item_size = members.length;
        if (overlapped) { q.x0 = block[0]; q.x1 = block[1]; q.band = band; q.bands = members.length; }
      });
    });
    return passes;
  }

  // Running sums of the memory curve's steps: [[time, level], ...] per device.
  function curves(tl) {
    return tl.memory.map(function (steps) {
      var t = 0, level = 0, times = decode(steps[0]), levels = decode(steps[1]);
      return times.map(function (dt, i) { t += dt; level += levels[i]; return [t, level]; });
    });
  }

  function Timeline(container, tl, tooltip) {
    this.container = container;
    this.tl = tl;
    this.tooltip = tooltip;
    this.passes = unpack(tl);
    this.memory = curves(tl);
    this.highlighted = null;
    this.own = false;  // own time axis: 0..this method's makespan instead of the shared one
    this.axisEnd = tl.xmax || 1;
    this.view = [0, this.axisEnd];
    this.status = container.querySelector(".zb-status");
    this.toolbar();
    this.draw();
  }

  Timeline.prototype.toolbar = function () {
    var self = this, bar = document.createElement("div");
    bar.className = "zb-tools";
    function button(text, title, action, name) {
      var b = document.createElement("button");
      b.type = "button"; b.textContent = text; b.title = title;
      b.setAttribute("data-action", name);
      b.addEventListener("click", action);
      bar.appendChild(b);
    }
    button("+", "zoom in", function () { self.zoom(0.5); }, "zoom-in");
    button("\u2212", "zoom out", function () { self.zoom(2); }, "zoom-out");
    button("reset", "show the whole axis", function () { self.setView(0, self.axisEnd); }, "reset");
    var label = document.createElement("label"), box = document.createElement("input");
    box.type = "checkbox"; box.className = "zb-own";
    box.addEventListener("change", function () { self.ownAxis(box.checked); });
    label.appendChild(box);
    label.appendChild(document.createTextNode(" own time axis"));
    bar.appendChild(label);
    this.range = document.createElement("span");
    this.range.className = "zb-range";
    bar.appendChild(this.range);
    this.container.insertBefore(bar, this.container.firstChild);
  };

  Timeline.prototype.ownAxis = function (own) {
    this.own = own;
    this.axisEnd = own ? (this.tl.makespan || 1) : (this.tl.xmax || 1);
    this.setView(0, this.axisEnd);
  };

  // Zoom by `factor` (< 1 narrows the view) around time `centre` (default: the view's middle).
  Timeline.prototype.zoom = function (factor, centre) {
    var v = this.view, width = v[1] - v[0];
    if (centre === undefined) { centre = (v[0] + v[1]) / 2; }
    var next = Math.min(Math.max(width * factor, this.axisEnd / MAX_ZOOM), this.axisEnd);
    var t0 = centre - (centre - v[0]) * next / width;
    this.setView(t0, t0 + next);
  };

  Timeline.prototype.setView = function (t0, t1) {
    var width = Math.min(t1 - t0, this.axisEnd);
    t0 = Math.min(Math.max(t0, 0), this.axisEnd - width);
    this.view = [t0, t0 + width];
    this.draw();
  };

  Timeline.prototype.rowY = function (device) {
    return LAYOUT.top + device * (LAYOUT.row + LAYOUT.memory + LAYOUT.gap);
  };

  Timeline.prototype.x = function (t) {
    return LAYOUT.left + (t - this.view[0]) * this.scale;
  };

  // Under each device's row: its memory level over time (the evaluator's step curve) as a
  // filled strip, scaled to the largest of the caps and peaks, with the cap as a dashed line.
  Timeline.prototype.drawMemory = function (svg, plot) {
    var tl = this.tl, L = LAYOUT, self = this;
    var top = tl.memory_top || 1, end = this.x(Math.max(tl.xmax, tl.makespan));
    this.memory.forEach(function (curve, d) {
      var times = curve.map(function (p) { return p[0]; });
      var levels = curve.map(function (p) { return p[1]; });
      var y0 = self.rowY(d) + L.row + 1, h = L.memory - 3, bottom = y0 + h;
      var yOf = function (level) { return (bottom - h * level / top).toFixed(2); };
      var parts = ["M" + self.x(0).toFixed(2) + "," + bottom];
      times.forEach(function (t, i) {
        var x = self.x(t).toFixed(2);
        if (i > 0) { parts.push("L" + x + "," + yOf(levels[i - 1])); }
        parts.push("L" + x + "," + yOf(levels[i]));
      });
      parts.push("L" + end.toFixed(2) + "," + yOf(levels[levels.length - 1]));
      parts.push("L" + end.toFixed(2) + "," + bottom + "Z");
      var label = make("text", { x: L.left - 6, y: bottom - 1, "text-anchor": "end",
                                 class: "zb-memory-label" }, svg);
      label.textContent = "memory";
      var area = make("path", { d: parts.join(" "), class: "zb-memory", "data-device": d }, plot);
      var title = make("title", {}, area);
      title.textContent = "device " + d + " memory: peak " + fmt(tl.peak[d]) +
        (tl.cap ? " / cap " + fmt(tl.cap[d]) : "");
      if (tl.cap) {
        make("line", { x1: self.x(0), x2: end, y1: yOf(tl.cap[d]), y2: yOf(tl.cap[d]),
                       class: "zb-cap" }, plot);
      }
    });
  };

  Timeline.prototype.draw = function () {
    var tl = this.tl, self = this, L = LAYOUT;
    var height = this.rowY(tl.devices) + L.axis;
    var v = this.view, plotWidth = L.width - L.left - L.right;
    this.scale = plotWidth / ((v[1] - v[0]) || 1);
    var scale = this.scale;
    var svg = make("svg", { viewBox: "0 0 " + L.width + " " + height, class: "zb-svg",
                            role: "img", "aria-label": "timeline of " + tl.method,
                            "data-view": v[0] + "," + v[1] });
    var clipId = "zb-clip-" + this.container.getAttribute("data-timeline");
    var clip = make("clipPath", { id: clipId }, make("defs", {}, svg));
    make("rect", { x: L.left, y: 0, width: plotWidth, height: this.rowY(tl.devices) }, clip);
    var plot = make("g", { "clip-path": "url(#" + clipId + ")", class: "zb-plot" }, svg);
    for (var d = 0; d < tl.devices; d++) {
      make("rect", { x: this.x(0), y: this.rowY(d), width: tl.makespan * scale, height: L.row,
                     class: "zb-idle" }, plot);
      var label = make("text", { x: L.left - 6, y: this.rowY(d) + L.row / 2 + 3.5,
                                 "text-anchor": "end" }, svg);
      label.textContent = "device " + d;
    }
    this.drawMemory(svg, plot);
    var step = niceStep((v[1] - v[0]) || 1, 10), axisY = this.rowY(tl.devices) + 2;
    make("line", { x1: L.left, x2: L.left + plotWidth, y1: axisY, y2: axisY, stroke: "#444" }, svg);
    for (var t = Math.ceil(v[0] / step - 1e-9) * step; t <= v[1] + 1e-9 * v[1]; t += step) {
      var x = this.x(t);
      make("line", { x1: x, x2: x, y1: axisY, y2: axisY + 4, stroke: "#444" }, svg);
      var tick = make("text", { x: x, y: axisY + 15, "text-anchor": "middle", class: "zb-tick" }, svg);
      tick.textContent = fmt(t);
    }
    var unit = make("text", { x: L.left + plotWidth, y: axisY + 26, "text-anchor": "end" }, svg);
    unit.textContent = "time" + (tl.time_unit ? " (" + tl.time_unit + ")" : "");
    var blocks = {};
    this.passes.forEach(function (q) {
      var bandHeight = L.row / q.bands;
      var y = self.rowY(q.device) + q.band * bandHeight;
      var w = Math.max((q.x1 - q.x0) * scale, 0.6);
      // a white edge on a box a few pixels wide would wash the row out: none there
      q.node = make("rect", { x: self.x(q.x0), y: y, width: w, height: bandHeight,
                              fill: q.colour, class: w < THIN ? "zb-pass zb-thin" : "zb-pass",
                              "data-pass": passName(q), "data-mb": q.mb, "data-i": q.index },
                    plot);
      q.cx = self.x((q.x0 + q.x1) / 2);
      q.cy = y + bandHeight / 2;
      q.label = null;
      var text = String(q.mb);
      if (w >= 6.5 * text.length + 3 && bandHeight >= 9) {
        q.label = make("text", { x: q.cx, y: q.cy, class: "zb-label", style: "fill:" + q.ink }, plot);
        q.label.textContent = text;
      }
      // outline atomic blocks only where wide enough: thin outlines would paint rows black
      if (q.item_size > 1 && (q.item_end - q.item_start) * scale >= 14) {
        blocks[q.device + ":" + q.item_start] = q;
      }
    });
    Object.keys(blocks).forEach(function (key) {
      var q = blocks[key];
      make("rect", { x: self.x(q.item_start), y: self.rowY(q.device),
                     width: (q.item_end - q.item_start) * scale, height: L.row,
                     class: "zb-block" }, plot);
    });
    this.pathLayer = make("g", { class: "zb-path" }, plot);
    if (this.svg) { this.container.replaceChild(svg, this.svg); } else { this.container.appendChild(svg); }
    this.svg = svg;
    this.range.textContent = "showing " + fmt(v[0]) + "\u2013" + fmt(v[1]) +
      (tl.time_unit ? " " + tl.time_unit : "") +
      (v[1] - v[0] < this.axisEnd - 1e-9 * this.axisEnd ? " (zoomed)" : "");
    svg.addEventListener("mouseover", function (e) { self.hover(e); });
    svg.addEventListener("mousemove", function (e) { self.move(e); });
    svg.addEventListener("mouseout", function (e) { self.unhover(e); });
    svg.addEventListener("click", function (e) { if (!self.dragged) { self.click(e); } });
    svg.addEventListener("wheel", function (e) { self.wheel(e); }, { passive: false });
    svg.addEventListener("mousedown", function (e) { self.dragStart(e); });
    if (this.highlighted !== null) { this.highlight(this.highlighted); }
  };

  // The time under a mouse event (viewBox units: the SVG scales with the page width).
  Timeline.prototype.timeAt = function (e) {
    var box = this.svg.getBoundingClientRect();
    var x = (e.clientX - box.left) * LAYOUT.width / box.width;
    return this.view[0] + (x - LAYOUT.left) / this.scale;
  };

  Timeline.prototype.wheel = function (e) {
    if (!e.ctrlKey && !e.metaKey) { return; }  // a plain wheel scrolls the page
    e.preventDefault();
    this.zoom(e.deltaY < 0 ? 0.8 : 1.25, this.timeAt(e));
  };

  Timeline.prototype.dragStart = function (e) {
    var self = this, startX = e.clientX, view = this.view.slice();
    this.dragged = false;
    if (view[1] - view[0] >= this.axisEnd - 1e-9 * this.axisEnd) { return; }  // nothing to pan
    var box = this.svg.getBoundingClientRect(), perPixel = LAYOUT.width / box.width / this.scale;
    function move(m) {
      var dx = m.clientX - startX;
      if (Math.abs(dx) > 3) { self.dragged = true; }
      if (self.dragged) { self.setView(view[0] - dx * perPixel, view[1] - dx * perPixel); }
    }
    function up() {
      window.removeEventListener("mousemove", move);
      window.removeEventListener("mouseup", up);
      setTimeout(function () { self.dragged = false; }, 0);
    }
    window.addEventListener("mousemove", move);
    window.addEventListener("mouseup", up);
  };

  Timeline.prototype.passOf = function (target) {
    var i = target && target.getAttribute && target.getAttribute("data-i");
    return i === null || i === undefined ? null : this.passes[Number(i)];
  };

  Timeline.prototype.hover = function (e) {
    var q = this.passOf(e.target);
    if (!q) { return; }
    q.node.classList.add("zb-hover");
    var unit = this.tl.time_unit ? " " + this.tl.time_unit : "";
    var lines = [
      "<b>" + passName(q) + "</b> on device " + q.device,
      "stage " + q.stage + " \u00b7 micro-batch " + q.mb + " \u00b7 " + q.kind + " " + KIND_NAMES[q.kind],
      "start " + fmt(q.start) + " \u00b7 end " + fmt(q.end) + unit +
        " (" + fmt(q.end - q.start) + unit + ")"
    ];
    if (q.item_size > 1) {
      lines.push((q.bands > 1 ? "overlapped block " : "fused block ") + fmt(q.item_start) +
                 "\u2013" + fmt(q.item_end) + unit);
    }
    this.tooltip.innerHTML = lines.join("<br>");
    this.tooltip.setAttribute("data-pass", passName(q));
    this.tooltip.style.display = "block";
    this.move(e);
  };

  Timeline.prototype.move = function (e) {
    if (this.tooltip.style.display !== "block") { return; }
    var box = this.tooltip.getBoundingClientRect();
    var x = e.clientX + 14, y = e.clientY + 14;
    if (x + box.width > window.innerWidth) { x = Math.max(0, e.clientX - box.width - 8); }
    if (y + box.height > window.innerHeight) { y = Math.max(0, e.clientY - box.height - 8); }
    this.tooltip.style.left = x + "px";
    this.tooltip.style.top = y + "px";
  };

  Timeline.prototype.unhover = function (e) {
    var q = this.passOf(e.target);
    if (q) { q.node.classList.remove("zb-hover"); }
    this.tooltip.style.display = "none";
    this.tooltip.removeAttribute("data-pass");
  };

  Timeline.prototype.click = function (e) {
    var q = this.passOf(e.target);
    if (!q || this.highlighted === q.mb) { this.clear(); return; }
    this.highlight(q.mb);
  };

  Timeline.prototype.clear = function () {
    this.highlighted = null;
    this.svg.classList.remove("zb-dim");
    this.svg.removeAttribute("data-highlight");
    this.passes.forEach(function (q) {
      q.node.classList.remove("zb-hl");
      if (q.label) { q.label.classList.remove("zb-hl"); }
    });
    while (this.pathLayer.firstChild) { this.pathLayer.removeChild(this.pathLayer.firstChild); }
    this.status.textContent = "Click a pass to highlight its micro-batch's path.";
  };

  Timeline.prototype.highlight = function (mb) {
    this.clear();
    this.highlighted = mb;
    this.svg.classList.add("zb-dim");
    this.svg.setAttribute("data-highlight", mb);
    var mine = this.passes.filter(function (q) { return q.mb === mb; });
    mine.forEach(function (q) {
      q.node.classList.add("zb-hl");
      if (q.label) { q.label.classList.add("zb-hl"); }
    });
    // the path: F through the stages in forward order, then B back (W hangs off its B)
    var path = mine.filter(function (q) { return q.step >= 0; })
                   .sort(function (a, b) { return a.step - b.step; });
    var points = path.map(function (q) { return q.cx.toFixed(1) + "," + q.cy.toFixed(1); });
    make("polyline", { points: points.join(" ") }, this.pathLayer);
    var layer = this.pathLayer;
    path.forEach(function (q) { make("circle", { cx: q.cx, cy: q.cy, r: 2.2 }, layer); });
    var devices = path.map(function (q) { return q.device; });
    var last = mine.reduce(function (a, q) { return Math.max(a, q.end); }, 0);
    this.status.textContent = "micro-batch " + mb + ": devices " + devices.join(" \u2192 ") +
      ", done at " + fmt(last) + " (click it again to clear)";
  };

  function init() {
    var source = document.getElementById("zb-data");
    if (!source) { return; }
    var data = JSON.parse(source.textContent);
    var tooltip = document.getElementById("zb-tooltip");
    var views = [];
    document.querySelectorAll(".zb-timeline").forEach(function (container) {
      var tl = data.timelines[Number(container.getAttribute("data-timeline"))];
      var view = new Timeline(container, tl, tooltip);
      view.clear();
      views.push(view);
    });
    window.zbopt = { timelines: views };  // for the curious (and the browser tests)
    document.body.setAttribute("data-ready", "1");
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
