"""A picture of a capture, built: ops in order, arrays as data nodes, read and write edges.

:func:`build_graph` turns a decoded program (:class:`wrpkit.model.Program`)
into a :class:`Graph`: a tree of items (ops, IF/WHILE groups, and runs of a
repeated op sequence folded into one ``×N`` group) plus the arrays they touch
(a binding's region, or a region without a binding), each op carrying its
edges to arrays with a mode (``"read"``, ``"write"``, ``"readwrite"`` or
``"touches"`` where the file does not say) and a byte count.

:mod:`wrpkit.debug.graph_render` lays it out and draws it (HTML, SVG, DOT).
"""

from __future__ import annotations

import json
import re
import struct
from typing import Optional

from .. import records
from ..records import field, record
from .. import model as m
from ..checks.region_types import merged_signatures, region_types
from ..checks.effects import argument_name, effects, kernel_names, launch_argument, launch_label, merge_modes
from ..formats import annotations as ann

#: Longest op sequence that :func:`fold_repeats` looks for.
MAX_PERIOD = 16

_RELOC_NAMES = {k.value: k.name for k in m.RelocKind if k.value in (1, 2, 3)}


@record(slots=True)
class Edge:
    """A link from an op to an array."""

    array: int
    mode: str  # "read", "write", "readwrite" or "touches"
    bytes: int
    arg: str = ""

    def to_json(self) -> list:
        return [self.array, self.mode, self.bytes, self.arg]


@record(slots=True)
class ArrayNode:
    """An array: a binding's region, or a region without a binding."""

    id: int
    region_id: int
    name: str
    size: int
    bindings: tuple = ()
    dtype: str = ""
    shape: tuple = ()
    roles: tuple = ()

    def to_json(self) -> dict:
        return {"id": self.id, "region": self.region_id, "name": self.name, "size": self.size,
                "bindings": list(self.bindings), "dtype": self.dtype, "shape": list(self.shape),
                "roles": list(self.roles)}


@record(slots=True)
class Item:
    """An op (``kind`` = op type) or a group (``kind`` = ``"IF"``, ``"WHILE"``, ``"THEN"``, ``"ELSE"``,
    ``"REPEAT"``) of the graph's tree."""

    id: str
    kind: str
    label: str
    index: str = ""
    edges: list = field(default_factory=list)
    details: dict = field(default_factory=dict)
    children: list = field(default_factory=list)
    count: int = 0  # REPEAT: number of repeats; children hold the first one, ``rest`` the others
    rest: list = field(default_factory=list)
    is_group: bool = False
    #: With a profile (``wrp graph --profile``): ``[ms, runs]`` of this op, or summed over a group.
    time: Optional[list] = None
    #: Where the program issued the op (``"sim.py:42 in step()"``, :mod:`wrpkit.checks.sources`); "" when unknown.
    source: str = ""

    def to_json(self, tables: "_Tables") -> dict:
        """This item as the page's JSON: details and edge lists as indices into shared tables."""
        d = {"id": self.id, "k": self.kind, "l": self.label}
        if self.index:
            d["i"] = self.index
        if self.source:
            d["s"] = self.source
        if self.time is not None:
            d["t"] = self.time
        if self.edges:
            d["e"] = tables.edges(self.edges)
        if self.details:
            d["d"] = tables.details(self.details)
        if self.is_group:
            d["c"] = [c.to_json(tables) for c in self.children]
            if self.kind == "REPEAT":
                d["n"] = self.count
                if _rest_is_derivable(self):
                    # the other repeats, column by column: one detail and one edge-list reference per op
                    # (their kinds, labels, indices and ids follow from the first repeat's)
                    d["rd"] = [tables.details(c.details) if c.details else -1 for it in self.rest for c in it]
                    d["re"] = [tables.edges(c.edges) if c.edges else -1 for it in self.rest for c in it]
                    if any(c.time is not None for it in self.rest for c in it):
                        d["rt"] = [c.time for it in self.rest for c in it]
                else:
                    d["r"] = [[c.to_json(tables) for c in it] for it in self.rest]
        return d


_INDEX_TAIL = re.compile(r"^(.*?)(\d+)$")


def _rest_is_derivable(group: "Item") -> bool:
    """Whether every op of a ``REPEAT`` group's other repeats is its first repeat's op of the same
    position with only the index moved on by whole periods (``3.e4`` → ``3.e6`` → ...), id ``o`` + index,
    so that the page can rebuild them from their detail and edge references alone."""
    body, p = group.children, len(group.children)
    base = []
    for b in body:
        mt = _INDEX_TAIL.match(b.index) if not b.is_group else None
        if mt is None:
            return False
        base.append((mt.group(1), int(mt.group(2))))
    for j, rep in enumerate(group.rest, 1):
        if len(rep) != p:
            return False
        for (pre, n), b, c in zip(base, body, rep):
            idx = f"{pre}{n + j * p}"
            if c.is_group or c.kind != b.kind or c.label != b.label or c.index != idx or c.id != "o" + idx \
                    or c.source != b.source:
                return False
    return True


class _Tables:
    """Detail records and edge lists of the page, each written once and referred to by index.

    Ops that are the same launch share one detail dict and one edge list (see
    ``_Builder.launch``), so identity is the key; equal content under another
    identity is still written once.
    """

    def __init__(self):
        self.detail_rows: list = []
        self.edge_rows: list = []
        self._details_by_id: dict = {}
        self._edges_by_id: dict = {}
        self._by_text: dict = {}

    def _intern(self, obj, by_id: dict, rows: list, row) -> int:
        text = json.dumps(row, separators=(",", ":"), ensure_ascii=True)
        i = self._by_text.get((text, id(rows)))
        if i is None:
            i = self._by_text[(text, id(rows))] = len(rows)
            rows.append(row)
        by_id[id(obj)] = (obj, i)  # holds obj, so its id stays unique while the table lives
        return i

    def details(self, details: dict) -> int:
        hit = self._details_by_id.get(id(details))
        if hit is not None:
            return hit[1]
        return self._intern(details, self._details_by_id, self.detail_rows, details)

    def edges(self, edges: list) -> int:
        hit = self._edges_by_id.get(id(edges))
        if hit is not None:
            return hit[1]
        return self._intern(edges, self._edges_by_id, self.edge_rows, [e.to_json() for e in edges])


@record
class Graph:
    """A capture as a graph: the item tree and the arrays."""

    title: str
    items: list
    arrays: list
    op_total: int
    has_access: bool
    #: With a profile: ``{"total_ms", "replay_ms", "engine", "device", "timer", "repeat"}``.
    profile: Optional[dict] = None

    def to_json(self) -> dict:
        """The page's JSON: the item tree, with details (``D``) and edge lists (``E``) in shared tables."""
        tables = _Tables()
        items = [i.to_json(tables) for i in self.items]
        d = {"title": self.title, "items": items, "D": tables.detail_rows, "E": tables.edge_rows,
             "arrays": [a.to_json() for a in self.arrays], "op_total": self.op_total,
             "has_access": self.has_access}
        if self.profile is not None:
            d["profile"] = self.profile
        return d


# ---------------------------------------------------------------------------
# Building the graph
# ---------------------------------------------------------------------------


def _decode_scalar(raw: bytes, dt: Optional[ann.DataType]) -> Optional[str]:
    """A scalar (or vector/matrix) argument's value as text, through its data type."""
    if dt is None or dt.fields:
        return None
    fmt = {ann.ScalarKind.BOOL: "?", ann.ScalarKind.INT8: "b", ann.ScalarKind.UINT8: "B",
           ann.ScalarKind.INT16: "h", ann.ScalarKind.UINT16: "H", ann.ScalarKind.INT32: "i",
           ann.ScalarKind.UINT32: "I", ann.ScalarKind.INT64: "q", ann.ScalarKind.UINT64: "Q",
           ann.ScalarKind.FLOAT16: "e", ann.ScalarKind.FLOAT32: "f", ann.ScalarKind.FLOAT64: "d"}.get(dt.scalar)
    if fmt is None:
        return None
    n = 1
    for d in dt.shape:
        n *= d
    need = struct.calcsize("<" + fmt) * n
    if n <= 0 or n > 64 or len(raw) < need:
        return None
    vals = struct.unpack_from(f"<{n}{fmt}", raw)
    text = [f"{v:.6g}" if isinstance(v, float) else str(v) for v in vals]
    return text[0] if not dt.shape else "(" + ", ".join(text) + ")"


def _array_shape(raw: bytes) -> Optional[tuple]:
    """Shape of a packed ``array_t`` (data, grad, shape[4], strides[4], ndim)."""
    if len(raw) < 50:
        return None
    ndim = struct.unpack_from("<H", raw, 48)[0]
    if not 1 <= ndim <= 4:
        return None
    return struct.unpack_from(f"<{ndim}i", raw, 16)


class _Builder:
    def __init__(self, prog: m.Program, extra_signatures=None):
        self.prog = prog
        self.extra_signatures = extra_signatures
        self.annotations = None
        try:
            self.annotations = ann.read_annotations(prog)
        except Exception:  # noqa: BLE001 -- a graph of a file with bad annotations still draws its ops
            self.annotations = None
        self.sigs = {}
        self.has_access = False
        if self.annotations is not None:
            for k in self.annotations.kernel_signatures:
                self.sigs[(k.module_hash, k.kernel_key)] = k
                if any(a.access for a in k.arguments):
                    self.has_access = True
        if extra_signatures:
            # kernel annotations the caller built (e.g. from the kernels' source) fill in unannotated kernels
            self.sigs = merged_signatures(prog, extra_signatures)
            self.has_access = self.has_access or any(a.access for k in self.sigs.values() for a in k.arguments)
        self.modules = {mod.module_hash: mod.module_name for mod in prog.modules}
        self.regions = {r.region_id: r for r in prog.regions}
        from ..checks.sources import Sources  # noqa: PLC0415

        self.sources = Sources(self.annotations, prog.ops) if self.annotations is not None else Sources()
        if extra_signatures:  # kernels typed from the user's source (--kernels) carry their definition lines
            self.sources.add_kernels(extra_signatures.values())
        self.array_of_region: dict = {}
        self.arrays: list = []
        sig_map = self.annotations.signature_map() if self.annotations is not None else {}
        by_region: dict = {}
        for b in prog.resolved_bindings():
            by_region.setdefault(b.region_id, []).append(b.name)
        self._bindings = by_region
        self._sig_map = sig_map
        self.op_total = 0
        self._launches: dict = {}
        # names, dtypes and shapes of every region: the one region-typing function
        self.types = region_types(prog, annotations=self.annotations, extra_signatures=extra_signatures)

    def array(self, region_id: int) -> int:
        a = self.array_of_region.get(region_id)
        if a is not None:
            return a
        region = self.regions.get(region_id)
        names = tuple(self._bindings.get(region_id, ()))
        roles = []
        for n in names:
            s = self._sig_map.get(n)
            if s is not None:
                roles += (["input"] if s.is_input else []) + (["output"] if s.is_output else [])
        if names and not roles:
            roles = ["binding"]
        rt = self.types.get(region_id)
        # An unbound array is named by the kernel arguments that use it ("f", or "f / forces").
        label = rt.name if rt is not None else f"region {region_id}"
        dtype = rt.dtype.name if rt is not None and rt.dtype is not None else ""
        shape = tuple(rt.shape) if rt is not None and rt.dtype is not None and rt.shape is not None else ()
        node = ArrayNode(len(self.arrays), region_id, label, region.size if region is not None else 0, names,
                         dtype, shape, tuple(dict.fromkeys(roles)))
        self.arrays.append(node)
        self.array_of_region[region_id] = node.id
        return node.id

    def items(self, ops, prefix: str) -> list:
        out = []
        for i, op in enumerate(ops):
            index = f"{prefix}{i}"
            out.append(self.item(op, index))
        return out

    def _effect_edges(self, op: m.Op) -> list:
        """Edges of a non-launch op: one per region reference of the op table (:func:`effects`)."""
        out = []
        for acc in effects(op, self.prog, self.sigs).accesses:
            if acc.region_id in self.regions:
                out.append(Edge(self.array(acc.region_id), acc.mode, acc.nbytes, acc.name))
        return out

    def _where(self, region_id: int, offset: int) -> str:
        """``name+offset`` of a byte in a region (its binding or argument name), for labels."""
        self.array(region_id)
        node = self.arrays[self.array_of_region[region_id]] if region_id in self.array_of_region else None
        name = node.name if node is not None else f"region {region_id}"
        return f"{name}+{offset}"

    def item(self, op: m.Op, index: str) -> Item:
        it = self._item(op, index)
        if self.sources.has_call_sites:
            it.source = self.sources.op_where(index)
        return it

    def _item(self, op: m.Op, index: str) -> Item:
        t = op.op_type
        self.op_total += 1
        if t == m.OpType.IF:
            children = []
            if op.then_ops:
                then = Item(f"g{index}t", "THEN", f"then ({len(op.then_ops)})", index, is_group=True,
                            children=self.items(op.then_ops, index + "."))
                children.append(then)
            if op.else_ops:
                els = Item(f"g{index}e", "ELSE", f"else ({len(op.else_ops)})", index, is_group=True,
                           children=self.items(op.else_ops, index + ".e"))
                children.append(els)
            it = Item(f"g{index}", "IF", f"IF {self._where(op.cond_region_id, op.cond_offset)}", index,
                      is_group=True, children=children,
                      details={"op": "IF", "condition": f"region {op.cond_region_id} offset {op.cond_offset}"})
            it.edges = self._effect_edges(op)
            return it
        if t == m.OpType.WHILE:
            it = Item(f"g{index}", "WHILE", f"WHILE {self._where(op.cond_region_id, op.cond_offset)}", index,
                      is_group=True, children=self.items(op.body, index + "."),
                      details={"op": "WHILE", "condition": f"region {op.cond_region_id} offset {op.cond_offset}",
                               "body ops": str(len(op.body))})
            it.edges = self._effect_edges(op)
            return it
        if t == m.OpType.KERNEL_LAUNCH:
            return self.launch(op, index)
        return self.generic(op, index)

    def launch(self, op: m.KernelLaunch, index: str) -> Item:
        # A step repeats the same launch many times: everything drawn of a launch follows from these
        # fields, so identical launches share one label, detail dict and edge list (built once).
        key = (op.module_hash, op.kernel_key, op.shape, op.ndim, op.dim, op.block_dim, op.is_forward,
               tuple(op.params), tuple(op.relocations), bytes(op.value_data) if op.value_data is not None else b"",
               tuple(op.legacy_args))
        shared = self._launches.get(key)
        if shared is None:
            shared = self._launches[key] = self._launch_parts(op)
        label, details, edges = shared
        return Item(f"o{index}", "KERNEL_LAUNCH", label, index, edges, details)

    def _launch_parts(self, op: m.KernelLaunch) -> tuple:
        """``(label, details, edges)`` of a launch."""
        sig = self.sigs.get((op.module_hash, op.kernel_key))
        args = sig.arguments if sig is not None else ()
        # launch_label: never one box for both directions, nor for two kernels that share a key
        short = launch_label(op, self.prog)
        if "." in op.kernel_key:
            short = short.replace(op.kernel_key, op.kernel_key.rsplit(".", 1)[-1], 1)
        dims = list(op.shape[:op.ndim]) if op.ndim else [op.dim]
        details = {"op": "KERNEL_LAUNCH", "kernel": kernel_names(self.prog).get((op.module_hash, op.kernel_key), op.kernel_key),
                   "module": f"{self.modules.get(op.module_hash, '?')} {op.module_hash[:8]}",
                   "dims": "x".join(str(d) for d in dims), "threads": str(op.dim),
                   "direction": "forward" if op.is_forward else "backward"}
        if op.block_dim:
            details["block_dim"] = str(op.block_dim)
        defined = self.sources.kernel_where(op.module_hash, op.kernel_key)
        if defined:
            details["defined at"] = defined
        value = bytes(op.value_data) if op.value_data is not None else b""
        edges: dict = {}
        by_param: dict = {}
        for acc in effects(op, self.prog, self.sigs).accesses:
            if acc.region_id not in self.regions:
                continue
            by_param.setdefault(acc.param, []).append(acc)
            if acc.mode == "unused":
                continue
            aid = self.array(acc.region_id)
            key = (aid, acc.name)
            prev = edges.get(key)
            if prev is None:
                edges[key] = Edge(aid, acc.mode, acc.nbytes, acc.name)
            else:
                prev.mode = merge_modes(prev.mode, acc.mode)
                prev.bytes = max(prev.bytes, acc.nbytes)
        arg_lines = []
        for p, rels in op.param_relocations():
            a = launch_argument(args, p)
            name = argument_name(args, p.param_index)
            raw = value[p.value_offset:p.value_offset + p.value_size]
            accs = [x for x in by_param.get(p.param_index, ()) if x.part == "data"]
            if accs:
                for acc in accs:
                    desc = f"region {acc.region_id} +{acc.offset} ({acc.nbytes} B)"
                    arg_lines.append([acc.name, (a.type if a is not None else "?"), desc, acc.mode])
                continue
            if rels:
                arg_lines.append([name, (a.type if a is not None else "?"), "none", ""])
                continue
            text = _decode_scalar(raw, a.dtype if a is not None else None) if a is not None and not a.ndim else None
            if text is None:
                text = raw.hex() if len(raw) <= 16 else raw[:16].hex() + "…"
            arg_lines.append([name, a.type if a is not None else "?", text, ""])
        details["arguments"] = arg_lines
        details["relocations"] = [[r.value_byte_offset, r.region_id, r.region_offset,
                                   _RELOC_NAMES.get(r.kind) or str(r.kind)]
                                  for r in op.relocations[:64]]
        return short, details, list(edges.values())

    def generic(self, op: m.Op, index: str) -> Item:
        name = op.op_type.name
        details = {"op": name}
        for f in records.fields(op):
            v = getattr(op, f.name)
            if f.name == "at":
                continue
            if isinstance(v, (bytes, bytearray, memoryview)):
                details[f.name] = f"{len(v)} bytes"
                continue
            details[f.name] = str(v)
        it = Item(f"o{index}", name, name.lower().replace("_", " "), index, details=details)
        it.edges = self._effect_edges(op)
        return it


def _signature(item: Item) -> tuple:
    """What makes two items the same step of a repeated sequence: the same kind, kernel, regions and
    sizes (a launch's scalar argument values aside)."""
    if item.is_group:
        return (item.kind, item.label, tuple(_signature(c) for c in item.children),
                tuple((e.array, e.mode, e.bytes) for e in item.edges))
    return (item.kind, item.label, item.details.get("kernel"), item.details.get("module"),
            item.details.get("dims"), tuple((e.array, e.mode, e.bytes, e.arg) for e in item.edges))


def fold_repeats(items: list, max_period: int = MAX_PERIOD) -> list:
    """Fold runs of a repeated item sequence into ``REPEAT`` groups (recursively inside groups).

    At each position the period (1..``max_period``) whose repeats cover the
    most items is folded when it repeats at least twice.
    """
    for it in items:
        if it.is_group and it.kind != "REPEAT":
            it.children = fold_repeats(it.children, max_period)
    sig_ids: dict = {}
    by_parts: dict = {}  # launches sharing details and edges share a signature: computed once
    sigs = []
    for it in items:
        parts = None if it.is_group else (it.kind, it.label, id(it.details), id(it.edges))
        s = by_parts.get(parts) if parts is not None else None
        if s is None:
            s = sig_ids.setdefault(_signature(it), len(sig_ids))
            if parts is not None:
                by_parts[parts] = s
        sigs.append(s)
    n = len(items)
    out = []
    i = 0
    while i < n:
        best_p, best_k = 0, 1
        for p in range(1, min(max_period, (n - i) // 2) + 1):
            if best_p and (n - i) // p * p <= best_k * best_p:
                continue  # this period cannot cover more than the best one found
            k = 1
            while i + (k + 1) * p <= n and sigs[i + k * p:i + (k + 1) * p] == sigs[i:i + p]:
                k += 1
            if k >= 2 and k * p > best_k * max(best_p, 1):
                best_p, best_k = p, k
        if best_p == 0:
            out.append(items[i])
            i += 1
            continue
        body = items[i:i + best_p]
        rest = [items[i + j * best_p:i + (j + 1) * best_p] for j in range(1, best_k)]
        names = []
        for b in body:
            if b.label not in names:
                names.append(b.label)
        label = " → ".join(names[:3]) + (" …" if len(names) > 3 else "")
        g = Item(f"r{body[0].id}", "REPEAT", label, body[0].index, is_group=True, children=body, count=best_k,
                 rest=rest, details={"op": "REPEAT", "repeats": str(best_k), "ops per repeat": str(best_p),
                                     "first op": body[0].index})
        merged: dict = {}
        for b in body:
            for e in _all_edges(b):
                prev = merged.get((e.array, e.mode))
                if prev is None:
                    merged[(e.array, e.mode)] = Edge(e.array, e.mode, e.bytes, e.arg)
                else:
                    prev.bytes = max(prev.bytes, e.bytes)
        g.edges = list(merged.values())
        out.append(g)
        i += best_k * best_p
    return out


def _walk(items):
    """Every item of a tree (repeats' other iterations included), depth first."""
    for it in items:
        yield it
        if it.is_group:
            yield from _walk(it.children)
            for rep in it.rest:
                yield from _walk(rep)


def _all_edges(item: Item):
    yield from item.edges
    if item.is_group:
        for c in item.children:
            yield from _all_edges(c)


def _set_times(items: list, paths: dict) -> None:
    """Give each op its profiled ``[ms, runs]`` (by path) and each group the sum over what it holds."""
    for it in items:
        if it.is_group:
            _set_times(it.children, paths)
            for rep in it.rest:
                _set_times(rep, paths)
            parts = [c.time for c in it.children] + [c.time for rep in it.rest for c in rep]
            parts = [p for p in parts if p is not None]
            if parts:
                it.time = [sum(p[0] for p in parts), sum(p[1] for p in parts)]
        elif it.index in paths:
            p = paths[it.index]
            it.time = [float(p["ms"]), int(p["calls"])]


#: Heat of an op's share of the profiled time: ColorBrewer YlOrRd (5 classes, colour-blind safe),
#: lower bound of each class's share.  The page and the SVG use the same table.
HEAT = ((0.35, "#bd0026"), (0.15, "#f03b20"), (0.05, "#fd8d3c"), (0.01, "#fecc5c"), (0.0, "#ffffb2"))


def heat_colour(share: float) -> str:
    """The fill of an op with ``share`` (0..1) of the profiled time."""
    for lo, colour in HEAT:
        if share >= lo:
            return colour
    return HEAT[-1][1]


def build_graph(program: m.Program, title: str = "", fold: bool = True, extra_signatures=None,
                profile: Optional[dict] = None) -> Graph:
    """The graph of a captured program.

    Args:
        program: A decoded :class:`wrpkit.model.Program` (region and module
            contents are not read).
        title: Shown at the top of the picture (e.g. the file name).
        fold: Fold repeated op sequences into ``×N`` groups.
        extra_signatures: Kernel signatures for kernels the file does not annotate
            (``{(module_hash, kernel_key) or kernel_key: KernelSignature}``); their
            argument access and dtypes then draw and type the arrays.
        profile: Times to colour ops by (what
            :func:`wrpkit.debug.profile_format.load_profile` returns), or None.

    Returns:
        A :class:`Graph`.
    """
    b = _Builder(program, extra_signatures)
    items = b.items(program.ops, "")
    if fold:
        items = fold_repeats(items)
    summary = None
    if profile is not None:
        _set_times(items, profile["paths"])
        summary = {k: profile.get(k) for k in ("total_ms", "replay_ms", "engine", "device", "timer", "repeat")}
        summary["heat"] = [[lo, c] for lo, c in HEAT]
    # bindings that no op touches are still data nodes
    for bnd in program.bindings:
        if bnd.region_id in b.regions:
            b.array(bnd.region_id)
    return Graph(title, items, b.arrays, b.op_total, b.has_access, summary)


__all__ = ["Graph", "Item", "Edge", "ArrayNode", "build_graph", "fold_repeats", "heat_colour", "HEAT"]
