// The instance page's monitoring charts (templates/orders/partials/_instance_monitoring.html):
// GPU utilization, GPU memory, power, CPU, memory, disk and network over 1 h, 24 h or 7 d, read
// from the host's monitoring endpoint (data-url, ?range=) when a range is chosen and again every
// data-refresh-ms. The endpoint sends one point per bucket (null where the host did not run or
// did not report: a gap) and says why there is nothing to show. Texts come from the section's
// data attributes (translated by the template).
document.addEventListener("DOMContentLoaded", function () {
  var section = document.getElementById("host-monitoring");
  if (!section || typeof echarts === "undefined") return;
  var labels = section.dataset;
  var status = document.getElementById("host-monitoring-status");
  var grid = document.getElementById("host-monitoring-charts");
  var buttons = Array.prototype.slice.call(section.querySelectorAll("button[data-range]"));
  var locale = document.documentElement.lang.indexOf("zh") === 0 ? "ZH" : "EN";
  var refresh = parseInt(labels.refreshMs, 10) || 60000;
  var range = labels.range || "1h";
  // A date or a time on every label: ECharts' own labels write a new day as its bare number
  // ("4", "5"), which reads as anything but a date. The site's labeller (chart-axes.js) writes
  // dates as the page's language does; ECharts' templates stand in should it be missing.
  var axes = typeof loamAxes === "function" ? loamAxes(document.documentElement.lang) : null;
  var timeLabels = {
    year: "{yyyy}-{MM}-{dd}",
    month: "{MM}-{dd}",
    day: "{MM}-{dd}",
    hour: "{HH}:{mm}",
    minute: "{HH}:{mm}",
    second: "{HH}:{mm}:{ss}",
    millisecond: "{HH}:{mm}:{ss}"
  };
  var GIB = 1 / 1024;
  var MBIT = 8 / 1000000;
  var specs = [
    {id: "host-chart-gpu-utilization", max: 100, unit: "%", lines: [{figure: "gpu_utilization_pct", name: labels.gpuLabel}]},
    {id: "host-chart-gpu-memory", lines: [
      {figure: "gpu_memory_used_mib", name: labels.usedLabel, scale: GIB},
      {figure: "gpu_memory_total_mib", name: labels.totalLabel, scale: GIB, dashed: true}
    ]},
    {id: "host-chart-power", unit: "W", lines: [{figure: "power_w", name: labels.powerLabel}]},
    {id: "host-chart-cpu", max: 100, unit: "%", lines: [{figure: "cpu_pct", name: labels.cpuLabel}]},
    {id: "host-chart-memory", lines: [
      {figure: "memory_used_mib", name: labels.usedLabel, scale: GIB},
      {figure: "memory_limit_mib", name: labels.limitLabel, scale: GIB, dashed: true}
    ]},
    {id: "host-chart-disk", lines: [
      {figure: "disk_used_mib", name: labels.usedLabel, scale: GIB},
      {figure: "disk_size_mib", name: labels.sizeLabel, scale: GIB, dashed: true}
    ]},
    {id: "host-chart-network", lines: [
      {figure: "net_rx_bytes_per_s", name: labels.receivedLabel, scale: MBIT},
      {figure: "net_tx_bytes_per_s", name: labels.sentLabel, scale: MBIT}
    ]}
  ];
  var charts = specs.map(function (spec) {
    var chart = echarts.init(document.getElementById(spec.id), null, {locale: locale});
    var yAxis = {type: "value", min: 0};
    if (spec.max) yAxis.max = spec.max;
    if (spec.unit) yAxis.axisLabel = {formatter: "{value} " + spec.unit};
    chart.setOption({
      animation: false,
      tooltip: {trigger: "axis"},
      legend: {top: 0, type: "scroll", show: spec.lines.length > 1},
      grid: {left: 52, right: 14, top: spec.lines.length > 1 ? 30 : 12, bottom: 28},
      xAxis: {type: "time", axisLabel: {formatter: timeLabels, hideOverlap: true}},
      yAxis: yAxis,
      series: []
    });
    return {chart: chart, spec: spec};
  });

  function round(value, scale) {
    return value === null || value === undefined ? null : Math.round(value * (scale || 1) * 100) / 100;
  }

  function draw(data) {
    var times = data.series.at.map(function (at) { return new Date(at); });
    charts.forEach(function (entry) {
      var series = entry.spec.lines.map(function (line) {
        var values = data.series[line.figure] || [];
        return {
          name: line.name,
          type: "line",
          showSymbol: false,
          connectNulls: false,
          lineStyle: line.dashed ? {type: "dashed", width: 1} : undefined,
          data: times.map(function (at, i) { return [at, round(values[i], line.scale)]; })
        };
      });
      // The whole range, not what ECharts would guess from the points there are.
      var start = new Date(data.start), end = new Date(data.end);
      var formatter = axes ? function (value) { return axes.time(value, end - start); } : timeLabels;
      entry.chart.setOption(
        {xAxis: {min: start, max: end, axisLabel: {formatter: formatter}}, series: series},
        {replaceMerge: ["series"]}
      );
    });
    grid.hidden = !data.has_data;
    if (data.has_data) charts.forEach(function (entry) { entry.chart.resize(); });
    var text = data.notice;
    if (!text) {
      var minutes = String(Math.round(data.step_s / 60));
      var language = document.documentElement.lang || undefined;
      text = labels.updatedLabel + " " + new Date(data.end).toLocaleTimeString(language) + " · " +
        labels.stepLabel.replace("%(minutes)s", minutes);
    }
    status.textContent = text;
  }

  var timer = null;
  function load() {
    var url = section.dataset.url + "?range=" + encodeURIComponent(range);
    fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (response) {
        if (response.status === 404 || response.status === 403) {
          clearInterval(timer);  // the host is gone, or no longer ours to see
          throw new Error(String(response.status));
        }
        if (!response.ok) throw new Error(String(response.status));
        return response.json();
      })
      .then(function (data) { if (data.range === range) draw(data); })
      .catch(function () { status.textContent = labels.failedLabel; });
  }

  buttons.forEach(function (button) {
    button.addEventListener("click", function () {
      range = button.dataset.range;
      buttons.forEach(function (other) {
        var chosen = other === button;
        other.classList.toggle("active", chosen);
        other.setAttribute("aria-pressed", chosen ? "true" : "false");
      });
      status.textContent = labels.loadingLabel || status.textContent;
      load();
    });
  });
  load();
  timer = setInterval(load, refresh);
  window.addEventListener("resize", function () {
    charts.forEach(function (entry) { entry.chart.resize(); });
  });
});
