// The snapshot page's only script (inlined by page.py): the Discard button, the pages of
// partitions, and live progress while a shown namespace is running. Rows are rendered as
// page.py renders them.
"use strict";

document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-discard]");
  if (!button || button.disabled) return;
  const label = button.getAttribute("data-label");
  if (!confirm("Discard all snapshots of " + label + "?\n"
               + "The next run of this task starts from scratch.")) return;
  const status = button.parentElement.querySelector(".status");
  button.disabled = true;
  status.textContent = "discarding…";
  try {
    const response = await fetch(button.getAttribute("data-discard"), {
      method: "POST", credentials: "same-origin", headers: {"Accept": "application/json"}});
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      const detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
      throw new Error((body.detail && detail) || ("HTTP " + response.status));
    }
    status.textContent = body.discarded ? "discarded" : "already gone";
    setTimeout(() => window.location.reload(), 600);
  } catch (error) {
    status.textContent = "failed: " + error.message;
    status.className = "status error";
    button.disabled = false;
  }
});

// --- live progress: a small fetch of the JSON API per running namespace -------------

const POLL_MS = Number(document.body.dataset.pollMs || 3000);
const RATE_WINDOW_MS = 30000;  // records/s over about the last half minute
const samples = new Map();     // section -> [[time ms, done rows], ...]

const escapeHtml = (value) => String(value).replace(/[&<>"']/g, (c) => (
  {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;"}[c]));
const text = (value) => escapeHtml(value === null || value === undefined ? "—" : value);
const count = (n) => (n === null || n === undefined
  ? "?" : n.toLocaleString("en-US").replace(/,/g, "\u202f"));

function bar(done, total) {
  if (!total) return "";
  const percent = Math.max(0, Math.min(100, 100 * done / total)).toFixed(1);
  return `<span class="bar" title="${percent} %"><span style="width:${percent}%"></span></span>`;
}

const done = (n, total) =>
  `<span class="figures">${count(n)} / ${count(total)}</span>${bar(n, total)}`;

// A UTC time to the second; the full timestamp (and `detail`) is its tooltip.
function moment(iso, detail = "") {
  return iso === null ? "—"
    : `<span title="${text(iso + detail)}">${text(iso.slice(0, 19).replace("T", " "))}</span>`;
}

function watermark(value, utc) {
  if (value === null) return "—";
  return utc ? moment(utc, ` (${value} ms)`) : text(value);
}

// The columns as page.py declared them in the header: [label, class] per cell.
function columns(section) {
  return [...section.querySelectorAll("thead th")].map((th) => [th.textContent, th.className]);
}

function cells(section, values, extra = "") {
  const tds = columns(section).map(([label, kind], i) =>
    `<td class="${escapeHtml(kind)}" data-label="${escapeHtml(label)}">${values[i]}</td>`);
  return `<tr${extra}>${tds.join("")}</tr>`;
}

// One partition, as page.py's _partition_row renders it (the state comes from the API).
function row(section, p) {
  const state = `<span title="${text(p.state_note)}">${text(p.state)}</span>`;
  const kind = ` class="${escapeHtml(p.state.replace(/ /g, "-"))}"`;
  if (p.epoch === null) {
    return cells(section, [`part ${p.partition}`, ...Array(7).fill("—"), state], kind);
  }
  return cells(section, [
    `part ${p.partition}`, done(p.done_rows, p.records_total), count(p.dead_letter_rows),
    p.epoch, p.in_flight, watermark(p.watermark, p.watermark_utc), moment(p.committed_at),
    text(p.attempt), state], kind);
}

function duration(seconds) {
  if (seconds >= 3600) return `${Math.floor(seconds / 3600)} h ${Math.round(seconds % 3600 / 60)} min`;
  if (seconds >= 60) return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
  return `${Math.round(seconds)} s`;
}

// Records/s from the samples of the last RATE_WINDOW_MS, and the time left at that rate.
function pace(section, t) {
  const now = Date.now();
  const seen = (samples.get(section) || []).filter(([time]) => now - time <= RATE_WINDOW_MS);
  seen.push([now, t.done_rows]);
  samples.set(section, seen);
  const [then, doneThen] = seen[0];
  if (now === then) return "— rec/s · ETA —";
  const rate = Math.max(0, (t.done_rows - doneThen) * 1000 / (now - then));
  const left = t.records_total === null ? null : t.records_total - t.done_rows;
  const eta = rate > 0 && left !== null ? duration(left / rate) : "—";
  return `${count(Math.round(rate))} rec/s · ETA ${eta}`;
}

function update(section, ns) {
  const t = ns.totals;
  section.dataset.running = String(ns.running);
  section.querySelector(".summary").textContent = t.summary;
  section.querySelector(".facts").innerHTML = `${t.partitions_reported} of ${t.partition_count}`
    + ` partitions reported · combined watermark ${watermark(t.watermark, t.watermark_utc)}`
    + ` · last commit ${moment(t.last_committed_at)}`;
  const c = t.cost;
  section.querySelector(".cost").textContent = `${count(c.requests_made)} API calls made · `
    + `saved: ${count(c.response_cache_hits)} by the response cache, `
    + `${count(c.coalesced_calls)} by sharing identical requests, `
    + `${count(c.calls_saved_by_resume)} by resuming`;
  const idle = ns.completed ? "completed" : "not running";
  const paceBox = section.querySelector(".pace");
  paceBox.classList.toggle("stalled", ns.stalled !== null);
  paceBox.title = ns.stalled ? ns.stalled.note : "";
  paceBox.textContent = ns.stalled ? ns.stalled.text : (ns.running ? pace(section, t) : idle);
  const empty = ns.completed ? "completed: output published" : "no committed snapshot yet";
  section.querySelector("tbody").innerHTML = ns.partitions.map((p) => row(section, p)).join("")
    || `<tr><td colspan="${columns(section).length}" class="muted">`
    + `${text(ns.progress_note || empty)}</td></tr>`;
  pager(section, ns.partitions_page);
  section.querySelector("tfoot").innerHTML = cells(section, [
    "total", done(t.done_rows, t.records_total), count(t.dead_letter_rows), t.epoch,
    t.in_flight, watermark(t.watermark, t.watermark_utc), moment(t.last_committed_at), "", ""]);
}

// The range shown and the total; a button is disabled where there is no page to go to.
function pager(section, page) {
  const box = section.querySelector(".pager");
  box.hidden = page.total <= page.limit;
  const last = Math.min(page.offset + page.limit, page.total);
  box.querySelector(".range").textContent =
    `partitions ${count(Math.min(page.offset + 1, page.total))}–${count(last)} of ${count(page.total)}`;
  box.querySelector('[data-page="-1"]').disabled = page.offset === 0;
  box.querySelector('[data-page="1"]').disabled = last >= page.total;
  section.dataset.partitionsTotal = String(page.total);
}

document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-page]");
  if (!button || button.disabled) return;
  const section = button.closest("section");
  const limit = Number(section.dataset.partitionsLimit);
  const offset = Number(section.dataset.partitionsOffset) + Number(button.dataset.page) * limit;
  section.dataset.partitionsOffset = String(Math.max(0, offset));
  await refresh(section).catch(() => undefined);
});

async function refresh(section) {
  const query = new URLSearchParams({
    partitions_offset: section.dataset.partitionsOffset,
    partitions_limit: section.dataset.partitionsLimit});
  const response = await fetch(`${section.dataset.detail}?${query}`, {
    credentials: "same-origin", headers: {"Accept": "application/json"}});
  if (response.status === 404) {  // discarded meanwhile
    section.dataset.running = "false";
    section.querySelector(".pace").textContent = "snapshots gone";
  } else if (response.ok) {
    update(section, await response.json());
  }
}

// Polls while any shown namespace is running; stops for good once none is.
async function poll() {
  const live = [...document.querySelectorAll('section[data-running="true"]')];
  if (!live.length) {
    document.body.dataset.polling = "stopped";
    return;
  }
  document.body.dataset.polling = "on";
  await Promise.all(live.map((section) => refresh(section).catch(() => undefined)));
  setTimeout(poll, POLL_MS);
}

document.querySelectorAll('section[data-running="true"]').forEach((section) => {
  pace(section, {done_rows: Number(section.dataset.done), records_total: null});
});
setTimeout(poll, POLL_MS);
