/* Draws every chart from the JSON block; nothing is fetched. Sets data-charts-rendered on <body> when done. */
(function () {
  "use strict";
  var CONFIG = { responsive: true, displaylogo: false, scrollZoom: false,
                 modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"] };

  function drawChart(id, figure) {
    var element = document.getElementById(id + "-plot");
    if (!element) { return Promise.resolve(false); }
    return Plotly.newPlot(element, figure.data, figure.layout, CONFIG).then(function () { return true; });
  }

  function drawAll() {
    var holder = document.getElementById("soak-chart-data");
    var figures = JSON.parse(holder.textContent);
    var drawn = Object.keys(figures).map(function (id) { return drawChart(id, figures[id]); });
    Promise.all(drawn).then(function (results) {
      document.body.setAttribute("data-charts-rendered", String(results.filter(Boolean).length));
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", drawAll);
  } else {
    drawAll();
  }
}());
