"""The snapshot store's costs against k and P, format 2 beside format 1, as an SVG for the docs.

``python -m benchmarks.scale_plot [RESULTS] [SVG]`` draws ``benchmarks/results/scale.json``
(``make bench-scale``) into ``docs/scale-cost.svg``: three log-log panels from the local
store's rows, each a line per design measured in the same run. Plain SVG written here:
the project's environment has no plotting library, and a Markdown page renders SVG as it is.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.scale import RESULTS

SVG = Path(__file__).parent.parent / "docs" / "scale-cost.svg"
WIDTH, HEIGHT, GAP = 300, 220, 40
MARGIN = {"left": 56, "right": 12, "top": 34, "bottom": 40}
WAYS = {"record": "progress record", "scan": "partition by partition"}
NEW, OLD = "#1f77b4", "#d62728"
COLOURS = {"format 2": NEW, "format 1": OLD, "progress record": NEW, "partition by partition": OLD}

Series = dict[str, list[tuple[float, float]]]


def panels(results: dict[str, Any]) -> list[tuple[str, str, Series]]:
    """(title, x label, lines) per panel, from the local store's measurements."""
    rows = results["local"]["partitions"]

    def by_format(value: Callable[[dict[str, Any]], float]) -> Series:
        return {
            f"format {fmt}": [(r["k"], value(r)) for r in rows if r["format"] == fmt]
            for fmt in (2, 1)
        }

    progress = results["local"]["progress"]
    requests_by_way = {
        name: [(p["P"], sum(p[way]["requests"].values())) for p in progress if way in p]
        for way, name in WAYS.items()
    }
    return [
        ("bytes written per cut", "cuts so far (k)", by_format(_written)),
        ("metadata objects read by a resume", "cuts so far (k)", by_format(_resume_reads)),
        ("storage requests per progress read", "partitions (P)", requests_by_way),
    ]


def _written(row: dict[str, Any]) -> float:
    return float(row["per_cut_all"]["bytes_written"])


def _resume_reads(row: dict[str, Any]) -> float:
    return float(row["resume"]["metadata_objects_read"])


def _ticks(low: float, high: float) -> list[float]:
    return [10.0**e for e in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)]


def _label(value: float) -> str:
    return f"{value:,.0f}".replace(",", " ") if value >= 1 else f"{value:g}"


def panel_svg(x0: float, title: str, xlabel: str, lines: Series) -> list[str]:
    """One log-log panel at horizontal offset ``x0``: axes, decade ticks, a polyline per
    series with its points marked, and a legend."""
    points = [p for series in lines.values() for p in series]
    xs, ys = (
        _ticks(min(p[0] for p in points), max(p[0] for p in points)),
        _ticks(min(p[1] for p in points), max(p[1] for p in points)),
    )
    left, top = x0 + MARGIN["left"], MARGIN["top"]
    right, bottom = x0 + WIDTH - MARGIN["right"], HEIGHT - MARGIN["bottom"]

    def at(x: float, y: float) -> tuple[float, float]:
        fx = (math.log10(x) - math.log10(xs[0])) / max(math.log10(xs[-1] / xs[0]), 1e-9)
        fy = (math.log10(y) - math.log10(ys[0])) / max(math.log10(ys[-1] / ys[0]), 1e-9)
        return left + fx * (right - left), bottom - fy * (bottom - top)

    out = [
        f'<text x="{x0 + WIDTH / 2}" y="16" text-anchor="middle" font-weight="bold">{title}</text>',
        f'<text x="{(left + right) / 2}" y="{HEIGHT - 6}" text-anchor="middle">{xlabel}</text>',
        f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" '
        'fill="none" stroke="#888"/>',
    ]
    for x in xs:
        px, _ = at(x, ys[0])
        out.append(f'<text x="{px}" y="{bottom + 14}" text-anchor="middle">{_label(x)}</text>')
    for y in ys:
        _, py = at(xs[0], y)
        out.append(f'<line x1="{left}" x2="{right}" y1="{py}" y2="{py}" stroke="#eee"/>')
        out.append(f'<text x="{left - 4}" y="{py + 4}" text-anchor="end">{_label(y)}</text>')
    for index, (name, series) in enumerate(lines.items()):
        colour = COLOURS[name]
        coords = [at(x, y) for x, y in sorted(series)]
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in coords)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        out += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}"/>' for px, py in coords]
        out.append(
            f'<text x="{left + 6}" y="{top + 14 + 14 * index}" fill="{colour}">{name}</text>'
        )
    return out


def render(results: dict[str, Any]) -> str:
    drawn = panels(results)
    width = len(drawn) * WIDTH + (len(drawn) - 1) * GAP
    body: list[str] = []
    for index, (title, xlabel, lines) in enumerate(drawn):
        body += panel_svg(index * (WIDTH + GAP), title, xlabel, lines)
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{HEIGHT}" '
            f'font-family="sans-serif" font-size="11">',
            f'<rect width="{width}" height="{HEIGHT}" fill="white"/>',
            *body,
            "</svg>",
            "",
        ]
    )


def main(argv: Sequence[str]) -> int:
    source = Path(argv[0]) if argv else RESULTS
    target = Path(argv[1]) if len(argv) > 1 else SVG
    target.write_text(render(json.loads(source.read_text())))
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
