"""Server-rendered HTML of the snapshot page: one self-contained document, no external assets.

Renders the same :class:`~enrichment_airflow.web.models.NamespaceView` objects the JSON API returns,
so the page and the API never disagree. Every value is HTML-escaped. The inline script
(``page.js``) posts a discard through ``fetch`` with the browser's Airflow cookie and,
while a shown namespace is running, refreshes it from the JSON API every few seconds
(rows rendered as :func:`_partition_row` renders them) with records/s and an ETA, or
``no progress for 45 s`` once the run went silent.

Fits its width: from 1 280 to 1 920 px the table's columns fit without a scroll bar (long
values wrap; times are cut to the second with the full value as a tooltip), and below
960 px (phones) every row becomes a card of labelled values (``page.css``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape
from importlib.resources import files
from typing import Any

from enrichment_airflow.web.models import CostView, NamespaceView, PartitionView
from spark_jobs.records.values import format_count

_STYLE = files(__package__).joinpath("page.css").read_text()
_SCRIPT = files(__package__).joinpath("page.js").read_text()
#: How often the page refreshes a running namespace.
POLL_MS = 3_000
#: Provider batches listed per namespace (a run has a few per partition); the rest counted.
BATCHES_SHOWN = 20


def _text(value: Any, missing: str = "—") -> str:
    return escape(missing if value is None else str(value))


def _count(value: int | None) -> str:
    return format_count(value, "\u202f")  # a narrow no-break space: a number never wraps


def _bar(done: int, total: int | None) -> str:
    if not total:
        return ""
    percent = max(0.0, min(100.0, 100.0 * done / total))
    return (
        f'<span class="bar" title="{percent:.1f} %">'
        f'<span style="width:{percent:.1f}%"></span></span>'
    )


def _done(done: int, total: int | None) -> str:
    """``48 213 / 100 000`` and a bar."""
    return f'<span class="figures">{_count(done)} / {_count(total)}</span>{_bar(done, total)}'


def _moment(iso: str | None, detail: str = "") -> str:
    """A UTC time to the second (``2026-11-24 01:17:57``, short enough for a column); the
    full timestamp, and ``detail``, is its tooltip."""
    if iso is None:
        return "—"
    return f'<span title="{escape(iso + detail)}">{escape(iso[:19].replace("T", " "))}</span>'


def _watermark(value: int | None, utc: str | None) -> str:
    if value is None:
        return "—"
    return _moment(utc, f" ({value} ms)") if utc else _text(value)


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
        f"{_moment(t.last_committed_at)}"
    )


#: The table's columns: each header, which labels its cells in the stacked (narrow) form,
#: and the class that sets how its cells wrap (page.css); page.js reads both from the
#: header, so the rows it renders match these.
COLUMNS = (
    ("Partition", "name"),
    ("Done / total", "num done"),
    ("Dead letters", "num"),
    ("Epoch", "num"),
    ("In flight", "num"),
    ("Watermark (UTC)", "when"),
    ("Last commit (UTC)", "when"),
    ("Attempt", "text"),
    ("State", "state"),
)


def _row(values: Iterable[str], extra: str = "") -> str:
    cells = "".join(
        f'<td class="{kind}" data-label="{label}">{value}</td>'
        for (label, kind), value in zip(COLUMNS, values, strict=True)
    )
    return f"<tr{extra}>{cells}</tr>"


def _partition_row(p: PartitionView) -> str:
    """One partition; a pending or corrupt one (no valid commit) has only its state."""
    state = f'<span title="{escape(p.state_note)}">{escape(p.state)}</span>'
    kind = f' class="{escape(p.state.replace(" ", "-"))}"'
    if p.epoch is None:
        return _row([f"part {p.partition}", *["—"] * 7, state], kind)
    return _row(
        [
            f"part {p.partition}",
            _done(p.done_rows, p.records_total),
            _count(p.dead_letter_rows),
            str(p.epoch),
            str(p.in_flight),
            _watermark(p.watermark, p.watermark_utc),
            _moment(p.committed_at),
            _text(p.attempt),
            state,
        ],
        kind,
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
    empty = "completed: output published" if ns.completed else "no committed snapshot yet"
    return "".join(_partition_row(p) for p in ns.partitions) or (
        f'<tr><td colspan="{len(COLUMNS)}" class="muted">'
        f"{escape(ns.progress_note or empty)}</td></tr>"
    )


def _footer(ns: NamespaceView) -> str:
    t = ns.totals
    return _row(
        [
            "total",
            _done(t.done_rows, t.records_total),
            _count(t.dead_letter_rows),
            str(t.epoch),
            str(t.in_flight),
            _watermark(t.watermark, t.watermark_utc),
            _moment(t.last_committed_at),
            "",
            "",
        ]
    )


def _pace(ns: NamespaceView) -> str:
    """Records/s and the ETA (page.js measures them), or that the run went silent."""
    if ns.stalled is not None:
        return (
            f'<span class="pace stalled" title="{escape(ns.stalled.note)}">'
            f"{escape(ns.stalled.text)}</span>"
        )
    text = "— rec/s · ETA —" if ns.running else ("completed" if ns.completed else "not running")
    return f'<span class="pace">{text}</span>'


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


def _batches(ns: NamespaceView) -> str:
    """A batch-mode run's provider batches (of the partitions shown): what the provider
    has done of each, as its partition last saw it; the page as loaded (no refresh)."""
    if not ns.batches:
        return ""
    items = "".join(
        f"<li>part {b.partition}: <code>{escape(b.batch_id)}</code> {escape(b.status)}: "
        f"{_count(b.done)} of {_count(b.total)} done, {_count(b.failed)} failed"
        f" · seen {_moment(b.seen_at)}</li>"
        for b in ns.batches[:BATCHES_SHOWN]
    )
    more = len(ns.batches) - BATCHES_SHOWN
    if more > 0:
        items += f"<li>and {_count(more)} more</li>"
    return f'<div class="batches muted">provider batches<ul>{items}</ul></div>'


def _namespace_section(ns: NamespaceView, editable: bool) -> str:
    t = ns.totals
    headers = "".join(f'<th class="{kind}">{label}</th>' for label, kind in COLUMNS)
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
        {_pace(ns)} · <span class="facts">{_facts(ns)}</span></div>
      <div class="muted cost">{_cost(t.cost)}</div>
    </div>
    <div>{_discard_button(ns, editable)} <span class="status muted"></span></div>
  </div>
  {_batches(ns)}
  {_pager(ns)}
  <div class="scroll"><table>
    <thead><tr>{headers}</tr></thead>
    <tbody>{_rows(ns)}</tbody>
    <tfoot>{_footer(ns)}</tfoot>
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
