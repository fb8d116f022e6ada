/* gpulse heatmap: rows x columns of one byte (0..254 = fraction, 255 = no data),
   drawn through a 256-colour table. Shared by report.html and the live page. The
   colours come from the page's embedded palette (gpulse/palette.py), never from here. */
"use strict";
var gpulse = window.gpulse || {};
window.gpulse = gpulse;

gpulse.decode = function (b64) {
  var s = atob(b64), out = new Uint8Array(s.length);
  for (var i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
};

gpulse.rgbTable = function (lut) {
  var t = new Uint8Array(256 * 3);
  for (var i = 0; i < 256; i++) {
    var h = lut[Math.min(i, lut.length - 1)];
    t[3 * i] = parseInt(h.substr(1, 2), 16);
    t[3 * i + 1] = parseInt(h.substr(3, 2), 16);
    t[3 * i + 2] = parseInt(h.substr(5, 2), 16);
  }
  return t;
};

/* Draw `cells` (rows*cols bytes, row-major) on `canvas`: one band of rowHeight CSS
   pixels per row, columns stretched to the canvas' CSS width, no smoothing; rowGap
   (a CSS colour) draws thin separators that keep rows countable; a line of
   nodeGap (a CSS colour) above each row in `breaks` marks where another node's
   GPUs begin. */
gpulse.drawHeatmap = function (canvas, cells, rows, cols, lut, rowHeight, rowGap, breaks, nodeGap) {
  var table = gpulse.rgbTable(lut);
  var off = document.createElement("canvas");
  off.width = Math.max(cols, 1);
  off.height = Math.max(rows, 1);
  var octx = off.getContext("2d");
  var img = octx.createImageData(off.width, off.height);
  var px = img.data;
  for (var i = 0; i < rows * cols; i++) {
    var v = cells[i];
    px[4 * i] = table[3 * v];
    px[4 * i + 1] = table[3 * v + 1];
    px[4 * i + 2] = table[3 * v + 2];
    px[4 * i + 3] = 255;
  }
  octx.putImageData(img, 0, 0);
  var dpr = window.devicePixelRatio || 1;
  var cssW = canvas.clientWidth || canvas.parentNode.clientWidth || 800;
  var cssH = rows * rowHeight;
  canvas.style.height = cssH + "px";
  canvas.width = Math.round(cssW * dpr);
  canvas.height = Math.round(cssH * dpr);
  var ctx = canvas.getContext("2d");
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(off, 0, 0, off.width, off.height, 0, 0, canvas.width, canvas.height);
  if (rowGap && rowHeight >= 6 && rows > 1) {
    ctx.fillStyle = rowGap;
    for (var r = 1; r < rows; r++) ctx.fillRect(0, Math.round(r * rowHeight * dpr), canvas.width, Math.max(1, Math.round(dpr / 2)));
  }
  if (breaks && nodeGap) {
    ctx.fillStyle = nodeGap;
    breaks.forEach(function (r) {
      ctx.fillRect(0, Math.round(r * rowHeight * dpr) - Math.round(dpr), canvas.width, Math.max(2, Math.round(2 * dpr)));
    });
  }
  canvas.setAttribute("data-rows", String(rows));
  canvas.setAttribute("data-cols", String(cols));
};

/* Fill a <select> with the palette's cell modes, the default selected. */
gpulse.modeOptions = function (select, palette) {
  if (select.options.length) return;
  Object.keys(palette.modes).forEach(function (k) {
    var o = document.createElement("option");
    o.value = k; o.textContent = palette.modes[k];
    if (k === palette.default_mode) o.selected = true;
    select.appendChild(o);
  });
};

/* A straggler badge: the wording and explanation the palette gives its direction. */
gpulse.badge = function (palette, direction) {
  var s = palette.straggler[direction], b = document.createElement("span");
  b.className = "badge " + (direction === "idler" ? "cold" : "hot");
  b.textContent = s.badge;
  b.title = s.title;
  return b;
};

/* Which cell is under the mouse: {row, col} or null. */
gpulse.cellAt = function (canvas, ev, rows, cols, rowHeight) {
  var r = canvas.getBoundingClientRect();
  var x = ev.clientX - r.left, y = ev.clientY - r.top;
  if (x < 0 || y < 0 || x >= r.width || y >= r.height) return null;
  return { row: Math.min(rows - 1, Math.floor(y / rowHeight)), col: Math.min(cols - 1, Math.floor(x / r.width * cols)) };
};

gpulse.pct = function (v) { return v === 255 ? "no data" : Math.round(v / 254 * 100) + " %"; };

/* A moment as the report writes it: wall clock in the report's zone (one offset)
   and the time since the start of the recording. */
gpulse.fmtTime = function (t, clock) {
  var s = Math.max(0, Math.round(t - clock.t0));
  function two(n) { return (n < 10 ? "0" : "") + n; }
  /* as report/clock.py's elapsed(): 12 s, 4 min 05 s, 1 h 02 min */
  var since = (s < 60 ? s + " s" : s < 3600 ? Math.floor(s / 60) + " min " + two(s % 60) + " s" :
    Math.floor(s / 3600) + " h " + two(Math.floor(s % 3600 / 60)) + " min") + " into the recording";
  if (!clock.epoch) return since;
  var d = new Date((t + clock.offset) * 1000);
  return d.toISOString().substr(11, 8) + " (" + since + ")";
};
