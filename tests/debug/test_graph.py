"""Argument access recorded at capture, and ``wrp graph`` (HTML, SVG, DOT) on real captures.

The browser tests drive Debian's ``chromium`` through Playwright
(``executable_path``); without either they skip and say why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import warp as wp

import wrpkit
from proc_helpers import ROOT
from wrpkit.debug import graph as g
from wrpkit.debug import graph_render as draw
from wrpkit.formats import annotations as ann
from wrpkit.formats.container import open_capture
from wrpkit.run.capture.access import kernel_argument_access

CHROMIUM = os.environ.get("WRP_CHROMIUM", "/usr/bin/chromium")

wp.init()


# -- kernels with a known access pattern --------------------------------------


@wp.func
def _store_through(dst: wp.array(dtype=float), i: int, v: float):
    dst[i] = v


@wp.func
def _load_through(src: wp.array(dtype=float), i: int) -> float:
    return src[i]


@wp.kernel
def k_access(a: wp.array(dtype=float), b: wp.array(dtype=float), c: wp.array(dtype=float),
             d: wp.array(dtype=float), e: wp.array(dtype=float), f: wp.array(dtype=float),
             g_: wp.array(dtype=float), h: wp.array(dtype=float), unused: wp.array(dtype=float), s: float):
    i = wp.tid()
    b[i] = a[i] * s                      # a read, b written
    c[i] += 1.0                          # c read and written
    wp.atomic_add(d, 0, a[i])            # d atomically updated
    _store_through(e, i, _load_through(f, i))   # e written, f read through @wp.func
    alias = g_
    alias[i] = float(h.shape[0])         # g_ written through an alias; h only metadata


def _arrays(n=4):
    return [wp.zeros(n, dtype=float, device="cpu") for _ in range(9)]


def test_kernel_argument_access_from_source():
    acc = kernel_argument_access(k_access)
    A = ann.ArgumentAccess
    assert list(acc) == [A.READ, A.WRITE, A.READ_WRITE, A.READ_WRITE, A.WRITE, A.READ, A.WRITE, A.UNUSED,
                         A.UNUSED, A.UNKNOWN]
    assert kernel_argument_access(k_access) is acc  # cached per kernel


@pytest.fixture(scope="module")
def access_capture(tmp_path_factory) -> Path:
    """A wrpkit capture of one launch of ``k_access`` (so its annotations record access)."""
    arrs = _arrays()
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_access, dim=4, inputs=[*arrs, 2.0], device="cpu")
    return rec.save(tmp_path_factory.mktemp("acc") / "acc.wrp", inputs={"a": arrs[0]}, outputs={"b": arrs[1]})


def test_access_recorded_in_the_file_and_read_back(access_capture):
    path = access_capture
    with open_capture(path) as cap:
        access = ann.argument_access(cap.program)
        (key, words), = access.items()
        assert key[1] == k_access.key
        assert words == ["read", "write", "readwrite", "readwrite", "write", "read", "write", "unused", "unused",
                         None]
        gr = g.build_graph(cap.program)
        modes = {gr.arrays[e.array].name: e.mode for e in gr.items[0].edges}
        assert modes["a"] == "read" and modes["b"] == "write"
        assert sorted(modes.values()).count("touches") == 0
    res = subprocess.run([sys.executable, "-m", "wrpkit.cli", "inspect", str(path), "--ops"], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
    assert "a=read@r" in res.stdout and "b=write@r" in res.stdout and "c=readwrite@r" in res.stdout


def test_files_without_the_record_say_touches(captures):
    with open_capture(captures["scalars"]) as cap:
        prog = cap.program
        prog.annotations = b""
        assert ann.argument_access(prog) == {}
        gr = g.build_graph(prog)
        modes = {e.mode for it in gr.items for e in g._all_edges(it) if it.kind != "IF"}
        assert modes == {"touches"}
        assert not gr.has_access


def test_old_annotations_without_access_decode_as_unknown(access_capture):
    with open_capture(access_capture) as cap:
        a = ann.read_annotations(cap.program)
    stripped = ann.Annotations(a.producer, a.signature, tuple(
        ann.KernelSignature(k.kernel_key, k.module_hash, tuple(
            ann.KernelArgument(x.name, x.type, x.value_size, x.dtype, x.ndim) for x in k.arguments))
        for k in a.kernel_signatures), a.module_digests)
    back = ann.decode_annotations(ann.encode_annotations(stripped))
    assert all(x.access_word is None for k in back.kernel_signatures for x in k.arguments)
    # an access value this reader does not know reads as unknown
    odd = ann.KernelArgument("x", "int32", 4, None, 0, 200)
    assert odd.access_word is None


# -- the graph model ----------------------------------------------------------


def _ops_in(items) -> int:
    n = 0
    for it in items:
        if it.is_group:
            n += (it.kind in ("IF", "WHILE")) + _ops_in(it.children)
            for rep in it.rest:
                n += _ops_in(rep)
        else:
            n += 1
    return n


@pytest.mark.parametrize("name", ["scalars", "capture_while", "nested_cond", "scan", "radix_sort", "mesh"])
def test_graph_covers_every_op(captures, name):
    with open_capture(captures[name]) as cap:
        gr = g.build_graph(cap.program)
        total = sum(1 for _ in wrpkit.model.walk_ops(cap.program.ops))
    assert gr.op_total == total == _ops_in(gr.items)
    regions = {a.region_id for a in gr.arrays}
    assert len(regions) == len(gr.arrays)


@pytest.fixture(scope="session")
def big_capture(tmp_path_factory) -> Path:
    """A capture with 10,000 kernel launches (9,999 of one kernel after one other)."""
    import programs  # noqa: PLC0415

    path = tmp_path_factory.mktemp("big") / "big.wrp"
    programs.capture_to_file(programs.make_big(10_000, 4096), path)
    return path


def test_repeats_fold_into_one_group(big_capture):
    with open_capture(big_capture) as cap:
        gr = g.build_graph(cap.program)
    assert gr.op_total == 10_000 == _ops_in(gr.items)
    reps = [it for it in gr.items if it.kind == "REPEAT"]
    assert len(reps) == 1 and reps[0].count == 9_999 and len(reps[0].children) == 1
    assert reps[0].children[0].details["kernel"].endswith("k_tiny")
    # identical launches (k_tiny's scalar cycles through 7 values) share one detail record, and the page
    # writes each record once and the other repeats as two columns of references
    ops = [reps[0].children[0]] + [r[0] for r in reps[0].rest]
    assert ops[3].details is ops[10].details and ops[3].edges is ops[10].edges
    assert ops[3].details is not ops[4].details and ops[3].details["arguments"] != ops[4].details["arguments"]
    data = gr.to_json()
    assert len(data["D"]) == 1 + 7 + 1  # k_touch_big, 7 k_tiny variants, the REPEAT group
    rep_json = next(it for it in data["items"] if it["k"] == "REPEAT")
    assert "r" not in rep_json and len(rep_json["rd"]) == len(rep_json["re"]) == 9_998
    assert [data["D"][d] for d in rep_json["rd"]] == [r[0].details for r in reps[0].rest]


def test_svg_and_dot(captures, tmp_path):
    with open_capture(captures["capture_while"]) as cap:
        gr = g.build_graph(cap.program, title="while")
    svg = ET.fromstring(draw.render_svg(gr))
    texts = " ".join(t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text"))
    assert "WHILE" in texts
    dot = draw.render_dot(gr)
    assert dot.startswith("digraph") and "cluster_" in dot
    if shutil.which("dot"):
        subprocess.run(["dot", "-Tsvg", "-o", str(tmp_path / "x.svg")], input=dot.encode(), check=True)


def test_dot_label_of_an_array_no_kernel_names_says_its_region_once(tmp_path):
    """An unbound array that only a fill and a copy touch has no name but its region: once in its label."""
    x = wp.array(np.ones(8, np.float32), device="cpu")
    scratch = wp.zeros(8, dtype=float, device="cpu")
    wp.capture_begin(device="cpu", apic=True)
    scratch.fill_(2.0)
    wp.copy(x, scratch)
    graph = wp.capture_end(device="cpu")
    path = tmp_path / "fill_copy.wrp"
    wp.capture_save(graph, str(path), inputs={"x": x})
    with open_capture(path) as cap:
        gr = g.build_graph(cap.program, title="fill")
        rid = next(r.region_id for r in cap.program.regions if r.region_id not in
                   {b.region_id for b in cap.program.bindings})
    labels = [ln for ln in draw.render_dot(gr).splitlines() if "shape=ellipse" in ln]
    unbound = [ln for ln in labels if f"region {rid}" in ln]
    assert len(unbound) == 1 and unbound[0].count(f"region {rid}") == 1, labels
    assert any('label="x"' in ln for ln in labels), labels


def test_cli_graph_formats_and_errors(captures, tmp_path):
    src = captures["nested_cond"]
    for ext in ("html", "svg", "dot"):
        out = tmp_path / f"g.{ext}"
        res = subprocess.run([sys.executable, "-m", "wrpkit.cli", "graph", str(src), "-o", str(out), "--json"],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert out.stat().st_size > 0 and f'"format": "{ext}"' in res.stdout
    bad = subprocess.run([sys.executable, "-m", "wrpkit.cli", "graph", str(src), "-o", str(tmp_path / "g.png")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and not (tmp_path / "g.png").exists()
    junk = tmp_path / "junk.wrp"
    junk.write_bytes(b"WRP1" + b"\0" * 40)
    res = subprocess.run([sys.executable, "-m", "wrpkit.cli", "graph", str(junk), "-o", str(tmp_path / "j.html")],
                         capture_output=True, text=True)
    assert res.returncode == 3 and "Traceback" not in res.stderr and not (tmp_path / "j.html").exists()


def test_html_is_self_contained(captures, tmp_path):
    out = tmp_path / "g.html"
    with open_capture(captures["capture_while"]) as cap:
        draw.write_graph(cap.program, out)
    text = out.read_text()
    for needle in ("http://", "https://", "src=", "href=", "@import", "url(http"):
        if needle == "http://":
            # the only http:// allowed is the SVG namespace, which is an identifier, never fetched
            assert text.replace("http://www.w3.org/2000/svg", "").count("http://") == 0
        else:
            assert needle not in text, needle


# -- the browser ---------------------------------------------------------------


def _browser():
    try:
        from playwright.sync_api import sync_playwright  # noqa: PLC0415
    except ImportError:
        pytest.skip("playwright is not installed (pip install '.[test]')")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set WRP_CHROMIUM)")
    return sync_playwright


@pytest.fixture(scope="module")
def browser():
    sync_playwright = _browser()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


_SWEEP = """async () => {
  // scroll from top to bottom a screenful at a time, as a user would, and note every op, group and
  // array node that is on screen (below the sticky header) at some point
  const frame = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const nodes = new Map(), arrays = new Map();
  const head = document.querySelector("header").getBoundingClientRect().bottom;
  for (let y = 0; ; y += innerHeight - head) {
    window.scrollTo(0, y);
    await frame();
    for (const [sel, key, out] of [["#graph g.node", "id", nodes], ["#graph g.arr", "a", arrays]]) {
      for (const n of document.querySelectorAll(sel)) {
        const r = n.getBoundingClientRect();
        if (r.bottom > head && r.top < innerHeight && !out.has(n.dataset[key])) out.set(n.dataset[key], r.top + scrollY);
      }
    }
    if (scrollY + innerHeight >= document.documentElement.scrollHeight) break;
  }
  window.scrollTo(0, 0);
  await frame();
  const order = m => Array.from(m.entries()).sort((a, b) => a[1] - b[1]).map(e => e[0]);
  return {nodes: order(nodes), arrays: order(arrays).map(Number)};
}"""


_SCREENS = """async (fractions) => {
  // scroll to each fraction of the page's height and note the op and group rows on screen, top to bottom
  const frame = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const head = document.querySelector("header").getBoundingClientRect().bottom;
  const screens = [];
  for (const f of fractions) {
    window.scrollTo(0, f * (document.documentElement.scrollHeight - innerHeight));
    await frame();
    const on = [];
    for (const n of document.querySelectorAll("#graph g.node")) {
      const r = n.getBoundingClientRect();
      if (r.top >= head && r.bottom <= innerHeight) on.push([r.top, n.dataset.id]);
    }
    screens.push(on.sort((a, b) => a[0] - b[0]).map(e => e[1]));
  }
  return {screens: screens, height: innerHeight - head};
}"""


class Page:
    """An opened graph page that records console errors and network requests."""

    def __init__(self, browser, html: Path, height: int = 900):
        self.errors, self.requests = [], []
        self.page = browser.new_page(viewport={"width": 1400, "height": height})
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.url = html.resolve().as_uri()
        self.page.goto(self.url)
        self.page.wait_for_selector("body[data-ready='1']")

    def js(self, expr, arg=None):
        return self.page.evaluate(expr, arg)

    def drawn(self) -> list:
        """Ids of the op and group rows in the page now (the rows around the viewport)."""
        return self.js("() => Array.from(document.querySelectorAll('#graph g.node')).map(n => n.dataset.id)")

    def screens(self, fractions) -> dict:
        """``{"screens": [[row ids wholly on screen]], "height": px}`` at each fraction of the scroll height."""
        return self.js(_SCREENS, list(fractions))

    def seen(self) -> dict:
        """``{"nodes": [row ids], "arrays": [array ids]}`` a user sees scrolling through the whole page."""
        return self.js(_SWEEP)

    def check_clean(self):
        assert self.errors == []
        assert [u for u in self.requests if u != self.url] == []


def _html(path: Path, tmp_path: Path) -> tuple:
    out = tmp_path / (path.stem + ".html")
    with open_capture(path) as cap:
        draw.write_graph(cap.program, out, title=path.name)
        gr = g.build_graph(cap.program)
    return out, gr


def _expected_rows(gr) -> list:
    return [r.item.id for r in draw.visible_rows(gr.items, draw.default_expanded(gr.items))]


@pytest.fixture(scope="module")
def sample_captures(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("samples")
    paths = {}
    for script in sorted((ROOT / "samples").glob("[a-z]*.py")):
        subprocess.run([sys.executable, str(script), str(out)], check=True, capture_output=True)
        paths[script.stem] = out / f"{script.stem}.wrp"
    return paths


@pytest.mark.slow  # drives Chromium
def test_browser_samples(browser, sample_captures, tmp_path):
    assert len(sample_captures) >= 4
    for name, path in sample_captures.items():
        html, gr = _html(path, tmp_path)
        p = Page(browser, html)
        seen = p.seen()
        assert seen["nodes"] == _expected_rows(gr), name
        # every array with an edge in the view is drawn as a data node
        want = {e.array for r in draw.visible_rows(gr.items, draw.default_expanded(gr.items)) for e in r.item.edges}
        assert set(seen["arrays"]) == want, name
        p.check_clean()
        p.page.close()


@pytest.mark.slow  # drives Chromium
def test_browser_while_folds_unfolds_and_details(browser, sample_captures, tmp_path):
    html, gr = _html(sample_captures["while_loop"], tmp_path)
    p = Page(browser, html)
    whiles = [it for it in gr.items if it.kind == "WHILE"]
    assert whiles
    w = whiles[0]
    body = [c.id for c in w.children]
    assert set(body) <= set(p.drawn())
    p.page.click(f"[data-tog='{w.id}']")
    after = p.drawn()
    assert w.id in after and not set(body) & set(after)
    p.page.click(f"[data-tog='{w.id}']")
    assert set(body) <= set(p.drawn())
    # click a kernel launch: the panel names its kernel and dims
    launch = next(c for c in g._walk(gr.items) if c.kind == "KERNEL_LAUNCH")
    p.page.click(f"g.node[data-id='{launch.id}'] rect")
    panel = p.page.inner_text("#details")
    assert launch.details["kernel"] in panel and launch.details["dims"] in panel
    # search: the matching launches light up, nothing else
    short = launch.label
    p.page.fill("#search", short)
    hits = set(p.js("() => Array.from(document.querySelectorAll('#graph g.node.hit')).map(n => n.dataset.id)"))
    want = {it.id for it in g._walk(gr.items) if not it.is_group and short.lower() in
            (it.label + " " + it.details.get("kernel", "")).lower()}
    assert hits == want and hits
    lit = p.js("() => Array.from(document.querySelectorAll('#graph line.edge.hit')).map(e => e.dataset.from)")
    assert set(lit) == want
    p.check_clean()


@pytest.mark.slow  # drives Chromium
def test_browser_10000_ops(browser, big_capture, tmp_path):
    html, gr = _html(big_capture, tmp_path)
    assert html.stat().st_size < 5 * 2**20
    p = Page(browser, html)
    assert p.drawn() == _expected_rows(gr)
    rep = next(it for it in gr.items if it.kind == "REPEAT")
    assert "×9999" in p.page.text_content(f"g.node[data-id='{rep.id}']")
    # unfolding the ×9999 group lays out every op; the page draws only the rows near the viewport, so
    # wherever a user scrolls, the screen is full of the right ops in order, from the first to the last
    p.page.click(f"[data-tog='{rep.id}']")
    want = [r.item.id for r in draw.visible_rows(gr.items, draw.default_expanded(gr.items) | {rep.id})]
    assert len(want) == 10_000 + 1
    assert p.js("() => +document.getElementById('graph').dataset.rows") == len(want)
    assert 0 < len(p.drawn()) < 1_000
    seen = p.screens([i / 40 for i in range(41)] + [0.5001, 0.3])
    where = {rid: k for k, rid in enumerate(want)}
    full = int(seen["height"] // 34) - 1
    for screen in seen["screens"]:
        assert len(screen) >= full
        k = where[screen[0]]
        assert screen == want[k:k + len(screen)]
    assert seen["screens"][0][0] == want[0] and seen["screens"][40][-1] == want[-1]
    starts = [where[sc[0]] for sc in seen["screens"][:41]]
    assert starts == sorted(starts) and len(set(starts)) == 41
    # the last op, once scrolled to, shows its details on click
    last = gr.items[-1].rest[-1][-1] if gr.items[-1].kind == "REPEAT" else gr.items[-1]
    assert p.page.query_selector(f"g.node[data-id='{last.id}']") is None  # not drawn while far off screen
    p.js("() => new Promise(r => { window.scrollTo(0, document.documentElement.scrollHeight); "
         "requestAnimationFrame(() => requestAnimationFrame(r)); })")
    p.page.click(f"g.node[data-id='{last.id}'] rect")
    assert last.details["kernel"] in p.page.inner_text("#details")
    p.js("() => new Promise(r => { window.scrollTo(0, 0); requestAnimationFrame(() => requestAnimationFrame(r)); })")
    # searching for a kernel inside the folded group lights the group up
    p.page.click(f"[data-tog='{rep.id}']")
    p.page.fill("#search", "k_tiny")
    hits = p.js("() => Array.from(document.querySelectorAll('#graph g.node.hit')).map(n => n.dataset.id)")
    assert hits == [rep.id]
    p.check_clean()


@wp.kernel
def k_values_and_views(x: wp.array(dtype=float), m: wp.array2d(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    v = x[i]                 # an element: a value, not an alias of x
    row = m[i]               # a view of m's row i
    row[0] = v               # a store through the view writes m
    out[i] = v + 1.0         # reading the value v does not touch x again


def test_element_values_are_not_aliases():
    A = ann.ArgumentAccess
    assert kernel_argument_access(k_values_and_views) == (A.READ, A.WRITE, A.WRITE)
