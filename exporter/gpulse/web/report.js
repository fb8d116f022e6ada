/* report.html: draws the embedded heatmap (one row per GPU, or per node with a
   drill-down into one node's GPUs) and answers the mouse. */
"use strict";
(function () {
  var hm = JSON.parse(document.getElementById("gpulse-heatmap").textContent);
  var pal = hm.palette;
  var cells = {}, nodeCells = {};
  Object.keys(hm.cells).forEach(function (k) { cells[k] = gpulse.decode(hm.cells[k]); });
  if (hm.nodes) Object.keys(hm.node_cells).forEach(function (k) { nodeCells[k] = gpulse.decode(hm.node_cells[k]); });
  var stall = gpulse.decode(hm.stall);
  var canvas = document.getElementById("heatmap");
  var strip = document.getElementById("stallstrip");
  var drill = document.getElementById("drill");
  var drillNode = document.getElementById("drill-node");
  var mode = document.getElementById("mode");
  var tip = document.getElementById("tip");
  gpulse.modeOptions(mode, pal);

  function node() { return hm.nodes[drillNode ? +drillNode.value : 0]; }

  function drawDrill() {
    var n = node(), rows = n.end - n.first, c = cells[mode.value];
    gpulse.drawHeatmap(drill, c.subarray(n.first * hm.cols, n.end * hm.cols), rows, hm.cols, pal.lut,
                       hm.drill_row_height, pal.row_gap);
    var labels = drill.closest(".hm-grid").querySelector(".hm-labels");
    labels.querySelectorAll(".row-label").forEach(function (e) { e.remove(); });
    var axis = labels.querySelector(".axis-label");
    for (var r = n.first; r < n.end; r++) {
      var d = document.createElement("div");
      d.className = "row-label";
      d.style.height = hm.drill_row_height + "px";
      d.textContent = hm.rows[r];
      labels.insertBefore(d, axis);
    }
  }

  function draw() {
    if (hm.nodes) {
      gpulse.drawHeatmap(canvas, nodeCells[mode.value], hm.nodes.length, hm.cols, pal.lut, hm.row_height, pal.row_gap);
      drawDrill();
    } else {
      gpulse.drawHeatmap(canvas, cells[mode.value], hm.rows.length, hm.cols, pal.lut, hm.row_height, pal.row_gap,
                         hm.node_breaks, pal.node_gap);
    }
    gpulse.drawHeatmap(strip, stall, stall.length / hm.cols, hm.cols, pal.stall_lut, 14, null);
  }

  function tooltip(target, rowsOf, nameOf, source, rowHeight) {
    target.addEventListener("mousemove", function (ev) {
      var c = gpulse.cellAt(target, ev, rowsOf(), hm.cols, rowHeight);
      if (!c) { tip.style.display = "none"; return; }
      var t = hm.t0 + (c.col + 0.5) * hm.dt, src = source(), i = c.row * hm.cols + c.col;
      tip.textContent = nameOf(c.row) + " · " + gpulse.fmtTime(t, hm.clock) + " · work score " +
        gpulse.pct(src.work[i]) + " · busy " + gpulse.pct(src.busy[i]) + " · real work " + gpulse.pct(src.active[i]);
      tip.style.left = (ev.clientX + 14) + "px";
      tip.style.top = (ev.clientY + 10) + "px";
      tip.style.display = "block";
    });
    target.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  }

  if (hm.nodes) {
    tooltip(canvas, function () { return hm.nodes.length; }, function (r) { return hm.nodes[r].name; },
            function () { return nodeCells; }, hm.row_height);
    function offset(o) {
      var s = {};
      Object.keys(cells).forEach(function (k) { s[k] = cells[k].subarray(o * hm.cols); });
      return s;
    }
    tooltip(drill, function () { return node().end - node().first; },
            function (r) { return hm.rows[node().first + r]; }, function () { return offset(node().first); },
            hm.drill_row_height);
    drillNode.addEventListener("change", drawDrill);
    canvas.addEventListener("click", function (ev) {
      var c = gpulse.cellAt(canvas, ev, hm.nodes.length, hm.cols, hm.row_height);
      if (!c) return;
      drillNode.value = String(c.row);
      drawDrill();
      drill.scrollIntoView({ block: "nearest" });
    });
    document.querySelectorAll(".node-row").forEach(function (e, k) {
      e.addEventListener("click", function () { drillNode.value = String(k); drawDrill(); });
    });
  } else {
    tooltip(canvas, function () { return hm.rows.length; }, function (r) { return hm.rows[r]; },
            function () { return cells; }, hm.row_height);
  }
  mode.addEventListener("change", draw);
  window.addEventListener("resize", draw);
  draw();
  document.body.setAttribute("data-ready", "1");
})();
