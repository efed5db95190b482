// Filter boxes above the leaderboard tables: typing keeps the rows (ranked and reference) whose text,
// method id or description holds every word typed. A link to an entry's details opens them.
(function () {
  "use strict";
  function rowText(row) {
    var cell = row.querySelector("td[data-col=method]");
    return (row.textContent + " " + (row.getAttribute("data-method") || "") + " "
            + (cell ? cell.getAttribute("title") || "" : "")).toLowerCase();
  }
  function apply(input) {
    var table = document.getElementById(input.getAttribute("data-table"));
    if (!table) { return; }
    var words = input.value.toLowerCase().split(/\s+/).filter(function (w) { return w.length > 0; });
    var rows = table.querySelectorAll("tbody tr");
    var shown = 0;
    Array.prototype.forEach.call(rows, function (row) {
      var text = rowText(row);
      var keep = words.every(function (w) { return text.indexOf(w) >= 0; });
      row.hidden = !keep;
      if (keep) { shown += 1; }
    });
    var count = input.parentNode.querySelector(".lb-count");
    if (count) { count.textContent = words.length ? shown + " of " + rows.length + " rows" : ""; }
  }
  function openTarget() {
    var id = decodeURIComponent(window.location.hash.slice(1));
    var target = id ? document.getElementById(id) : null;
    if (target && target.tagName === "DETAILS") { target.open = true; target.scrollIntoView(); }
  }
  function init() {
    Array.prototype.forEach.call(document.querySelectorAll("input.lb-filter"), function (input) {
      input.addEventListener("input", function () { apply(input); });
      if (input.value) { apply(input); }
    });
    window.addEventListener("hashchange", openTarget);
    openTarget();
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", init); }
  else { init(); }
})();
