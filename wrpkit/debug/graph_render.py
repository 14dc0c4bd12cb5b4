"""A capture's graph laid out and drawn: HTML, SVG and Graphviz DOT.

It is drawn three ways, from a :class:`~wrpkit.debug.graph.Graph`
(:func:`~wrpkit.debug.graph.build_graph`):

* :func:`render_html`: one self-contained HTML file (the graph as JSON plus a
  small renderer, no network request of any kind) with collapsible groups,
  search and a details panel;
* :func:`render_svg`: a static SVG picture of the default view;
* :func:`render_dot`: Graphviz text.

All three use the same layout (see :func:`layout`): ops in one column in
execution order, each array on a vertical lane to their right that spans its
first to its last use, lanes shared by arrays whose uses do not overlap, and
edges as horizontal links from an op to the lanes it touches.
"""

from __future__ import annotations

import html
import json
import math
from importlib import resources
from typing import Optional

from ..records import record
from .. import model as m
from ..checks.summary import shape_text
from .graph import Graph, Item, build_graph, heat_colour


# ---------------------------------------------------------------------------
# Layout (the HTML renderer runs the same algorithm in JavaScript)
# ---------------------------------------------------------------------------

ROW_H = 34
OP_W = 300
INDENT = 16
LANE_W = 120
TOP = 64


@record
class Row:
    item: Item
    depth: int
    header: bool  # a group's header row


def visible_rows(items: list, expanded: set, depth: int = 0) -> list:
    """Rows of the view: a group is one row, plus its children's rows when expanded."""
    rows = []
    for it in items:
        rows.append(Row(it, depth, it.is_group))
        if it.is_group and it.id in expanded:
            rows.extend(visible_rows(it.children, expanded, depth + 1))
            if it.kind == "REPEAT":
                for rep in it.rest:
                    rows.extend(visible_rows(rep, expanded, depth + 1))
    return rows


def default_expanded(items: list) -> set:
    """Groups shown open by default: IF/WHILE bodies open, repeats folded."""
    out = set()

    def walk(its):
        for it in its:
            if it.is_group and it.kind != "REPEAT":
                out.add(it.id)
                walk(it.children)

    walk(items)
    return out


def layout(graph: Graph, rows: list) -> tuple:
    """Lane of each array and its first/last row: ``({array: lane}, {array: (first, last)}, lanes)``."""
    span: dict = {}
    for r, row in enumerate(rows):
        edges = row.item.edges if (row.header and row.item.kind == "REPEAT") or not row.item.is_group else row.item.edges
        for e in edges:
            lo, hi = span.get(e.array, (r, r))
            span[e.array] = (min(lo, r), max(hi, r))
    lane_end: list = []
    lane: dict = {}
    for a in sorted(span, key=lambda a: span[a]):
        lo, hi = span[a]
        for li, end in enumerate(lane_end):
            if end < lo - 1:
                lane[a] = li
                lane_end[li] = hi
                break
        else:
            lane[a] = len(lane_end)
            lane_end.append(hi)
    return lane, span, len(lane_end)


def edge_width(nbytes: int) -> float:
    """Stroke width of an edge: 1 px for a few bytes, up to 7 px for a gigabyte."""
    return round(1 + min(6.0, max(0.0, math.log2(max(nbytes, 1)) / 5)), 2)


_COLORS = {"read": "#2b7bd6", "write": "#d6452b", "readwrite": "#8e44ad", "touches": "#888888"}
_KIND_FILL = {"KERNEL_LAUNCH": "#eef5ff", "IF": "#fff6e0", "WHILE": "#fff0f0", "THEN": "#fffaf0",
              "ELSE": "#fffaf0", "REPEAT": "#eefbef"}


def render_svg(graph: Graph) -> str:
    """A static SVG picture of the graph's default view (IF/WHILE bodies open, repeats folded)."""
    rows = visible_rows(graph.items, default_expanded(graph.items))
    lane, span, nlanes = layout(graph, rows)
    lane_x0 = OP_W + 40
    width = lane_x0 + max(nlanes, 1) * LANE_W + 20
    height = TOP + len(rows) * ROW_H + 30
    e = html.escape
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           '<defs>' + "".join(
               f'<marker id="a-{k}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
               f'orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="{c}"/></marker>'
               for k, c in _COLORS.items()) + '</defs>',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="20" font-size="15" font-weight="bold">{e(graph.title)}</text>',
           f'<text x="10" y="38" fill="#555">{graph.op_total} ops, {len(graph.arrays)} arrays'
           f'{"" if graph.has_access else " (no access record: edges say touches)"}</text>']
    arrays = {a.id: a for a in graph.arrays}
    for a, li in lane.items():
        x = lane_x0 + li * LANE_W + LANE_W / 2
        lo, hi = span[a]
        y0, y1 = TOP + lo * ROW_H, TOP + hi * ROW_H + ROW_H
        out.append(f'<line x1="{x}" y1="{y0}" x2="{x}" y2="{y1}" stroke="#bbb" stroke-width="2"/>')
    expanded = default_expanded(graph.items)
    open_groups: list = []

    def close_to(depth, r):
        while open_groups and open_groups[-1][0] >= depth:
            d, start, kind = open_groups.pop()
            fx = 4 + d * INDENT
            out.append(f'<rect x="{fx}" y="{TOP + start * ROW_H + 1}" width="{OP_W + 2 - fx}" '
                       f'height="{(r - start) * ROW_H - 2}" rx="7" fill="{_KIND_FILL.get(kind, "#f4f4f4")}" '
                       f'fill-opacity="0.55" stroke="#c9c9c9"/>')

    for r, row in enumerate(rows):
        close_to(row.depth, r)
        if row.item.is_group and row.item.id in expanded:
            open_groups.append((row.depth, r, row.item.kind))
    close_to(0, len(rows))
    for r, row in enumerate(rows):
        y = TOP + r * ROW_H
        it = row.item
        es = sorted((ed for ed in it.edges if ed.array in lane), key=lambda ed: -lane[ed.array])
        for k, ed in enumerate(es):
            dy = (k - (len(es) - 1) / 2) * min(5, 20 / max(len(es), 1))
            x = lane_x0 + lane[ed.array] * LANE_W + LANE_W / 2
            c = _COLORS.get(ed.mode, "#888")
            ends = {"read": 'marker-start="url(#a-read)"', "write": 'marker-end="url(#a-write)"',
                    "readwrite": 'marker-start="url(#a-readwrite)" marker-end="url(#a-readwrite)"'}.get(ed.mode, "")
            dash = ' stroke-dasharray="4 3"' if ed.mode == "touches" else ""
            out.append(f'<line x1="{OP_W + 4}" y1="{y + ROW_H / 2 + dy}" x2="{x - 6}" y2="{y + ROW_H / 2 + dy}" '
                       f'stroke="{c}" '
                       f'stroke-width="{edge_width(ed.bytes)}" stroke-opacity="0.75"{dash} {ends}/>')
        x = 8 + row.depth * INDENT
        w = OP_W - x
        fill = _KIND_FILL.get(it.kind, "#f4f4f4")
        if graph.profile is not None and it.time is not None and not (it.is_group and it.id in expanded):
            total = graph.profile.get("total_ms") or 0
            fill = heat_colour(it.time[0] / total if total > 0 else 0.0)
        out.append(f'<rect x="{x}" y="{y + 3}" width="{w}" height="{ROW_H - 6}" rx="5" fill="{fill}" '
                   f'stroke="#667" stroke-width="1"/>')
        label = it.label if len(it.label) <= 30 else it.label[:29] + "…"
        prefix = f"×{it.count} " if it.kind == "REPEAT" else ("" if it.kind == "KERNEL_LAUNCH" or it.is_group
                                                             else "")
        dims = it.details.get("dims")
        text = f"{it.index} {prefix}{label}" + (f" [{dims}]" if dims else "")
        out.append(f'<text x="{x + 6}" y="{y + ROW_H / 2 + 4}">{e(text)}</text>')
    for a, li in lane.items():
        lo = span[a][0]
        node = arrays[a]
        x = lane_x0 + li * LANE_W + 6
        y = TOP + lo * ROW_H - 2
        name = node.name if len(node.name) <= 14 else node.name[:13] + "…"
        out.append(f'<rect x="{x}" y="{y - 14}" width="{LANE_W - 12}" height="18" rx="9" fill="#fffbe6" '
                   f'stroke="#b8860b"/><text x="{x + 6}" y="{y - 1}" font-size="11">{e(name)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def render_dot(graph: Graph) -> str:
    """Graphviz text: ops chained in order, IF/WHILE/repeat groups as clusters, arrays as ellipses."""

    def q(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'

    lines = ["digraph capture {", "  rankdir=TB;", '  node [fontname="Helvetica", fontsize=10];',
             f"  label={q(graph.title)};"]
    order: list = []

    def emit(items, indent):
        pad = "  " * indent
        for it in items:
            if it.is_group:
                lines.append(f"{pad}subgraph {q('cluster_' + it.id)} {{")
                lab = (f"×{it.count} " if it.kind == "REPEAT" else "") + it.label
                lines.append(f"{pad}  label={q(lab)};")
                head = it.id + "_h"
                lines.append(f"{pad}  {q(head)} [shape=point];")
                order.append(head)
                for ed in it.edges:
                    _edge(head, ed)
                emit(it.children, indent + 1)
                lines.append(f"{pad}}}")
            else:
                lab = f"{it.index} {it.label}" + (f"\n[{it.details['dims']}]" if "dims" in it.details else "")
                lines.append(f"{pad}{q(it.id)} [shape=box, style=rounded, label={q(lab)}];")
                order.append(it.id)
                for ed in it.edges:
                    _edge(it.id, ed)

    edges_out: list = []

    def _edge(src, ed):
        a = f"a{ed.array}"
        style = f'penwidth={edge_width(ed.bytes)}, color="{_COLORS.get(ed.mode, "#888")}"'
        if ed.mode == "read":
            edges_out.append(f"  {q(a)} -> {q(src)} [{style}];")
        elif ed.mode == "write":
            edges_out.append(f"  {q(src)} -> {q(a)} [{style}];")
        else:
            extra = ", style=dashed" if ed.mode == "touches" else ""
            edges_out.append(f"  {q(src)} -> {q(a)} [{style}, dir=both{extra}];")

    emit(graph.items, 1)
    for a in graph.arrays:
        lab = a.name + (f"\n{a.dtype} {shape_text(a.shape)}" if a.dtype else "") + \
            ("" if a.bindings or a.name == f"region {a.region_id}" else f"\nregion {a.region_id}")
        lines.append(f"  {q('a' + str(a.id))} [shape=ellipse, style=filled, fillcolor=\"#fffbe6\", label={q(lab)}];")
    for x, y in zip(order, order[1:]):
        lines.append(f"  {q(x)} -> {q(y)} [color=\"#cccccc\", weight=10];")
    lines.extend(edges_out)
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_html(graph: Graph) -> str:
    """One self-contained HTML page: the graph as JSON plus its renderer; no network request of any kind."""
    files = resources.files(__package__).joinpath("assets")
    template = files.joinpath("graph.html").read_text(encoding="utf-8")
    script = files.joinpath("graph.js").read_text(encoding="utf-8")
    data = json.dumps(graph.to_json(), separators=(",", ":"), ensure_ascii=True)
    data = data.replace("</", "<\\/")  # never closes the script element, whatever a name holds
    return (template.replace("@@TITLE@@", html.escape(graph.title))
            .replace("@@DATA@@", data).replace("@@SCRIPT@@", script))


def write_graph(program: m.Program, dest, fmt: Optional[str] = None, title: str = "",
                profile: Optional[dict] = None) -> dict:
    """Draw a program's graph into ``dest`` (atomically).

    Args:
        program: The decoded program.
        dest: Output path; its suffix picks the format unless ``fmt`` is given.
        fmt: ``"html"``, ``"svg"`` or ``"dot"``.
        title: Shown in the picture.
        profile: Per-path times (:func:`wrpkit.debug.profile_format.load_profile`): ops
            are coloured by their share of the time and show it.

    Returns:
        ``{"path", "format", "bytes", "ops", "arrays", "items"}``.

    Raises:
        ValueError: The format is not one of html, svg, dot.
    """
    from pathlib import Path  # noqa: PLC0415

    from ..atomic_writes import atomic_write  # noqa: PLC0415

    dest = Path(dest)
    fmt = (fmt or dest.suffix.lstrip(".") or "html").lower()
    renderers = {"html": render_html, "svg": render_svg, "dot": render_dot}
    if fmt not in renderers:
        raise ValueError(f"cannot draw a graph as {fmt!r}: use html, svg or dot")
    graph = build_graph(program, title=title, profile=profile)
    text = renderers[fmt](graph).encode("utf-8")
    atomic_write(dest, [text])
    return {"path": str(dest), "format": fmt, "bytes": len(text), "ops": graph.op_total,
            "arrays": len(graph.arrays), "items": len(graph.items)}


__all__ = ["render_html", "render_svg", "render_dot", "write_graph", "layout", "visible_rows",
           "default_expanded", "edge_width", "Row"]
