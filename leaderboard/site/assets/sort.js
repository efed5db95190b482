// Sortable leaderboard tables: click (or press Enter on) a column header to sort the ranked rows.
// Reference rows (oracle, floors) live in their own <tbody class="ref"> and stay where they are.
(function () {
  "use strict";
  function cellKey(row, col, numeric) {
    var cell = row.cells[col];
    var raw = cell.hasAttribute("data-value") ? cell.getAttribute("data-value") : cell.textContent.trim();
    if (!numeric) { return raw.toLowerCase(); }
    var v = parseFloat(raw);
    return isNaN(v) ? null : v;
  }
  function sortTable(table, col, th) {
    var body = table.tBodies[0];
    var numeric = th.getAttribute("data-sort") === "num";
    var dir = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
    var heads = table.tHead.rows[0].cells;
    for (var i = 0; i < heads.length; i++) { heads[i].removeAttribute("aria-sort"); }
    th.setAttribute("aria-sort", dir);
    var sign = dir === "ascending" ? 1 : -1;
    var rows = Array.prototype.slice.call(body.rows).map(function (r, i) {
      return { row: r, key: cellKey(r, col, numeric), index: i };
    });
    rows.sort(function (a, b) {
      if (a.key === null && b.key === null) { return a.index - b.index; }
      if (a.key === null) { return 1; }   // missing values last, whatever the direction
      if (b.key === null) { return -1; }
      if (a.key < b.key) { return -sign; }
      if (a.key > b.key) { return sign; }
      return a.index - b.index;
    });
    rows.forEach(function (r) { body.appendChild(r.row); });
  }
  function init() {
    var tables = document.querySelectorAll("table.lb");
    Array.prototype.forEach.call(tables, function (table) {
      var heads = table.tHead.rows[0].cells;
      Array.prototype.forEach.call(heads, function (th, col) {
        var button = th.querySelector("button");
        if (!button || !th.hasAttribute("data-sort")) { return; }
        button.addEventListener("click", function () { sortTable(table, col, th); });
      });
    });
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", init); }
  else { init(); }
})();
