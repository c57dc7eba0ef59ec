"""Whether an HTTP redirect is followed, and where to.

aiohttp follows redirects by itself, to any host, dropping only ``Authorization``,
``Cookie`` and ``Proxy-Authorization`` on the way: an API key in ``http.secret_headers``
would reach whichever host a 3xx names, even over plain http after https, and the hops
would bypass the rate limit, the request budget and the counters. So the session never
follows (``attempt.py``); the sender asks :func:`next_hop` about each 3xx and, where the
policy allows it, sends the next hop as a call of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from yarl import URL

from spark_jobs.defaults import RedirectPolicy

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5
"""Hops one call may take under ``follow_redirects: same-origin`` (aiohttp's is 10)."""


class RedirectRefused(Exception):
    """The redirect is not followed; the message says where it pointed (scheme, host,
    port and path only: a query or user info may carry a secret) and why."""


@dataclass(frozen=True)
class Hop:
    """The request a followed redirect makes."""

    method: str
    url: str
    body: str | None


def next_hop(
    policy: RedirectPolicy,
    method: str,
    url: str,
    body: str | None,
    status: int,
    location: str | None,
    hops: int,
) -> Hop:
    """The request that follows a ``status`` answer with ``location`` to ``method url``
    after ``hops`` redirects; raises :class:`RedirectRefused` unless ``policy`` allows it.

    As browsers and aiohttp do, a 303 (and a 301/302 after a POST) becomes a GET without
    a body; 307 and 308 repeat the request as it was.
    """
    if not location:
        raise RedirectRefused("a redirect without a Location")
    source = URL(url, encoded=True)
    try:
        target = source.join(URL(location, encoded=True))
    except ValueError:
        raise RedirectRefused("a redirect to an invalid Location") from None
    where = f"a redirect to {shown(target)}"
    if policy == "none":
        raise RedirectRefused(f"{where}, not followed (follow_redirects: none)")
    if not target.is_absolute() or target.origin() != source.origin():
        raise RedirectRefused(
            f"{where}, not followed: another scheme, host or port (follow_redirects: "
            f"{policy} follows only redirects to {shown(source.origin())})"
        )
    if hops >= MAX_REDIRECTS:
        raise RedirectRefused(f"{where}, not followed: more than {MAX_REDIRECTS} redirects")
    if status == 303 or (status in (301, 302) and method == "POST"):
        return Hop("GET", str(target), None)
    return Hop(method, str(target), body)


def shown(url: URL) -> str:
    """``url`` without user info, query or fragment: where it points, nothing it carries."""
    if not url.is_absolute():
        return url.path or "/"
    return str(url.with_user(None).with_query(None).with_fragment(None))
