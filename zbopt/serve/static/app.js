/* zbopt explorer: the page's behaviour. Every number comes from the server (zbopt's evaluator,
 * compare and solve); this file only draws the documents it gets and asks for new ones. */
(function () {
  "use strict";

  var FIELDS = ["schedule", "placement", "devices", "microbatches", "chunks", "group_size",
                "t_f", "t_b", "t_w", "comm", "m_b", "m_w", "memory_cap"];
  var KIND_NAMES = { F: "forward", B: "backward (input gradient)", W: "backward (weight gradient)" };
  var L = { left: 74, right: 14, top: 4, row: 22, memory: 18, gap: 7, axis: 30 };
  var BARS = { width: 190, left: 8 };

  var state = {
    page: Math.random().toString(36).slice(2) + Date.now().toString(36),
    setup: null, doc: null, job: null, zoom: 1, cursor: -1, timer: null, highlight: null,
    evalController: null, compareController: null, evalTimer: null, compareTimer: null, busy: false,
    evalQuery: null, shownQuery: null, events: null, eventsController: null, eventsPending: false, changedAt: null, timing: null, overlay: null, canvas: null, hovered: -1,
    source: null, solving: false, rows: [], shape: null, origins: {}, resampled: {}, chosen: {}, swapped: null
  };

  function $(id) { return document.getElementById(id); }

  var FORMATS = {};  // one formatter per number of digits: toLocaleString builds one per call

  function fmt(x, digits) {
    if (x === null || x === undefined) { return "–"; }
    var d = digits === undefined ? 3 : digits;
    if (!FORMATS[d]) { FORMATS[d] = new Intl.NumberFormat("en-US", { maximumFractionDigits: d }); }
    return FORMATS[d].format(Number(x));
  }

  function pct(x) { return x === null || x === undefined ? "–" : (100 * x).toFixed(2) + "%"; }

  // a gap as the command line prints it (gap_text): a positive gap under 0.005% is "<0.01%",
  // not "0.00%", which reads as proven optimal
  function gapPct(x) {
    if (x === null || x === undefined) { return "–"; }
    if (x > 0 && x < 0.00005) { return "<0.01%"; }
    return pct(x > 0 ? x : 0);
  }

  function esc(text) {
    return String(text).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }

  function query() {
    var params = new URLSearchParams();
    FIELDS.forEach(function (f) {
      var node = $("f-" + f);
      if (!node.disabled) { params.set(f, node.value); }
    });
    return params.toString();
  }

  function settingsObject() {
    var out = {};
    FIELDS.forEach(function (f) { var n = $("f-" + f); if (!n.disabled) { out[f] = n.value; } });
    return out;
  }

  // ----- errors next to the controls -----------------------------------------------------------

  function clearErrors() {
    document.querySelectorAll("#settings .error").forEach(function (p) {
      var input = $("f-" + p.id.slice(2));
      if (!(input && input.dataset.refused)) { p.textContent = ""; }  // kept until typing on
    });
    document.querySelectorAll("#settings .invalid").forEach(function (n) {
      n.classList.remove("invalid");
      n.removeAttribute("aria-invalid");
    });
  }

  function showError(field, message) {
    var box = $("e-" + field);
    if (!box) { box = $("page-error"); }
    var input = $("f-" + field);
    if (input && input.validity && input.validity.badInput) {
      // the browser sends what it cannot read as nothing
      message = message.replace(" is empty:", " is not a number:");
    }
    box.textContent = message;
    if (input) {
      input.classList.add("invalid");
      input.setAttribute("aria-invalid", "true");
    }
  }

  async function readError(response) {
    try {
      var body = await response.json();
      return { field: body.field || "", message: body.error || response.statusText };
    } catch (e) {
      return { field: "", message: "the server answered " + response.status };
    }
  }

  // ----- evaluate ------------------------------------------------------------------------------

  // whether the page is still working on the last change (the view or its step states)
  function settle() {
    state.busy = state.evalTimer !== null || state.evalController !== null || state.eventsPending;
  }

  function scheduleEvaluate(delay) {
    clearTimeout(state.evalTimer);
    state.busy = true;
    if (state.changedAt === null) { state.changedAt = performance.now(); }
    state.evalTimer = setTimeout(function () { state.evalTimer = null; evaluate(); },
                                 delay === undefined ? 120 : delay);
  }

  async function evaluate() {
    var q = query();
    clearTimeout(state.evalTimer);
    state.evalTimer = null;
    // already on its way, or already shown
    if ((state.evalController && state.evalQuery === q) ||
        (!state.evalController && q === state.shownQuery && !state.job)) {
      state.changedAt = null;
      settle();
      return;
    }
    state.busy = true;
    if (state.evalController) { state.evalController.abort(); }
    // the table is for the settings being left: stop it so the server's time goes to the view
    clearTimeout(state.compareTimer);
    if (state.compareController) {
      state.compareController.abort();
      state.compareController = null;
      $("compare-status").textContent = "(for the previous settings)";
    }
    var controller = new AbortController();
    state.evalController = controller;
    state.evalQuery = q;
    $("busy").hidden = false;
    var began = performance.now(), changed = state.changedAt === null ? began : state.changedAt;
    state.changedAt = null;
    try {
      var response = await fetch("/api/evaluate?" + q, { signal: controller.signal });
      if (controller !== state.evalController) { return; }
      clearErrors();
      if (!response.ok) {
        var err = await readError(response);
        showError(err.field, err.message);
        document.body.setAttribute("data-state", "invalid");
        state.shownQuery = null;
        document.querySelector(".timeline-panel").classList.add("stale");
        clearTimeout(state.compareTimer);
        if (state.compareController) { state.compareController.abort(); state.compareController = null; }
        $("compare-status").textContent = "(for the last valid settings)";
        $("showing").textContent = state.doc ? state.doc.result.method +
          " (the last valid settings)" : "nothing yet";
        return;
      }
      var answered = performance.now();
      var serverTiming = {};
      (response.headers.get("Server-Timing") || "").split(",").forEach(function (part) {
        var m = /^\s*(\w+);dur=([\d.]+)/.exec(part);
        if (m) { serverTiming[m[1]] = Number(m[2]); }
      });
      var doc = await response.json();
      if (controller !== state.evalController) { return; }
      $("page-error").textContent = "";
      document.querySelector(".timeline-panel").classList.remove("stale");
      state.job = null;
      state.shownQuery = q;
      var parsed = performance.now();
      show(doc);
      var drawn = performance.now();
      document.body.setAttribute("data-state", "ready");
      scheduleCompare();
      // where the time of the last re-evaluation went (ms), for the benchmark: from the control's
      // change to the frame showing the new view (the next frame after drawing, then its paint)
      var view = document.body.getAttribute("data-view");
      requestAnimationFrame(function () {
        setTimeout(function () {
          var painted = performance.now();
          state.timing = { total: painted - changed, wait: began - changed, server: answered - began,
                           parse: parsed - answered, draw: drawn - parsed, paint: painted - drawn,
                           queue: serverTiming.queue, compute: serverTiming.compute };
          document.body.setAttribute("data-painted", view);
          if (!state.events && document.body.getAttribute("data-view") === view) { loadEvents(q, view); }
        }, 0);
      });
    } catch (e) {
      if (e.name !== "AbortError") { $("page-error").textContent = "the server did not answer: " + e.message; }
    } finally {
      if (controller === state.evalController) {
        $("busy").hidden = true;
        state.evalController = null;
        state.evalQuery = null;
        settle();  // settings may have changed again meanwhile
      }
    }
  }

  function show(doc) {
    stop();
    state.doc = doc;
    state.events = null;
    state.eventsPending = !doc.events;
    if (state.eventsController) { state.eventsController.abort(); state.eventsController = null; }
    ["step", "play", "cursor"].forEach(function (id) { $(id).disabled = true; });
    if (doc.events) { decodeEvents(doc.events); }
    showMetrics(doc.result);
    $("view-note").textContent = (doc.notes || []).join("; ");
    var r = doc.result;
    $("showing").textContent = r.method + (r.kind === "solver" ? " (solved: " + r.status + ")" : "") +
      " on placement " + r.placement + (r.placement === "interleaved" ? " with " + r.chunks + " chunks" : "");
    state.highlight = null;
    drawTimeline();
    setCursor(-1);
    markCompareRow();
    document.body.setAttribute("data-view", String(Number(document.body.getAttribute("data-view") || 0) + 1));
  }

  function showMetrics(r) {
    var unit = r.time_unit ? ' <span class="u">' + esc(r.time_unit) + "</span>" : "";
    var munit = r.memory_unit ? ' <span class="u">' + esc(r.memory_unit) + "</span>" : "";
    var peak = r.peak_memory ? Math.max.apply(null, r.peak_memory) : null;
    var caps = r.memory_cap, cap = null, why = "no cap";
    if (caps && r.peak_memory) {
      // each device against its own cap: the largest peak may sit under a larger cap
      var over = [], top = r.peak_memory.indexOf(peak);
      r.peak_memory.forEach(function (x, d) { if (x > caps[d]) { over.push(d); } });
      var same = caps.every(function (c) { return c === caps[0]; });
      if (r.fits_cap === false && over.length) {
        var d = over[0];
        cap = caps[d];
        why = "over: device " + d + ": " + fmt(r.peak_memory[d]) + " > " + fmt(cap) +
          (over.length > 1 ? " (and " + (over.length - 1) + " more device" +
           (over.length > 2 ? "s" : "") + ")" : "");
      } else {
        cap = caps[top];
        why = (r.fits_cap === false ? "over the cap " : "cap ") + fmt(cap) +
          (same ? "" : " on device " + top);
      }
    } else if (caps) {
      cap = Math.max.apply(null, caps);
      why = "cap " + fmt(cap);
    }
    var values = {
      span: [r.span, fmt(r.span) + unit], makespan: [r.makespan, fmt(r.makespan) + unit],
      bubble: [r.bubble_rate, pct(r.bubble_rate)],
      peak: [peak, fmt(peak) + munit + '<span class="why">' + esc(why) + "</span>"],
      bound: [r.lower_bound, r.lower_bound === null ? "–" : fmt(r.lower_bound) + unit +
              (r.bound_name ? '<span class="why">' + esc(r.bound_name.replace(/_/g, " ")) + "</span>" : "")],
      gap: [r.gap, gapPct(r.gap)], status: [r.status, r.status]
    };
    Object.keys(values).forEach(function (k) {
      var node = $("m-" + k);
      node.innerHTML = values[k][1];
      node.setAttribute("data-value", values[k][0] === null ? "" : String(values[k][0]));
    });
    $("m-peak").classList.toggle("over", r.fits_cap === false);
    $("m-peak").setAttribute("data-cap", cap === null ? "" : String(cap));
  }

  // ----- the timeline --------------------------------------------------------------------------
  // The passes are painted on a canvas as wide as the visible part of the timeline (thousands of
  // SVG nodes took longer to build than the server took to answer); the rows, memory curves,
  // axis, cursor and the highlighted micro-batch stay SVG, a few hundred nodes at most.

  var KINDS = "FBW";

  function rowY(d) { return L.top + d * (L.row + L.memory + L.gap); }

  // the server's columns as typed arrays, with the box of the passes of multi-pass blocks (an
  // overlapped F&B block draws its passes as stacked bands over the whole block) and where each
  // device's passes begin (they come device by device, each in time order)
  function unpack(tl) {
    if (tl.unpacked) { return tl.unpacked; }
    var cols = tl.passes, n = cols.stage.length;
    var P = { n: n, device: new Int32Array(n), stage: Int32Array.from(cols.stage),
              mb: Int32Array.from(cols.mb), kind: new Uint8Array(n), start: Float64Array.from(cols.start),
              end: Float64Array.from(cols.end), band: new Int32Array(n), bands: new Int32Array(n).fill(1),
              itemSize: new Int32Array(n).fill(1), first: new Int32Array(tl.devices + 1) };
    P.x0 = P.start.slice(); P.x1 = P.end.slice(); P.itemStart = P.start.slice(); P.itemEnd = P.end.slice();
    var device = -1;
    for (var i = 0; i < n; i++) {
      var d = tl.stage_device[P.stage[i]];
      if (d !== device) {
        for (var e = device + 1; e <= d; e++) { P.first[e] = i; }
        device = d;
      }
      P.device[i] = d;
      P.kind[i] = KINDS.indexOf(cols.kind.charAt(i));
    }
    for (var f = device + 1; f <= tl.devices; f++) { P.first[f] = n; }
    tl.blocks.forEach(function (block) {
      var members = block.slice(3), overlapped = block[2] === 1;
      members.forEach(function (k, band) {
        P.itemStart[k] = block[0]; P.itemEnd[k] = block[1]; P.itemSize[k] = members.length;
        if (overlapped) { P.x0[k] = block[0]; P.x1[k] = block[1]; P.band[k] = band; P.bands[k] = members.length; }
      });
    });
    tl.unpacked = P;
    return P;
  }

  function passName(P, i) { return P.stage[i] + KINDS.charAt(P.kind[i]) + P.mb[i]; }

  function passInfo(i) {
    var tl = state.doc.timeline, P = unpack(tl), k = P.kind[i], s = P.stage[i];
    return { index: i, name: passName(P, i), device: P.device[i], stage: s, mb: P.mb[i],
             kind: KINDS.charAt(k), start: P.start[i], end: P.end[i], item_start: P.itemStart[i],
             item_end: P.itemEnd[i], item_size: P.itemSize[i], bands: P.bands[i],
             step: tl.step[k][s], colour: tl.colour[k][s] };
  }

  // a pass's box in the drawing's coordinates
  function boxOf(P, i) {
    var bh = L.row / P.bands[i];
    return { x: L.left + P.x0[i] * state.scale, y: rowY(P.device[i]) + P.band[i] * bh,
             w: Math.max((P.x1[i] - P.x0[i]) * state.scale, 0.5), h: bh };
  }

  // the memory curve of each device as [time, level] points
  function curves(tl) {
    return tl.memory.map(function (curve) {
      return curve[0].map(function (t, i) { return [t, curve[1][i]]; });
    });
  }

  function drawTimeline() {
    var doc = state.doc;
    if (!doc) { return; }
    var tl = doc.timeline, box = $("timeline"), P = unpack(tl);
    var width = Math.max(box.clientWidth - 2, 480) * state.zoom;
    var span = tl.makespan || 1;
    var scale = (width - L.left - L.right) / span;
    state.scale = scale;
    var height = rowY(tl.devices) + L.axis;
    var out = ['<div class="tl-inner" style="width:' + width + "px;height:" + height + 'px">',
               '<svg xmlns="http://www.w3.org/2000/svg" class="tl" width="' + width + '" height="' +
               height + '" role="img" aria-label="timeline of ' + esc(tl.method) + '" data-passes="' + P.n + '">'];
    for (var d = 0; d < tl.devices; d++) {
      var y = rowY(d);
      out.push('<rect class="idle" x="' + L.left + '" y="' + y + '" width="' + (span * scale).toFixed(2) +
               '" height="' + L.row + '"/>');
      out.push('<text class="dev" x="' + (L.left - 6) + '" y="' + (y + L.row / 2 + 4) + '">device ' + d + '</text>');
    }
    // memory strips: the evaluator's step curve under each device, its cap dashed
    var top = tl.memory_top || 1;
    var r2 = function (x) { return Math.round(x * 100) / 100; };
    curves(tl).forEach(function (curve, d) {
      var y0 = rowY(d) + L.row + 2, h = L.memory - 4, bottom = y0 + h;
      var yOf = function (level) { return r2(bottom - h * level / top); };
      // a step curve: across to each change at the level before it, then up or down
      var parts = ["M" + L.left + "," + bottom];
      for (var i = 0; i < curve.length; i++) {
        parts.push("H" + r2(L.left + curve[i][0] * scale) + "V" + yOf(curve[i][1]));
      }
      var end = r2(L.left + span * scale);
      parts.push("H" + end + "V" + bottom + "Z");
      out.push('<path class="mem" data-device="' + d + '" d="' + parts.join("") + '"><title>device ' + d +
               ' memory: peak ' + fmt(tl.peak[d]) + (tl.cap ? " / cap " + fmt(tl.cap[d]) : "") + '</title></path>');
      if (tl.cap) {
        out.push('<line class="cap" x1="' + L.left + '" x2="' + end + '" y1="' + yOf(tl.cap[d]) +
                 '" y2="' + yOf(tl.cap[d]) + '"/>');
      }
    });
    // time axis
    var axisY = rowY(tl.devices) + 2, step = niceStep(span, Math.max(4, Math.round(width / 110)));
    out.push('<line class="axis" x1="' + L.left + '" x2="' + (L.left + span * scale) + '" y1="' + axisY + '" y2="' + axisY + '"/>');
    for (var t = 0; t <= span + 1e-9; t += step) {
      var tx = L.left + t * scale;
      out.push('<line class="axis" x1="' + tx + '" x2="' + tx + '" y1="' + axisY + '" y2="' + (axisY + 4) + '"/>');
      out.push('<text class="tick" x="' + tx + '" y="' + (axisY + 15) + '">' + fmt(t) + '</text>');
    }
    out.push('</svg><canvas class="passes" aria-hidden="true"></canvas>');
    out.push('<svg xmlns="http://www.w3.org/2000/svg" class="overlay" width="' + width + '" height="' + height +
             '" aria-hidden="true"><g class="hl"></g><g class="path"></g>' +
             '<rect class="hover" x="0" y="0" width="0" height="0" style="display:none"/>' +
             '<rect class="future" x="' + L.left + '" y="0" width="0" height="' + (axisY - 1) + '"/>' +
             '<line class="cursor" x1="' + L.left + '" x2="' + L.left + '" y1="0" y2="' + (axisY + 4) + '"/></svg></div>');
    var keep = box.scrollLeft / Math.max(box.scrollWidth, 1);
    box.innerHTML = out.join("");
    box.scrollLeft = keep * box.scrollWidth;
    state.svg = box.querySelector("svg.tl");
    state.overlay = box.querySelector("svg.overlay");
    state.canvas = box.querySelector("canvas.passes");
    state.hovered = -1;
    paintPasses();
    $("zoom-level").textContent = Math.round(state.zoom * 100) + "%";
    drawBars();
    placeCursor();
    if (state.highlight !== null) { highlight(state.highlight); }
  }

  // the passes in the visible part of the timeline; the highlighted micro-batch's at full
  // colour, the others washed out
  function paintPasses() {
    var doc = state.doc, canvas = state.canvas;
    if (!doc || !canvas) { return; }
    var tl = doc.timeline, P = unpack(tl), box = $("timeline");
    var view = Math.max(box.clientWidth, 1), height = rowY(tl.devices), ratio = window.devicePixelRatio || 1;
    var left = box.scrollLeft, scale = state.scale, lit = state.highlight;
    canvas.style.left = left + "px";
    canvas.style.width = view + "px";
    canvas.style.height = height + "px";
    canvas.width = Math.max(1, Math.round(view * ratio));
    canvas.height = Math.max(1, Math.round(height * ratio));
    var ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, -left * ratio, 0);
    ctx.font = "10px system-ui, sans-serif";
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    var lo = left - 1, hi = left + view + 1, drawn = 0;
    for (var i = 0; i < P.n; i++) {
      var x = L.left + P.x0[i] * scale, w = Math.max((P.x1[i] - P.x0[i]) * scale, 0.5);
      if (x > hi || x + w < lo) { continue; }
      var bh = L.row / P.bands[i], y = rowY(P.device[i]) + P.band[i] * bh;
      var k = P.kind[i], s = P.stage[i];
      ctx.globalAlpha = lit === null || P.mb[i] === lit ? 1 : 0.22;
      ctx.fillStyle = tl.colour[k][s];
      // a hairline of white between neighbours where there is room for it
      var edge = w > 2 ? 0.2 : 0;
      ctx.fillRect(x + edge, y + 0.2, w - 2 * edge, bh - 0.4);
      var label = String(P.mb[i]);
      if (w >= 6.5 * label.length + 3 && bh >= 10) {
        ctx.fillStyle = tl.ink[k][s];
        ctx.fillText(label, x + w / 2, y + bh / 2 + 0.5);
      }
      drawn++;
    }
    canvas.setAttribute("data-drawn", String(drawn));
  }

  function niceStep(range, ticks) {
    var raw = range / ticks, power = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) { if (steps[i] * power >= raw) { return steps[i] * power; } }
    return 10 * power;
  }

  // ----- hover, highlight, zoom ----------------------------------------------------------------

  // the pass under the mouse (its index), or -1: the device row from y, then the last pass of
  // that device starting at or before the time under x (a device's passes are in time order)
  function passAt(e) {
    if (!state.doc || !state.svg) { return -1; }
    var tl = state.doc.timeline, P = unpack(tl), r = state.svg.getBoundingClientRect();
    var px = e.clientX - r.left, py = e.clientY - r.top;
    var d = Math.floor((py - L.top) / (L.row + L.memory + L.gap));
    if (d < 0 || d >= tl.devices) { return -1; }
    var dy = py - rowY(d);
    if (dy < 0 || dy > L.row) { return -1; }
    var t = (px - L.left) / state.scale, lo = P.first[d], hi = P.first[d + 1] - 1, found = -1;
    while (lo <= hi) {
      var mid = (lo + hi) >> 1;
      if (P.x0[mid] <= t) { found = mid; lo = mid + 1; } else { hi = mid - 1; }
    }
    // the bands of an overlapped block share its start: look back over them
    for (var i = found; i >= P.first[d] && i > found - 8; i--) {
      var b = boxOf(P, i);
      if (px >= b.x && px <= b.x + b.w && dy >= b.y - rowY(d) && dy <= b.y - rowY(d) + b.h) { return i; }
    }
    return -1;
  }

  function hover(e) {
    var i = passAt(e), tip = $("tooltip"), mark = state.overlay ? state.overlay.querySelector("rect.hover") : null;
    $("timeline").style.cursor = i < 0 ? "" : "pointer";
    if (i < 0) {
      tip.style.display = "none";
      tip.removeAttribute("data-pass");
      if (mark) { mark.style.display = "none"; }
      state.hovered = -1;
      return;
    }
    var q = passInfo(i), P = unpack(state.doc.timeline), b = boxOf(P, i);
    mark.setAttribute("x", b.x.toFixed(2));
    mark.setAttribute("y", b.y.toFixed(2));
    mark.setAttribute("width", b.w.toFixed(2));
    mark.setAttribute("height", b.h.toFixed(2));
    mark.style.display = "";
    state.hovered = i;
    var unit = state.doc.timeline.time_unit ? " " + state.doc.timeline.time_unit : "";
    var lines = ["<b>" + q.name + "</b> on device " + q.device,
                 "stage " + q.stage + " · micro-batch " + q.mb + " · " + q.kind + " " + KIND_NAMES[q.kind],
                 "start " + fmt(q.start) + " · end " + fmt(q.end) + unit + " (" + fmt(q.end - q.start) + unit + ")"];
    if (q.item_size > 1) {
      lines.push((q.bands > 1 ? "overlapped block " : "fused block ") + fmt(q.item_start) + "–" + fmt(q.item_end) + unit);
    }
    tip.innerHTML = lines.join("<br>");
    tip.setAttribute("data-pass", q.name);
    tip.style.display = "block";
    var tb = tip.getBoundingClientRect(), x = e.clientX + 14, y = e.clientY + 14;
    if (x + tb.width > window.innerWidth) { x = Math.max(0, e.clientX - tb.width - 8); }
    if (y + tb.height > window.innerHeight) { y = Math.max(0, e.clientY - tb.height - 8); }
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }

  // where pass `name` is on screen (scrolled into view first): for tests and the curious
  function passPoint(name) {
    var P = unpack(state.doc.timeline), box = $("timeline");
    for (var i = 0; i < P.n; i++) {
      if (passName(P, i) !== name) { continue; }
      var b = boxOf(P, i);
      if (b.x < box.scrollLeft || b.x + b.w > box.scrollLeft + box.clientWidth) {
        box.scrollLeft = Math.max(0, b.x - box.clientWidth / 2);
        paintPasses();
      }
      var r = state.svg.getBoundingClientRect();
      return { x: r.left + b.x + b.w / 2, y: r.top + b.y + b.h / 2, left: r.left + b.x, top: r.top + b.y,
               width: b.w, height: b.h, colour: passInfo(i).colour };
    }
    return null;
  }

  function clearHighlight() {
    var had = state.highlight !== null;
    state.highlight = null;
    if (!state.svg) { return; }
    state.svg.removeAttribute("data-highlight");
    state.overlay.querySelector("g.hl").innerHTML = "";
    state.overlay.querySelector("g.path").innerHTML = "";
    if (had) { paintPasses(); }
    $("hl-status").textContent = "Hover a pass for its times; click it to highlight its micro-batch. Ctrl + wheel zooms.";
  }

  function highlight(mb) {
    clearHighlight();
    state.highlight = mb;
    state.svg.setAttribute("data-highlight", mb);
    paintPasses();
    var P = unpack(state.doc.timeline), mine = [];
    for (var i = 0; i < P.n; i++) { if (P.mb[i] === mb) { mine.push(passInfo(i)); } }
    state.overlay.querySelector("g.hl").innerHTML = mine.map(function (q) {
      var b = boxOf(P, q.index);
      return '<rect class="hl" data-pass="' + q.name + '" x="' + b.x.toFixed(2) + '" y="' + b.y.toFixed(2) +
             '" width="' + b.w.toFixed(2) + '" height="' + b.h.toFixed(2) + '"/>';
    }).join("");
    var path = mine.filter(function (q) { return q.step >= 0; }).sort(function (a, b) { return a.step - b.step; });
    var points = path.map(function (q) {
      var b = boxOf(P, q.index);
      return (b.x + b.w / 2).toFixed(1) + "," + (b.y + b.h / 2).toFixed(1);
    });
    state.overlay.querySelector("g.path").innerHTML = '<polyline points="' + points.join(" ") + '"/>';
    var last = mine.reduce(function (a, q) { return Math.max(a, q.end); }, 0);
    $("hl-status").textContent = "micro-batch " + mb + ": devices " +
      path.map(function (q) { return q.device; }).join(" → ") + ", done at " + fmt(last) +
      " (click it again to clear)";
  }

  function click(e) {
    var i = passAt(e);
    var mb = i < 0 ? null : unpack(state.doc.timeline).mb[i];
    if (mb === null || state.highlight === mb) { clearHighlight(); return; }
    highlight(mb);
  }

  function zoomTo(z) {
    state.zoom = Math.min(Math.max(z, 1), 64);
    drawTimeline();
  }

  // ----- the step control ----------------------------------------------------------------------

  function decodeEvents(ev) {
    var p = state.doc.timeline.devices, n = ev.time.length;
    var flight = new Float64Array(n * p), pending = new Float64Array(n * p);
    var f = new Float64Array(p), w = new Float64Array(p);
    for (var k = 0; k < n; k++) {
      ev.changes[k].forEach(function (c) { f[c[0]] = c[1]; w[c[0]] = c[2]; });
      flight.set(f, k * p);
      pending.set(w, k * p);
    }
    state.flight = flight;
    state.pending = pending;
    var top = 0;
    ev.peak_in_flight.forEach(function (x, d) { top = Math.max(top, x, ev.peak_pending_w[d]); });
    state.barTop = top || 1;
    state.events = ev;
    $("cursor").max = String(n - 1);
    ["step", "play", "cursor"].forEach(function (id) { $(id).disabled = false; });
  }

  // the step states of the shown view, asked for once it is on screen
  async function loadEvents(q, view) {
    if (state.eventsController) { state.eventsController.abort(); }
    var controller = new AbortController();
    state.eventsController = controller;
    try {
      var response = await fetch("/api/events?" + q, { signal: controller.signal });
      if (!response.ok) {
        $("cursor-label").textContent = "no step states: " + (await readError(response)).message;
        return;
      }
      var ev = await response.json();
      if (document.body.getAttribute("data-view") !== view) { return; }  // another view since
      decodeEvents(ev);
      setCursor(-1);
    } catch (e) {
      if (e.name !== "AbortError") { $("cursor-label").textContent = "no step states: " + e.message; }
    } finally {
      if (controller === state.eventsController) {
        state.eventsController = null;
        state.eventsPending = false;
        settle();
      }
    }
  }

  function drawBars() {
    var doc = state.doc, p = doc.timeline.devices;
    var height = rowY(p) + L.axis;
    var out = ['<svg xmlns="http://www.w3.org/2000/svg" width="' + BARS.width + '" height="' + height + '" class="bars-svg">'];
    for (var d = 0; d < p; d++) {
      var y = rowY(d);
      out.push('<g class="bar" data-device="' + d + '">' +
               '<rect class="track" x="' + BARS.left + '" y="' + y + '" width="' + (BARS.width - 60) + '" height="' + (L.row + L.memory) + '"/>' +
               '<rect class="flight" x="' + BARS.left + '" y="' + (y + 2) + '" width="0" height="' + (L.row - 4) + '"/>' +
               '<rect class="pending" x="' + BARS.left + '" y="' + (y + L.row + 1) + '" width="0" height="' + (L.memory - 4) + '"/>' +
               '<line class="peak" y1="' + y + '" y2="' + (y + L.row + L.memory) + '"/>' +
               '<text class="val-f" x="' + (BARS.width - 48) + '" y="' + (y + L.row / 2 + 4) + '"></text>' +
               '<text class="val-w" x="' + (BARS.width - 48) + '" y="' + (y + L.row + L.memory / 2 + 2) + '"></text></g>');
    }
    out.push('<text class="bars-title" x="' + BARS.left + '" y="' + (rowY(p) + 16) + '">in flight · pending W</text>');
    out.push("</svg>");
    $("bars").innerHTML = out.join("");
  }

  function setCursor(k) {
    var n = state.events ? state.events.time.length : 0;
    state.cursor = Math.max(-1, Math.min(k, n - 1));
    $("cursor").value = String(state.cursor);
    placeCursor();
  }

  function placeCursor() {
    var doc = state.doc;
    if (!doc || !state.svg) { return; }
    var ev = state.events, p = doc.timeline.devices, k = state.cursor;
    if (!ev) {
      k = state.cursor = -1;
      ev = { time: [], peak_in_flight: [] };
    }
    var t = k < 0 ? 0 : ev.time[k];
    var x = L.left + t * state.scale, end = L.left + doc.timeline.makespan * state.scale;
    var line = state.overlay.querySelector("line.cursor"), future = state.overlay.querySelector("rect.future");
    line.setAttribute("x1", x);
    line.setAttribute("x2", x);
    line.style.display = k < 0 ? "none" : "";
    // what has not started yet is washed out while stepping; before the first step all shows
    future.setAttribute("x", x);
    future.setAttribute("width", k < 0 ? 0 : Math.max(0, end - x));
    state.svg.setAttribute("data-cursor", String(k));
    var usable = BARS.width - 60, top = state.events ? state.barTop : 1;
    document.querySelectorAll("#bars g.bar").forEach(function (g, d) {
      var f = k < 0 ? 0 : state.flight[k * p + d], w = k < 0 ? 0 : state.pending[k * p + d];
      g.setAttribute("data-in-flight", String(f));
      g.setAttribute("data-pending-w", String(w));
      g.querySelector("rect.flight").setAttribute("width", (usable * f / top).toFixed(2));
      g.querySelector("rect.pending").setAttribute("width", (usable * w / top).toFixed(2));
      var peak = BARS.left + usable * (ev.peak_in_flight[d] || 0) / top;
      var pk = g.querySelector("line.peak");
      pk.setAttribute("x1", peak);
      pk.setAttribute("x2", peak);
      g.querySelector("text.val-f").textContent = fmt(f, 2);
      g.querySelector("text.val-w").textContent = fmt(w, 2) + " W";
    });
    var unit = doc.timeline.time_unit ? " " + doc.timeline.time_unit : "";
    $("cursor-label").textContent = !state.events ? "loading the events…" :
      k < 0 ? "before the first event (" + ev.time.length + " events)" :
      "event " + (k + 1) + " of " + ev.time.length + " · t = " + fmt(t) + unit;
    if (k < 0) {
      $("event-text").textContent = "Step moves the cursor to the next moment a pass starts or ends; the bars show each device's activations in flight (F done, B not yet) and pending W (B done, W not yet), the tick its peak.";
    } else {
      var parts = ev.ended[k].map(function (e) { return e[1] + " ends on device " + e[0]; })
        .concat(ev.started[k].map(function (e) { return e[1] + " starts on device " + e[0]; }));
      $("event-text").textContent = "t = " + fmt(t) + unit + ": " + parts.join(", ");
    }
  }

  function stop() {
    clearInterval(state.timer);
    state.timer = null;
    $("play").textContent = "play";
  }

  function play() {
    if (state.timer) { stop(); return; }
    if (!state.events) { return; }
    var n = state.events.time.length;
    if (state.cursor >= n - 1) { setCursor(-1); }
    var every = Math.max(16, Math.min(250, 12000 / n));
    $("play").textContent = "pause";
    state.timer = setInterval(function () {
      if (state.cursor >= n - 1) { stop(); return; }
      setCursor(state.cursor + 1);
    }, every);
  }

  // ----- comparison ------------------------------------------------------------------------------

  function scheduleCompare() {
    clearTimeout(state.compareTimer);
    state.compareTimer = setTimeout(loadCompare, 600);  // the table waits for settings to rest
  }

  async function loadCompare() {
    if (state.compareController) { state.compareController.abort(); }
    var controller = new AbortController();
    state.compareController = controller;
    $("compare-status").textContent = "computing…";
    var q = query();
    // how far it is, asked every half second while it computes (the server runs one method
    // at a time and says which)
    var poll = setInterval(async function () {
      try {
        var answer = await fetch("/api/compare/progress?" + q, { signal: controller.signal });
        if (!answer.ok || controller !== state.compareController) { return; }
        var p = await answer.json();
        if (controller !== state.compareController) { return; }
        $("compare-status").textContent = "computing… " + p.done + " of " + p.total +
          " methods done" + (p.running ? " (running " + p.running + ")" : "");
      } catch (e) { /* the table's own request reports failures */ }
    }, 500);
    try {
      var response = await fetch("/api/compare?" + q, { signal: controller.signal });
      if (!response.ok) {
        var err = await readError(response);
        $("compare-status").textContent = err.message;
        return;
      }
      var rows = await response.json();
      if (controller !== state.compareController) { return; }
      state.rows = rows;
      drawCompare(rows);
      $("compare-status").textContent = "";
    } catch (e) {
      if (e.name !== "AbortError") { $("compare-status").textContent = "the server did not answer: " + e.message; }
    } finally {
      clearInterval(poll);
      if (controller === state.compareController) { state.compareController = null; }
    }
  }

  function drawCompare(rows) {
    var applied = rows.filter(function (r) { return r.applies; })
      .sort(function (a, b) { return a.span - b.span; });
    var best = applied.filter(function (r) { return r.fits_cap; })
      .reduce(function (a, r) { return Math.min(a, r.span); }, Infinity);
    var html = applied.map(function (r) {
      var placement = r.placement + (r.placement === "interleaved" ? "/" + r.chunks : "");
      var peak = Math.max.apply(null, r.peak_memory);
      return '<tr class="row' + (r.fits_cap && r.span === best ? " best" : "") + '" data-method="' + esc(r.method) +
        '" tabindex="0"><td>' + esc(r.method) + "</td><td>" + esc(r.kind) + "</td><td>" + esc(placement) +
        '</td><td class="num">' + fmt(r.span) + '</td><td class="num">' + pct(r.bubble_rate) +
        '</td><td class="num">' + fmt(peak) + "</td><td>" + (r.fits_cap ? "yes" : '<span class="over">no</span>') +
        '</td><td class="num">' + gapPct(r.gap) + "</td></tr>";
    });
    rows.filter(function (r) { return !r.applies; }).forEach(function (r) {
      html.push('<tr class="na"><td>' + esc(r.method) + "</td><td>" + esc(r.kind) +
                '</td><td colspan="6">does not apply: ' + esc(r.message) + "</td></tr>");
    });
    document.querySelector("#compare-table tbody").innerHTML = html.join("");
    markCompareRow();
  }

  function markCompareRow() {
    var shown = state.doc && !state.job ? state.doc.result.method : null;
    document.querySelectorAll("#compare-table tr.row").forEach(function (tr) {
      tr.classList.toggle("shown", tr.getAttribute("data-method") === shown);
    });
  }

  function pickRow(tr) {
    if (!tr || !tr.classList.contains("row")) { return; }
    $("f-schedule").value = tr.getAttribute("data-method");
    $("schedule-note").textContent = "";
    state.swapped = null;
    syncControls();
    evaluate();
  }

  // ----- solve ---------------------------------------------------------------------------------

  async function solve() {
    var status = $("solve-status");
    ["solver", "time_limit"].forEach(function (f) { $("e-" + f).textContent = ""; });
    $("solve-note").textContent = "";
    var body = settingsObject(), askedFor = query(), solvedSettings = settingsObject();
    state.solved = null;
    $("solve-show").hidden = true;
    body.page = state.page;
    body.solver = $("f-solver").value;
    body.time_limit = $("f-time_limit").value;
    var response;
    try {
      response = await fetch("/api/solve", { method: "POST", headers: { "Content-Type": "application/json" },
                                               body: JSON.stringify(body) });
    } catch (e) {
      status.textContent = "the server did not answer: " + e.message;
      return;
    }
    if (!response.ok) {
      var err = await readError(response);
      if (response.status === 409) {
        // the running solve goes on; say why this one did not start
        $("solve-note").textContent = "Solve refused: " + err.message;
      } else {
        showError(err.field, err.message);
        status.textContent = "Solve not started: " + err.message;
        status.setAttribute("data-status", "invalid");
      }
      return;
    }
    var job = await response.json();
    state.solving = job.job;
    $("solve-cancel").hidden = false;
    $("solve-cancel").disabled = false;
    $("solve-finish").hidden = false;
    $("solve-finish").disabled = false;
    status.setAttribute("data-status", "running");
    status.textContent = "solving " + job.shown + "'s instance (placement " + job.placement + ") with " +
      job.solver + ", up to " + fmt(job.time_limit) + " s…";
    $("solve-progress").textContent = "";
    if (state.source) { state.source.close(); }
    var source = new EventSource("/api/solve/" + job.job + "/events");
    state.source = source;
    source.addEventListener("progress", function (e) {
      var s = JSON.parse(e.data), p = s.progress || {};
      $("solve-progress").textContent = (p.phase || "starting") + " · " + fmt(s.elapsed, 1) + " s" +
        (p.incumbent !== undefined && p.incumbent !== null ? " · incumbent " + fmt(p.incumbent) : "") +
        (p.bound !== undefined && p.bound !== null ? " · bound " + fmt(p.bound) : "") +
        (p.gap !== undefined && p.gap !== null ? " · gap " + gapPct(p.gap) : "");
    });
    source.addEventListener("done", function (e) {
      source.close();
      state.source = null;
      state.solving = false;
      $("solve-cancel").hidden = true;
      $("solve-finish").hidden = true;
      var s = JSON.parse(e.data);
      status.setAttribute("data-status", s.status || "error");
      if (s.status === "cancelled") {
        status.textContent = "Solve cancelled after " + fmt(s.elapsed, 1) + " s: the view is unchanged";
        return;
      }
      if (s.error) {
        status.textContent = "Solve failed: " + s.error;
        return;
      }
      var r = s.result;
      // optimality has a scope (the placement solved on) and a proof (the bound that meets it)
      var scope = r.status === "optimal" ? " among " + r.placement + " schedules (proved by the " +
        String(r.bound_name).replace(/_/g, " ") + " bound)" : "";
      status.textContent = r.method + ": " + r.status + scope + (r.span !== null ? " · span " + fmt(r.span) : "") +
        (r.lower_bound !== null ? " · bound " + fmt(r.lower_bound) : "") + " · gap " + gapPct(r.gap) +
        " · " + fmt(r.runtime, 1) + " s" + (r.message ? " — " + r.message : "");
      if (s.view && query() === askedFor) {
        showSolved(s.view, s.job);
      } else if (s.view) {
        // the settings changed while it ran: the view and the downloads stay with them
        state.solved = { view: s.view, job: s.job, settings: solvedSettings };
        status.textContent += " — solved for other settings than the ones shown now (" +
          describe(solvedSettings) + "); the view is unchanged";
        $("solve-show").hidden = false;
      }
    });
    // the browser reconnects by itself while the server is away; a server that answers but no
    // longer knows the solve (it was restarted) ends it
    source.onerror = function () {
      if (state.source !== source) { return; }
      if (source.readyState === EventSource.CLOSED) {
        source.close();
        state.source = null;
        state.solving = false;
        $("solve-cancel").hidden = true;
        $("solve-finish").hidden = true;
        status.setAttribute("data-status", "error");
        status.textContent = "Solve lost: the server no longer has it (was it restarted?); press Solve again";
        $("solve-progress").textContent = "";
      } else {
        $("solve-progress").textContent = "the server does not answer; trying again…";
      }
    };
  }

  // stop the running solve: "cancel" ends it with nothing (its events end as cancelled),
  // "finish" stops its search and its events end with the best schedule it found
  async function stopSolve(how) {
    var job = state.solving, button = $(how === "cancel" ? "solve-cancel" : "solve-finish");
    if (!job) { return; }
    button.disabled = true;
    try {
      var response = await fetch("/api/solve/" + encodeURIComponent(job) + "/" + how, { method: "POST" });
      if (!response.ok) {
        $("solve-note").textContent = (how === "cancel" ? "Cancel" : "Stop") + " refused: " +
          (await readError(response)).message;
        button.disabled = false;
        return;
      }
      if (state.solving === job) {
        $("solve-finish").disabled = true;
        $("solve-status").textContent = how === "cancel" ? "cancelling the solve…" :
          "stopping the search: its best schedule comes next…";
      }
    } catch (e) {
      $("solve-note").textContent = "the server did not answer: " + e.message;
      button.disabled = false;
    }
  }

  function showSolved(view, job) {
    show(view);
    state.job = job;
    state.shownQuery = null;
    markCompareRow();
  }

  // the settings that differ from the controls', as "devices 8, micro-batches 32"
  function describe(settings) {
    var now = settingsObject();
    var changed = FIELDS.filter(function (f) { return f in settings && settings[f] !== now[f]; });
    return changed.map(function (f) { return state.setup.labels[f] + " " + settings[f]; }).join(", ") ||
      "the same values";
  }

  // the solve that finished for other settings, on request: its settings back in the
  // controls, then its schedule (the downloads are then its own)
  function showSolvedAgain() {
    var solved = state.solved;
    if (!solved) { return; }
    state.solved = null;
    $("solve-show").hidden = true;
    clearTimeout(state.evalTimer);
    state.evalTimer = null;
    if (state.evalController) { state.evalController.abort(); state.evalController = null; }
    $("busy").hidden = true;
    FIELDS.forEach(function (f) { if (f in solved.settings) { $("f-" + f).value = solved.settings[f]; } });
    $("schedule-note").textContent = "";
    state.swapped = null;
    syncControls();
    resetShape();
    clearErrors();
    document.querySelector(".timeline-panel").classList.remove("stale");
    document.body.setAttribute("data-state", "ready");
    showSolved(solved.view, solved.job);
    scheduleCompare();
    settle();
  }

  // ----- downloads -----------------------------------------------------------------------------

  async function download(what) {
    var box = $("e-download");
    box.textContent = "";
    var q = query() + (state.job ? "&job=" + encodeURIComponent(state.job) : "");
    var response;
    try {
      response = await fetch("/api/download/" + what + "?" + q);
    } catch (e) {
      box.textContent = "the server did not answer: " + e.message;
      return;
    }
    if (!response.ok) {
      box.textContent = (await readError(response)).message;
      return;
    }
    var name = (response.headers.get("Content-Disposition") || "").replace(/.*filename="([^"]+)".*/, "$1");
    var url = URL.createObjectURL(await response.blob());
    var a = document.createElement("a");
    a.href = url;
    a.download = name || what;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(function () { URL.revokeObjectURL(url); }, 10000);
  }

  // ----- per-stage lists following the stage count ---------------------------------------------
  // A list of one value per stage (or per device, for the memory cap) that fitted the settings
  // before the device, chunk or placement change is rewritten for the new count: a uniform one
  // follows it, another is resampled (see resample()) and the note under devices names it. The
  // list the user wrote is kept as its origin, so a count typed digit by digit (4, 1, 12) or
  // changed back is resampled from it, not from what an intermediate count made of it. A list
  // being typed in (focused), or one that fitted neither count (the user's own, still
  // mismatched), is left alone: the server's message then says what to change.

  var LISTS = ["t_f", "t_b", "t_w", "m_b", "m_w", "memory_cap"];

  function count(text, low, high) {
    if (!/^\s*\+?[0-9]+\s*$/.test(text)) { return null; }
    var n = Number(text);
    return n >= low && n <= high ? n : null;
  }

  // the devices and stages of the instance as written in the controls, or null while a count
  // is not a valid one (mid-typing)
  function shapeOf() {
    var p = count($("f-devices").value, 1, 64), placement = $("f-placement").value, chunks = 1;
    if (p === null) { return null; }
    if (placement === "interleaved") {
      chunks = count($("f-chunks").value, 0, 16);
      if (chunks === null || chunks === 1) { return null; }
      chunks = chunks || 2;  // 0: the placement's default
    } else if (placement !== "contiguous") {
      chunks = 2;
    }
    return { devices: p, stages: p * chunks, dual: placement === "dualpipe" };
  }

  function sameShape(a, b) {
    return a.devices === b.devices && a.stages === b.stages && a.dual === b.dual;
  }

  // the values of a list as written (null unless every one is a number)
  function listOf(text) {
    var parts = String(text).trim().split(/[,\s]+/).filter(function (x) { return x; });
    return parts.length && parts.every(function (x) { return isFinite(Number(x)); }) ? parts : null;
  }

  // whether a list of n values fits a shape: one per stage (dualpipe: or one per model part,
  // shared by both copies); the memory cap one per device
  function fits(field, n, shape) {
    if (field === "memory_cap") { return n === shape.devices; }
    return n === shape.stages || (shape.dual && n === shape.devices);
  }

  // n values from a list of k, piecewise constant in stage order: new stage i takes old stage
  // round(i (k - 1) / (n - 1)), so the first and last stages keep their values (the embedding's
  // and the head's, often the odd ones) and the others take the nearest in relative position
  function resample(values, n) {
    var k = values.length, out = [];
    for (var i = 0; i < n; i++) { out.push(values[n === 1 ? 0 : Math.round(i * (k - 1) / (n - 1))]); }
    return out;
  }

  function resampledFor(field, values, from, to) {
    if (field === "memory_cap") { return resample(values, to.devices); }
    if (from.dual && to.dual && values.length === 2 * from.devices) {  // each copy on its own
      var half = from.devices;
      return resample(values.slice(0, half), to.devices).concat(resample(values.slice(half), to.devices));
    }
    return resample(values, to.dual ? to.devices : to.stages);
  }

  function followShape() {
    var shape = shapeOf(), before = state.shape;
    if (!shape || !before || sameShape(shape, before)) { return; }
    state.shape = shape;
    LISTS.forEach(function (field) {
      var input = $("f-" + field), values = listOf(input.value), origin = state.origins[field];
      if (input === document.activeElement || !values) { return; }
      if (!origin) {
        if (values.length === 1 || !fits(field, values.length, before) ||
            fits(field, values.length, shape)) { return; }
        origin = state.origins[field] = { text: input.value, values: values, shape: before };
      }
      delete state.resampled[field];
      if (fits(field, origin.values.length, shape)) {  // back to a count it was written for
        input.value = origin.text;
        delete state.origins[field];
        return;
      }
      var out = resampledFor(field, origin.values, origin.shape, shape);
      input.value = out.join(", ");
      if (origin.values.some(function (x) { return Number(x) !== Number(origin.values[0]); })) {
        state.resampled[field] = [origin.values.length, out.length];
      }
    });
    noteResampled();
  }

  // the user wrote this list: it is its own origin now
  function forgetOrigin(field) {
    delete state.origins[field];
    if (state.resampled[field]) { delete state.resampled[field]; noteResampled(); }
  }

  function noteResampled() {
    var parts = LISTS.filter(function (f) { return state.resampled[f]; }).map(function (f) {
      var r = state.resampled[f];
      return state.setup.labels[f] + " (" + r[0] + " → " + r[1] + (f === "memory_cap" ? " devices)" : " values)");
    });
    LISTS.forEach(function (f) { $("f-" + f).classList.toggle("resampled", !!state.resampled[f]); });
    $("resample-note").textContent = parts.length ? "Resampled for the new count: " + parts.join(", ") +
      ". The first and last keep their values, each other takes the nearest old one's; edit them freely." : "";
  }

  // settings put in the controls by the page itself (a solve's): their lists are their own
  function resetShape() {
    state.origins = {};
    state.resampled = {};
    state.shape = shapeOf();
    noteResampled();
  }

  // ----- controls ------------------------------------------------------------------------------

  function methodInfo(name) {
    return state.setup.methods.filter(function (m) { return m.name === name; })[0];
  }

  // which controls matter: chunks for interleaved (the instance's or a re-placed one), group
  // size for the methods that take one; the others are disabled, not hidden
  // on an instance written with another placement than contiguous only that placement's
  // methods run (a contiguous one is re-placed for any method): the others are disabled
  function applies(method, placement) {
    return placement === "contiguous" || method.placement === placement;
  }

  // the placement changed: a method that no longer runs is swapped for the one last shown on
  // this placement (or its first), and the note under the schedule says so; one swapped in so
  // gives way to the method last shown on the placement come back to
  function followPlacement() {
    var select = $("f-schedule"), placement = $("f-placement").value, method = methodInfo(select.value);
    var note = $("schedule-note"), remembered = methodInfo(state.chosen[placement] || "");
    var swapped = state.swapped === select.value;
    note.textContent = "";
    state.swapped = null;
    if (!method || (applies(method, placement) && !(swapped && remembered))) { return; }
    var next = remembered && applies(remembered, placement) ? remembered :
      state.setup.methods.filter(function (m) { return applies(m, placement); })[0];
    if (!next || next.name === method.name) { return; }
    select.value = next.name;
    if (!applies(method, placement)) {
      state.swapped = next.name;
      note.textContent = method.name + " runs on " + method.placement + " instances: showing " +
        next.name + " for placement " + placement;
    }
  }

  function syncControls() {
    var method = methodInfo($("f-schedule").value), placement = $("f-placement").value;
    state.chosen[placement] = $("f-schedule").value;
    Array.prototype.forEach.call($("f-schedule").options, function (option) {
      option.disabled = !applies(methodInfo(option.value), placement);
    });
    var interleaved = placement === "interleaved" || (placement === "contiguous" && method && method.placement === "interleaved");
    $("f-chunks").disabled = !interleaved;
    $("f-group_size").disabled = !(method && method.group_size);
    ["chunks", "group_size"].forEach(function (f) {  // a refusal under a control now off goes
      var input = $("f-" + f);
      if (input.disabled && input.dataset.refused) { delete input.dataset.refused; $("e-" + f).textContent = ""; }
    });
    $("h-chunks").textContent = (interleaved ? "chunks per device for the interleaved placement" :
      "chunks: only for interleaved placements") + (method && method.group_size ?
      "; group size N ≥ devices, dividing micro-batches (0: N = devices)" : "; group size: interleaved-1f1b only");
    $("h-schedule").textContent = method ? method.description : "";
    $("f-group_size").min = "0";
    $("f-group_size").max = $("f-microbatches").value || "1024";
    // the spinners follow the family's rules; the server checks every value anyway
    var dual = placement === "dualpipe" || (placement === "contiguous" && method && method.placement === "dualpipe");
    $("f-microbatches").min = dual ? "2" : "1";
    $("f-microbatches").step = dual ? "2" : "1";
  }

  function fillControls(setup) {
    var select = $("f-schedule");
    var groups = {};
    setup.methods.forEach(function (m) {
      var key = m.kind === "heuristic" ? "heuristics" : "handwritten families";
      (groups[key] = groups[key] || []).push(m);
    });
    select.innerHTML = Object.keys(groups).map(function (g) {
      return '<optgroup label="' + g + '">' + groups[g].map(function (m) {
        return '<option value="' + esc(m.name) + '">' + esc(m.name) + " (" + esc(m.placement) + ")</option>";
      }).join("") + "</optgroup>";
    }).join("");
    $("f-placement").innerHTML = setup.placements.map(function (p) {
      return '<option value="' + p + '">' + p + "</option>";
    }).join("");
    $("f-solver").innerHTML = setup.solvers.map(function (s) {
      return '<option value="' + s + '">' + s + "</option>";
    }).join("");
    if (setup.solvers.indexOf("cpsat") >= 0) { $("f-solver").value = "cpsat"; }
    FIELDS.forEach(function (f) { $("f-" + f).value = setup.defaults[f]; });
    var inst = setup.instance;
    $("instance-name").textContent = (inst.name || "instance") + " · every number from zbopt's evaluator";
    $("time-unit").textContent = inst.time_unit ? "(" + inst.time_unit + ")" : "";
    $("memory-unit").textContent = inst.memory_unit ? "(" + inst.memory_unit + ")" : "";
    syncControls();
    resetShape();
  }

  async function init() {
    var response = await fetch("/api/settings");
    state.setup = await response.json();
    fillControls(state.setup);
    var form = $("settings");
    form.addEventListener("input", function (e) {
      var field = e.target.name;
      delete e.target.dataset.refused;
      if (field && $("e-" + field)) { $("e-" + field).textContent = ""; }
      if (LISTS.indexOf(field) >= 0) { forgetOrigin(field); }
      if (field === "placement") { followPlacement(); }
      if (field === "schedule") { $("schedule-note").textContent = ""; state.swapped = null; }
      followShape();  // before the request below is built
      syncControls();
      // typing waits for a pause; a committed change (below) goes at once
      scheduleEvaluate(e.target.tagName === "SELECT" ? 0 : 150);
    });
    form.addEventListener("change", function () {
      if (state.changedAt === null) { state.changedAt = performance.now(); }
      followShape();
      syncControls();
      evaluate();
    });
    form.addEventListener("submit", function (e) { e.preventDefault(); });
    var box = $("timeline");
    box.addEventListener("mousemove", hover);
    box.addEventListener("mouseleave", function () { $("tooltip").style.display = "none"; });
    var scrolled = false;
    box.addEventListener("scroll", function () {
      if (scrolled) { return; }
      scrolled = true;
      requestAnimationFrame(function () { scrolled = false; paintPasses(); });
    });
    box.addEventListener("click", click);
    box.addEventListener("wheel", function (e) {
      if (!e.ctrlKey) { return; }
      e.preventDefault();
      zoomTo(state.zoom * (e.deltaY < 0 ? 1.25 : 0.8));
    }, { passive: false });
    $("zoom-in").addEventListener("click", function () { zoomTo(state.zoom * 1.5); });
    $("zoom-out").addEventListener("click", function () { zoomTo(state.zoom / 1.5); });
    $("zoom-fit").addEventListener("click", function () { zoomTo(1); });
    $("reset").addEventListener("click", function () { stop(); setCursor(-1); });
    $("step").addEventListener("click", function () { stop(); setCursor(state.cursor + 1); });
    $("play").addEventListener("click", play);
    $("cursor").addEventListener("input", function (e) { stop(); setCursor(Number(e.target.value)); });
    $("solve").addEventListener("click", solve);
    $("solve-cancel").addEventListener("click", function () { stopSolve("cancel"); });
    $("solve-finish").addEventListener("click", function () { stopSolve("finish"); });
    $("solve-show").addEventListener("click", showSolvedAgain);
    // a number field the browser cannot read is sent empty, and one typed with a comma as
    // digits run together: say so under it instead of quoting what the browser made of it
    document.querySelectorAll("#settings input[type=number]").forEach(function (input) {
      input.addEventListener("beforeinput", function (e) {
        var text = e.data || (e.dataTransfer ? e.dataTransfer.getData("text/plain") : "");
        var odd = /[^0-9+\-]/.exec(text.trim() || "");
        if (odd) {  // typed or pasted
          e.preventDefault();
          input.dataset.refused = "1";
          $("e-" + input.name).textContent = state.setup.labels[input.name] +
            " takes a whole number: " + JSON.stringify(odd[0]) + " cannot be part of it";
        }
      });
    });
    document.querySelectorAll("[data-download]").forEach(function (b) {
      b.addEventListener("click", function () { download(b.getAttribute("data-download")); });
    });
    var table = document.querySelector("#compare-table tbody");
    table.addEventListener("click", function (e) { pickRow(e.target.closest("tr")); });
    table.addEventListener("keydown", function (e) { if (e.key === "Enter") { pickRow(e.target.closest("tr")); } });
    var resized = null;
    window.addEventListener("resize", function () {
      clearTimeout(resized);
      resized = setTimeout(drawTimeline, 150);
    });
    state.evaluateNow = evaluate;
    state.passPoint = passPoint;
    state.passInfo = passInfo;
    state.gapPct = gapPct;
    window.zbopt = state;  // for the curious (and the browser tests and benchmark)
    await evaluate();
    document.body.setAttribute("data-ready", "1");
  }

  init().catch(function (e) { $("page-error").textContent = "the page could not start: " + e.message; });
})();
