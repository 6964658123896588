/* Printing to PDF (`soak report --pdf`, which opens this page as report.html?print=a4 or ?print=letter): the
   paper size becomes an @page rule, and once report.js has drawn the charts each becomes a static PNG image at a
   width that suits the page, so the PDF holds exactly what was drawn. Without ?print= this does nothing.
   Sets data-print-ready on <body> when done. */
(function () {
  "use strict";
  var PAPERS = { a4: "A4", letter: "letter" };
  var WIDTH = 1000, HEIGHT = 420, SCALE = 2;
  var match = /[?&]print=(a4|letter)\b/.exec(window.location.search);
  if (!match) { return; }

  function setPaper(size) {
    var style = document.createElement("style");
    style.textContent = "@page { size: " + size + "; margin: 12mm; }";
    document.head.appendChild(style);
  }

  function toImage(plot) {
    return Plotly.toImage(plot, { format: "png", width: WIDTH, height: HEIGHT, scale: SCALE }).then(function (url) {
      var image = document.createElement("img");
      image.className = "plot-image";
      image.alt = plot.getAttribute("aria-label") || "chart";
      image.src = url;
      Plotly.purge(plot);
      plot.replaceWith(image);
      return true;
    });
  }

  function convertAll() {
    var plots = Array.prototype.slice.call(document.querySelectorAll("div.plot.js-plotly-plot"));
    Promise.all(plots.map(toImage)).then(function (done) {
      document.body.setAttribute("data-print-ready", String(done.length));
    });
  }

  function whenDrawn() {
    if (document.body.hasAttribute("data-charts-rendered")) { convertAll(); } else { setTimeout(whenDrawn, 50); }
  }

  setPaper(PAPERS[match[1]]);
  whenDrawn();
}());
