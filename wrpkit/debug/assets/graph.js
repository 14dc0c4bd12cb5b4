// wrp graph renderer: draws the capture graph embedded in this page.
// Layout (as wrpkit/debug/graph.py's layout()): ops in one column in execution
// order; each array on a vertical lane to the right spanning its first to its
// last use; lanes reused by arrays whose uses do not overlap; edges are
// horizontal links from an op to the lanes it touches, width by bytes.
"use strict";
(function () {
  var G = JSON.parse(document.getElementById("graph-data").textContent);
  var ROW_H = 34, OP_W = 300, INDENT = 16, LANE_W = 120, TOP = 24;
  var COLORS = {read: "#2b7bd6", write: "#d6452b", readwrite: "#8e44ad", touches: "#888888"};
  var FILL = {KERNEL_LAUNCH: "#eef5ff", IF: "#fff6e0", WHILE: "#fff0f0", THEN: "#fffaf0", ELSE: "#fffaf0", REPEAT: "#eefbef"};
  var byId = {}, parent = {};
  var expanded = {};
  var state = {query: "", selected: null, hits: {}, arrHits: {}};

  function index(items, par) {
    items.forEach(function (it) {
      byId[it.id] = it; parent[it.id] = par;
      if (it.c) {
        index(it.c, it.id);
        if (it.r) it.r.forEach(function (rep) { index(rep, it.id); });
        if (it.k !== "REPEAT") expanded[it.id] = true;
      }
    });
  }
  index(G.items, null);

  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
    });
  }
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
      items.forEach(function (it) {
        out.push({it: it, depth: depth});
        if (it.c && expanded[it.id]) {
          walk(it.c, depth + 1);
          if (it.r) it.r.forEach(function (rep) { walk(rep, depth + 1); });
        }
      });
    }
    walk(G.items, 0);
    return out;
  }

  function layout(rs) {
    var span = {}, order = [];
    rs.forEach(function (r, i) {
      (r.it.e || []).forEach(function (e) {
        var s = span[e[0]];
        if (!s) { span[e[0]] = [i, i]; order.push(e[0]); } else { s[1] = i; }
      });
    });
    order.sort(function (a, b) { return span[a][0] - span[b][0] || span[a][1] - span[b][1]; });
    var laneEnd = [], lane = {};
    order.forEach(function (a) {
      var lo = span[a][0], hi = span[a][1], placed = false;
      for (var l = 0; l < laneEnd.length; l++) {
        if (laneEnd[l] < lo - 1) { lane[a] = l; laneEnd[l] = hi; placed = true; break; }
      }
      if (!placed) { lane[a] = laneEnd.length; laneEnd.push(hi); }
    });
    return {lane: lane, span: span, n: laneEnd.length};
  }

  function render() {
    var rs = rows(), L = layout(rs);
    var laneX0 = OP_W + 40, W = laneX0 + Math.max(L.n, 1) * LANE_W + 20, H = TOP + rs.length * ROW_H + 20;
    var dim = state.query ? " dim" : "";
    var s = ['<svg id="graph" class="' + dim + '" xmlns="http://www.w3.org/2000/svg" width="' + W + '" height="' + H + '" font-size="12">'];
    s.push("<defs>");
    for (var k in COLORS) s.push('<marker id="m-' + k + '" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="5" markerHeight="5" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="' + COLORS[k] + '"/></marker>');
    s.push("</defs>");
    for (var a in L.lane) {
      var x = laneX0 + L.lane[a] * LANE_W + LANE_W / 2, sp = L.span[a];
      s.push('<line class="life" x1="' + x + '" y1="' + (TOP + sp[0] * ROW_H) + '" x2="' + x + '" y2="' + (TOP + sp[1] * ROW_H + ROW_H) + '"/>');
    }
    // frames around open groups: from the header row to the group's last row
    var frames = [], open = [];
    function closeTo(depth, i) {
      while (open.length && open[open.length - 1].depth >= depth) {
        var f = open.pop(), fx = 4 + f.depth * INDENT;
        frames.push('<rect class="frame" x="' + fx + '" y="' + (TOP + f.row * ROW_H + 1) + '" width="' + (OP_W + 2 - fx) + '" height="' + ((i - f.row) * ROW_H - 2) + '" rx="7" fill="' + (FILL[f.kind] || "#f4f4f4") + '" fill-opacity=".55" stroke="#c9c9c9"/>');
      }
    }
    rs.forEach(function (r, i) {
      closeTo(r.depth, i);
      if (r.it.c && expanded[r.it.id]) open.push({depth: r.depth, row: i, kind: r.it.k});
    });
    closeTo(0, rs.length);
    s.push(frames.join(""));
    var edges = [], nodes = [];
    rs.forEach(function (r, i) {
      var it = r.it, y = TOP + i * ROW_H, hit = state.hits[it.id];
      var es = (it.e || []).slice().sort(function (a, b) { return L.lane[b[0]] - L.lane[a[0]]; });
      es.forEach(function (e, k) {
        // longest first (drawn below), each a few pixels apart so that none hides another
        var ax = laneX0 + L.lane[e[0]] * LANE_W + LANE_W / 2, mode = e[1];
        var dy = (k - (es.length - 1) / 2) * Math.min(5, 20 / Math.max(es.length, 1));
        var mk = mode === "read" ? ' marker-start="url(#m-read)"' : mode === "write" ? ' marker-end="url(#m-write)"' :
          mode === "readwrite" ? ' marker-start="url(#m-readwrite)" marker-end="url(#m-readwrite)"' : ' stroke-dasharray="4 3"';
        var eh = hit || state.arrHits[e[0]] ? " hit" : "";
        edges.push('<line class="edge' + eh + '" data-from="' + it.id + '" data-a="' + e[0] + '" data-mode="' + mode + '" x1="' + (OP_W + 4) + '" y1="' + (y + ROW_H / 2 + dy) + '" x2="' + (ax - 6) + '" y2="' + (y + ROW_H / 2 + dy) + '" stroke="' + COLORS[mode] + '" stroke-width="' + width(e[2]) + '"' + mk + '><title>' + esc(e[3] + ": " + mode + ", " + size(e[2])) + '</title></line>');
      });
      var x = 8 + r.depth * INDENT, w = OP_W - x, cls = "node" + (hit ? " hit" : "") + (state.selected === it.id ? " sel" : "");
      var label = it.l.length > 34 ? it.l.slice(0, 33) + "\u2026" : it.l;
      var dims = it.d && it.d.dims ? " [" + it.d.dims + "]" : "";
      var tog = "";
      if (it.c) tog = '<text class="tog" data-tog="' + it.id + '" x="' + (x + 6) + '" y="' + (y + ROW_H / 2 + 4) + '" style="pointer-events:all">' + (expanded[it.id] ? "\u25be" : "\u25b8") + "</text>";
      var pre = it.k === "REPEAT" ? "\u00d7" + it.n + " " : (it.c && it.k !== "REPEAT" ? it.k + " " : "");
      if (it.k === "IF" || it.k === "WHILE") pre = "";
      nodes.push('<g class="' + cls + '" data-id="' + it.id + '" data-kind="' + it.k + '"><rect x="' + x + '" y="' + (y + 3) + '" width="' + w + '" height="' + (ROW_H - 6) + '" rx="5" fill="' + (FILL[it.k] || "#f4f4f4") + '"/>' + tog +
        '<text x="' + (x + (it.c ? 18 : 6)) + '" y="' + (y + ROW_H / 2 + 4) + '"><tspan fill="#888">' + esc(it.i || "") + "</tspan> " + esc(pre + label + dims) + "</text></g>");
    });
    s.push(edges.join(""), nodes.join(""));
    for (a in L.lane) {
      var node = G.arrays[a], ax0 = laneX0 + L.lane[a] * LANE_W + 6, ay = TOP + L.span[a][0] * ROW_H - 2;
      var nm = node.name.length > 14 ? node.name.slice(0, 13) + "\u2026" : node.name;
      s.push('<g class="arr' + (state.arrHits[a] ? " hit" : "") + '" data-a="' + a + '"><rect x="' + ax0 + '" y="' + (ay - 12) + '" width="' + (LANE_W - 12) + '" height="18" rx="9"/><text x="' + (ax0 + 7) + '" y="' + (ay + 1) + '" font-size="11">' + esc(nm) + "</text><title>" + esc(node.name) + "</title></g>");
    }
    s.push("</svg>");
    document.getElementById("view").innerHTML = s.join("");
    var nh = Object.keys(state.hits).length + Object.keys(state.arrHits).length;
    document.getElementById("hits").textContent = state.query ? nh + " matches" : "";
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
    var it = byId[id]; if (!it) return;
    state.selected = id;
    var d = it.d || {}, h = "<h2>" + esc((it.i ? it.i + " " : "") + (d.kernel || it.l)) + "</h2>" + table(d);
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
        if (it.c) { walk(it.c); if (it.r) it.r.forEach(walk); }
      });
    }
    walk(G.items);
    var h = "<h2>" + esc(n.name) + "</h2>" + table({region: n.region, size: size(n.size), dtype: n.dtype || "unknown",
      shape: n.shape.length ? n.shape.join("x") : "unknown", bindings: n.bindings.join(", ") || "none", roles: n.roles.join(", ") || "none"});
    h += "<h3>used by</h3><table>";
    for (var k in roles) h += "<tr><td>" + esc(roles[k]) + "</td><td>" + esc(k) + "</td></tr>";
    document.getElementById("details").innerHTML = h + "</table>";
  }

  function search(q) {
    state.query = q = (q || "").trim().toLowerCase();
    state.hits = {}; state.arrHits = {};
    if (q) {
      var visible = {};
      rows().forEach(function (r) { visible[r.it.id] = true; });
      for (var id in byId) {
        var it = byId[id];
        if (it.c) continue;
        var text = (it.l + " " + ((it.d && it.d.kernel) || "")).toLowerCase();
        if (text.indexOf(q) < 0) continue;
        var v = id;  // the match itself, or the folded group that hides it
        for (var p = id; p !== null; p = parent[p]) if (visible[p] && (p === id || !expanded[p])) { v = p; break; }
        state.hits[v] = true;
      }
      G.arrays.forEach(function (n) {
        if ((n.name + " " + n.bindings.join(" ")).toLowerCase().indexOf(q) >= 0) state.arrHits[n.id] = true;
      });
    }
    render();
    return {items: Object.keys(state.hits), arrays: Object.keys(state.arrHits).map(Number)};
  }
  function setAll(open) {
    for (var id in byId) if (byId[id].c) expanded[id] = open;
    render();
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
  document.getElementById("stats").textContent = G.op_total + " ops, " + G.arrays.length + " arrays" +
    (G.has_access ? "" : " (no access record in this file: edges say \u201ctouches\u201d)");
  window.wrpGraph = {data: G, rows: rows, render: render, search: search, toggle: toggle, expanded: expanded, select: showItem};
  render();
  document.body.setAttribute("data-ready", "1");
})();
