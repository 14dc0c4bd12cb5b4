// wrp graph renderer: draws the capture graph embedded in this page.
// Layout (as wrpkit/debug/graph.py's layout()): ops in one column in execution
// order; each array on a vertical lane to the right spanning its first to its
// last use; lanes reused by arrays whose uses do not overlap; edges are
// horizontal links from an op to the lanes it touches, width by bytes.
//
// Speed: details and edge lists come once each in tables (G.D, G.E) that ops
// refer to by index; the other repeats of a folded xN group come as two
// columns of such references.  The page lays out every row of the current
// view (cheap: arrays of numbers) but draws only the rows around the
// viewport, as one SVG string set with one innerHTML, and draws again when
// scrolling nears the edge of what is drawn.
"use strict";
(function () {
  var G = JSON.parse(document.getElementById("graph-data").textContent);
  var D = G.D || [], E = G.E || [];
  var ROW_H = 34, OP_W = 300, INDENT = 16, LANE_W = 120, TOP = 24;
  var OVERSCAN = 40;  // rows drawn beyond each edge of the viewport
  var COLORS = {read: "#2b7bd6", write: "#d6452b", readwrite: "#8e44ad", touches: "#888888"};
  var FILL = {KERNEL_LAUNCH: "#eef5ff", IF: "#fff6e0", WHILE: "#fff0f0", THEN: "#fffaf0", ELSE: "#fffaf0", REPEAT: "#eefbef"};
  var byId = new Map(), parent = new Map();
  // a profile (wrp graph --profile): ops carry t = [ms, runs]; fill by share of the total, classes of P.heat
  var P = G.profile || null;
  function share(it) { return P && it.t && P.total_ms > 0 ? it.t[0] / P.total_ms : null; }
  function heat(sh) {
    for (var h = 0; h < P.heat.length; h++) if (sh >= P.heat[h][0]) return P.heat[h][1];
    return P.heat[P.heat.length - 1][1];
  }
  function ms(v) { return v >= 100 ? v.toFixed(1) : v >= 1 ? v.toFixed(3) : v.toFixed(4); }
  function pct(sh) { return (100 * sh).toFixed(sh >= 0.1 ? 0 : 1) + "%"; }
  var expanded = {};
  var state = {query: "", selected: null, hits: {}, arrHits: {}};
  var V = null;            // the current view: rows, lanes, frames, size
  var drawn = [0, -1];     // rows [first, last] in the SVG now

  // the other repeats of a folded group, rebuilt from their columns of references
  function unpackRest(g) {
    var body = g.c, p = body.length, out = [];
    var base = body.map(function (b) { var m = /^(.*?)(\d+)$/.exec(b.i); return [m[1], +m[2]]; });
    for (var j = 1; j < g.n; j++) {
      var rep = [];
      for (var m = 0; m < p; m++) {
        var q = (j - 1) * p + m, idx = base[m][0] + (base[m][1] + j * p);
        var it = {id: "o" + idx, k: body[m].k, l: body[m].l, i: idx};
        if (body[m].s) it.s = body[m].s;  // a repeat's op is issued where the first repeat's is
        if (g.rd[q] >= 0) it.d = g.rd[q];
        if (g.re[q] >= 0) it.e = g.re[q];
        if (g.rt && g.rt[q]) it.t = g.rt[q];
        rep.push(it);
      }
      out.push(rep);
    }
    delete g.rd; delete g.re; delete g.rt;
    return out;
  }

  function index(items, par) {
    for (var j = 0; j < items.length; j++) {
      var it = items[j];
      if (typeof it.d === "number") it.d = D[it.d];
      if (typeof it.e === "number") it.e = E[it.e];
      byId.set(it.id, it); parent.set(it.id, par);
      if (it.c) {
        index(it.c, it.id);
        if (it.r) for (var r = 0; r < it.r.length; r++) index(it.r[r], it.id);
        if (it.k !== "REPEAT") expanded[it.id] = true;
      }
    }
  }
  index(G.items, null);

  // a group's other repeats (those sent as columns are rebuilt on first use: unfolding, search)
  function restOf(g) {
    if (g.rd) {
      g.r = unpackRest(g);
      for (var r = 0; r < g.r.length; r++) index(g.r[r], g.id);
    }
    return g.r || [];
  }
  function unpackAll(items) {
    for (var j = 0; j < items.length; j++) {
      var it = items[j];
      if (!it.c) continue;
      unpackAll(it.c);
      var rest = restOf(it);
      for (var r = 0; r < rest.length; r++) unpackAll(rest[r]);
    }
  }

  var ESC = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"};
  function esc(s) { return String(s).replace(/[&<>"']/g, function (c) { return ESC[c]; }); }
  function width(bytes) { return Math.round((1 + Math.min(6, Math.max(0, Math.log2(Math.max(bytes, 1)) / 5))) * 100) / 100; }
  function size(b) {
    if (b < 1024) return b + " B";
    var u = ["KiB", "MiB", "GiB", "TiB"], i = -1;
    do { b /= 1024; i++; } while (b >= 1024 && i < 3);
    return b.toFixed(1) + " " + u[i];
  }

  function rows() {
    var out = [];
    function walk(items, depth) {
      for (var j = 0; j < items.length; j++) {
        var it = items[j];
        out.push({it: it, depth: depth});
        if (it.c && expanded[it.id]) {
          walk(it.c, depth + 1);
          var rest = restOf(it);
          for (var r = 0; r < rest.length; r++) walk(rest[r], depth + 1);
        }
      }
    }
    walk(G.items, 0);
    return out;
  }

  function layout(rs) {
    var span = [], order = [];
    for (var i = 0; i < rs.length; i++) {
      var es = rs[i].it.e;
      if (!es) continue;
      for (var k = 0; k < es.length; k++) {
        var a = es[k][0], s = span[a];
        if (!s) { span[a] = [i, i]; order.push(a); } else { s[1] = i; }
      }
    }
    order.sort(function (a, b) { return span[a][0] - span[b][0] || span[a][1] - span[b][1]; });
    var laneEnd = [], lane = [];
    order.forEach(function (a) {
      var lo = span[a][0], hi = span[a][1], placed = false;
      for (var l = 0; l < laneEnd.length; l++) {
        if (laneEnd[l] < lo - 1) { lane[a] = l; laneEnd[l] = hi; placed = true; break; }
      }
      if (!placed) { lane[a] = laneEnd.length; laneEnd.push(hi); }
    });
    return {lane: lane, span: span, order: order, n: laneEnd.length};
  }

  // lay out the whole view (after folding, unfolding, search or selection), then draw what is in sight
  function render() {
    var rs = rows(), L = layout(rs);
    // frames around open groups: from the header row to the group's last row
    var frames = [], open = [];
    function closeTo(depth, i) {
      while (open.length && open[open.length - 1].depth >= depth) {
        var f = open.pop();
        frames.push({depth: f.depth, row: f.row, end: i, kind: f.kind});
      }
    }
    for (var i = 0; i < rs.length; i++) {
      closeTo(rs[i].depth, i);
      if (rs[i].it.c && expanded[rs[i].it.id]) open.push({depth: rs[i].depth, row: i, kind: rs[i].it.k});
    }
    closeTo(0, rs.length);
    var laneX0 = OP_W + 40;
    V = {rs: rs, L: L, frames: frames, laneX0: laneX0,
         W: laneX0 + Math.max(L.n, 1) * LANE_W + 20, H: TOP + rs.length * ROW_H + 20};
    draw(true);
    var nh = Object.keys(state.hits).length + Object.keys(state.arrHits).length;
    document.getElementById("hits").textContent = state.query ? nh + " matches" : "";
  }

  // rows in sight: [first, last]
  function inSight() {
    var view = document.getElementById("view");
    var top = view.getBoundingClientRect().top + 8;  // #view's padding
    var first = Math.floor((-top - TOP) / ROW_H), n = Math.ceil(window.innerHeight / ROW_H) + 1;
    first = Math.max(0, Math.min(first, V.rs.length - 1));
    return [first, Math.min(V.rs.length - 1, first + n)];
  }

  function draw(force) {
    var w = inSight(), n = V.rs.length;
    if (!force) {
      var slack = OVERSCAN / 3;
      var okTop = drawn[0] === 0 || w[0] - drawn[0] >= slack;
      var okBottom = drawn[1] >= n - 1 || drawn[1] - w[1] >= slack;
      if (okTop && okBottom) return;
    }
    var lo = Math.max(0, w[0] - OVERSCAN), hi = Math.min(n - 1, w[1] + OVERSCAN);
    drawn = [lo, hi];
    var rs = V.rs, L = V.L, laneX0 = V.laneX0;
    var y0 = TOP + lo * ROW_H, y1 = TOP + (hi + 1) * ROW_H;
    var dim = state.query ? " dim" : "";
    var s = ['<svg id="graph" class="' + dim + '" xmlns="http://www.w3.org/2000/svg" width="' + V.W + '" height="' + V.H + '" font-size="12" data-rows="' + n + '" data-first="' + lo + '" data-last="' + hi + '">'];
    s.push("<defs>");
    for (var k in COLORS) s.push('<marker id="m-' + k + '" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="5" markerHeight="5" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="' + COLORS[k] + '"/></marker>');
    s.push("</defs>");
    // lifelines, clipped to the drawn rows
    for (var o = 0; o < L.order.length; o++) {
      var a = L.order[o], sp = L.span[a];
      if (sp[1] < lo || sp[0] > hi) continue;
      var x = laneX0 + L.lane[a] * LANE_W + LANE_W / 2;
      s.push('<line class="life" x1="' + x + '" y1="' + Math.max(TOP + sp[0] * ROW_H, y0) + '" x2="' + x + '" y2="' + Math.min(TOP + sp[1] * ROW_H + ROW_H, y1) + '"/>');
    }
    for (var f = 0; f < V.frames.length; f++) {
      var fr = V.frames[f];
      if (fr.end - 1 < lo || fr.row > hi) continue;
      var fx = 4 + fr.depth * INDENT;
      s.push('<rect class="frame" x="' + fx + '" y="' + (TOP + fr.row * ROW_H + 1) + '" width="' + (OP_W + 2 - fx) + '" height="' + ((fr.end - fr.row) * ROW_H - 2) + '" rx="7" fill="' + (FILL[fr.kind] || "#f4f4f4") + '" fill-opacity=".55" stroke="#c9c9c9"/>');
    }
    var edges = [], nodes = [];
    for (var i = lo; i <= hi; i++) {
      var r = rs[i], it = r.it, y = TOP + i * ROW_H, hit = state.hits[it.id];
      var es = (it.e || []).slice().sort(function (p, q) { return L.lane[q[0]] - L.lane[p[0]]; });
      for (var j = 0; j < es.length; j++) {
        // longest first (drawn below), each a few pixels apart so that none hides another
        var e = es[j], ax = laneX0 + L.lane[e[0]] * LANE_W + LANE_W / 2, mode = e[1];
        var dy = (j - (es.length - 1) / 2) * Math.min(5, 20 / Math.max(es.length, 1));
        var mk = mode === "read" ? ' marker-start="url(#m-read)"' : mode === "write" ? ' marker-end="url(#m-write)"' :
          mode === "readwrite" ? ' marker-start="url(#m-readwrite)" marker-end="url(#m-readwrite)"' : ' stroke-dasharray="4 3"';
        var eh = hit || state.arrHits[e[0]] ? " hit" : "";
        edges.push('<line class="edge' + eh + '" data-from="' + it.id + '" data-a="' + e[0] + '" data-mode="' + mode + '" x1="' + (OP_W + 4) + '" y1="' + (y + ROW_H / 2 + dy) + '" x2="' + (ax - 6) + '" y2="' + (y + ROW_H / 2 + dy) + '" stroke="' + COLORS[mode] + '" stroke-width="' + width(e[2]) + '"' + mk + '><title>' + esc(e[3] + ": " + mode + ", " + size(e[2])) + '</title></line>');
      }
      var x0 = 8 + r.depth * INDENT, w0 = OP_W - x0, cls = "node" + (hit ? " hit" : "") + (state.selected === it.id ? " sel" : "");
      var sh = share(it), fill = FILL[it.k] || "#f4f4f4", ink = "", timeText = "";
      if (sh !== null && !(it.c && expanded[it.id])) {  // an open group's ops show their own heat
        fill = heat(sh);
        if (sh >= P.heat[1][0]) { ink = ' fill="#fff"'; cls += " hot"; }
      }
      if (sh !== null) timeText = '<text class="time" x="' + (x0 + w0 - 6) + '" y="' + (y + ROW_H / 2 + 4) + '" text-anchor="end"' + ink + ">" + esc(ms(it.t[0]) + " ms " + pct(sh)) + "</text>";
      var maxLabel = sh !== null ? 22 : 34;
      var label = it.l.length > maxLabel ? it.l.slice(0, maxLabel - 1) + "\u2026" : it.l;
      var dims = it.d && it.d.dims ? " [" + it.d.dims + "]" : "";
      var tog = "";
      if (it.c) tog = '<text class="tog" data-tog="' + it.id + '" x="' + (x0 + 6) + '" y="' + (y + ROW_H / 2 + 4) + '" style="pointer-events:all">' + (expanded[it.id] ? "\u25be" : "\u25b8") + "</text>";
      // labels carry their own kind ("IF n+0", "then (3)"): only a repeat gets its count in front
      var pre = it.k === "REPEAT" ? "\u00d7" + it.n + " " : "";
      nodes.push('<g class="' + cls + '" data-id="' + it.id + '" data-row="' + i + '" data-kind="' + it.k + '"' + (sh !== null ? ' data-share="' + sh.toFixed(4) + '" data-fill="' + fill + '"' : "") + '><rect x="' + x0 + '" y="' + (y + 3) + '" width="' + w0 + '" height="' + (ROW_H - 6) + '" rx="5" fill="' + fill + '"/>' + tog +
        '<text x="' + (x0 + (it.c ? 18 : 6)) + '" y="' + (y + ROW_H / 2 + 4) + '"' + ink + '><tspan fill="' + (ink ? "#fde" : sh !== null ? "#444" : "#888") + '">' + esc(it.i || "") + "</tspan> " + esc(pre + label + (sh !== null ? "" : dims)) + "</text>" + timeText + "</g>");
    }
    s.push(edges.join(""), nodes.join(""));
    // an array's name at the top of its lane
    for (o = 0; o < L.order.length; o++) {
      a = L.order[o];
      if (L.span[a][0] < lo || L.span[a][0] > hi) continue;
      var node = G.arrays[a], ax0 = laneX0 + L.lane[a] * LANE_W + 6, ay = TOP + L.span[a][0] * ROW_H - 2;
      var nm = node.name.length > 14 ? node.name.slice(0, 13) + "\u2026" : node.name;
      s.push('<g class="arr' + (state.arrHits[a] ? " hit" : "") + '" data-a="' + a + '"><rect x="' + ax0 + '" y="' + (ay - 12) + '" width="' + (LANE_W - 12) + '" height="18" rx="9"/><text x="' + (ax0 + 7) + '" y="' + (ay + 1) + '" font-size="11">' + esc(nm) + "</text><title>" + esc(node.name) + "</title></g>");
    }
    s.push("</svg>");
    document.getElementById("view").innerHTML = s.join("");
  }

  function table(obj) {
    var h = "<table>";
    for (var k in obj) {
      var v = obj[k];
      if (Array.isArray(v)) continue;
      h += "<tr><td>" + esc(k) + "</td><td>" + esc(v) + "</td></tr>";
    }
    return h + "</table>";
  }
  function showItem(id) {
    var it = byId.get(id); if (!it) return;
    state.selected = id;
    var d = it.d || {}, h = "<h2>" + esc((it.i ? it.i + " " : "") + (d.kernel || it.l)) + "</h2>";
    if (P && it.t) {
      var sh = share(it);
      h += '<h3>time</h3><table id="time">' + "<tr><td>total</td><td>" + ms(it.t[0]) + " ms</td></tr><tr><td>share</td><td>" + pct(sh) +
        " of " + ms(P.total_ms) + " ms</td></tr><tr><td>runs</td><td>" + it.t[1] + "</td></tr>" +
        (it.t[1] > 0 ? "<tr><td>per run</td><td>" + ms(it.t[0] / it.t[1]) + " ms</td></tr>" : "") + "</table>";
    }
    if (it.s) h += '<h3>issued at</h3><table id="source"><tr><td>' + esc(it.s) + "</td></tr></table>";
    h += table(d);
    if (d.arguments && d.arguments.length) {
      h += "<h3>arguments</h3><table>";
      d.arguments.forEach(function (a) { h += "<tr><td>" + esc(a[0]) + "</td><td>" + esc(a[2]) + (a[3] ? " <b>" + esc(a[3]) + "</b>" : "") + '<br><span style="color:#888">' + esc(a[1]) + "</span></td></tr>"; });
      h += "</table>";
    }
    if (d.relocations && d.relocations.length) {
      h += "<h3>relocations</h3><table><tr><td>value byte</td><td>region +offset (kind)</td></tr>";
      d.relocations.forEach(function (r) { h += "<tr><td>" + r[0] + "</td><td>" + r[1] + " +" + r[2] + " (" + esc(r[3]) + ")</td></tr>"; });
      h += "</table>";
    }
    if (it.e && it.e.length) {
      h += "<h3>arrays</h3><table>";
      it.e.forEach(function (e) { h += "<tr><td>" + esc(e[1]) + "</td><td>" + esc(G.arrays[e[0]].name) + " (" + esc(e[3]) + ", " + size(e[2]) + ")</td></tr>"; });
      h += "</table>";
    }
    document.getElementById("details").innerHTML = h;
    render();
  }
  function showArray(a) {
    var n = G.arrays[a], roles = {};
    function walk(items) {
      items.forEach(function (it) {
        if (!it.c) (it.e || []).forEach(function (e) { if (e[0] === n.id) roles[(it.d && it.d.kernel) || it.l] = e[1]; });
        if (it.c) { walk(it.c); restOf(it).forEach(walk); }
      });
    }
    walk(G.items);
    var h = "<h2>" + esc(n.name) + "</h2>" + table({region: n.region, size: size(n.size), dtype: n.dtype || "unknown",
      shape: n.shape.length ? n.shape.join("x") : "unknown", bindings: n.bindings.join(", ") || "none", roles: n.roles.join(", ") || "none"});
    h += "<h3>used by</h3><table>";
    for (var k in roles) h += "<tr><td>" + esc(roles[k]) + "</td><td>" + esc(k) + "</td></tr>";
    document.getElementById("details").innerHTML = h + "</table>";
  }

  var texts = new Map();  // an op's searchable text, by its detail record
  function search(q) {
    state.query = q = (q || "").trim().toLowerCase();
    state.hits = {}; state.arrHits = {};
    if (q) {
      unpackAll(G.items);
      var visible = new Set(), rs = rows();
      for (var i = 0; i < rs.length; i++) visible.add(rs[i].it.id);
      byId.forEach(function (it, id) {
        if (it.c) return;
        var text = texts.get(it.d || it.l);  // ops that share a detail record share their text
        if (text === undefined) {
          text = (it.l + " " + ((it.d && it.d.kernel) || "")).toLowerCase();
          texts.set(it.d || it.l, text);
        }
        if (text.indexOf(q) < 0) return;
        var v = id;  // the match itself, or the folded group that hides it
        for (var p = id; p !== null && p !== undefined; p = parent.get(p)) if (visible.has(p) && (p === id || !expanded[p])) { v = p; break; }
        state.hits[v] = true;
      });
      G.arrays.forEach(function (n) {
        if ((n.name + " " + n.bindings.join(" ")).toLowerCase().indexOf(q) >= 0) state.arrHits[n.id] = true;
      });
    }
    render();
    return {items: Object.keys(state.hits), arrays: Object.keys(state.arrHits).map(Number)};
  }
  function setAll(open) {
    byId.forEach(function (it, id) { if (it.c) expanded[id] = open; });
    if (state.query) search(state.query); else render();
  }
  function toggle(id, open) {
    expanded[id] = open === undefined ? !expanded[id] : open;
    if (state.query) search(state.query); else render();
  }

  document.getElementById("view").addEventListener("click", function (ev) {
    var t = ev.target;
    if (t.getAttribute && t.getAttribute("data-tog")) { toggle(t.getAttribute("data-tog")); return; }
    var g = t.closest ? t.closest("g") : null;
    if (!g) return;
    if (g.getAttribute("data-id")) showItem(g.getAttribute("data-id"));
    else if (g.getAttribute("data-a") !== null) showArray(+g.getAttribute("data-a"));
  });
  document.getElementById("search").addEventListener("input", function (ev) { search(ev.target.value); });
  document.getElementById("expand").addEventListener("click", function () { setAll(true); });
  document.getElementById("collapse").addEventListener("click", function () { setAll(false); });
  window.addEventListener("scroll", function () { draw(false); }, {passive: true});
  window.addEventListener("resize", function () { draw(false); });
  document.getElementById("stats").textContent = G.op_total + " ops, " + G.arrays.length + " arrays" +
    (G.has_access ? "" : " (no access record in this file: edges say \u201ctouches\u201d)");
  if (P) {
    // the heat legend: each class's share range, lightest first, plus what was profiled
    var lg = [], hs = P.heat.slice().reverse();
    for (var h = 0; h < hs.length; h++) {
      var lo = hs[h][0], hi = h + 1 < hs.length ? hs[h + 1][0] : 1;
      var pc = function (v) { return +(100 * v).toFixed(1) + "%"; };
      lg.push('<span><b style="background:' + hs[h][1] + '"></b>' + (h === 0 ? "<" + pc(hi) : h + 1 < hs.length ? pc(lo) + "\u2013" + pc(hi) : "\u2265" + pc(lo)) + "</span>");
    }
    var hl = document.getElementById("heat");
    hl.innerHTML = "share of " + ms(P.total_ms) + " ms: " + lg.join("") +
      '<span class="stats">(' + esc(P.engine + ", " + P.device + ", " + (P.timer || "") + ", median of " + P.repeat) +
      (P.replay_ms ? "; whole replay " + ms(P.replay_ms) + " ms" : "") + ")</span>";
    hl.hidden = false;
  }
  window.wrpGraph = {data: G, rows: rows, share: share, render: render, search: search, toggle: toggle, expanded: expanded, select: showItem,
                     drawn: function () { return drawn.slice(); }};
  render();
  document.body.setAttribute("data-ready", "1");
})();
