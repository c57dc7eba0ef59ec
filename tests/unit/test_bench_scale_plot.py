"""The scale benchmark's plot: a panel per cost, a line per design, points placed on
log axes (a larger cost drawn higher)."""

import xml.etree.ElementTree as ET

from benchmarks.scale_plot import render

NS = {"svg": "http://www.w3.org/2000/svg"}


def row(fmt: int, k: int, written: int, objects: int) -> dict:
    return {
        "format": fmt,
        "k": k,
        "per_cut_all": {"bytes_written": written},
        "resume": {"metadata_objects_read": objects},
    }


def progress(partitions: int) -> dict:
    scan = {"LIST": partitions + 1, "GET": partitions}
    return {"P": partitions, "record": {"requests": {"GET-range": 1}}, "scan": {"requests": scan}}


RESULTS = {
    "local": {
        "partitions": [
            row(2, 100, 6_000, 2),
            row(2, 10_000, 8_000, 2),
            row(1, 100, 12_000, 100),
            row(1, 1_000, 200_000, 1_000),
        ],
        "progress": [progress(10), progress(10_000)],
    }
}


def test_each_design_is_a_line_whose_costlier_points_sit_higher():
    svg = ET.fromstring(render(RESULTS))
    titles = [t.text for t in svg.findall("svg:text", NS) if t.get("font-weight") == "bold"]
    assert titles == [
        "bytes written per cut",
        "metadata objects read by a resume",
        "storage requests per progress read",
    ]
    lines = svg.findall("svg:polyline", NS)
    assert len(lines) == 6
    heights = [
        [float(point.split(",")[1]) for point in line.get("points").split()] for line in lines
    ]
    format2_written, format1_written = heights[0], heights[1]
    assert format1_written[1] < format1_written[0]  # 200 000 bytes drawn above 12 000
    assert max(format2_written) > min(format1_written)  # format 2 writes less: drawn lower
    record, scan = heights[4], heights[5]
    assert record[0] == record[1] and scan[1] < scan[0]  # flat in P against growing
    legends = {t.text for t in svg.findall("svg:text", NS)}
    assert {"format 1", "format 2", "progress record", "partition by partition"} <= legends
