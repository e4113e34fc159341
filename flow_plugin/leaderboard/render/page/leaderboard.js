/* flow-plugin leaderboard page: plain JavaScript, no library, no network.
   Reads two JSON blocks of the page: #board-data (the leaderboard JSON as written) and #view-data
   (its page view: display columns and, per protocol, view and column, each cell's value, spread,
   interval, significance and text, computed in Python). Builds the table (sorted by the average,
   highest first, until a header is clicked), the filters, the charts and the provenance panel from
   them; it computes no number but the best of each column among the rows shown. */
(function () {
  "use strict";
  var board = JSON.parse(document.getElementById("board-data").textContent);
  var view = JSON.parse(document.getElementById("view-data").textContent);
  var rowsById = {};
  board.rows.forEach(function (row) { rowsById[row.id] = row; });

  var TEXT_COLUMNS = view.name_columns;
  var FILTERS = ["backbone", "calibrator", "fit_corpus", "duplicates"];
  var VIEW_NAMES = { scores: "scores", raw: "Δ against raw", linear: "Δ against the best linear baseline" };
  // the rows start sorted by the average, highest first
  var state = { protocol: view.protocols[0], view: view.views[0], sort: "average", dir: -1, search: "", filters: {},
                selected: null };

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (name) {
      if (name === "text") { node.textContent = attrs[name]; } else { node.setAttribute(name, attrs[name]); }
    });
    (children || []).forEach(function (child) { if (child) { node.appendChild(child); } });
    return node;
  }
  function svg(tag, attrs) {
    var node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    Object.keys(attrs || {}).forEach(function (name) { node.setAttribute(name, attrs[name]); });
    return node;
  }
  function cellOf(entry, column, viewName) {
    return entry.cells[state.protocol][viewName || state.view][column] || null;
  }
  function chartView() { return state.view === "scores" ? "raw" : state.view; }

  // ---------------------------------------------------------------- controls
  function distinct(key) {
    var seen = [];
    view.entries.forEach(function (entry) {
      if (seen.indexOf(entry.columns[key]) < 0) { seen.push(entry.columns[key]); }
    });
    return seen;
  }
  function buildFilters() {
    FILTERS.forEach(function (key) {
      var select = document.getElementById("filter-" + key);
      select.appendChild(el("option", { value: "", text: "All" }));
      distinct(key).forEach(function (value) { select.appendChild(el("option", { value: value, text: value })); });
      select.addEventListener("change", function () { state.filters[key] = select.value; render(); });
    });
    document.getElementById("search").addEventListener("input", function (event) {
      state.search = event.target.value.trim().toLowerCase(); render();
    });
    Array.prototype.forEach.call(document.querySelectorAll("input[name=protocol]"), function (input) {
      input.addEventListener("change", function () { state.protocol = input.value; render(); });
    });
    Array.prototype.forEach.call(document.querySelectorAll("input[name=view]"), function (input) {
      input.addEventListener("change", function () { state.view = input.value; render(); });
    });
  }

  // ---------------------------------------------------------------- table
  // a naming column with one value for every row is said once above the table, not repeated per row
  var CONSTANT = view.entries.length > 1 ? TEXT_COLUMNS.filter(function (c) { return distinct(c.key).length === 1; }) : [];
  var NAMING = TEXT_COLUMNS.filter(function (c) { return CONSTANT.indexOf(c) < 0; });
  // the naming columns, then the average next to them (visible on a narrow screen), then the tasks
  function columnsShown() {
    var cols = NAMING.map(function (c) { return { key: c.key, label: c.label, text: true }; });
    if (state.view !== "scores") { cols.push({ key: "against", label: "Against", text: true }); }
    var numbers = view.columns.filter(function (c) { return c.key === "average"; })
      .concat(view.columns.filter(function (c) { return c.key !== "average"; }));
    numbers.forEach(function (c) { cols.push({ key: c.key, label: c.label, title: c.title, text: false }); });
    return cols;
  }
  function textValue(entry, key) {
    if (key === "against") { return entry.against[state.protocol][state.view] || "—"; }
    return entry.columns[key];
  }
  function visibleEntries() {
    var shown = view.entries.filter(function (entry) {
      for (var i = 0; i < FILTERS.length; i++) {
        var wanted = state.filters[FILTERS[i]];
        if (wanted && entry.columns[FILTERS[i]] !== wanted) { return false; }
      }
      if (state.search) {
        var hay = (entry.name + " " + TEXT_COLUMNS.map(function (c) { return entry.columns[c.key]; }).join(" ") +
                   " " + entry.rows.join(" ")).toLowerCase();
        if (hay.indexOf(state.search) < 0) { return false; }
      }
      return true;
    });
    if (state.sort) {
      var column = columnsShown().filter(function (c) { return c.key === state.sort; })[0];
      var order = shown.map(function (entry, index) { return { entry: entry, index: index }; });
      order.sort(function (a, b) {
        var x, y;
        if (column && column.text) {
          x = textValue(a.entry, state.sort); y = textValue(b.entry, state.sort);
          var byText = x.localeCompare(y, undefined, { numeric: true });
          return byText !== 0 ? state.dir * byText : a.index - b.index;
        }
        var cx = cellOf(a.entry, state.sort), cy = cellOf(b.entry, state.sort);
        x = cx ? cx.value : null; y = cy ? cy.value : null;
        if (x === null && y === null) { return a.index - b.index; }
        if (x === null) { return 1; }  // missing values last, in either direction
        if (y === null) { return -1; }
        return x !== y ? state.dir * (x - y) : a.index - b.index;
      });
      shown = order.map(function (item) { return item.entry; });
    }
    return shown;
  }
  function buildHead() {
    var tr = el("tr");
    columnsShown().forEach(function (c, index) {
      var sorted = state.sort === c.key;
      var th = el("th", { scope: "col", class: (c.text ? "" : "num") + (index === 0 ? " sticky" : "") +
                                               (c.key === "average" ? " avg" : ""),
                          "aria-sort": sorted ? (state.dir > 0 ? "ascending" : "descending") : "none" });
      var button = el("button", { type: "button", "data-sort": c.key,
                                  title: (c.title ? c.title + ": " : "") + "sort by this column" },
                      [el("span", { text: c.label }),
                       el("span", { class: "arrow", "aria-hidden": "true",
                                    text: sorted ? (state.dir > 0 ? "▲" : "▼") : "" })]);
      button.addEventListener("click", function () {
        if (state.sort === c.key) { state.dir = -state.dir; } else { state.sort = c.key; state.dir = c.text ? 1 : -1; }
        render();
        var again = document.querySelector("th button[data-sort='" + c.key + "']");
        if (again) { again.focus(); }
      });
      th.appendChild(button);
      tr.appendChild(th);
    });
    var thead = document.getElementById("board-head");
    thead.textContent = "";
    thead.appendChild(tr);
  }
  function best(entries, column) {
    if (state.view !== "scores") { return null; }
    var top = null;
    entries.forEach(function (entry) {
      var cell = cellOf(entry, column);
      if (cell && (top === null || cell.value > top)) { top = cell.value; }
    });
    return top;
  }
  function hoverText(entry, column) {
    var row = rowsById[entry.rows[0]];
    var entryScore = column === "average" ? null : row.scores[column];
    var parts = [];
    var hw = entryScore && entryScore.hardware;
    if (hw) {
      parts.push((hw.precision || "?") + ", bf16 kernels " + (hw.bf16_kernels || "?") + ", " +
                 (hw.torch_threads || "?") + " torch thread(s), " + (hw.cpu || "unknown CPU"));
    }
    if (entryScore && entryScore.date) { parts.push("computed " + entryScore.date); }
    if (entry.rows.length > 1) { parts.push(entry.rows.length + " seeds"); }
    parts.push("click for the provenance");
    return parts.join("; ");
  }
  // a cell's text in parts the table may set on several lines (so that it fits the window): the value, ± its
  // spread over seeds, then its interval and the tasks an average leaves out (which may wrap themselves)
  function cellParts(text) {
    var at = text.indexOf(" [");
    if (at < 0) { at = text.indexOf(" (without"); }
    var value = at < 0 ? text : text.slice(0, at);
    var spread = value.indexOf(" ± ");
    var parts = spread < 0 ? [el("span", { class: "v", text: value })]
      : [el("span", { class: "v", text: value.slice(0, spread) }), document.createTextNode(" "),
         el("span", { class: "sd", text: value.slice(spread + 1) })];
    if (at >= 0) { parts.push(document.createTextNode(" "), el("span", { class: "ci", text: text.slice(at + 1) })); }
    return parts;
  }
  function buildBody(entries) {
    var tbody = document.getElementById("board-body");
    tbody.textContent = "";
    var cols = columnsShown();
    var tops = {};
    view.columns.forEach(function (c) { tops[c.key] = best(entries, c.key); });
    entries.forEach(function (entry) {
      var tr = el("tr", { "data-key": entry.key });
      cols.forEach(function (c) {
        if (c.text) {
          var header = c.key === cols[0].key;  // the first naming column heads the row
          tr.appendChild(el(header ? "th" : "td",
                            Object.assign({ "data-col": c.key, text: textValue(entry, c.key) },
                                          header ? { scope: "row", class: "sticky", title: entry.name } : {})));
          return;
        }
        var cell = cellOf(entry, c.key);
        var classes = ["num"];
        if (c.key === "average") { classes.push("avg"); }
        if (cell && tops[c.key] !== null && cell.value === tops[c.key]) { classes.push("best"); }
        if (cell && state.view !== "scores") {
          classes.push(cell.value > 0 ? "pos" : cell.value < 0 ? "neg" : "zero");
          if (cell.significant) { classes.push("sig"); }
        }
        if (state.selected && state.selected.key === entry.key && state.selected.column === c.key) {
          classes.push("selected");
        }
        var td = el("td", { class: classes.join(" "), "data-col": c.key });
        if (cell) {
          td.setAttribute("data-value", String(cell.value));
          var button = el("button", { type: "button", title: hoverText(entry, c.key),
                                      "aria-label": entry.name + ", " + c.title + ": " + cell.text +
                                                    (cell.significant ? " (significant)" : "") },
                          cellParts(cell.text));
          button.addEventListener("click", function () {
            state.selected = { key: entry.key, column: c.key };
            showProvenance(entry, c.key);
            render(true);
            var again = document.querySelector("tr[data-key=\"" + CSS.escape(entry.key) + "\"] td[data-col=\"" +
                                               CSS.escape(c.key) + "\"] button");
            if (again) { again.focus(); }
          });
          td.appendChild(button);
        } else {
          td.textContent = "—";
        }
        tr.appendChild(td);
      });
      tbody.appendChild(tr);
    });
    document.getElementById("count").textContent =
      "Showing " + entries.length + " of " + view.entries.length + " rows (" + state.protocol + ", " +
      VIEW_NAMES[state.view] + ")";
  }

  // ---------------------------------------------------------------- provenance
  function dl(pairs) {
    var list = el("dl");
    pairs.forEach(function (pair) {
      if (pair[1] === undefined || pair[1] === null || pair[1] === "") { return; }
      list.appendChild(el("dt", { text: pair[0] }));
      list.appendChild(el("dd", { text: String(pair[1]) }));
    });
    return list;
  }
  function hardwareText(hw) {
    if (!hw) { return "not recorded"; }
    return [hw.cpu || "unknown CPU", (hw.cpu_cores ? hw.cpu_cores + " cores" : null),
            "device " + (hw.device || "?"), hw.gpu || null, "precision " + (hw.precision || "?"),
            "bf16 kernels " + (hw.bf16_kernels || "?"), (hw.torch_threads || "?") + " torch thread(s)",
            "torch " + (hw.torch || "?")].filter(Boolean).join(", ");
  }
  function fitText(fits) {
    if (!fits || !fits.length) { return "no fit record in the leaderboard"; }
    return fits.map(function (fit) {
      var bits = [fit.calibrator + " on " + (fit.source || fit.fit_corpus || "?")];
      if (fit.n_sentences !== undefined) {
        bits.push(fit.n_sentences + " sentences (" + fit.n_unique_sentences + " distinct)");
      }
      if (fit.sampled) { bits.push("sampled at most " + fit.max_fit_sentences + ", seed " + fit.seed); }
      if (fit.fit_seconds !== undefined && fit.fit_seconds !== null) { bits.push("fit " + fit.fit_seconds + " s"); }
      if (fit.fit_log_likelihood !== undefined && fit.fit_log_likelihood !== null) {
        bits.push("log-likelihood " + Number(fit.fit_log_likelihood).toFixed(2));
      }
      if (fit.adapted) { bits.push("adapted: " + JSON.stringify(fit.adapted)); }
      return bits.join(", ");
    }).join("; ");
  }
  function showProvenance(entry, column) {
    var panel = document.getElementById("provenance");
    panel.textContent = "";
    var label = view.columns.filter(function (c) { return c.key === column; })[0];
    var cell = cellOf(entry, column);
    panel.appendChild(el("h3", { text: entry.name + ", " + label.title + " (" + state.protocol + ", " +
                                       VIEW_NAMES[state.view] + "): " + (cell ? cell.text : "—") }));
    var first = rowsById[entry.rows[0]];
    var pairs = [["Model", first.model + " @ " + first.revision], ["Weights", first.backbone_model],
                 ["Max sequence length", first.max_seq_length]];
    if (state.view !== "scores") {
      var against = entry.against[state.protocol][state.view];
      pairs.push(["Against", against ? (state.view === "raw" ? "the raw backbone, " + (first.baseline || "")
                                        : "the best linear baseline of the same backbone and fit corpus: " + against)
                                     : "no baseline in this leaderboard"]);
      if (cell && cell.basis) {
        pairs.push(["Significance", "95% interval [" + cell.ci95[0] + ", " + cell.ci95[1] + "] "
                                    + (cell.significant ? "excludes" : "includes") + " 0"]);
      }
    }
    panel.appendChild(dl(pairs));
    var table = el("table");
    var header = ["Seed", "Score (all)", "wmean", "Date", "Dataset revision", "Hardware", "Fit"];
    table.appendChild(el("thead", {}, [el("tr", {}, header.map(function (h) { return el("th", { scope: "col", text: h }); }))]));
    var tbody = el("tbody");
    entry.rows.forEach(function (rowId, index) {
      var row = rowsById[rowId];
      var seed = entry.seeds ? entry.seeds[index] : ((row.calibrator_params || {}).seed);
      var values;
      if (column === "average") {
        var dates = Object.keys(row.scores).map(function (t) { return row.scores[t].date; }).filter(Boolean).sort();
        var hardware = [];
        Object.keys(row.scores).forEach(function (t) {
          var text = hardwareText(row.scores[t].hardware);
          if (hardware.indexOf(text) < 0) { hardware.push(text); }
        });
        values = [seed === undefined ? "—" : seed, row.average, row.average_wmean,
                  dates.length ? dates[0] + (dates[0] !== dates[dates.length - 1] ? " to " + dates[dates.length - 1] : "") : "—",
                  row.n_tasks + " tasks", hardware.join(" | "), "per task: click a task's cell"];
      } else {
        var score = row.scores[column];
        values = score ? [seed === undefined ? "—" : seed, score.score, score.wmean, score.date || "—",
                          score.dataset_revision, hardwareText(score.hardware),
                          row.calibrator === "raw" ? "none (raw embeddings)" : fitText(score.fits)]
                       : [seed === undefined ? "—" : seed, "—", "—", "—", "—", "—", "—"];
      }
      tbody.appendChild(el("tr", {}, values.map(function (v) {
        return el("td", { text: v === null || v === undefined ? "—" : String(v) });
      })));
    });
    table.appendChild(tbody);
    panel.appendChild(table);
  }

  // ---------------------------------------------------------------- charts
  function chart(column, entries) {
    var viewName = chartView();
    var items = entries.map(function (entry) { return { entry: entry, cell: cellOf(entry, column.key, viewName) }; })
      .filter(function (item) { return item.cell; });
    var oneBackbone = items.length > 0 && items.every(function (item) {
      return item.entry.columns.backbone === items[0].entry.columns.backbone;
    });
    var figure = el("figure", { "data-col": column.key });
    figure.appendChild(el("figcaption", { text: column.title + ": " + VIEW_NAMES[viewName] + " (" + state.protocol + ")" +
                                                (oneBackbone ? ", " + items[0].entry.columns.backbone : "") }));
    if (!items.length) { figure.appendChild(el("p", { text: "No row shown has this delta." })); return figure; }
    var labelWidth = 215, plotWidth = 175, valueWidth = 100, rowHeight = 17, top = 4;
    var low = 0, high = 0;
    items.forEach(function (item) {
      var c = item.cell, lo = c.ci95 ? c.ci95[0] : c.value - (c.spread || 0), hi = c.ci95 ? c.ci95[1] : c.value + (c.spread || 0);
      low = Math.min(low, lo, c.value); high = Math.max(high, hi, c.value);
    });
    if (high - low < 1e-9) { high = low + 1; }
    var pad = (high - low) * 0.05;
    low -= pad; high += pad;
    function x(v) { return labelWidth + (v - low) / (high - low) * plotWidth; }
    var height = top + items.length * rowHeight + 4;
    var node = svg("svg", { width: labelWidth + plotWidth + valueWidth, height: height, role: "img",
                            "aria-label": column.title + ": " + VIEW_NAMES[viewName] });
    items.forEach(function (item, index) {
      var c = item.cell, y = top + index * rowHeight;
      var full = oneBackbone ? item.entry.short_name : item.entry.name;
      var name = full.length > 34 ? full.slice(0, 33) + "…" : full;
      var label = svg("text", { x: labelWidth - 6, y: y + 12, "text-anchor": "end" });
      label.textContent = name;
      node.appendChild(label);
      var x0 = x(0), x1 = x(c.value);
      var bar = svg("rect", { x: Math.min(x0, x1), y: y + 3, width: Math.max(Math.abs(x1 - x0), 0.5), height: rowHeight - 6,
                              class: "bar " + (c.value >= 0 ? "pos" : "neg") + (c.significant ? "" : " faint"),
                              "data-key": item.entry.key, "data-value": String(c.value) });
      var tip = svg("title");
      tip.textContent = item.entry.name + ": " + c.text;
      bar.appendChild(tip);
      node.appendChild(bar);
      var lo = c.ci95 ? c.ci95[0] : (c.spread ? c.value - c.spread : null);
      var hi = c.ci95 ? c.ci95[1] : (c.spread ? c.value + c.spread : null);
      if (lo !== null && hi !== null) {
        var mid = y + rowHeight / 2;
        node.appendChild(svg("line", { x1: x(lo), x2: x(hi), y1: mid, y2: mid, class: "err" }));
        node.appendChild(svg("line", { x1: x(lo), x2: x(lo), y1: mid - 3, y2: mid + 3, class: "err" }));
        node.appendChild(svg("line", { x1: x(hi), x2: x(hi), y1: mid - 3, y2: mid + 3, class: "err" }));
      }
      var value = svg("text", { x: labelWidth + plotWidth + 6, y: y + 12 });
      value.textContent = c.text;
      node.appendChild(value);
    });
    node.appendChild(svg("line", { x1: x(0), x2: x(0), y1: 0, y2: height, class: "zero" }));
    figure.appendChild(node);
    return figure;
  }
  function buildCharts(entries) {
    var holder = document.getElementById("charts");
    holder.textContent = "";
    view.columns.forEach(function (column) { holder.appendChild(chart(column, entries)); });
    document.getElementById("charts-title").textContent =
      "Per task: " + VIEW_NAMES[chartView()] + " (protocol " + state.protocol + ")";
  }

  // ---------------------------------------------------------------- render
  function render(keepProvenance) {
    var entries = visibleEntries();
    buildHead();
    buildBody(entries);
    buildCharts(entries);
    if (!keepProvenance && state.selected) {
      var entry = view.entries.filter(function (e) { return e.key === state.selected.key; })[0];
      if (entry) { showProvenance(entry, state.selected.column); }
    }
    document.body.setAttribute("data-protocol", state.protocol);
    document.body.setAttribute("data-view", state.view);
  }
  buildFilters();
  var said = CONSTANT.filter(function (c) { return view.entries[0].columns[c.key] !== "—"; });
  document.getElementById("constant").textContent = said.length ? "Every row: " + said.map(function (c) {
    return c.label.toLowerCase() + " " + view.entries[0].columns[c.key];
  }).join(", ") + "." : "";
  render();
  document.body.setAttribute("data-ready", "true");
})();
