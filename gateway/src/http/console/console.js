// Oxbow console: a read-only view of the cluster over the broker's own JSON API.
// No framework and no build step: the broker embeds this file as is. Every value from the
// API is put into the page as text (textContent / attributes), never parsed as HTML.
"use strict";

const REFRESH_MS = 5000;
const PAGE_ROWS = 50;
const RECORDS_MAX_BYTES = 256 * 1024;
const RECORDS_SHOWN_MAX = 100;

const state = { cluster: null, timer: null, page: {}, generation: 0 };

// ---------------------------------------------------------------- helpers ----

function el(tag, attrs, ...children) {
  const svg = ["svg", "path", "line", "text", "polyline", "g"].includes(tag);
  const node = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "on") { for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn); }
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function fmtNum(n, digits) {
  if (n === null || n === undefined) return "–";
  return Number(n).toLocaleString("en-US", { maximumFractionDigits: digits === undefined ? 0 : digits });
}

function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v.toFixed(0) : v.toFixed(1)) + " " + units[i];
}

function fmtRate(n, unit) {
  return n === null || n === undefined ? "–" : fmtNum(n, 1) + " " + unit;
}

function span(ms) {
  return ms < 120000 ? Math.round(ms / 1000) + " s" : Math.round(ms / 60000) + " min";
}

function ids(list) {
  return list && list.length ? list.join(", ") : "–";
}

function badge(text, kind) {
  return el("span", { class: "badge " + (kind || "") }, text);
}

function table(headers, rows) {
  const head = el("tr", {}, headers.map((h) => el("th", { class: h.num ? "num" : null }, h.label || h)));
  return el("table", {}, el("thead", {}, head), el("tbody", {}, rows));
}

function td(value, num) {
  return el("td", { class: num ? "num" : null }, value);
}

async function api(path, accept) {
  const response = await fetch(path, {
    credentials: "same-origin",
    headers: { Accept: accept || "application/json" },
  });
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
  if (!response.ok) {
    const message = body && body.message ? body.message : response.status + " " + response.statusText;
    const err = new Error(message);
    err.status = response.status;
    throw err;
  }
  return body;
}

async function cluster() {
  if (!state.cluster) {
    const list = await api("/v3/clusters");
    state.cluster = list.data[0].cluster_id;
    document.getElementById("cluster").textContent = "cluster " + state.cluster;
  }
  return "/v3/clusters/" + encodeURIComponent(state.cluster);
}

function enc(s) {
  return encodeURIComponent(s);
}

// ---------------------------------------------------------------- views ----

async function brokersView() {
  const base = await cluster();
  const brokers = (await api(base + "/brokers")).data;
  const rows = brokers.map((b) => el("tr", { "data-broker": b.broker_id },
    td(b.broker_id, true),
    td((b.host || "?") + ":" + (b.port || "?")),
    td(b.rack || "–"),
    td(badge(b.lease, b.lease === "valid" ? "ok" : "bad")),
    td(b.is_controller ? badge("controller", "ok") : ""),
    td(b.partitions_led, true),
    td(ids(b.wal_replica_ids)),
    td(ids(b.wal_in_sync_replica_ids)),
    td(fmtRate(b.bytes_in_per_sec, "B/s"), true),
    td(b.wal_bytes === null ? "–" : fmtBytes(b.wal_bytes), true),
    td(b.is_this_broker ? "this broker" : (b.http_address ? el("a", { href: "http://" + b.http_address + "/ui" }, b.http_address) : "")),
  ));
  return [
    el("h1", {}, "Brokers ", el("span", { class: "muted" }, "(" + brokers.length + " live)")),
    table(["Id", "Kafka address", "Zone", "Lease", "Role", { label: "Partitions led", num: true },
      "WAL replicas", "WAL in sync", { label: "Bytes in", num: true }, { label: "WAL on disk", num: true }, "Console"], rows),
  ];
}

async function topicsView() {
  const base = await cluster();
  const topics = (await api(base + "/topics")).data;
  const rows = topics.map((t) => el("tr", { "data-topic": t.topic_name },
    td(el("a", { href: "#/topics/" + enc(t.topic_name) }, t.topic_name)),
    td(t.partitions_count, true),
    td(t.under_replicated_partitions ? badge(t.under_replicated_partitions, "warn") : "0", true),
    td(t.offline_partitions ? badge(t.offline_partitions, "bad") : "0", true),
    td(t.partitions_led_here, true),
    td(fmtBytes(t.stored_bytes), true),
    td(fmtRate(t.records_per_sec, "rec/s"), true),
  ));
  return [
    el("h1", {}, "Topics ", el("span", { class: "muted" }, "(" + topics.length + ")")),
    topics.length ? table(["Topic", { label: "Partitions", num: true }, { label: "Under-replicated", num: true },
      { label: "Offline", num: true }, { label: "Led here", num: true }, { label: "Stored", num: true },
      { label: "Throughput", num: true }], rows) : el("p", { class: "muted" }, "No topics."),
  ];
}

function pager(key, total, rerender) {
  const pages = Math.max(1, Math.ceil(total / PAGE_ROWS));
  const page = Math.min(state.page[key] || 0, pages - 1);
  state.page[key] = page;
  const go = (p) => () => { state.page[key] = p; rerender(); };
  return {
    page,
    node: el("div", { class: "pager" },
      el("button", { type: "button", disabled: page === 0, on: { click: go(page - 1) } }, "‹ Prev"),
      el("span", {}, "page " + (page + 1) + " of " + pages + " · " + total + " partitions"),
      el("button", { type: "button", disabled: page >= pages - 1, on: { click: go(page + 1) } }, "Next ›")),
  };
}

async function topicView(name) {
  const base = await cluster();
  const [topic, parts] = await Promise.all([
    api(base + "/topics/" + enc(name)),
    api(base + "/topics/" + enc(name) + "/partitions"),
  ]);
  const all = parts.data;
  const container = el("div", {});
  const render = () => {
    const p = pager("topic:" + name, all.length, render);
    const slice = all.slice(p.page * PAGE_ROWS, (p.page + 1) * PAGE_ROWS);
    const rows = slice.map((x) => el("tr", { "data-partition": x.partition_id },
      td(x.partition_id, true),
      td(x.leader_live ? x.leader_id : badge("offline", "bad"), true),
      td(x.leader_epoch, true),
      td(ids(x.replica_ids)),
      td(ids(x.isr_ids)),
      td(!x.leader_live ? badge("offline", "bad") : x.under_replicated ? badge("under-replicated", "warn") : badge("in sync", "ok")),
      td(fmtNum(x.log_start_offset), true),
      td(fmtNum(x.high_watermark), true),
      td(x.stored_bytes === null ? "–" : fmtBytes(x.stored_bytes), true),
      td(fmtRate(x.records_per_sec, "rec/s"), true),
      td(el("a", { href: "#/records/" + enc(name) + "/" + x.partition_id }, "browse")),
    ));
    container.replaceChildren(p.node, table([{ label: "Partition", num: true }, { label: "Leader", num: true },
      { label: "Epoch", num: true }, "Replicas", "ISR", "State", { label: "Log start", num: true },
      { label: "High watermark", num: true }, { label: "Stored", num: true }, { label: "Throughput", num: true }, ""], rows));
  };
  render();
  const summary = el("div", { class: "summary" },
    el("div", {}, el("span", {}, "Partitions"), el("b", {}, topic.partitions_count)),
    el("div", {}, el("span", {}, "Under-replicated"), el("b", {}, topic.under_replicated_partitions)),
    el("div", {}, el("span", {}, "Offline"), el("b", {}, topic.offline_partitions)),
    el("div", {}, el("span", {}, "Stored (led here)"), el("b", {}, fmtBytes(topic.stored_bytes))),
    el("div", {}, el("span", {}, "Throughput (led here)"), el("b", {}, fmtRate(topic.records_per_sec, "rec/s"))));
  return [el("h1", {}, el("a", { href: "#/topics" }, "Topics"), " / ", name), summary, container];
}

async function groupsView() {
  const base = await cluster();
  const groups = (await api(base + "/consumer-groups")).data;
  const rows = groups.map((g) => el("tr", { "data-group": g.consumer_group_id },
    td(el("a", { href: "#/groups/" + enc(g.consumer_group_id) }, g.consumer_group_id)),
    td(stateBadge(g.state)),
    td(g.protocol_type || "–"),
    td(g.coordinator_id + (g.coordinated_here ? " (this broker)" : "")),
  ));
  return [
    el("h1", {}, "Consumer groups ", el("span", { class: "muted" }, "(" + groups.length + ")")),
    groups.length ? table(["Group", "State", "Protocol type", "Coordinator"], rows) : el("p", { class: "muted" }, "No consumer groups."),
  ];
}

function stateBadge(s) {
  const kind = s === "STABLE" ? "ok" : s === "EMPTY" || s === "UNKNOWN" ? "" : s === "DEAD" ? "bad" : "warn";
  return badge(s, kind);
}

function lagChart(history, intervalMs) {
  const w = 640, h = 180, left = 56, right = 12, top = 12, bottom = 26;
  const svg = el("svg", { class: "chart", width: w, height: h, viewBox: "0 0 " + w + " " + h, role: "img", "aria-label": "total lag over time" });
  if (!history.length) {
    svg.append(el("text", { x: left, y: h / 2 }, "No samples yet (one every " + intervalMs / 1000 + " s)."));
    return svg;
  }
  const t0 = history[0].time_ms, t1 = history[history.length - 1].time_ms;
  const maxLag = Math.max(1, ...history.map((p) => p.total_lag));
  const x = (t) => left + (t1 === t0 ? (w - left - right) : ((t - t0) / (t1 - t0)) * (w - left - right));
  const y = (v) => top + (1 - v / maxLag) * (h - top - bottom);
  const pts = history.map((p) => x(p.time_ms).toFixed(1) + "," + y(p.total_lag).toFixed(1));
  if (history.length === 1) pts.unshift(left + "," + y(history[0].total_lag).toFixed(1));
  svg.append(
    el("line", { class: "axis", x1: left, y1: h - bottom, x2: w - right, y2: h - bottom }),
    el("line", { class: "axis", x1: left, y1: top, x2: left, y2: h - bottom }),
    el("path", { class: "area", d: "M" + pts[0].split(",")[0] + "," + (h - bottom) + " L" + pts.join(" L") + " L" + pts[pts.length - 1].split(",")[0] + "," + (h - bottom) + " Z" }),
    el("polyline", { class: "line", points: pts.join(" ") }),
    el("text", { x: 4, y: top + 10 }, fmtNum(maxLag)),
    el("text", { x: 4, y: h - bottom }, "0"),
    el("text", { x: left, y: h - 8 }, new Date(t0).toLocaleTimeString()),
    el("text", { x: w - right - 60, y: h - 8 }, new Date(t1).toLocaleTimeString()),
  );
  return svg;
}

async function groupView(name) {
  const base = await cluster();
  const g = base + "/consumer-groups/" + enc(name);
  const [group, consumers, lags, summary] = await Promise.all([
    api(g), api(g + "/consumers"), api(g + "/lags"), api(g + "/lag-summary"),
  ]);
  const memberRows = consumers.data.map((c) => el("tr", { "data-consumer": c.consumer_id },
    td(c.consumer_id), td(c.client_id), td(c.client_host), td(c.instance_id || "–"),
    td(c.assigned_partitions.map((a) => a.topic_name + "-" + a.partition_id).join(", ") || "–"),
  ));
  const lagRows = lags.data.map((l) => el("tr", { "data-lag": l.topic_name + "-" + l.partition_id },
    td(l.topic_name), td(l.partition_id, true), td(fmtNum(l.current_offset), true),
    td(fmtNum(l.log_end_offset), true), td(l.lag === null ? "–" : fmtNum(l.lag), true), td(l.client_id || "–"),
  ));
  const lagPage = pager("lags:" + name, lagRows.length, () => route());
  const shownLags = lagRows.slice(lagPage.page * PAGE_ROWS, (lagPage.page + 1) * PAGE_ROWS);
  return [
    el("h1", {}, el("a", { href: "#/groups" }, "Consumer groups"), " / ", name),
    el("div", { class: "summary" },
      el("div", {}, el("span", {}, "State"), stateBadge(group.state)),
      el("div", {}, el("span", {}, "Assignor"), el("b", {}, group.partition_assignor || "–")),
      el("div", {}, el("span", {}, "Coordinator"), el("b", {}, group.coordinator_id)),
      el("div", {}, el("span", {}, "Members"), el("b", {}, group.members_count === null ? "?" : group.members_count)),
      el("div", {}, el("span", {}, "Total lag"), el("b", { id: "total-lag" }, fmtNum(summary.total_lag))),
      el("div", {}, el("span", {}, "Max lag"), el("b", {}, fmtNum(summary.max_lag) + (summary.max_lag_topic_name ? " (" + summary.max_lag_topic_name + "-" + summary.max_lag_partition_id + ")" : "")))),
    group.coordinated_here ? null : el("p", { class: "muted" }, "Members are known only to the coordinator, broker " + group.coordinator_id + "; open its console (Brokers) for them."),
    el("h2", {}, "Total lag over the last " + span(summary.lag_history.length * summary.lag_history_interval_ms) +
      " (sampled every " + summary.lag_history_interval_ms / 1000 + " s)"),
    lagChart(summary.lag_history, summary.lag_history_interval_ms),
    el("h2", {}, "Members (" + consumers.data.length + ")"),
    consumers.data.length ? table(["Consumer id", "Client id", "Host", "Instance id", "Assigned partitions"], memberRows) : el("p", { class: "muted" }, "No members."),
    el("h2", {}, "Lag per partition"),
    lagRows.length > PAGE_ROWS ? lagPage.node : null,
    lagRows.length ? table(["Topic", { label: "Partition", num: true }, { label: "Committed", num: true },
      { label: "Log end", num: true }, { label: "Lag", num: true }, "Client"], shownLags) : el("p", { class: "muted" }, "No committed offsets."),
  ];
}

// ---------------------------------------------------------- record browser ----

function b64bytes(s) {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function hex(bytes) {
  const shown = Array.from(bytes.slice(0, 256), (b) => b.toString(16).padStart(2, "0")).join(" ");
  return bytes.length > 256 ? shown + " …" : shown;
}

// A key or value: pretty JSON when it parses, text when it is UTF-8, hex and base64 if not.
function renderData(b64) {
  if (b64 === null || b64 === undefined) return el("span", { class: "muted" }, "null");
  const bytes = b64bytes(b64);
  let text = null;
  try { text = new TextDecoder("utf-8", { fatal: true }).decode(bytes); } catch (e) { text = null; }
  if (text !== null) {
    const trimmed = text.trim();
    if (trimmed.startsWith("{") || trimmed.startsWith("[")) {
      try { return el("pre", { class: "json" }, JSON.stringify(JSON.parse(trimmed), null, 2)); } catch (e) { /* text */ }
    }
    return el("pre", { class: "text" }, text);
  }
  return el("div", {}, badge("binary"), el("pre", { class: "hex" }, hex(bytes)), el("pre", { class: "b64 muted" }, b64));
}

function parseQuery(q) {
  const out = {};
  for (const part of (q || "").split("&")) {
    if (!part) continue;
    const [k, v] = part.split("=");
    out[decodeURIComponent(k)] = decodeURIComponent(v || "");
  }
  return out;
}

async function recordsView(topic, partition, query) {
  const base = await cluster();
  const topics = (await api(base + "/topics")).data.map((t) => t.topic_name);
  const q = parseQuery(query);
  const topicSel = el("select", { id: "rb-topic" }, topics.map((t) => el("option", { value: t, selected: t === topic }, t)));
  const partIn = el("input", { id: "rb-partition", type: "number", min: 0, value: partition || 0 });
  const modeSel = el("select", { id: "rb-mode" },
    el("option", { value: "offset", selected: !q.timestamp }, "from offset"),
    el("option", { value: "timestamp", selected: !!q.timestamp }, "from time"));
  const fromIn = el("input", { id: "rb-from", value: q.timestamp || q.offset || "0", title: "an offset, or a time: ms since the epoch or e.g. 2026-12-01T10:00:00Z" });
  const go = () => {
    let from = fromIn.value.trim();
    if (modeSel.value === "timestamp" && !/^\d+$/.test(from)) {
      const ms = Date.parse(from);
      from = isNaN(ms) ? "0" : String(ms);
    }
    location.hash = "#/records/" + enc(topicSel.value) + "/" + (parseInt(partIn.value, 10) || 0) + "?" + modeSel.value + "=" + enc(from);
  };
  const controls = el("div", { class: "browse" }, "Topic", topicSel, "Partition", partIn, modeSel, fromIn,
    el("button", { type: "button", on: { click: go } }, "Show"));
  const out = [el("h1", {}, "Records"), controls];
  if (!topic) {
    out.push(el("p", { class: "muted" }, "Pick a topic and partition."));
    return out;
  }
  const params = q.timestamp ? "timestamp=" + enc(q.timestamp) : "offset=" + enc(q.offset || "0");
  const records = await api("/topics/" + enc(topic) + "/partitions/" + enc(partition) + "/records?" + params +
    "&max_bytes=" + RECORDS_MAX_BYTES + "&timeout=0&timestamps=true", "application/vnd.kafka.binary.v2+json");
  const shown = records.slice(0, RECORDS_SHOWN_MAX);
  const rows = shown.map((r) => el("tr", { "data-offset": r.offset },
    td(r.offset, true), td(r.timestamp >= 0 ? new Date(r.timestamp).toISOString() : "–"),
    td(renderData(r.key)), td(renderData(r.value))));
  out.push(el("p", { class: "muted" }, shown.length + " record(s) of " + topic + "-" + partition +
    (records.length ? " from offset " + records[0].offset : "")));
  if (rows.length) {
    out.push(table([{ label: "Offset", num: true }, "Timestamp", "Key", "Value"], rows));
    const next = records[records.length - 1].offset + 1;
    out.push(el("p", {}, el("a", { href: "#/records/" + enc(topic) + "/" + partition + "?offset=" + next }, "next records ›")));
  }
  return out;
}

// ------------------------------------------------------------------ router ----

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query] = raw.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, query };
}

async function route() {
  const generation = ++state.generation;
  const { parts, query } = parseHash();
  const view = parts[0] || "brokers";
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.view === view);
  let render;
  let refresh = true;
  switch (view) {
    case "topics": render = parts[1] ? () => topicView(parts[1]) : topicsView; break;
    case "groups": render = parts[1] ? () => groupView(parts[1]) : groupsView; break;
    case "records": render = () => recordsView(parts[1], parts[2], query); refresh = false; break;
    default: render = brokersView;
  }
  const main = document.getElementById("view");
  try {
    const nodes = await render();
    if (generation !== state.generation) return;
    main.replaceChildren(...nodes.filter(Boolean));
    document.body.dataset.view = view;
    document.body.dataset.ready = "1";
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    if (generation !== state.generation) return;
    main.replaceChildren(el("p", { class: "error" }, (e.status ? e.status + ": " : "") + e.message));
    document.body.dataset.ready = "error";
  }
  clearTimeout(state.timer);
  if (refresh) state.timer = setTimeout(() => { if (generation === state.generation) route(); }, REFRESH_MS);
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", route);
