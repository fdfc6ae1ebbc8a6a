// Stacked bar charts of money per category: an element with data-money-chart="ID" draws the
// json_script payload ID, {"x": [labels], "series": [{"name": …, "data": [minor units]}]}.
document.addEventListener("DOMContentLoaded", function () {
  var locale = document.documentElement.lang.indexOf("zh") === 0 ? "ZH" : "EN";
  var major = function (minor) { return (minor / 100).toFixed(2); };
  var axes = loamAxes(document.documentElement.lang);
  document.querySelectorAll("[data-money-chart]").forEach(function (element) {
    var data = JSON.parse(document.getElementById(element.dataset.moneyChart).textContent);
    var chart = echarts.init(element, null, {locale: locale});
    chart.setOption({
      tooltip: {trigger: "axis", valueFormatter: major},
      legend: {top: 0, type: "scroll"},
      grid: {left: 64, right: 16, top: 40, bottom: 32},
      xAxis: {type: "category", data: data.x, axisLabel: {formatter: axes.isoDate}},
      yAxis: {type: "value", axisLabel: {formatter: major}},
      series: data.series.map(function (s) {
        return {name: s.name, type: "bar", stack: "total", data: s.data};
      })
    });
    window.addEventListener("resize", function () { chart.resize(); });
    element.dataset.rendered = "true";
  });
});
