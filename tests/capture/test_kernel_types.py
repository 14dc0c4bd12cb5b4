"""``--kernels`` types a stock capture from the types Warp itself resolved (``wrpkit.run.capture.kernel_types``).

Warp 1.19's own examples spell kernel arguments ``wp.array[float]`` and ``wp.array2d[float]``
beside ``wp.array(dtype=float)`` and ``wp.array2d(dtype=float)``.  The program below uses them
all, with a struct of arrays, a ``wp.vec3`` array and an indexed array; it is written to
``tmp_path`` and run as a script, so stock ``wp.capture_save`` records its kernels under
``__main__`` with no types.  Its eager run (the same kernels, launched one by one) writes the
golden values.  Also: :func:`wrpkit.run.capture.access.argument_lines`, the source lines where a
kernel touches each array.
"""

from __future__ import annotations

import ctypes
import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import warp as wp

from proc_helpers import invoke_raising as wrp
from wrpkit.run.capture.access import argument_lines, kernel_argument_access, kernel_signature
from wrpkit.run.capture.kernel_types import kernel_argument_types
from wrpkit.run.load.upgrade import kernel_arg_specs

PROGRAM = textwrap.dedent('''
    """Kernels in the idioms of Warp 1.19's examples, captured with stock Warp when run as a script."""
    import sys

    import numpy as np
    import warp as wp

    N, R, C = 6, 3, 4


    @wp.struct
    class Particles:
        pos: wp.array(dtype=wp.vec3)
        vel: wp.array[wp.vec3]


    @wp.kernel
    def scale(x: wp.array[float], y: wp.array[float], s: float):
        i = wp.tid()
        y[i] = x[i] * s


    @wp.kernel
    def grid(a: wp.array2d(dtype=float), b: wp.array2d[float]):
        i, j = wp.tid()
        b[i, j] = a[i, j] * 2.0 + float(j)


    @wp.kernel
    def move(p: Particles, dt: float):
        i = wp.tid()
        p.pos[i] = p.pos[i] + p.vel[i] * dt


    @wp.kernel
    def norms(v: wp.array(dtype=wp.vec3), n: wp.array[float]):
        i = wp.tid()
        n[i] = wp.length(v[i])


    @wp.kernel
    def gather(src: wp.indexedarray[float], out: wp.array[float]):
        i = wp.tid()
        out[i] = src[i] + 1.0


    def make():
        rng = np.random.default_rng(3)

        def f(*shape):
            return rng.standard_normal(shape).astype(np.float32)

        return {"x": wp.array(f(N), dtype=float, device="cpu"), "y": wp.zeros(N, dtype=float, device="cpu"),
                "a": wp.array(f(R, C), dtype=float, device="cpu"), "b": wp.zeros((R, C), dtype=float, device="cpu"),
                "pos": wp.array(f(N, 3), dtype=wp.vec3, device="cpu"),
                "vel": wp.array(f(N, 3), dtype=wp.vec3, device="cpu"),
                "n": wp.zeros(N, dtype=float, device="cpu"),
                "data": wp.array(f(8), dtype=float, device="cpu"),
                "idx": wp.array(np.array([7, 0, 3], dtype=np.int32), dtype=wp.int32, device="cpu"),
                "g": wp.zeros(3, dtype=float, device="cpu")}


    def step(d):
        wp.launch(scale, dim=N, inputs=[d["x"], d["y"], 3.0], device="cpu")
        wp.launch(grid, dim=(R, C), inputs=[d["a"], d["b"]], device="cpu")
        p = Particles()
        p.pos = d["pos"]
        p.vel = d["vel"]
        wp.launch(move, dim=N, inputs=[p, 0.5], device="cpu")
        wp.launch(norms, dim=N, inputs=[d["pos"], d["n"]], device="cpu")
        wp.launch(gather, dim=3, inputs=[wp.indexedarray(d["data"], [d["idx"]]), d["g"]], device="cpu")


    # pos is updated in place: listed last among the inputs and first among the outputs, so the
    # file's binding list tells every binding's role.
    INPUTS = ["x", "a", "vel", "data", "idx", "pos"]
    OUTPUTS = ["pos", "y", "b", "n", "g"]

    if __name__ == "__main__":
        wp.config.quiet = True
        d = make()
        wp.load_module(device="cpu")
        wp.capture_begin(device="cpu", apic=True)
        try:
            step(d)
        finally:
            graph = wp.capture_end(device="cpu")
        wp.capture_save(graph, sys.argv[1], inputs={k: d[k] for k in INPUTS}, outputs={k: d[k] for k in OUTPUTS})
        eager = make()
        step(eager)  # the same kernels, run eagerly: the golden values
        wp.synchronize_device("cpu")
        np.savez(sys.argv[2], **{k: eager[k].numpy() for k in OUTPUTS})
''')

#: What each binding is, as the program declares it: (dtype, shape, input, output).
EXPECTED = {
    "x": ("float32", [6], True, False), "a": ("float32", [3, 4], True, False),
    "vel": ("vec3f", [6], True, False), "data": ("float32", [8], True, False),
    "idx": ("int32", [3], True, False), "pos": ("vec3f", [6], True, True),
    "y": ("float32", [6], False, True), "b": ("float32", [3, 4], False, True),
    "n": ("float32", [6], False, True), "g": ("float32", [3], False, True),
}


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    """``{"dir", "prog", "stock", "golden"}``: the program, its stock capture and its eager outputs."""
    d = tmp_path_factory.mktemp("kernel_types")
    prog = d / "prog.py"
    prog.write_text(PROGRAM)
    stock, golden = d / "stock.wrp", d / "golden.npz"
    r = subprocess.run([sys.executable, str(prog), str(stock), str(golden)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return {"dir": d, "prog": prog, "stock": stock, "golden": golden}


@pytest.fixture(scope="module")
def annotated(made) -> Path:
    out = made["dir"] / "typed.wrp"
    r = wrp("annotate", made["stock"], "--kernels", made["prog"], "-o", out, "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert [k["kernel"] for k in report["kernels"] if not k["matched"]] == [], report
    assert all(k["code"] == "same" for k in report["kernels"]), report
    return out


def _bindings(path, *extra) -> dict:
    r = wrp("inspect", path, "--json", *extra)
    assert r.exit_code == 0, r.output
    return {b["name"]: b for b in json.loads(r.stdout)["bindings"]}


def test_annotate_types_every_idiom_with_its_dims_and_keeps_the_stock_roles(made, annotated):
    stock = _bindings(made["stock"])
    typed = _bindings(annotated)
    got = {n: (b.get("dtype"), b.get("shape"), b["input"], b["output"]) for n, b in typed.items()}
    assert got == EXPECTED
    # the roles are the ones the stock file's binding list states: annotate changed none of them
    assert {n: (b["input"], b["output"]) for n, b in stock.items()} == {n: v[2:] for n, v in EXPECTED.items()}


def test_kernels_on_inspect_types_in_memory_the_same_way(made):
    got = _bindings(made["stock"], "--kernels", made["prog"])
    assert {n: (b.get("dtype"), b.get("shape")) for n, b in got.items()} == {n: v[:2] for n, v in EXPECTED.items()}


def test_replay_of_the_annotated_file_matches_the_eager_run(made, annotated):
    r = wrp("replay", annotated, "--check", made["golden"], "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)["outputs"]
    assert out["b"]["shape"] == [3, 4] and "a" not in out  # a is an input only, as the stock file says


def test_replay_of_the_stock_file_with_kernels_matches_the_eager_run(made):
    r = wrp("replay", made["stock"], "--kernels", made["prog"], "--check", made["golden"])
    assert r.exit_code == 0, r.output
    assert "check passed" in r.stdout


def test_a_2d_input_of_the_right_shape_is_taken_and_a_wrong_shape_refused(made, tmp_path):
    good, flat, wrong = tmp_path / "good.npy", tmp_path / "flat.npy", tmp_path / "wrong.npy"
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(good, a)
    np.save(flat, a.reshape(12))
    np.save(wrong, np.zeros((4, 3), dtype=np.float32))
    r = wrp("replay", made["stock"], "--kernels", made["prog"], "--input", f"a={good}", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)["outputs"]
    assert out["b"]["shape"] == [3, 4]
    assert out["b"]["max"] == pytest.approx(float((a * 2.0 + np.arange(4)).max()))
    for bad in (flat, wrong):
        r = wrp("replay", made["stock"], "--kernels", made["prog"], "--input", f"a={bad}")
        assert r.exit_code == 2, r.output
        assert "(3, 4)" in r.output, r.output


# ---------------------------------------------------------------------------
# Warp's resolved types, in process
# ---------------------------------------------------------------------------


@wp.struct
class Body:
    pos: wp.array(dtype=wp.vec3)
    grid: wp.array2d[float]
    ids: wp.indexedarray[int]
    count: int


@wp.kernel
def k_forms(a: wp.array[float], b: wp.array2d[float], c: wp.array2d(dtype=float), d: wp.array3d[wp.vec3],
            e: wp.array4d(dtype=wp.mat22), f: wp.indexedarray(dtype=float), g: wp.indexedarray2d(dtype=float),
            h: wp.fabricarray(dtype=float), q: wp.array(dtype=float, ndim=2), s: Body, u: wp.uint64,
            v: wp.vec3, m: wp.mat33, x: float):
    i = wp.tid()


def test_every_annotation_form_is_typed_from_warps_own_objects():
    types = {t.name: t for t in kernel_argument_types(k_forms)}
    want = {"a": ("array", 1, "float32", 56), "b": ("array", 2, "float32", 56), "c": ("array", 2, "float32", 56),
            "d": ("array", 3, "vec3f", 56), "e": ("array", 4, "mat22f", 56),
            "f": ("indexedarray", 1, "float32", 104), "g": ("indexedarray", 2, "float32", 104),
            "q": ("array", 2, "float32", 56)}
    for name, (family, ndim, dtype, size) in want.items():
        t = types[name]
        assert (t.family, t.ndim, t.dtype.name, t.size, t.problem) == (family, ndim, dtype, size, None), name
    assert types["h"].family == "fabricarray" and types["h"].problem is None
    assert [(s.path, s.family, s.ndim, s.dtype.name) for s in types["s"].arrays] == [
        ("s.pos", "array", 1, "vec3f"), ("s.grid", "array", 2, "float32"), ("s.ids", "indexedarray", 1, "int32")]
    assert [s.offset for s in types["s"].arrays] == [0, 56, 112]
    assert types["s"].size == ctypes.sizeof(Body.ctype)
    assert (types["u"].family, types["u"].dtype.name, types["u"].size) == (None, "uint64", 8)
    assert (types["v"].dtype.name, types["v"].size, types["m"].dtype.name, types["m"].size) == ("vec3f", 12, "mat33f", 36)
    assert types["x"].dtype.name == "float32" and types["x"].size == 4
    # --kernels' layout matching reads the same answer, and so does the kernel signature
    specs = kernel_arg_specs(k_forms)
    assert [(s.name, s.is_array, s.size) for s in specs] == [(t.name, t.is_array, t.size) for t in types.values()]
    sig = kernel_signature(k_forms, "k_forms", "0" * 64)
    for arg in sig.arguments:
        t = types[arg.name]
        assert arg.ndim == t.ndim and arg.dtype == t.dtype, arg.name


@wp.func
def _store(dst: wp.array(dtype=float), i: int, v: float):
    dst[i] = v  # LINE store


@wp.func
def _bump(b: Body, i: int):
    b.pos[i] = b.pos[i] * 2.0  # LINE bump


@wp.kernel
def k_lines(a: wp.array[float], grid: wp.array2d(dtype=float), out: wp.array(dtype=float), s: Body,
            hist: wp.array[int], unused: wp.array[float]):
    i = wp.tid()
    x = a[i]  # LINE read a
    _store(out, i, x)  # LINE call store
    grid[i, 0] = x + grid[i, 1]  # LINE grid
    wp.atomic_add(hist, 0, 1)  # LINE atomic
    out[i] += s.grid[i, 0]  # LINE augassign
    _bump(s, i)  # LINE call bump


def _line(marker: str) -> int:
    lines, first = inspect.getsourcelines(sys.modules[__name__])
    return next(n for n, text in enumerate(lines, start=first or 1) if text.rstrip().endswith(f"# LINE {marker}"))


def test_argument_lines_name_the_source_lines_of_each_read_and_write():
    got = argument_lines(k_lines)
    assert k_lines.adj.filename == __file__
    assert got == {
        "a": {"read": [_line("read a")], "write": []},
        "grid": {"read": [_line("grid")], "write": [_line("grid")]},
        "out": {"read": [_line("augassign")], "write": sorted([_line("store"), _line("augassign")])},
        "s.pos": {"read": [_line("bump")], "write": [_line("bump")]},
        "s.grid": {"read": [_line("augassign")], "write": []},
        "s.ids": {"read": [], "write": []},
        "hist": {"read": [_line("atomic")], "write": [_line("atomic")]},
        "unused": {"read": [], "write": []},
    }
    # the access flags come from the same walk
    A = type(kernel_argument_access(k_lines)[0])
    assert kernel_argument_access(k_lines) == (A.READ, A.READ_WRITE, A.READ_WRITE, A.READ_WRITE, A.READ_WRITE,
                                               A.UNUSED)


def test_argument_lines_never_raises():
    assert argument_lines(object()) == {}


def test_argument_lines_count_a_function_of_another_file_at_its_call(tmp_path):
    from wrpkit.run.load.upgrade import import_kernels_file, module_kernels

    (tmp_path / "kt_helpers.py").write_text(textwrap.dedent('''
        import warp as wp


        @wp.func
        def put(dst: wp.array(dtype=float), i: int, v: float):
            dst[i] = v
    '''))
    main = tmp_path / "kt_main.py"
    main.write_text(textwrap.dedent('''
        import warp as wp
        from kt_helpers import put


        @wp.kernel
        def k(src: wp.array[float], dst: wp.array2d[float], out: wp.array[float]):
            i = wp.tid()
            put(out, i, src[i])
            dst[i, 0] = 1.0
    '''))
    (k,) = module_kernels(import_kernels_file(main))
    assert k.adj.filename == str(main)
    assert argument_lines(k) == {"src": {"read": [9], "write": []}, "dst": {"read": [], "write": [10]},
                                 "out": {"read": [], "write": [9]}}


def test_trace_of_the_stock_file_types_every_kernel(made):
    r = wrp("trace", made["stock"], "--kernels", made["prog"], "--json")
    assert r.exit_code == 0, r.output
    assert "whose layout" not in r.output
    assert "5 of 5" in r.stderr or all(k["matched"] for k in json.loads(r.stdout)["kernels"]["kernels"])
