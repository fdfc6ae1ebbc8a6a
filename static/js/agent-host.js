// The instance page's live charts of a host on an agent server (templates/agents/partials/
// _instance_charts.html): GPU utilization, memory used and power, one line per card, polled
// from the host's telemetry endpoint (data-url) every data-interval-ms. Texts come from the
// section's data attributes (translated by the template).
document.addEventListener("DOMContentLoaded", function () {
  var section = document.getElementById("agent-host-charts");
  if (!section || typeof echarts === "undefined") return;
  var status = document.getElementById("agent-host-charts-status");
  var locale = document.documentElement.lang.indexOf("zh") === 0 ? "ZH" : "EN";
  var interval = parseInt(section.dataset.intervalMs, 10) || 5000;
  var base = {
    tooltip: {trigger: "axis"},
    legend: {top: 0, type: "scroll"},
    grid: {left: 48, right: 12, top: 32, bottom: 28},
    xAxis: {type: "time"},
    animation: false
  };
  // Times of day, and the date at midnight (chart-axes.js), not ECharts' bare day numbers.
  var axes = typeof loamAxes === "function" ? loamAxes(document.documentElement.lang) : null;
  function chart(id, yAxis) {
    var element = document.getElementById(id);
    var instance = echarts.init(element, null, {locale: locale});
    instance.setOption(Object.assign({}, base, {yAxis: yAxis, series: []}));
    return instance;
  }
  var charts = {
    utilization_pct: chart("chart-gpu-utilization", {type: "value", min: 0, max: 100}),
    memory_used_mib: chart("chart-gpu-memory", {type: "value", min: 0}),
    power_w: chart("chart-gpu-power", {type: "value", min: 0})
  };
  var scale = {utilization_pct: 1, memory_used_mib: 1 / 1024, power_w: 1};
  function draw(data) {
    Object.keys(charts).forEach(function (figure) {
      var series = data.cards.map(function (card) {
        var line = data.series[card.uuid] || {at: []};
        return {
          name: section.dataset.cardLabel + " " + card.index,
          type: "line",
          showSymbol: line.at.length < 3,  // a line needs two points; show the first ones
          connectNulls: false,
          data: line.at.map(function (at, i) {
            var value = line[figure][i];
            return [new Date(at), value === null ? null : Math.round(value * scale[figure] * 10) / 10];
          })
        };
      });
      // The window the figures cover, not a range ECharts guesses from one or two points.
      var xAxis = {type: "time", max: new Date(data.updated_at)};
      if (data.since) xAxis.min = new Date(data.since);
      if (axes) {
        var span = data.since ? xAxis.max - xAxis.min : 0;
        xAxis.axisLabel = {hideOverlap: true, formatter: function (value) { return axes.time(value, span); }};
      }
      charts[figure].setOption({xAxis: xAxis, series: series}, {replaceMerge: ["series"]});
    });
    var text;
    if (!data.cards.length) text = section.dataset.noneLabel;
    else if (data.server_silent) text = section.dataset.silentLabel;
    else text = section.dataset.updatedLabel + " " + new Date(data.updated_at).toLocaleTimeString();
    status.textContent = text;
  }
  var timer = null;
  function poll() {
    fetch(section.dataset.url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (response) {
        if (response.status === 404 || response.status === 403) {
          clearInterval(timer);  // the host is gone, or no longer ours to see
          throw new Error(String(response.status));
        }
        if (!response.ok) throw new Error(String(response.status));
        return response.json();
      })
      .then(draw)
      .catch(function () { status.textContent = section.dataset.failedLabel; });
  }
  poll();
  timer = setInterval(poll, interval);
  window.addEventListener("resize", function () {
    Object.keys(charts).forEach(function (figure) { charts[figure].resize(); });
  });
});
