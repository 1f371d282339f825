/* The dashboard's live parts: poll the server's fragments and swap them in, draw the charts,
 * send Stop and Cancel. Same-origin requests only (the login cookie goes with them). */
(function () {
  "use strict";
  var REFRESH_MS = 2000;

  function get(url) {
    return fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json, text/html"}})
      .then(function (res) {
        if (res.status === 401) {
          location.href = "/login?next=" + encodeURIComponent(location.pathname + location.search);
          throw new Error("logged out");
        }
        if (!res.ok) throw new Error(res.status + " on " + url);
        return res;
      });
  }

  function every(ms, fn) {
    var timer = null, stopped = false;
    function tick() {
      Promise.resolve().then(fn).catch(function () {}).then(function (more) {
        if (more !== false && !stopped) timer = setTimeout(tick, ms);
      });
    }
    tick();
    return function () { stopped = true; clearTimeout(timer); };
  }

  /* --- the runs table ---------------------------------------------------------------------- */
  var table = document.getElementById("runs-table");
  if (table) {
    setTimeout(function () {
      every(REFRESH_MS, function () {
        return get("/ui/runs" + location.search).then(function (r) { return r.text(); })
          .then(function (html) { table.innerHTML = html; });
      });
    }, REFRESH_MS);
  }

  /* --- the GPU page ------------------------------------------------------------------------- */
  var report = document.getElementById("gpu-report");
  if (report) {
    setTimeout(function () {
      every(5000, function () {
        return get("/ui/gpus").then(function (r) { return r.text(); })
          .then(function (html) { report.innerHTML = html; });
      });
    }, 5000);
  }

  /* --- the GPU page: each GPU's utilisation and memory over time, as the controller recorded
   * them (one series per GPU; the window's buttons pick how far back) ------------------------ */
  var gpuHistory = document.getElementById("gpu-history");
  if (gpuHistory) {
    var gpuName = function (s) { return s.machine + " · GPU " + s.index + (s.name ? " " + s.name : ""); };
    var pct = function (v) { return Math.round(v * 10) / 10 + " %"; };
    var gb = function (v) { return (Math.round(v * 100) / 100) + " GB"; };
    var drawGpuHistory = function () {
      var since = gpuHistory.getAttribute("data-since");
      return get("/api/v1/monitoring/gpu/history?since=" + encodeURIComponent(since))
        .then(function (r) { return r.json(); }).then(function (h) {
          var empty = "no GPU reading recorded in the last " + since +
            " (the controller records each GPU once a minute while it runs)";
          CorralChart.draw(document.getElementById("chart-gpu-util"), {
            series: h.series.map(function (s) { return {name: gpuName(s), points: s.utilization_pct}; }),
            x: "time", yFormat: pct, label: "GPU utilisation over time", empty: empty});
          CorralChart.draw(document.getElementById("chart-gpu-mem"), {
            series: h.series.map(function (s) {
              return {name: gpuName(s), points: s.memory_used_mb.map(function (p) { return [p[0], p[1] / 1024]; })};
            }),
            x: "time", yFormat: gb, label: "GPU memory used over time", empty: empty});
        });
    };
    gpuHistory.addEventListener("click", function (ev) {
      var button = ev.target.closest("button[data-window]");
      if (!button) return;
      gpuHistory.setAttribute("data-since", button.getAttribute("data-window"));
      gpuHistory.querySelectorAll("button[data-window]").forEach(function (b) {
        b.setAttribute("aria-pressed", b === button ? "true" : "false");
      });
      drawGpuHistory().catch(function () {});
    });
    every(60000, drawGpuHistory);
  }

  /* --- a sweep's page: the metric against each numeric parameter, one dot per trial --------- */
  var sweepPage = document.querySelector("[data-sweep]");
  if (sweepPage) {
    var sweepName = encodeURIComponent(sweepPage.getAttribute("data-sweep"));
    get("/api/v1/sweeps/" + sweepName).then(function (r) { return r.json(); }).then(function (s) {
      document.querySelectorAll(".sweep-chart").forEach(function (box) {
        var param = box.getAttribute("data-param"), byState = {};
        s.trials.forEach(function (t) {
          if (t.value === null || typeof t.params[param] !== "number") return;
          (byState[t.state] = byState[t.state] || []).push([t.params[param], t.value]);
        });
        var series = Object.keys(byState).sort().map(function (k) { return {name: k, points: byState[k]}; });
        CorralChart.draw(box, {series: series, x: "number", dots: true,
          label: s.metric + " by " + param, empty: "no trial has reported " + s.metric + " yet"});
      });
    });
    return;
  }

  /* --- a run's page ------------------------------------------------------------------------ */
  var page = document.querySelector("[data-run]");
  if (!page) return;
  var runId = page.getAttribute("data-run");
  var enc = encodeURIComponent(runId);

  function usd(v) {
    var a = Math.abs(v);
    return "$" + (a >= 0.1 || a === 0 ? v.toFixed(2) : Number(v.toPrecision(2)).toString());
  }

  function drawCharts() {
    return get("/api/v1/runs/" + enc + "/charts").then(function (r) { return r.json(); }).then(function (c) {
      CorralChart.draw(document.getElementById("chart-loss"),
        {series: c.loss, x: "number", label: "loss by step", empty: "no loss reported yet"});
      CorralChart.draw(document.getElementById("chart-validation"),
        {series: c.validation, x: "number", label: "validation metrics by step",
         empty: "no validation metric reported yet"});
      CorralChart.draw(document.getElementById("chart-cost"),
        {series: [c.cost], x: "time", yFormat: usd, label: "cost over time", empty: "no cost yet"});
    });
  }

  /* The log box shows its newest line: on load, and after each refresh unless the reader
   * scrolled up to read older lines. */
  function keepLogsAtEnd(update, always) {
    var box = document.querySelector("#part-logs .logs");
    var atEnd = always || !box || box.scrollTop + box.clientHeight >= box.scrollHeight - 8;
    update();
    box = document.querySelector("#part-logs .logs");
    if (box && atEnd) box.scrollTop = box.scrollHeight;
  }

  function refreshParts() {
    return get("/ui/runs/" + enc).then(function (r) { return r.json(); }).then(function (data) {
      keepLogsAtEnd(function () {
        Object.keys(data.parts).forEach(function (name) {
          var slot = document.getElementById("part-" + name);
          if (slot) slot.innerHTML = data.parts[name];
        });
      });
      page.setAttribute("data-state", data.state);
      return data.terminal;
    });
  }

  var ended = page.getAttribute("data-terminal") === "true";
  keepLogsAtEnd(function () {}, true);
  drawCharts().catch(function () {});
  if (!ended) {
    setTimeout(function () {
      every(REFRESH_MS, function () {
        return Promise.all([refreshParts(), drawCharts()]).then(function (r) { return !r[0]; });
      });
    }, REFRESH_MS);
  }

  document.addEventListener("click", function (ev) {
    var button = ev.target.closest("button[data-action]");
    if (!button || button.disabled) return;
    var action = button.getAttribute("data-action");
    if (action === "cancel" && !confirm("Cancel " + runId + " now? Its stages are killed without a grace period.")) return;
    button.disabled = true;
    var note = document.getElementById("action-note");
    fetch("/api/v1/runs/" + enc + "/" + action, {
      method: "POST", credentials: "same-origin", headers: {"X-Corral-Dashboard": "1"}
    }).then(function (res) {
      return res.json().then(function (body) {
        if (note) note.textContent = res.ok ? (action === "stop" ? "Stopping: the stages get their grace period." : "Cancelling.") : body.message;
      });
    }).catch(function (err) { if (note) note.textContent = String(err); })
      .then(function () { return refreshParts(); }).catch(function () {});
  });
})();
