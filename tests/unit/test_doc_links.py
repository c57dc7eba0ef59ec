"""Every relative link in the README, CONTRIBUTING, ``docs/`` and the benchmarks' history
reaches a file, and its anchor a heading there: sections moved between pages stay
reachable."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
HISTORY = ROOT / "benchmarks" / "results" / "HISTORY.md"
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *DOCS, HISTORY]
# [text](target) and ![alt](target); the text may wrap across lines.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.M | re.S)


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped (letters,
    digits, spaces, ``-`` and ``_`` stay), each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text.replace("`", ""))
    return text.replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text()), flags=re.M):
        slug = github_slug(heading)
        out.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return frozenset(out)


def relative_links(page: Path) -> list[str]:
    targets = LINK.findall(FENCE.sub("", page.read_text()))
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def test_the_slug_rule_is_githubs():
    assert github_slug("The `http:` section") == "the-http-section"
    assert github_slug("Where a record's time goes") == "where-a-records-time-goes"
    assert github_slug("The snapshot store at scale (`make bench-scale`)") == (
        "the-snapshot-store-at-scale-make-bench-scale"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_its_anchor(page):
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        # A leading "/" is the repository's root, as GitHub reads it.
        base = ROOT if path.startswith("/") else page.parent
        dest = (base / path.lstrip("/")).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor")
    assert broken == []


def test_every_docs_page_is_linked_from_the_readme():
    """Moved sections stay reachable from the page a newcomer opens first."""
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in relative_links(ROOT / "README.md")}
    assert [p.name for p in DOCS if p.resolve() not in linked] == []
