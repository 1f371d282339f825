/* corral's line charts: a few SVG elements, no dependencies, nothing fetched from elsewhere.
 *
 *   CorralChart.draw(element, {
 *     series: [{name: "loss", points: [[x, y], ...]}, ...],
 *     x: "number" | "time",          // time: x in unix seconds
 *     yFormat: (v) => string,        // optional
 *     empty: "no progress yet",      // shown when there is no point
 *     dots: true,                    // optional: points only, no line (a scatter)
 *   })
 *
 * The element gets one <svg class="chart-svg" data-points="N">: a polyline per series, a dot
 * per point (class "pt", up to 400 of them per series) with a <title> tooltip, axes with
 * round ticks and a legend. Copyright the corral authors, Apache-2.0 (like the rest of corral).
 */
(function (global) {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#db2777", "#65a30d"];
  var W = 560, H = 220, M = {top: 12, right: 26, bottom: 30, left: 58};

  function el(name, attrs, parent) {
    var node = document.createElementNS(NS, name);
    for (var k in attrs) node.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(node);
    return node;
  }

  function niceStep(span, count) {
    var raw = span / Math.max(count, 1), mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var norm = raw / mag;
    return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  }

  function ticks(lo, hi, count) {
    if (hi === lo) { hi = lo + 1; lo = lo - (lo === 0 ? 0 : 1); }
    var step = niceStep(hi - lo, count), out = [];
    var first = Math.floor(lo / step + 1e-9) * step, last = Math.ceil(hi / step - 1e-9) * step;
    for (var i = 0, v = first; v <= last + step * 1e-9; v = first + step * ++i) out.push(v);
    return {lo: first, hi: last, values: out};
  }

  function fmtNumber(v) {
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(1);
    return String(Math.round(v * 1e4) / 1e4);
  }

  function two(n) { return String(n).padStart(2, "0"); }

  function fmtTime(t, seconds) {
    var d = new Date(t * 1000), hm = two(d.getUTCHours()) + ":" + two(d.getUTCMinutes());
    return seconds ? hm + ":" + two(d.getUTCSeconds()) : hm;
  }

  function draw(target, opts) {
    var series = (opts.series || []).filter(function (s) { return s.points && s.points.length; });
    var yFmt = opts.yFormat || fmtNumber, xFmt = fmtNumber;
    target.textContent = "";
    var total = series.reduce(function (n, s) { return n + s.points.length; }, 0);
    if (!total) {
      var p = document.createElement("p");
      p.className = "chart-empty";
      p.textContent = opts.empty || "nothing to draw yet";
      target.appendChild(p);
      return;
    }
    var xs = [], ys = [];
    series.forEach(function (s) { s.points.forEach(function (p) { xs.push(p[0]); ys.push(p[1]); }); });
    var xt = ticks(Math.min.apply(null, xs), Math.max.apply(null, xs), 6);
    if (opts.x === "time") {
      var short = xt.hi - xt.lo < 3600;
      xFmt = function (t) { return fmtTime(t, short); };
    }
    var yt = ticks(Math.min.apply(null, ys), Math.max.apply(null, ys), 4);
    var pw = W - M.left - M.right, ph = H - M.top - M.bottom;
    function sx(x) { return M.left + (x - xt.lo) / (xt.hi - xt.lo || 1) * pw; }
    function sy(y) { return M.top + ph - (y - yt.lo) / (yt.hi - yt.lo || 1) * ph; }

    var svg = el("svg", {viewBox: "0 0 " + W + " " + H, class: "chart-svg", "data-points": total,
                         role: "img", "aria-label": opts.label || "chart"});
    var grid = el("g", {class: "grid"}, svg);
    yt.values.forEach(function (v) {
      el("line", {x1: M.left, x2: W - M.right, y1: sy(v), y2: sy(v)}, grid);
      el("text", {x: M.left - 6, y: sy(v) + 4, "text-anchor": "end"}, grid).textContent = yFmt(v);
    });
    xt.values.forEach(function (v, i) {
      var anchor = i === xt.values.length - 1 && xt.values.length > 1 ? "end" : "middle";
      el("text", {x: sx(v) + (anchor === "end" ? 8 : 0), y: H - 10, "text-anchor": anchor}, grid)
        .textContent = xFmt(v);
    });
    el("line", {class: "axis", x1: M.left, x2: W - M.right, y1: M.top + ph, y2: M.top + ph}, svg);
    el("line", {class: "axis", x1: M.left, x2: M.left, y1: M.top, y2: M.top + ph}, svg);

    series.forEach(function (s, i) {
      var color = COLORS[i % COLORS.length];
      var g = el("g", {class: "series", "data-name": s.name}, svg);
      if (!opts.dots) {
        el("polyline", {fill: "none", stroke: color, "stroke-width": 2, "stroke-linejoin": "round",
                        points: s.points.map(function (p) { return sx(p[0]) + "," + sy(p[1]); }).join(" ")}, g);
      }
      var every = Math.max(1, Math.ceil(s.points.length / 400));
      s.points.forEach(function (p, j) {
        if (j % every && j !== s.points.length - 1) return;
        var dot = el("circle", {class: "pt", cx: sx(p[0]), cy: sy(p[1]), r: opts.dots ? 4 : 2.6, fill: color}, g);
        el("title", {}, dot).textContent = s.name + ": " + yFmt(p[1]) + " at " + xFmt(p[0]);
      });
    });
    target.appendChild(svg);

    var legend = document.createElement("div");
    legend.className = "chart-legend";
    series.forEach(function (s, i) {
      var item = document.createElement("span");
      var swatch = document.createElement("i");
      swatch.style.background = COLORS[i % COLORS.length];
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(s.name));
      legend.appendChild(item);
    });
    target.appendChild(legend);
  }

  global.CorralChart = {draw: draw};
})(window);
