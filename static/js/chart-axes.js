// Time axes that read as dates: "12-04" (12月4日 in Chinese) for a span of days, the time of day
// ("14:30") within a day or two, with the date at midnight. ECharts' own time labels print a
// day-boundary tick as the bare day of the month ("4", "5"), which reads as a count, not a date.
var loamAxes = function (language) {
  var chinese = String(language).indexOf("zh") === 0;
  var pad = function (n) { return (n < 10 ? "0" : "") + n; };
  var day = function (date) {
    return chinese
      ? (date.getMonth() + 1) + "月" + date.getDate() + "日"
      : pad(date.getMonth() + 1) + "-" + pad(date.getDate());
  };
  var clock = function (date) { return pad(date.getHours()) + ":" + pad(date.getMinutes()); };
  var TWO_DAYS_MS = 2 * 24 * 3600 * 1000;
  return {
    // A tick of a time axis whose data span `spanMs` milliseconds.
    time: function (value, spanMs) {
      var date = new Date(value);
      if (spanMs >= TWO_DAYS_MS) return day(date);
      return date.getHours() === 0 && date.getMinutes() === 0 ? day(date) : clock(date);
    },
    // A category of a daily or monthly chart, as the server writes it: "2026-12-04", "2026-12".
    isoDate: function (text) {
      var parts = String(text).split("-");
      if (parts.length === 3) return day(new Date(+parts[0], parts[1] - 1, +parts[2]));
      if (parts.length === 2) return chinese ? parts[0] + "年" + (+parts[1]) + "月" : text;
      return text;
    }
  };
};
if (typeof module !== "undefined") module.exports = loamAxes;  // the tests run it in Node
