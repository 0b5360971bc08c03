/* zbopt report: interactive timelines, inlined into the HTML file (no libraries, no network).
 *
 * Reads the JSON in #zb-data (written by zbopt/report/html.py from evaluate()'s timelines) and
 * draws one SVG per method into each .zb-timeline container. Hovering a pass shows its stage,
 * micro-batch, kind, start and end; clicking a pass highlights its micro-batch's path through
 * the devices (F in forward stage order, then B back), clicking it again or the background
 * clears the highlight.
 */
(function () {
  "use strict";
  var SVGNS = "http://www.w3.org/2000/svg";
  var KIND_NAMES = { F: "forward", B: "backward (input gradient)", W: "backward (weight gradient)" };
  var LAYOUT = { width: 1200, left: 74, right: 14, top: 6, row: 24, memory: 20, gap: 8,
                 axis: 36 };

  function make(name, attrs, parent) {
    var node = document.createElementNS(SVGNS, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (parent) { parent.appendChild(node); }
    return node;
  }

  function fmt(x) {
    // integers keep thousands separators; fractions at most 3 decimals
    return Number(x).toLocaleString("en-US", { maximumFractionDigits: 3 });
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

  function unpack(fields, rows) {
    return rows.map(function (row, i) {
      var q = { index: i };
      fields.forEach(function (f, k) { q[f] = row[k]; });
      return q;
    });
  }

  function Timeline(container, tl, fields, tooltip) {
    this.container = container;
    this.tl = tl;
    this.tooltip = tooltip;
    this.passes = unpack(fields, tl.passes);
    this.highlighted = null;
    this.status = container.querySelector(".zb-status");
    this.draw();
  }

  Timeline.prototype.rowY = function (device) {
    return LAYOUT.top + device * (LAYOUT.row + LAYOUT.memory + LAYOUT.gap);
  };

  // Under each device's row: its memory level over time (the evaluator's step curve) as a
  // filled strip, scaled to the largest of the caps and peaks, with the cap as a dashed line.
  Timeline.prototype.drawMemory = function (svg, scale) {
    var tl = this.tl, L = LAYOUT, self = this;
    var top = tl.memory_top || 1, end = L.left + tl.xmax * scale;
    tl.memory.forEach(function (curve, d) {
      var y0 = self.rowY(d) + L.row + 1, h = L.memory - 3, bottom = y0 + h;
      var yOf = function (level) { return (bottom - h * level / top).toFixed(2); };
      var parts = ["M" + L.left + "," + bottom];
      curve.forEach(function (point, i) {
        var x = (L.left + point[0] * scale).toFixed(2);
        if (i > 0) { parts.push("L" + x + "," + yOf(curve[i - 1][1])); }
        parts.push("L" + x + "," + yOf(point[1]));
      });
      parts.push("L" + end.toFixed(2) + "," + yOf(curve[curve.length - 1][1]));
      parts.push("L" + end.toFixed(2) + "," + bottom + "Z");
      var label = make("text", { x: L.left - 6, y: bottom - 1, "text-anchor": "end",
                                 class: "zb-memory-label" }, svg);
      label.textContent = "memory";
      var area = make("path", { d: parts.join(" "), class: "zb-memory", "data-device": d }, svg);
      var title = make("title", {}, area);
      title.textContent = "device " + d + " memory: peak " + fmt(tl.peak[d]) +
        (tl.cap ? " / cap " + fmt(tl.cap[d]) : "");
      if (tl.cap) {
        make("line", { x1: L.left, x2: end, y1: yOf(tl.cap[d]), y2: yOf(tl.cap[d]),
                       class: "zb-cap" }, svg);
      }
    });
  };

  Timeline.prototype.draw = function () {
    var tl = this.tl, self = this, L = LAYOUT;
    var height = this.rowY(tl.devices) + L.axis;
    var scale = (L.width - L.left - L.right) / (tl.xmax || 1);
    this.scale = scale;
    var svg = make("svg", { viewBox: "0 0 " + L.width + " " + height, class: "zb-svg",
                            role: "img", "aria-label": "timeline of " + tl.method });
    this.svg = svg;
    for (var d = 0; d < tl.devices; d++) {
      make("rect", { x: L.left, y: this.rowY(d), width: tl.makespan * scale, height: L.row,
                     class: "zb-idle" }, svg);
      var label = make("text", { x: L.left - 6, y: this.rowY(d) + L.row / 2 + 3.5,
                                 "text-anchor": "end" }, svg);
      label.textContent = "device " + d;
    }
    this.drawMemory(svg, scale);
    var step = niceStep(tl.xmax || 1, 10), axisY = this.rowY(tl.devices) + 2;
    make("line", { x1: L.left, x2: L.left + tl.xmax * scale, y1: axisY, y2: axisY,
                   stroke: "#444" }, svg);
    for (var t = 0; t <= tl.xmax + 1e-9; t += step) {
      var x = L.left + t * scale;
      make("line", { x1: x, x2: x, y1: axisY, y2: axisY + 4, stroke: "#444" }, svg);
      var tick = make("text", { x: x, y: axisY + 15, "text-anchor": "middle" }, svg);
      tick.textContent = fmt(t);
    }
    var unit = make("text", { x: L.left + tl.xmax * scale, y: axisY + 26, "text-anchor": "end" }, svg);
    unit.textContent = "time" + (tl.time_unit ? " (" + tl.time_unit + ")" : "");
    var blocks = {};
    this.passes.forEach(function (q) {
      var bandHeight = L.row / q.bands;
      var y = self.rowY(q.device) + q.band * bandHeight;
      var w = Math.max((q.x1 - q.x0) * scale, 0.6);
      q.node = make("rect", { x: L.left + q.x0 * scale, y: y, width: w, height: bandHeight,
                              fill: q.colour, class: "zb-pass", "data-pass": passName(q),
                              "data-mb": q.mb, "data-i": q.index }, svg);
      q.cx = L.left + (q.x0 + q.x1) / 2 * scale;
      q.cy = y + bandHeight / 2;
      var text = String(q.mb);
      if (w >= 6.5 * text.length + 3 && bandHeight >= 9) {
        q.label = make("text", { x: q.cx, y: q.cy, class: "zb-label", style: "fill:" + q.ink }, svg);
        q.label.textContent = text;
      }
      // outline atomic blocks only where wide enough: thin outlines would paint rows black
      if (q.item_size > 1 && (q.item_end - q.item_start) * scale >= 14) {
        blocks[q.device + ":" + q.item_start] = q;
      }
    });
    Object.keys(blocks).forEach(function (key) {
      var q = blocks[key];
      make("rect", { x: L.left + q.item_start * scale, y: self.rowY(q.device),
                     width: (q.item_end - q.item_start) * scale, height: L.row,
                     class: "zb-block" }, svg);
    });
    this.pathLayer = make("g", { class: "zb-path" }, svg);
    this.container.appendChild(svg);
    svg.addEventListener("mouseover", function (e) { self.hover(e); });
    svg.addEventListener("mousemove", function (e) { self.move(e); });
    svg.addEventListener("mouseout", function (e) { self.unhover(e); });
    svg.addEventListener("click", function (e) { self.click(e); });
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
      var view = new Timeline(container, tl, data.fields, tooltip);
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
