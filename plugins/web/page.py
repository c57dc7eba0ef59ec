"""Server-rendered HTML of the snapshot page: one self-contained document, no external assets.

Renders the same namespace dicts the JSON API returns (see ``plugins.web.app``), so the page
and the API never disagree.  Every value is HTML-escaped; the only script is a small inline
handler that POSTs a discard through ``fetch`` with the browser's Airflow cookie.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from html import escape
from typing import Any

_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5rem;color:#1b1f24}
h1{font-size:1.4rem;margin:0 0 .3rem}
h2{font-size:1.05rem;margin:0}
.muted{color:#57606a}
.filters{margin:.8rem 0 1.2rem}
.filters input{padding:.25rem .4rem;margin-right:.4rem}
section{border:1px solid #d0d7de;border-radius:6px;padding:.8rem 1rem;margin:0 0 1rem}
.head{display:flex;justify-content:space-between;align-items:baseline;gap:1rem;flex-wrap:wrap}
table{border-collapse:collapse;width:100%;margin-top:.6rem;font-size:.9rem}
th,td{border-bottom:1px solid #eaeef2;padding:.3rem .5rem;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left}
tfoot td{font-weight:600;border-top:2px solid #d0d7de}
.bar{display:inline-block;width:6rem;height:.55rem;background:#eaeef2;border-radius:3px;
     vertical-align:middle;margin-left:.4rem;overflow:hidden}
.bar>span{display:block;height:100%;background:#2da44e}
button{padding:.3rem .8rem;border:1px solid #cf222e;background:#fff;color:#cf222e;
       border-radius:5px;cursor:pointer}
button:disabled{border-color:#d0d7de;color:#8c959f;cursor:not-allowed}
.error{color:#cf222e}
.empty{padding:1rem;border:1px dashed #d0d7de;border-radius:6px}
"""

_SCRIPT = """
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-discard]");
  if (!button || button.disabled) return;
  const label = button.getAttribute("data-label");
  if (!confirm("Discard all snapshots of " + label + "?\\n"
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
"""


def _text(value: Any, missing: str = "—") -> str:
    return escape(missing if value is None else str(value))


def _count(value: int | None) -> str:
    return "?" if value is None else f"{value:,}".replace(",", "\u202f")


def _bar(done: int, total: int | None) -> str:
    if not total:
        return ""
    percent = max(0.0, min(100.0, 100.0 * done / total))
    return (
        f'<span class="bar" title="{percent:.1f} %">'
        f'<span style="width:{percent:.1f}%"></span></span>'
    )


def _watermark(value: int | None, utc: str | None) -> str:
    if value is None:
        return "—"
    return f'<span title="{_text(value)} ms">{_text(utc or value)}</span>'


def _cost(cost: Mapping[str, int]) -> str:
    return (
        f"{_count(cost['requests_made'])} API calls made · saved: "
        f"{_count(cost['response_cache_hits'])} by the response cache, "
        f"{_count(cost['coalesced_calls'])} by sharing identical requests, "
        f"{_count(cost['calls_saved_by_resume'])} by resuming"
    )


def _state(p: Mapping[str, Any], running: bool) -> str:
    if p["finished"]:
        return "finished"
    if p["stats"].get("budget_exhausted"):
        return "budget spent"  # waits for a clear or the next run; not a failure
    if running:
        return "running"
    return f"interrupted (last commit {_ago(p['committed_at'])})"


def _ago(committed_at: str) -> str:
    seconds = (datetime.now(UTC) - datetime.fromisoformat(committed_at)).total_seconds()
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f} {unit} ago"
    return f"{max(seconds, 0):.0f} s ago"


def _partition_row(p: Mapping[str, Any], running: bool) -> str:
    state = _state(p, running)
    return (
        "<tr>"
        f"<td>part {p['partition']}</td>"
        f"<td>{_count(p['done_rows'])} / {_count(p['records_total'])}"
        f"{_bar(p['done_rows'], p['records_total'])}</td>"
        f"<td>{_count(p['dead_letter_rows'])}</td>"
        f"<td>{p['epoch']}</td>"
        f"<td>{p['in_flight']}</td>"
        f"<td>{_watermark(p['watermark'], p['watermark_utc'])}</td>"
        f"<td>{_text(p['committed_at'])}</td>"
        f"<td>{_text(p['attempt'])}</td>"
        f"<td>{state}</td>"
        "</tr>"
    )


def _namespace_section(ns: Mapping[str, Any], editable: bool) -> str:
    t = ns["totals"]
    label = f"{ns['dag_id']} / {ns['task_id']} / {ns['interval_start']}"
    if editable:
        button = (
            f'<button type="button" data-discard="{escape(ns["links"]["discard"])}"'
            f' data-label="{escape(label)}">Discard</button>'
        )
    else:
        button = (
            '<button type="button" disabled'
            ' title="Discarding needs edit permission on this DAG">Discard</button>'
        )
    corrupt = "".join(
        f'<tr><td>part {number}</td><td colspan="7" class="muted">no valid snapshot: every '
        "manifest failed its checks; the next run starts this partition over</td>"
        "<td>corrupt</td></tr>"
        for number in ns["corrupt_partitions"]
    )
    rows = "".join(_partition_row(p, ns["running"]) for p in ns["partitions"]) + corrupt or (
        '<tr><td colspan="9" class="muted">no committed snapshot yet</td></tr>'
    )
    return f"""
<section data-namespace="{escape(label)}">
  <div class="head">
    <div>
      <h2>{escape(ns["dag_id"])} <span class="muted">/</span> {escape(ns["task_id"])}
        <span class="muted">/</span> {escape(ns["interval_start"])}</h2>
      <div class="muted">{escape(t["summary"])} · {t["partitions_reported"]} of
        {t["partition_count"]} partitions reported · combined watermark
        {_watermark(t["watermark"], t["watermark_utc"])} · last commit
        {_text(t["last_committed_at"])}</div>
      <div class="muted">{_cost(t["cost"])}</div>
    </div>
    <div>{button} <span class="status muted"></span></div>
  </div>
  <table>
    <thead><tr><th>Partition</th><th>Done / total</th><th>Dead letters</th><th>Epoch</th>
      <th>In flight</th><th>Watermark (UTC)</th><th>Last commit (UTC)</th><th>Attempt</th>
      <th>State</th></tr></thead>
    <tbody>{rows}</tbody>
    <tfoot><tr><td>total</td>
      <td>{_count(t["done_rows"])} / {_count(t["records_total"])}
        {_bar(t["done_rows"], t["records_total"])}</td>
      <td>{_count(t["dead_letter_rows"])}</td><td>{t["epoch"]}</td><td>{t["in_flight"]}</td>
      <td>{_watermark(t["watermark"], t["watermark_utc"])}</td>
      <td>{_text(t["last_committed_at"])}</td><td></td><td></td></tr></tfoot>
  </table>
</section>"""


def render_page(
    namespaces: Iterable[Mapping[str, Any]],
    *,
    filters: Mapping[str, str | None],
    editable_dag_ids: set[str],
    user_name: str,
    error: str | None = None,
) -> str:
    """The whole HTML document; ``namespaces`` are the API's namespace dicts."""
    namespaces = list(namespaces)
    if error is not None:
        body = f'<p class="error empty">{escape(error)}</p>'
    elif namespaces:
        body = "".join(
            _namespace_section(ns, ns["dag_id"] in editable_dag_ids) for ns in namespaces
        )
    else:
        body = '<p class="empty muted">No snapshot namespaces you may read match this filter.</p>'
    inputs = "".join(
        f'<input name="{name}" placeholder="{name}" value="{_text(filters.get(name), "")}">'
        for name in ("dag_id", "task_id", "interval_start")
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Enrichment snapshots</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>Enrichment snapshots</h1>
<div class="muted">Resumable enrichment progress per task run, from the snapshot store.
  Signed in as {escape(user_name)}.</div>
<form class="filters" method="get">{inputs}<button type="submit"
  style="border-color:#d0d7de;color:#1b1f24">Filter</button> <a href="?">clear</a></form>
{body}
<script>{_SCRIPT}</script>
</body>
</html>
"""


def render_message(title: str, message: str, *, link: tuple[str, str] | None = None) -> str:
    """A minimal page for errors (not signed in, no access, store not configured)."""
    anchor = f'<p><a href="{escape(link[0])}">{escape(link[1])}</a></p>' if link else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>{_STYLE}</style></head>
<body><h1>{escape(title)}</h1><p>{escape(message)}</p>{anchor}</body></html>
"""
