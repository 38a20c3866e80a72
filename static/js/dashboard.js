// Draws the dashboards' charts with the vendored Chart.js. Each <canvas data-chart="ID"> reads
// its data from <script type="application/json" id="ID"> (Django's json_script). Amounts come
// as strings (exact decimals, in cents) and are turned into numbers only here, for drawing.
(function () {
  "use strict";
  var usd = new Intl.NumberFormat("en-US", { style: "currency", currency: "USD" });

  function toNumber(value) {
    return value === null || value === undefined ? null : Number(value);
  }

  function config(spec) {
    var horizontal = !!spec.horizontal;
    var datasets = spec.datasets.map(function (d) {
      return Object.assign({}, d, { data: d.data.map(toNumber) });
    });
    var options = {
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      interaction: { mode: spec.type === "line" ? "index" : "nearest", intersect: false },
      plugins: {
        legend: { position: spec.type === "doughnut" ? "right" : "bottom" },
        tooltip: {
          callbacks: {
            label: function (ctx) {
              var value = spec.type === "doughnut" ? ctx.parsed : (horizontal ? ctx.parsed.x : ctx.parsed.y);
              return (ctx.dataset.label && spec.type !== "doughnut" ? ctx.dataset.label + ": " : (ctx.label ? ctx.label + ": " : "")) + usd.format(value);
            },
          },
        },
      },
    };
    if (spec.type !== "doughnut") {
      var money = { beginAtZero: true, stacked: !!spec.stacked, ticks: { callback: function (v) { return usd.format(v); } } };
      var category = { stacked: !!spec.stacked, ticks: { autoSkip: true, maxRotation: 0 } };
      options.indexAxis = horizontal ? "y" : "x";
      options.scales = horizontal ? { x: money, y: category } : { x: category, y: money };
    }
    return { type: spec.type, data: { labels: spec.labels, datasets: datasets }, options: options };
  }

  function draw(root) {
    root.querySelectorAll("canvas[data-chart]").forEach(function (canvas) {
      if (canvas.dataset.drawn) return;
      var source = document.getElementById(canvas.dataset.chart);
      if (!source || typeof Chart === "undefined") return;
      var spec = JSON.parse(source.textContent);
      var empty = spec.datasets.every(function (d) { return d.data.every(function (v) { return !Number(v); }); });
      if (empty) {
        canvas.parentElement.classList.add("chart-empty");
        return;
      }
      canvas.dataset.drawn = "1";
      new Chart(canvas, config(spec));
    });
  }

  function forget(root) {
    root.querySelectorAll("canvas[data-drawn]").forEach(function (canvas) {
      var chart = Chart.getChart(canvas);
      if (chart) chart.destroy();
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    draw(document);
    document.body.addEventListener("htmx:beforeSwap", function (e) { forget(e.detail.target); });
    document.body.addEventListener("htmx:afterSettle", function () { draw(document); });
  });
})();
