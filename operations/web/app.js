// The live view of ldpstream serve: polls /api/estimates and /api/status every second and redraws.
// No build step and no library: plain DOM and SVG. Data attributes (data-name, data-window, data-n-reports,
// data-snapshot-time, data-value, data-frequency, ...) name what is drawn, for people and for tests alike.
"use strict";

const POLL_MS = 1000;
const TOP_VALUES = 24;
const SVG = "http://www.w3.org/2000/svg";
const chosenWindow = {};  // name -> the window the reader picked
const cardWidth = {};  // name -> the width inside its card at the last render, which its chart is laid out to
const DEFAULT_WIDTH = 640;

function token() {
  const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem("ldpstream-token", decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);  // the token leaves the address bar
  }
  return sessionStorage.getItem("ldpstream-token");
}

async function getJSON(path) {
  const headers = {};
  const t = token();
  if (t) headers["Authorization"] = "Bearer " + t;
  const response = await fetch(path, {headers, cache: "no-store"});
  if (!response.ok) {
    let message = response.status + " " + response.statusText;
    try { message = (await response.json()).error || message; } catch (e) { /* not JSON */ }
    throw new Error(message);
  }
  return response.json();
}

function el(tag, attrs, ...children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === "class") node.setAttribute("class", value);
    else if (key.startsWith("data-") || tag.startsWith("svg:") || key.startsWith("aria-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const pct = (x, digits = 1) => (x === null || x === undefined) ? "–" : (100 * x).toFixed(digits) + "%";
const num = (x) => (x === null || x === undefined) ? "–" : Number(x).toLocaleString("en-US");
const ago = (t, now) => (t === null || t === undefined) ? "–" : Math.max(0, now - t).toFixed(1) + " s ago";

function kindOf(published) {
  if ("association" in published) return "joint";
  if (published.schema === "dictionary/2") return "dictionary";
  return "marginal";
}

// ---------------------------------------------------------------- one metric: bars, whiskers, truth

function niceStep(rough) {  // 1, 2 or 5 times a power of ten
  const power = Math.pow(10, Math.floor(Math.log10(rough)));
  for (const m of [1, 2, 5, 10]) if (m * power >= rough) return m * power;
  return 10 * power;
}

function pValue(p) {
  if (p === 0) return "1e-300";
  return p < 1e-4 ? p.toExponential(1) : p.toFixed(4);
}

function marginalView(name, published, truth, width) {
  const values = published.values.map((v, i) => ({...v, index: i}));
  const truthOf = {};
  if (truth && truth.values) for (const t of truth.values) truthOf[t.value] = t.frequency;
  let shown = values;
  if (values.length > TOP_VALUES) {
    shown = [...values].sort((a, b) => b.frequency - a.frequency).slice(0, TOP_VALUES);
  }
  const peak = Math.max(1e-9, ...shown.map((v) => Math.max(v.high_95 ?? v.frequency, truthOf[v.value] ?? 0, v.frequency)));
  const step = niceStep(peak / 4);
  const top = Math.min(1, Math.ceil(peak / step) * step) || peak;
  // Laid out to the card's width: the labels and the numbers keep their room, the bars take the rest. Narrow
  // cards show the estimate alone (its interval stays drawn as the whisker).
  const narrow = width < 520;
  const labelWidth = Math.min(130, Math.round(width * 0.26)), numWidth = narrow ? 56 : 170, rowHeight = 20;
  const plotWidth = Math.max(60, width - labelWidth - numWidth);
  width = labelWidth + plotWidth + numWidth;
  const labelChars = Math.max(4, Math.floor((labelWidth - 10) / 7));
  const height = rowHeight * shown.length + 24;
  const x = (f) => labelWidth + plotWidth * Math.max(0, f) / top;
  const svg = el("svg:svg", {class: "chart", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
                             "data-width": width, "aria-label": `estimates of ${name}`});
  svg.append(el("svg:line", {class: "axis", x1: labelWidth, x2: labelWidth, y1: 0, y2: height - 20}));
  for (let f = 0; f <= top + 1e-12; f += step) {
    svg.append(el("svg:line", {class: "axis", x1: x(f), x2: x(f), y1: height - 22, y2: height - 18}));
    svg.append(el("svg:text", {class: "num", x: x(f), y: height - 6, "text-anchor": "middle"}, pct(f, step < 0.01 ? 1 : 0)));
  }
  shown.forEach((v, row) => {
    const y = row * rowHeight;
    const g = el("svg:g", {class: "value", "data-value": v.value, "data-frequency": v.frequency,
                           "data-low": v.low_95 ?? "", "data-high": v.high_95 ?? "",
                           "data-truth": truthOf[v.value] ?? ""});
    const label = String(v.value);
    g.append(el("svg:text", {class: "label", x: labelWidth - 6, y: y + 14},
                label.length > labelChars ? label.slice(0, labelChars - 1) + "…" : label, el("svg:title", {}, label)));
    g.append(el("svg:rect", {class: "bar", x: labelWidth, y: y + 4, height: rowHeight - 8,
                             width: Math.max(0, x(v.frequency) - labelWidth)}));
    if (v.low_95 !== undefined && v.low_95 !== null) {
      const mid = y + rowHeight / 2;
      g.append(el("svg:line", {class: "whisker", x1: x(v.low_95), x2: x(v.high_95), y1: mid, y2: mid}));
      for (const end of [v.low_95, v.high_95]) {
        g.append(el("svg:line", {class: "whisker", x1: x(end), x2: x(end), y1: mid - 5, y2: mid + 5}));
      }
    }
    if (truthOf[v.value] !== undefined) {
      g.append(el("svg:line", {class: "truth", x1: x(truthOf[v.value]), x2: x(truthOf[v.value]),
                               y1: y + 1, y2: y + rowHeight - 1}, el("svg:title", {}, "truth " + pct(truthOf[v.value], 2))));
    }
    const interval = (!narrow && v.low_95 !== undefined && v.low_95 !== null) ? ` [${pct(v.low_95)}, ${pct(v.high_95)}]` : "";
    g.append(el("svg:text", {class: "num", x: labelWidth + plotWidth + 8, y: y + 14}, pct(v.frequency) + interval));
    svg.append(g);
  });
  const note = values.length > shown.length ? `top ${shown.length} of ${values.length} values · ` : "";
  return [el("div", {class: "meta"},
             note, "method ", el("b", {}, published.method), " · intervals ", el("b", {}, published.interval_method ?? "none"),
             published.design_effect && published.design_effect > 1.0001 ? ` (design effect up to ${published.design_effect.toFixed(2)})` : "",
             truth ? ` · truth from a simulation of ${num(truth.n)} clients` : "",
             published.fit ? fitNote(published.fit) : ""),
          svg];
}

// the candidate model's goodness of fit (docs/math/misfit.md)
function fitNote(fit) {
  const p = fit.p_value < 1e-16 ? "p < 1e-16" : `p = ${fit.p_value.toPrecision(2)}`;
  const text = ` · fit: dispersion ${fit.dispersion.toFixed(2)} (${p})`;
  return fit.p_value < 0.01
    ? el("span", {class: "misfit"}, `${text}: the candidates miss about ${num(Math.round(fit.excess_reports))} reports; ` +
         `standard errors widened by ${fit.inflation.toFixed(2)}`)
    : text;
}

// ---------------------------------------------------------------- one association: the joint heat map

function collapseTruth(truth, rows, columns) {
  if (!truth || !truth.table) return null;
  const index = (labels, value) => { const i = labels.indexOf(value); return i >= 0 ? i : labels.indexOf("Other"); };
  const out = rows.map(() => columns.map(() => 0));
  truth.x_values.forEach((xv, i) => {
    const r = index(rows, xv);
    if (r < 0) return;
    truth.y_values.forEach((yv, j) => {
      const c = index(columns, yv);
      if (c >= 0) out[r][c] += truth.table[i][j];
    });
  });
  return out;
}

// Whether cell (i, j) is published as not identified (objects published before the field: all identified).
function unidentified(joint, i, j) {
  return Array.isArray(joint.identified) && joint.identified[i] && joint.identified[i][j] === false;
}

function jointView(name, joint, truth) {
  const peak = Math.max(1e-9, ...joint.table.flat());
  const expected = collapseTruth(truth, joint.rows, joint.columns);
  const table = el("table", {class: "heat", "data-association": name});
  const head = el("tr", {}, el("th", {class: "row"}, `${joint.x} ↓ · ${joint.y} →`));
  for (const c of joint.columns) head.append(el("th", {}, c));
  table.append(head);
  joint.rows.forEach((r, i) => {
    const tr = el("tr", {}, el("th", {class: "row"}, r));
    joint.columns.forEach((c, j) => {
      const share = joint.table[i][j];
      const level = Math.sqrt(Math.max(0, share) / peak);
      const td = el("td", {"data-row": r, "data-column": c, "data-share": share, "data-low": joint.low_95[i][j],
                           "data-high": joint.high_95[i][j], "data-identified": String(!unidentified(joint, i, j))},
                    pct(share), el("span", {class: "ci"}, `[${pct(joint.low_95[i][j])}, ${pct(joint.high_95[i][j])}]`
                                   + (unidentified(joint, i, j) ? "?" : "")),
                    expected ? el("span", {class: "t"}, "truth " + pct(expected[i][j])) : null);
      td.style.background = `hsl(212, 60%, ${(96 - 58 * level).toFixed(1)}%)`;
      if (level > 0.55) { td.style.color = "#fff"; td.classList.add("dark"); }
      tr.append(td);
    });
    table.append(tr);
  });
  const test = joint.independence;
  const verdict = test.p_value < 0.05 ? "dependent (independence rejected at 5%)" : "no evidence against independence at 5%";
  return [el("div", {class: "meta"}, `${num(joint.n_reports)} report pairs · intervals `,
             el("b", {}, joint.interval_method),
             joint.interval_method === "wald-clipped-inversion" ? " · closed form (no EM)" : ` · EM ${joint.em.iterations} iterations`,
             truth ? ` · truth from a simulation of ${num(truth.n)} clients` : ""),
          el("div", {class: "axis-note"}, "cell = share of clients with that pair of values; each with its 95% interval"),
          el("div", {class: "scroll"}, table),
          (joint.identification || []).length
            ? el("div", {class: "axis-note not-identified"}, "? not identified, the interval is no promise: "
                 + joint.identification.join("; "))
            : null,
          ...Object.entries(joint.fit || {}).filter(([, fit]) => fit)
            .map(([member, fit]) => el("div", {class: "axis-note member-fit", "data-member": member},
                                       `${member} against its candidates`, fitNote(fit))),
          joint.point ? el("div", {class: "axis-note"}, `point: ${joint.point}`) : null,
          el("div", {class: "test", "data-p-value": test.p_value},
             "independence test: statistic ", el("b", {}, test.statistic.toFixed(1)), ` on ${test.df} df, p ${test.p_value === 0 ? "<" : "="} `,
             el("b", {}, pValue(test.p_value)),
             " → ", el("span", {class: "verdict"}, verdict))];
}

// ---------------------------------------------------------------- a discovered dictionary

// The strings found without a dictionary (live, decoded each pass, or stored by discover --publish): the bars,
// intervals and simulated truth of a marginal, and how the dictionary was found and is kept.
function dictionaryView(name, dictionary, truth, width) {
  const found = dictionary.discovery || {};
  const waiting = (found.dictionary || []).filter((d) => !d.significant).map((d) => `${d.value} (${d.misses} miss)`);
  const missed = truth && truth.values
    ? truth.values.filter((t) => !dictionary.values.some((v) => v.value === t.value)).slice(0, 5) : [];
  return [el("div", {class: "meta dictionary", "data-source": found.source ?? "", "data-candidates": found.candidates ?? ""},
             `${dictionary.values.length} strings discovered without a dictionary (${found.source ?? "?"}) from `,
             el("b", {}, num(found.candidates)), " candidates",
             found.retire_after ? ` · retired after ${found.retire_after} decodes without significance` : "",
             waiting.length ? ` · not significant now: ${waiting.join(", ")}` : "",
             found.retired && found.retired.length ? ` · retired now: ${found.retired.join(", ")}` : "",
             missed.length ? ` · drawn but not found: ${missed.map((t) => `${t.value} (${pct(t.frequency)})`).join(", ")}` : ""),
          ...marginalView(name, dictionary, truth, width)];
}

// ---------------------------------------------------------------- the page

function card(name, windows, truth, now) {
  const names = Object.keys(windows);
  if (names.length === 0) return null;
  const window = names.includes(chosenWindow[name]) ? chosenWindow[name] : names[0];
  const published = windows[window];
  const kind = kindOf(published);
  const buttons = el("span", {class: "windows"});
  if (names.length > 1) {
    for (const w of names) {
      const b = el("button", {type: "button", "aria-pressed": String(w === window)}, w);
      b.addEventListener("click", () => { chosenWindow[name] = w; render(); });
      buttons.append(b);
    }
  }
  // The truth adds up everything simulated since it was first published: it matches the window "all" only.
  const shownTruth = window === "all" ? truth : null;
  const width = cardWidth[name] ?? DEFAULT_WIDTH;
  const body = kind === "joint" ? jointView(name, published, shownTruth)
    : kind === "dictionary" ? dictionaryView(name, published, shownTruth, width)
    : marginalView(name, published, shownTruth, width);
  const reports = published.n_reports;
  return el("section", {class: "card", "data-name": name, "data-kind": kind, "data-window": window,
                        "data-n-reports": reports, "data-snapshot-time": published.snapshot_time},
            el("h2", {}, name, el("span", {class: "kind"}, kind === "joint" ? `joint of ${published.x} × ${published.y}` : kind),
               buttons),
            el("div", {class: "meta"}, "window ", el("b", {}, window), " · ", el("b", {}, num(reports)), " reports · decoded ",
               ago(published.snapshot_time, now)),
            ...body);
}

let latest = null;
let latestStatus = null;

function render() {
  if (!latest) return;
  const now = Date.now() / 1000;
  const content = document.getElementById("content");
  const cards = [];
  for (const [name, windows] of Object.entries(latest.metrics)) {
    const c = card(name, windows, latest.truth[name], now);
    if (c) cards.push(c);
  }
  content.replaceChildren(...(cards.length ? cards : [el("p", {class: "empty"}, "no estimate published yet: is the decoder running?")]));
  // The cards' widths follow the page's, not their content's: measured now, a chart laid out to another
  // width is drawn again to this one.
  let again = false;
  for (const c of content.querySelectorAll("section.card")) {
    const style = getComputedStyle(c);
    const inner = Math.floor(c.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight));
    if (cardWidth[c.dataset.name] !== inner) { cardWidth[c.dataset.name] = inner; again = true; }
  }
  if (again && !rendering) { rendering = true; try { render(); } finally { rendering = false; } }
}
let rendering = false;

function renderStatus(status) {
  const ingest = status.ingest || {};
  const rate = ingest.reports_per_second;
  const rateNode = document.getElementById("ingest-rate");
  rateNode.textContent = rate === null || rate === undefined ? "measuring…" : Math.round(rate).toLocaleString("en-US");
  rateNode.dataset.rate = rate ?? "";
  document.getElementById("lag").textContent = status.partitions && status.partitions.length ? num(ingest.lag) : "–";
  document.getElementById("last-decode").textContent = status.last_decode ? ago(status.last_decode.time, Date.now() / 1000) : "never";
  // Live while the decoder keeps up: its last decode no older than a few of its intervals (the server says).
  const decode = status.decode;
  if (decode && decode.stale) {
    connection("stale", decode.seconds_ago === null ? "stale: no decode yet"
      : `stale: last decode ${Math.round(decode.seconds_ago)} s ago (every ${decode.interval} s)`);
  } else {
    connection("live", "live");
  }
  const dead = Object.values(status.dead_letters || {}).reduce((a, b) => a + b, 0);
  document.getElementById("dead-letters").textContent = num(dead);
}

function connection(state, text) {
  const pill = document.getElementById("connection");
  pill.dataset.state = state;
  pill.textContent = text;
}

async function poll() {
  try {
    latest = await getJSON("api/estimates");
    render();
    const updated = document.getElementById("updated");
    updated.textContent = new Date().toLocaleTimeString();
    updated.dataset.time = String(latest.time);
    try {
      latestStatus = await getJSON("api/status");
      renderStatus(latestStatus);
    } catch (error) {
      document.getElementById("ingest-rate").textContent = "–";
      connection("live", "live");  // the estimates came; the status did not
    }
  } catch (error) {
    connection("error", "error: " + error.message);
  }
  setTimeout(poll, POLL_MS);
}

let contentWidth = null;
new ResizeObserver((entries) => {  // the page's width changed (not its height): the charts follow
  const width = Math.round(entries[0].contentRect.width);
  if (width !== contentWidth) { contentWidth = width; render(); }
}).observe(document.getElementById("content"));
poll();
