// The operator overview's utilization and power charts, from the json_script payload
// "capacity-series"; series names (translated) come from each chart element's data attributes.
document.addEventListener("DOMContentLoaded", function () {
  var source = document.getElementById("capacity-series");
  var utilizationElement = document.getElementById("chart-utilization");
  var powerElement = document.getElementById("chart-power");
  if (!source || !utilizationElement || !powerElement) return;
  var data = JSON.parse(source.textContent);
  var locale = document.documentElement.lang.indexOf("zh") === 0 ? "ZH" : "EN";
  var times = data.times.map(function (t) { return new Date(t); });
  function pairs(values) { return values.map(function (v, i) { return [times[i], v]; }); }
  var axes = loamAxes(document.documentElement.lang);
  var span = times.length ? times[times.length - 1] - times[0] : 0;
  var base = {
    tooltip: {trigger: "axis"},
    legend: {top: 0},
    grid: {left: 48, right: 16, top: 36, bottom: 40},
    xAxis: {
      type: "time",
      axisLabel: {hideOverlap: true, formatter: function (value) { return axes.time(value, span); }}
    },
    dataZoom: [{type: "inside"}]
  };
  var utilization = echarts.init(utilizationElement, null, {locale: locale});
  utilization.setOption(Object.assign({}, base, {
    yAxis: {type: "value", min: 0, max: 100, axisLabel: {formatter: "{value} %"}},
    series: [
      {name: utilizationElement.dataset.allocatedLabel, type: "line", showSymbol: false, data: pairs(data.allocated_pct)},
      {name: utilizationElement.dataset.measuredLabel, type: "line", showSymbol: false, connectNulls: true, data: pairs(data.utilization_pct)}
    ]
  }));
  var power = echarts.init(powerElement, null, {locale: locale});
  power.setOption(Object.assign({}, base, {
    yAxis: {type: "value", axisLabel: {formatter: "{value} kW"}},
    series: [
      {name: powerElement.dataset.powerLabel, type: "line", showSymbol: false, areaStyle: {}, data: pairs(data.power_kw)},
      {name: powerElement.dataset.measuredLabel, type: "line", showSymbol: false, connectNulls: false, data: pairs(data.measured_kw)}
    ]
  }));
  window.addEventListener("resize", function () { utilization.resize(); power.resize(); });
  window.loamCharts = {utilization: utilization, power: power};
});
