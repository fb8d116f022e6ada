/* The live page: polls api/heatmap (relative, so it works under any path prefix and
   with the page's own credentials) and redraws. */
"use strict";
(function () {
  var boot = JSON.parse(document.getElementById("gpulse-boot").textContent);
  var canvas = document.getElementById("heatmap");
  var mode = document.getElementById("mode");
  var minutesSel = document.getElementById("minutes");
  var tip = document.getElementById("tip");
  var last = null, cells = null, timer = null;
  var ROW = 16;

  [1, 5, 15, 60, 240, 1440].forEach(function (m) {
    if (m > boot.max_minutes && m !== 1) return;
    var o = document.createElement("option");
    o.value = String(m); o.textContent = m < 60 ? m + " min" : (m / 60) + " h";
    if (m === boot.minutes) o.selected = true;
    minutesSel.appendChild(o);
  });
  var pal = boot.palette;
  gpulse.modeOptions(mode, pal);
  document.getElementById("legend-text").textContent = pal.legend.cells + "; " + pal.legend.no_data;
  document.getElementById("stall-legend").textContent = pal.legend.stall +
    "; stall strip: share of each column in which every GPU of the group was stalled at once";
  var STRIP = 14;

  // the engine names a straggler's cause once it has judged its span (analysis/cause.py)
  var NOT_JUDGED = "cause not judged yet";
  function causeTag(s) {
    var c = document.createElement("span");
    c.className = "cause";
    c.textContent = s.cause || NOT_JUDGED;
    c.title = s.cause ? s.cause + ": " + s.remedy : "the exporter names the cause once it has confirmed the straggler";
    return c;
  }

  function pct(x) { return x === null || x === undefined ? "–" : (100 * x).toFixed(1) + " %"; }
  function setText(id, v) { document.getElementById(id).textContent = v; }

  function render() {
    if (!last) return;
    var rows = last.rows.length;
    var labels = document.getElementById("labels");
    labels.textContent = "";
    var marks = {};
    last.stragglers.forEach(function (s) { marks["GPU " + s.gpu] = s; });
    last.rows.forEach(function (name) {
      var d = document.createElement("div");
      d.className = "row-label" + (marks[name] ? " straggler" : "");
      d.style.height = ROW + "px";
      if (marks[name]) {
        d.appendChild(gpulse.badge(pal, marks[name].direction));
        d.appendChild(causeTag(marks[name]));
      }
      d.appendChild(document.createTextNode(name));
      labels.appendChild(d);
    });
    if (last.cols > 0 && rows > 0) {
      cells = { work: gpulse.decode(last.work), busy: gpulse.decode(last.busy), active: gpulse.decode(last.active) };
      gpulse.drawHeatmap(canvas, cells[mode.value], rows, last.cols, pal.lut, ROW, pal.row_gap);
      // one stall strip per peer group, in the stall colour (transparent = no stall)
      var strips = last.groups.map(function (g) { return gpulse.decode(g.stall); });
      var joined = new Uint8Array(strips.length * last.cols);
      strips.forEach(function (s, i) { joined.set(s, i * last.cols); });
      gpulse.drawHeatmap(document.getElementById("stallstrip"), joined, strips.length, last.cols, pal.stall_lut,
                         STRIP, null);
      var sl = document.getElementById("strip-labels");
      sl.textContent = "";
      last.groups.forEach(function (g) {
        var d = document.createElement("div");
        d.className = "strip-label";
        d.textContent = "sync stalls" + (g.workload ? " · " + g.workload : "");
        sl.appendChild(d);
      });
    }
    var axis = document.getElementById("axis");
    axis.textContent = "";
    // the time of the run: a replay puts col_seconds of its log in each column
    var log = last.timeline === "log";
    var span = last.cols * last.col_seconds;
    [0, 0.25, 0.5, 0.75, 1].forEach(function (f) {
      var s = document.createElement("span");
      s.style.left = (100 * f) + "%";
      if (f === 0) s.className = "first";
      if (f === 1) { s.style.left = ""; s.style.right = "0"; s.style.transform = "none"; }
      var ago = Math.round(span * (1 - f));
      s.textContent = ago === 0 ? (log ? "latest (log time)" : "now") :
        "−" + (ago >= 120 ? Math.round(ago / 60) + " min" : ago + " s");
      axis.appendChild(s);
    });
    var g = last.groups.filter(function (x) { return x.holding; })[0] || last.groups[0] || {};
    // a measurement always; while stragglers explain the spread it is theirs, not imbalance
    setText("imbalance", g.imbalance === null || g.imbalance === undefined ? "–" :
      g.imbalance.toFixed(2) + (g.imbalance_explained ? " (stragglers)" : ""));
    setText("stall-window", pct(g.stall_fraction_window));
    setText("stall-total", pct(g.stall_fraction_total));
    setText("stall-period", g.stall_period ? g.stall_period.toFixed(1) + " s" : "none");
    setText("stragglers", last.stragglers.length ? last.stragglers.map(function (s) {
      return "GPU " + s.gpu + " (" + (s.direction === "idler" ? "cold" : "hot") + ")"; }).join(", ") : "none");
    var causes = document.getElementById("causes");
    causes.textContent = "";
    last.stragglers.forEach(function (s) {
      var li = document.createElement("li");
      li.setAttribute("data-gpu", s.gpu);
      var b = document.createElement("b");
      b.textContent = "GPU " + s.gpu + ": " + (s.cause || NOT_JUDGED);
      li.appendChild(b);
      li.appendChild(document.createTextNode(s.cause ? " — " + s.remedy +
        (s.evidence.length ? ". Evidence: " + s.evidence.join("; ") : "") : ""));
      causes.appendChild(li);
    });
    setText("minutes-label", String(last.minutes));
    setText("status", (last.stale ? "STALE · " : "") + "updated " + new Date().toLocaleTimeString());
    document.body.setAttribute("data-ready", "1");
  }

  function poll() {
    clearTimeout(timer);
    fetch("api/heatmap?minutes=" + encodeURIComponent(minutesSel.value), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(function (doc) { last = doc; render(); })
      .catch(function (e) { setText("status", "cannot update: " + e.message); })
      .then(function () { timer = setTimeout(poll, Math.max(1000, 2000 * boot.interval)); });
  }
  mode.addEventListener("change", render);
  minutesSel.addEventListener("change", poll);
  window.addEventListener("resize", render);
  canvas.addEventListener("mousemove", function (ev) {
    if (!last || !cells) return;
    var c = gpulse.cellAt(canvas, ev, last.rows.length, last.cols, ROW);
    if (!c) { tip.style.display = "none"; return; }
    var i = c.row * last.cols + c.col;
    var ago = Math.round((last.cols - 1 - c.col) * last.col_seconds);
    tip.textContent = last.rows[c.row] + " · " + ago + (last.timeline === "log" ? " s before the latest (log time)" :
      " s ago") + " · work score " + gpulse.pct(cells.work[i]) +
      " · busy " + gpulse.pct(cells.busy[i]) +
      " · real work " + gpulse.pct(cells.active[i]);
    tip.style.left = (ev.clientX + 14) + "px";
    tip.style.top = (ev.clientY + 10) + "px";
    tip.style.display = "block";
  });
  canvas.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  poll();
})();
