/* report.html: draws the embedded heatmap and answers the mouse. */
"use strict";
(function () {
  var hm = JSON.parse(document.getElementById("gpulse-heatmap").textContent);
  var cells = { busy: gpulse.decode(hm.busy), active: gpulse.decode(hm.active) };
  var stall = gpulse.decode(hm.stall);
  var canvas = document.getElementById("heatmap");
  var strip = document.getElementById("stallstrip");
  var mode = document.getElementById("mode");
  var tip = document.getElementById("tip");

  function draw() {
    gpulse.drawHeatmap(canvas, cells[mode.value], hm.rows.length, hm.cols, hm.lut, hm.row_height);
    gpulse.drawHeatmap(strip, stall, stall.length / hm.cols, hm.cols, hm.stall_lut, 14);
  }
  mode.addEventListener("change", draw);
  window.addEventListener("resize", draw);
  canvas.addEventListener("mousemove", function (ev) {
    var c = gpulse.cellAt(canvas, ev, hm.rows.length, hm.cols, hm.row_height);
    if (!c) { tip.style.display = "none"; return; }
    var i = c.row * hm.cols + c.col;
    var t = hm.t0 + (c.col + 0.5) * hm.dt;
    tip.textContent = hm.rows[c.row] + " · " + gpulse.fmtTime(t, hm.epoch, hm.t0) + " · busy " +
      gpulse.pct(cells.busy[i]) + " · real work " + gpulse.pct(cells.active[i]);
    tip.style.left = (ev.clientX + 14) + "px";
    tip.style.top = (ev.clientY + 10) + "px";
    tip.style.display = "block";
  });
  canvas.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  draw();
  document.body.setAttribute("data-ready", "1");
})();
