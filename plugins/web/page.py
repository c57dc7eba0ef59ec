"""Server-rendered HTML of the snapshot page: one self-contained document, no external assets.

Renders the same :class:`~plugins.web.models.NamespaceView` objects the JSON API returns,
so the page and the API never disagree. Every value is HTML-escaped. The inline script
(``page.js``) posts a discard through ``fetch`` with the browser's Airflow cookie and,
while a shown namespace is running, refreshes it from the JSON API every few seconds
(rows rendered as :func:`_partition_row` renders them) with records/s and an ETA.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from html import escape
from importlib.resources import files
from typing import Any

from plugins.web.models import CostView, NamespaceView, PartitionView

_STYLE = files(__package__).joinpath("page.css").read_text()
_SCRIPT = files(__package__).joinpath("page.js").read_text()
#: How often the page refreshes a running namespace.
POLL_MS = 3_000


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


def _cost(cost: CostView) -> str:
    return (
        f"{_count(cost.requests_made)} API calls made · saved: "
        f"{_count(cost.response_cache_hits)} by the response cache, "
        f"{_count(cost.coalesced_calls)} by sharing identical requests, "
        f"{_count(cost.calls_saved_by_resume)} by resuming"
    )


def _facts(ns: NamespaceView) -> str:
    t = ns.totals
    return (
        f"{t.partitions_reported} of {t.partition_count} partitions reported · combined "
        f"watermark {_watermark(t.watermark, t.watermark_utc)} · last commit "
        f"{_text(t.last_committed_at)}"
    )


def _state(p: PartitionView, running: bool) -> str:
    if p.finished:
        return "finished"
    if p.stats.get("budget_exhausted"):
        return "budget spent"  # waits for a clear or the next run; not a failure
    if running:
        return "running"
    return f"interrupted (last commit {_ago(p.committed_at)})"


def _when(iso: str | None) -> str:
    """A commit time to the second; the full timestamp is its tooltip."""
    if iso is None:
        return "—"
    return f'<span title="{escape(iso)}">{escape(iso[:19].replace("T", " "))}</span>'


def _ago(committed_at: str) -> str:
    seconds = (datetime.now(UTC) - datetime.fromisoformat(committed_at)).total_seconds()
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f} {unit} ago"
    return f"{max(seconds, 0):.0f} s ago"


def _partition_row(p: PartitionView, running: bool) -> str:
    return (
        "<tr>"
        f"<td>part {p.partition}</td>"
        f"<td>{_count(p.done_rows)} / {_count(p.records_total)}"
        f"{_bar(p.done_rows, p.records_total)}</td>"
        f"<td>{_count(p.dead_letter_rows)}</td>"
        f"<td>{p.epoch}</td>"
        f"<td>{p.in_flight}</td>"
        f"<td>{_watermark(p.watermark, p.watermark_utc)}</td>"
        f"<td>{_when(p.committed_at)}</td>"
        f"<td>{_text(p.attempt)}</td>"
        f"<td>{_state(p, running)}</td>"
        "</tr>"
    )


def _discard_button(ns: NamespaceView, editable: bool) -> str:
    """Only for users who may edit the DAG: a viewer sees no button at all."""
    if not editable:
        return ""
    return (
        f'<button type="button" data-discard="{escape(ns.links.discard)}"'
        f' data-label="{escape(ns.label)}">Discard</button>'
    )


def _rows(ns: NamespaceView) -> str:
    corrupt = "".join(
        f'<tr><td>part {number}</td><td colspan="7" class="muted">no valid snapshot: every '
        "manifest failed its checks; the next run starts this partition over</td>"
        "<td>corrupt</td></tr>"
        for number in ns.corrupt_partitions
    )
    empty = "completed: output published" if ns.completed else "no committed snapshot yet"
    return "".join(_partition_row(p, ns.running) for p in ns.partitions) + corrupt or (
        f'<tr><td colspan="9" class="muted">{escape(ns.progress_note or empty)}</td></tr>'
    )


def _pager(ns: NamespaceView) -> str:
    """Which partitions the table shows, with buttons to the pages around it (page.js);
    hidden while they all fit on one page."""
    page = ns.partitions_page
    hidden = "" if page.total > page.limit else " hidden"
    last = min(page.offset + page.limit, page.total)
    first_page = " disabled" if page.offset == 0 else ""
    last_page = " disabled" if last >= page.total else ""
    return (
        f'<div class="pager muted"{hidden}><span class="range">partitions '
        f"{_count(min(page.offset + 1, page.total))}–{_count(last)} of {_count(page.total)}"
        f'</span> <button type="button" data-page="-1"{first_page}>‹ previous</button>'
        f' <button type="button" data-page="1"{last_page}>next ›</button></div>'
    )


def _namespace_section(ns: NamespaceView, editable: bool) -> str:
    t = ns.totals
    pace = "— rec/s · ETA —" if ns.running else ("completed" if ns.completed else "not running")
    return f"""
<section data-namespace="{escape(ns.label)}" data-detail="{escape(ns.links.detail)}"
  data-running="{str(ns.running).lower()}" data-done="{t.done_rows}"
  data-partitions-offset="{ns.partitions_page.offset}"
  data-partitions-limit="{ns.partitions_page.limit}">
  <div class="head">
    <div>
      <h2>{escape(ns.dag_id)} <span class="muted">/</span> {escape(ns.task_id)}
        <span class="muted">/</span> {escape(ns.interval_start)}</h2>
      <div class="muted"><span class="summary">{escape(t.summary)}</span> ·
        <span class="pace">{pace}</span> · <span class="facts">{_facts(ns)}</span></div>
      <div class="muted cost">{_cost(t.cost)}</div>
    </div>
    <div>{_discard_button(ns, editable)} <span class="status muted"></span></div>
  </div>
  {_pager(ns)}
  <div class="scroll"><table>
    <thead><tr><th>Partition</th><th>Done / total</th><th>Dead letters</th><th>Epoch</th>
      <th>In flight</th><th>Watermark (UTC)</th><th>Last commit (UTC)</th><th>Attempt</th>
      <th>State</th></tr></thead>
    <tbody>{_rows(ns)}</tbody>
    <tfoot><tr><td>total</td>
      <td>{_count(t.done_rows)} / {_count(t.records_total)}
        {_bar(t.done_rows, t.records_total)}</td>
      <td>{_count(t.dead_letter_rows)}</td><td>{t.epoch}</td><td>{t.in_flight}</td>
      <td>{_watermark(t.watermark, t.watermark_utc)}</td>
      <td>{_when(t.last_committed_at)}</td><td></td><td></td></tr></tfoot>
  </table></div>
</section>"""


def render_page(
    namespaces: Iterable[NamespaceView],
    *,
    filters: Mapping[str, str | None],
    editable_dag_ids: set[str],
    user_name: str,
) -> str:
    """The whole HTML document."""
    namespaces = list(namespaces)
    if namespaces:
        body = "".join(_namespace_section(ns, ns.dag_id in editable_dag_ids) for ns in namespaces)
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
<body data-poll-ms="{POLL_MS}">
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
