"""The static site's stylesheet and script (plain CSS and vanilla JS, no CDN, no build step).

Kept as Python strings so that they ship inside the package with no package-data entry.
"""

STYLE_CSS = """\
:root { --fg: #1d2430; --muted: #5b6472; --line: #d8dde5; --head: #f3f5f8; --ref: #f7f7f2;
        --accent: #1f5fbf; --tie: #a45a00; }
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--fg);
       margin: 0; line-height: 1.45; background: #fff; }
header.top { background: #16263f; color: #fff; padding: 0.9rem 1.5rem; }
header.top a { color: #cfe0ff; }
header.top h1 { margin: 0; font-size: 1.35rem; }
header.top nav { margin-top: 0.3rem; font-size: 0.92rem; }
header.top nav a { margin-right: 0.9rem; }
main { padding: 1rem 1.5rem 3rem; max-width: 1500px; }
h2 { border-bottom: 2px solid var(--line); padding-bottom: 0.2rem; margin-top: 2.2rem; }
h3 { margin-top: 1.6rem; }
p.note, .note { color: var(--muted); font-size: 0.9rem; }
.table-wrap { overflow-x: auto; }
table.lb { border-collapse: collapse; font-size: 0.88rem; min-width: 100%; }
table.lb th, table.lb td { border-bottom: 1px solid var(--line); padding: 0.3rem 0.45rem; text-align: right;
                           white-space: nowrap; }
table.lb th { background: var(--head); position: sticky; top: 0; vertical-align: bottom; white-space: normal;
              min-width: 3.2rem; max-width: 8rem; }
/* a board fits a 1280 px window: the long cells wrap (the method, a code path, the GPU figure under the
   table's) instead of pushing the links column out of sight */
table.lb td[data-col="method"] { white-space: normal; min-width: 8rem; max-width: 14rem; text-align: left; }
table.lb td[data-col="links"] { white-space: normal; max-width: 8.5rem; overflow-wrap: anywhere; }
table.lb td .gpu { display: block; font-size: 0.8rem; }
table.lb td .trained { display: block; font-size: 0.78rem; color: var(--muted); }
table.lb th.text, table.lb td.text { text-align: left; }
table.lb th button { all: unset; cursor: pointer; font-weight: 600; }
table.lb th button:focus-visible { outline: 2px solid var(--accent); }
table.lb th button::after { content: "\\00a0\\2195"; color: #9aa3b0; font-weight: 400; }
table.lb th[aria-sort="ascending"] button::after { content: "\\00a0\\25B2"; color: var(--accent); }
table.lb th[aria-sort="descending"] button::after { content: "\\00a0\\25BC"; color: var(--accent); }
table.lb tbody.ref td { background: var(--ref); color: #3c4350; font-style: italic; }
table.lb tbody.ref tr:first-child td { border-top: 2px solid var(--line); }
table.lb td.primary { font-weight: 600; }
table.lb .tie { color: var(--tie); font-weight: 700; cursor: help; }
table.lb .bound { color: var(--muted); cursor: help; }
table.lb tr:hover td { background: #eef3fb; }
.plots { display: grid; grid-template-columns: repeat(auto-fit, minmax(360px, 1fr)); gap: 1rem; margin-top: 1rem; }
.plots figure { margin: 0; border: 1px solid var(--line); border-radius: 6px; padding: 0.5rem; background: #fff; }
.plots img { width: 100%; height: auto; display: block; }
.plots figcaption { font-size: 0.85rem; color: var(--muted); margin-top: 0.3rem; }
section.card { border-top: 2px solid var(--line); margin-top: 2.5rem; }
table.card { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0; }
table.card th, table.card td { border: 1px solid var(--line); padding: 0.2rem 0.5rem; }
table.card th { background: var(--head); }
code { background: #f1f3f6; padding: 0 0.2rem; border-radius: 3px; font-size: 0.9em; }
pre code { display: block; padding: 0.6rem; overflow-x: auto; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 0.2rem 1rem; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; }
.board-tools { display: flex; flex-wrap: wrap; gap: 0.5rem 1.2rem; align-items: center; margin: 0.4rem 0;
               font-size: 0.9rem; }
.board-tools input.lb-filter { padding: 0.25rem 0.5rem; border: 1px solid var(--line); border-radius: 4px;
                               min-width: 16rem; font: inherit; }
.board-tools .lb-count, .board-tools .downloads { color: var(--muted); }
table.lb tr[hidden] { display: none; }
.ext { font-size: 0.72rem; background: #fff1d6; color: #7a4b00; border-radius: 3px; padding: 0 0.25rem;
       cursor: help; font-style: normal; }
section.entries { margin-top: 1rem; }
section.entries details.entry { border-bottom: 1px solid var(--line); padding: 0.3rem 0; }
section.entries details.entry:target { background: #eef3fb; }
section.entries summary { cursor: pointer; font-weight: 600; }
dl.env { display: grid; grid-template-columns: max-content 1fr; gap: 0.1rem 0.8rem; margin: 0; }
dl.env dt { font-weight: 600; }
dl.env dd { margin: 0; }
"""

SORT_JS = """\
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
"""

FILTER_JS = """\
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
    var words = input.value.toLowerCase().split(/\\s+/).filter(function (w) { return w.length > 0; });
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
"""
