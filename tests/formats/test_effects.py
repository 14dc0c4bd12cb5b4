"""One truth about every op: ``effects()`` and ``region_types()``, and every tool agreeing with them,
on real captures (the stock ones of ``tests/programs.py`` and a spring chain written for this test)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import warp as wp

import wrpkit
from wrpkit import model as m
from wrpkit.checks.effects import effects, merge_modes
from wrpkit.checks.region_types import dtype_from_name, region_types
from wrpkit.checks.summary import summarize
from wrpkit.debug.graph import build_graph
from wrpkit.debug.graph_render import render_dot
from wrpkit.formats.container import open_capture


def _leaf_paths(ops, prefix="", out=None):
    """``{path: op}`` in ``wrp inspect``/``wrp trace`` numbering (``1.2``, ``1.e0``), IF/WHILE included."""
    out = {} if out is None else out
    for i, op in enumerate(ops):
        path = f"{prefix}{i}"
        out[path] = op
        if isinstance(op, m.If):
            _leaf_paths(op.then_ops, path + ".", out)
            _leaf_paths(op.else_ops, path + ".e", out)
        elif isinstance(op, m.While):
            _leaf_paths(op.body, path + ".", out)
    return out


def _graph_ops(items, out):
    for it in items:
        if it.kind in ("THEN", "ELSE", "REPEAT"):
            _graph_ops(it.children, out)
            continue
        out[it.index] = it
        if it.is_group:
            _graph_ops(it.children, out)


def _modes_by_region(accesses) -> dict:
    out: dict = {}
    for region, mode in accesses:
        if mode == "unused":
            continue
        out[region] = mode if region not in out else merge_modes(out[region], mode)
    return out


def _check_tools_agree(path) -> set:
    """graph (unfolded), inspect --json and effects() give every op the same regions and modes."""
    seen = set()
    with open_capture(path) as cap:
        prog = cap.program
        ops = _leaf_paths(prog.ops)
        graph = build_graph(prog, fold=False)
        region_of = {a.id: a.region_id for a in graph.arrays}
        items: dict = {}
        _graph_ops(graph.items, items)
        for path_, op in ops.items():
            seen.add(op.op_type)
            fx = effects(op, prog)
            want = _modes_by_region((a.region_id, a.mode) for a in fx.accesses)
            got = _modes_by_region((region_of[e.array], e.mode) for e in items[path_].edges)
            assert got == want, (path, path_, op.op_type.name)
            for a in fx.accesses:
                assert a.nbytes >= 0 and a.offset >= 0
                r = prog.region(a.region_id)
                assert r is not None and a.offset + a.nbytes <= r.size, (path_, a)
        info = summarize(cap, with_ops=True)

        def walk(recs, prefix=""):
            for i, rec in enumerate(recs):
                p = f"{prefix}{i}"
                fx = effects(ops[p], prog)
                assert [(w["region"], w["offset"], w["bytes"]) for w in rec["writes"]] == \
                    [(a.region_id, a.offset, a.nbytes) for a in fx.writes]
                assert [(w["region"], w["bytes"]) for w in rec["reads"]] == [(a.region_id, a.nbytes) for a in fx.reads]
                walk(rec.get("then_ops", []) or rec.get("body", []), p + ".")
                walk(rec.get("else_ops", []), p + ".e")

        walk(info["ops"])
    return seen


def test_every_tool_agrees_with_effects_on_every_capture(captures):
    seen = set()
    for name, path in captures.items():
        seen |= _check_tools_agree(path)
    # every op type a CPU capture can hold is covered (H2D copies and in-graph ALLOCs are CUDA-only;
    # BVH and hash-grid ops hold process-local handles that no file can replay)
    missing = {t for t in m.OP_CLASSES} - seen - {m.OpType.MEMCPY_H2D, m.OpType.ALLOC, m.OpType.BVH_REFIT,
                                                   m.OpType.BVH_REBUILD, m.OpType.HASH_GRID_UPDATE}
    assert not missing, sorted(t.name for t in missing)


def test_table_reads_and_writes_on_real_records(captures):
    """The op table's answers that the issue's trials found wrong elsewhere."""
    by_type: dict = {}
    for path in captures.values():
        with open_capture(path) as cap:
            for _, op in m.walk_ops(cap.program.ops):
                by_type.setdefault(op.op_type, []).append((op, cap.program))
    for op, prog in by_type[m.OpType.REDUCTION]:
        fx = effects(op, prog)
        assert {a.name: a.mode for a in fx.accesses}["input_a"] == "read"
        assert fx.written_regions() == [op.output_region_id]
    for op, prog in by_type[m.OpType.SEGMENTED_SORT]:
        modes = {a.name: a.mode for a in effects(op, prog).accesses}
        assert modes["segstart"] == "read" and modes["keys"] == "readwrite"
    for op, prog in by_type[m.OpType.BSR_TRANSPOSE]:
        fx = effects(op, prog)
        written = {a.name for a in fx.writes}
        assert not written & {"bsr_offsets", "bsr_row_counts", "bsr_columns"}
    for op, prog in by_type[m.OpType.WHILE] + by_type[m.OpType.IF]:
        fx = effects(op, prog)
        assert [(a.region_id, a.offset, a.nbytes, a.mode) for a in fx.accesses] == \
            [(op.cond_region_id, op.cond_offset, 4, "read")]
    for op, prog in by_type[m.OpType.MEMSET] + by_type[m.OpType.MEMTILE]:
        fx = effects(op, prog)
        assert fx.written_regions() == [op.region_id] and not fx.read_regions()


@pytest.mark.parametrize("name", ["scan", "radix_sort", "segmented_sort", "runlength", "reduce", "zero_fill",
                                  "nested_cond", "capture_while"])
def test_trace_records_the_regions_effects_writes(captures, name):
    t = wrpkit.trace(captures[name])
    with open_capture(captures[name]) as cap:
        ops = _leaf_paths(cap.program.ops)
        for rec in t.ops:
            fx = effects(ops[rec["path"]], cap.program)
            assert [w["region"] for w in rec["writes"]] == fx.written_regions(), rec


def test_op_record_dtypes_type_regions(captures):
    """SCAN and REDUCTION records carry their element dtype: stock captures' regions are typed by it."""
    for name, op_type in (("scan", m.OpType.SCAN), ("reduce", m.OpType.REDUCTION)):
        with open_capture(captures[name]) as cap:
            prog = cap.program
            types = region_types(prog)
            op = next(o for _, o in m.walk_ops(prog.ops) if o.op_type == op_type)
            rid = op.src_region_id if op_type == m.OpType.SCAN else op.input_a_region_id
            assert types[rid].dtype is not None and types[rid].source.startswith(op_type.name), types[rid]
        t = wrpkit.trace(captures[name])
        assert rid not in t.unknown_dtypes


# -- a spring chain, written as a user would -------------------------------------------------------

N = 8


@wp.kernel
def k_springs(x: wp.array(dtype=wp.vec3), f: wp.array(dtype=wp.vec3), k: float):
    i = wp.tid()
    if i > 0:
        f[i] = (x[i - 1] - x[i]) * k


@wp.func
def _damped(v: wp.vec3, c: float):
    return v * (1.0 - c)


@wp.kernel
def k_integrate(forces: wp.array(dtype=wp.vec3), x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3),
                dt: float):
    i = wp.tid()
    v[i] = _damped(v[i] + forces[i] * dt, 0.01)
    x[i] = x[i] + v[i] * dt


@wp.kernel
def k_kinetic_energy(v: wp.array(dtype=wp.vec3), e: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(e, 0, 0.5 * wp.dot(v[i], v[i]))


@wp.kernel
def k_countdown(n: wp.array(dtype=int), gate: wp.array(dtype=int)):
    n[0] = n[0] - 1
    gate[0] = n[0] % 2


@pytest.fixture(scope="module")
def spring_chain(tmp_path_factory):
    dev = "cpu"
    x = wp.array(np.stack([np.arange(N, dtype=np.float32), np.zeros(N, np.float32), np.zeros(N, np.float32)], 1),
                 dtype=wp.vec3, device=dev)
    v = wp.zeros(N, dtype=wp.vec3, device=dev)
    f = wp.zeros(N, dtype=wp.vec3, device=dev)  # scratch: never bound
    e = wp.zeros(1, dtype=float, device=dev)
    n = wp.array([4], dtype=int, device=dev)
    gate = wp.zeros(1, dtype=int, device=dev)

    def body():
        f.zero_()
        wp.launch(k_springs, dim=N, inputs=[x, f, 10.0], device=dev)
        wp.launch(k_integrate, dim=N, inputs=[f, x, v, 0.01], device=dev)
        wp.launch(k_countdown, dim=1, inputs=[n, gate], device=dev)
        wp.capture_if(gate, on_true=lambda: wp.launch(k_kinetic_energy, dim=N, inputs=[v, e], device=dev))

    with wrpkit.capture(device=dev) as rec:
        e.zero_()
        wp.capture_while(n, body)
    path = tmp_path_factory.mktemp("spring") / "spring.wrp"
    rec.save(path, inputs={"x": x, "v": v, "n": n}, outputs={"e": e, "x": x})
    return path


def test_spring_chain_is_named_and_typed_the_same_everywhere(spring_chain, tmp_path):
    with open_capture(spring_chain) as cap:
        prog = cap.program
        types = region_types(prog)
        launch = next(o for _, o in m.walk_ops(prog.ops) if isinstance(o, m.KernelLaunch)
                      and o.kernel_key.endswith("k_springs"))
        f_region = next(a.region_id for a in effects(launch, prog).accesses if a.name == "f")
        rt = types[f_region]
        assert rt.bindings == [] and rt.name == "f / forces"
        assert rt.dtype.name == "vec3f" and rt.shape == (N,) and rt.numpy_shape() == (N, 3)
        assert rt.conflicts == []
        graph = build_graph(prog)
        node = next(a for a in graph.arrays if a.region_id == f_region)
        assert (node.name, node.dtype, node.shape) == ("f / forces", "vec3f", (N,))
        whiles = [it for it in graph.items if it.kind == "WHILE"]
        assert whiles and all(e.mode == "read" for e in whiles[0].edges)
    # inspect: kinetic_energy only reads v
    out = subprocess.run([sys.executable, "-m", "wrpkit.cli", "inspect", str(spring_chain), "--ops", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    recs = json.loads(out.stdout)["ops"]
    flat = []

    def walk(rs):
        for r in rs:
            flat.append(r)
            for k in ("then_ops", "else_ops", "body"):
                walk(r.get(k, []))

    walk(recs)
    ke = next(r for r in flat if r.get("kernel_key", "").endswith("k_kinetic_energy"))
    assert {a["name"]: a["access"] for a in ke["args"]} == {"v": "read", "e": "readwrite"}
    springs = next(r for r in flat if r.get("kernel_key", "").endswith("k_springs"))
    fa = next(a for a in springs["args"] if a["name"] == "f")
    assert fa["region"] == f_region and fa["binding"] is None and fa["type"] == "array(ndim=1, dtype=vec3f)"
    memsets = [r for r in flat if r["op"] == "MEMSET"]
    e_region = next(t.region_id for t in types.values() if t.bindings == ["e"])
    assert len(memsets) == 2 and {w["region"] for r in memsets for w in r["writes"]} == {f_region, e_region}
    # trace types the unbound array and names it as the others do
    t = wrpkit.trace(spring_chain)
    assert f_region not in t.unknown_dtypes
    w = next(w for rec in t.ops for w in rec["writes"] if w["region"] == f_region)
    assert (w["name"], w["dtype"]) == ("f / forces", "vec3f")


def test_spring_chain_graph_memsets_do_not_fold_together(spring_chain):
    with open_capture(spring_chain) as cap:
        graph = build_graph(cap.program)
        memsets = []

        def walk(items):
            for it in items:
                if it.kind == "MEMSET":
                    memsets.append(it)
                if it.is_group:
                    walk(it.children)

        walk(graph.items)
        assert len(memsets) == 2 and all(len(it.edges) == 1 and it.edges[0].mode == "write" for it in memsets)
        assert memsets[0].edges[0].array != memsets[1].edges[0].array


def test_spring_chain_dot_has_real_line_breaks_and_renders(spring_chain, tmp_path):
    with open_capture(spring_chain) as cap:
        dot = render_dot(build_graph(cap.program, title="spring"))
    assert "\\\\n" not in dot and "\\n" in dot
    for repeated in ("WHILE WHILE", "IF IF", "THEN then", "ELSE else"):
        assert repeated not in dot
    if shutil.which("dot") is None:
        pytest.skip("Graphviz is not installed")
    src = tmp_path / "g.dot"
    src.write_text(dot)
    out = subprocess.run(["dot", "-Tsvg", str(src)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "<svg" in out.stdout and "f / forces" in out.stdout


def test_conflicting_kernel_views_are_reported_not_guessed(tmp_path):
    @wp.kernel
    def k_as_float(a: wp.array(dtype=float)):
        a[wp.tid()] = 1.0

    @wp.kernel
    def k_as_int(a: wp.array(dtype=int)):
        a[wp.tid()] = 1

    buf = wp.zeros(4, dtype=float, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_as_float, dim=4, inputs=[buf], device="cpu")
        wp.launch(k_as_int, dim=4, inputs=[buf.view(wp.int32)], device="cpu")
    path = tmp_path / "conflict.wrp"
    rec.save(path)
    with open_capture(path) as cap:
        types = region_types(cap.program)
        (rt,) = [t for t in types.values() if t.arguments]
        assert rt.dtype is None and rt.conflicts and "float32" in rt.conflicts[0] and "int32" in rt.conflicts[0]
        # the user's --dtype settles it; the kernels' disagreement is still said
        rt2 = region_types(cap.program, dtypes={rt.region_id: "int32"})[rt.region_id]
        assert rt2.dtype.name == "int32" and rt2.source == "--dtype" and rt2.conflicts


def test_dtype_names():
    assert dtype_from_name("vec3f").size == 12 and dtype_from_name("vec3f").shape == (3,)
    assert dtype_from_name("mat33d").size == 72 and dtype_from_name("quatf").shape == (4,)
    assert dtype_from_name("int64").size == 8 and dtype_from_name("vec0f") is None
    assert dtype_from_name("nonsense") is None


def test_replay_report_writes_shapes_as_inspect_does(spring_chain):
    """One shape convention: a vec3f binding of 8 is (8,) in wrp replay's report as in inspect."""
    rep = subprocess.run([sys.executable, "-m", "wrpkit.cli", "replay", str(spring_chain), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    x = json.loads(rep.stdout)["outputs"]["x"]
    assert (x["shape"], x["dtype"], x["numpy_shape"]) == ([N], "vec3f", [N, 3])
    ins = subprocess.run([sys.executable, "-m", "wrpkit.cli", "inspect", str(spring_chain), "--json"],
                         capture_output=True, text=True, timeout=120)
    b = next(b for b in json.loads(ins.stdout)["bindings"] if b["name"] == "x")
    assert (b["shape"], b["dtype"]) == ([N], "vec3f")


def test_inspect_regions_are_named_and_typed_as_graph_and_trace_say(spring_chain):
    ins = subprocess.run([sys.executable, "-m", "wrpkit.cli", "inspect", str(spring_chain), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert ins.returncode == 0, ins.stderr
    rows = {r["region_id"]: r for r in json.loads(ins.stdout)["regions"]}
    with open_capture(spring_chain) as cap:
        graph = build_graph(cap.program)
    for a in graph.arrays:
        r = rows[a.region_id]
        assert r["name"] == a.name and (r["dtype"] or "") == a.dtype and tuple(r["shape"] or ()) == a.shape
    f = next(r for r in rows.values() if r["name"] == "f / forces")
    assert (f["dtype"], f["shape"]) == ("vec3f", [N])
    text = subprocess.run([sys.executable, "-m", "wrpkit.cli", "inspect", str(spring_chain)],
                          capture_output=True, text=True, timeout=120, env={**__import__("os").environ,
                                                                            "COLUMNS": "80"})
    assert text.returncode == 0 and "f / forces" in text.stdout


def test_extra_kernel_annotations_type_a_stock_capture(spring_chain, tmp_path):
    """A caller's kernel annotations (here: those a wrpkit capture of the same kernels recorded) name,
    type and give access to the arrays of a stock capture, which records none of it."""
    dev = "cpu"
    x = wp.zeros(N, dtype=wp.vec3, device=dev)
    f = wp.zeros(N, dtype=wp.vec3, device=dev)
    v = wp.zeros(N, dtype=wp.vec3, device=dev)
    wp.capture_begin(device=dev, apic=True)
    try:
        wp.launch(k_springs, dim=N, inputs=[x, f, 10.0], device=dev)
        wp.launch(k_integrate, dim=N, inputs=[f, x, v, 0.01], device=dev)
    finally:
        graph = wp.capture_end(device=dev)
    stock = tmp_path / "stock.wrp"
    wp.capture_save(graph, str(stock), inputs={"x": x}, outputs={"v": v})
    from wrpkit.formats.annotations import read_annotations

    with open_capture(spring_chain) as cap:
        extra = {k.kernel_key: k for k in read_annotations(cap.program).kernel_signatures}
    with open_capture(stock) as cap:
        prog = cap.program
        assert not prog.annotations
        bare = region_types(prog)
        typed = region_types(prog, extra_signatures=extra)
        (f_rid,) = [r for r, t in typed.items() if not t.bindings and t.arguments]
        assert bare[f_rid].dtype is None and bare[f_rid].name == "arg1 / arg0"
        assert (typed[f_rid].name, typed[f_rid].dtype.name, typed[f_rid].shape) == ("f / forces", "vec3f", (N,))
        g = build_graph(prog, extra_signatures=extra)
        node = next(a for a in g.arrays if a.region_id == f_rid)
        assert (node.name, node.dtype) == ("f / forces", "vec3f")
        modes = {e.arg: e.mode for it in g.items for e in it.edges if e.array == node.id}
        assert modes == {"f": "write", "forces": "read"}


def test_the_validator_bounds_the_byte_ranges_effects_gives(captures):
    """``wrp validate`` checks, for every non-launch op, exactly the byte ranges effects() says it touches."""
    from wrpkit.checks import validate as v

    compared = 0
    for path in captures.values():
        with open_capture(path) as cap:
            prog = cap.program
            spans: dict = {}
            checker = v._Checker(prog)
            real = checker.span

            def span(where, at, region_id, offset, nbytes, what="range", allow_absent=False):
                if not (region_id == -1 and allow_absent):
                    spans.setdefault(at, set()).add((region_id, offset, nbytes))
                return real(where, at, region_id, offset, nbytes, what, allow_absent)

            checker.span = span
            checker.ops(prog.ops, "ops")
            assert not [p for p in checker.problems if p.severity == "error"], path
            for _, op in m.walk_ops(prog.ops):
                if isinstance(op, m.KernelLaunch):
                    continue
                want = {(a.region_id, a.offset, a.nbytes) for a in effects(op, prog).accesses}
                assert spans.get(op.at, set()) == want, (path.name, op.op_type.name)
                compared += bool(want)
    assert compared > 20


def test_stock_trace_counts_as_written_only_what_an_op_changed(tmp_path):
    """A stock capture records no access: each array argument "touches" its region (conservative),
    and the trace's digests tell which launches changed it: only the kernels' real writes count."""
    dev = "cpu"
    x = wp.array(np.stack([np.arange(N, dtype=np.float32)] * 3, 1), dtype=wp.vec3, device=dev)
    v = wp.array(np.ones((N, 3), np.float32), dtype=wp.vec3, device=dev)
    f = wp.zeros(N, dtype=wp.vec3, device=dev)
    e = wp.zeros(1, dtype=float, device=dev)
    wp.load_module(device=dev)
    wp.capture_begin(device=dev, apic=True)
    try:
        wp.launch(k_springs, dim=N, inputs=[x, f, 10.0], device=dev)
        wp.launch(k_kinetic_energy, dim=N, inputs=[v, e], device=dev)
    finally:
        graph = wp.capture_end(device=dev)
    path = tmp_path / "stock.wrp"
    wp.capture_save(graph, str(path))
    with open_capture(path) as cap:
        launches = [o for _, o in m.walk_ops(cap.program.ops) if isinstance(o, m.KernelLaunch)]
        region_of = {}  # (kernel, argument number) -> region
        for op in launches:
            fx = effects(op, cap.program)
            assert {a.mode for a in fx.accesses if a.part == "data"} == {"touches"}  # the file says nothing
            for a in fx.accesses:
                if a.part == "data":
                    region_of[(op.kernel_key, a.param)] = a.region_id
    springs = next(k for k, _ in region_of if k.endswith("k_springs"))
    energy = next(k for k, _ in region_of if k.endswith("k_kinetic_energy"))
    rx, rf, rv, re = (region_of[(springs, 1)], region_of[(springs, 2)], region_of[(energy, 1)],
                      region_of[(energy, 2)])
    t = wrpkit.trace(path)
    writers = {u["region"]: [w["name"] for w in u["writers"]] for u in t.unchecked}
    assert writers == {rf: [springs], re: [energy]}, writers  # x and v are only read
    unchanged = {u["region"]: u["unchanged"] for u in t.unchecked}
    assert unchanged == {rf: 0, re: 0}
    assert rx not in t.unknown_dtypes and rv not in t.unknown_dtypes
    # the per-op records still list every region the op may write (the conservative rule)
    assert [w["region"] for w in t.ops[0]["writes"]] == [rx, rf]
    r = subprocess.run([sys.executable, "-m", "wrpkit.cli", "trace", str(path)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "2 written region(s)" in r.stdout
    # an unbound region is named as wrp inspect names it: the argument that writes it (numbered from 0)
    assert f"region {rf} (unbound, argument arg1): written 1x by" in r.stdout, r.stdout
