"""Kernel access analysis (``wrpkit.run.capture.access``) on kernels written for this test, and what
``wrp inspect --ops --json`` reports for each launch argument of a real capture of them."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import warp as wp

import wrpkit
from wrpkit.formats import annotations as ann
from wrpkit.run.capture.access import kernel_argument_access

A = ann.ArgumentAccess


@wp.func
def _scaled(src: wp.array(dtype=float), i: int, s: float):
    return src[i] * s


@wp.func
def _put(dst: wp.array(dtype=float), i: int, v: float):
    dst[i] = v


@wp.kernel
def k_math(a: wp.array(dtype=float), v: wp.array(dtype=wp.vec3), e: wp.array(dtype=float)):
    i = wp.tid()
    e[i] = wp.sqrt(a[i]) + 0.5 * wp.dot(v[i], v[i]) + wp.abs(v[i][0]) + wp.length(v[i])


@wp.kernel
def k_helpers(x: wp.array(dtype=float), y: wp.array(dtype=float), unused: wp.array(dtype=float)):
    i = wp.tid()
    _put(y, i, _scaled(x, i, 2.0))


@wp.kernel
def k_atomic_inplace(hist: wp.array(dtype=int), x: wp.array(dtype=float), total: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(hist, i % 2, 1)
    x[i] = x[i] * 2.0
    wp.atomic_add(total, 0, x[i])


@wp.struct
class Grid:
    cells: wp.array2d(dtype=float)
    src: wp.array(dtype=float)
    n: int
    scale: float


@wp.kernel
def k_struct(g: Grid, gather: wp.array(dtype=int), out: wp.array(dtype=float)):
    i = wp.tid()
    j = gather[i] % g.n
    g.cells[i, 0] = g.src[j] * g.scale
    out[i] = float(g.n)


@wp.kernel
def k_tiles(a: wp.array2d(dtype=float), b: wp.array2d(dtype=float)):
    i = wp.tid()
    t = wp.tile_load(a, shape=(1, 4), offset=(i, 0))
    wp.tile_store(b, t, offset=(i, 0))


def test_builtin_calls_on_elements_are_reads():
    assert kernel_argument_access(k_math) == (A.READ, A.READ, A.WRITE)


def test_reads_and_writes_through_wp_func():
    assert kernel_argument_access(k_helpers) == (A.READ, A.WRITE, A.UNUSED)


def test_atomics_and_in_place_updates_are_readwrite():
    assert kernel_argument_access(k_atomic_inplace) == (A.READ_WRITE, A.READ_WRITE, A.READ_WRITE)


def test_struct_array_fields_count_and_value_fields_do_not():
    # g: its cells are written, its src read (one access for the struct argument: both)
    assert kernel_argument_access(k_struct) == (A.READ_WRITE, A.READ, A.WRITE)


def test_tiles_read_and_write():
    assert kernel_argument_access(k_tiles) == (A.READ, A.WRITE)


@pytest.fixture(scope="module")
def access_program(tmp_path_factory):
    """One capture of every kernel above, with an unbound scratch array (``e``) and a struct."""
    n = 4
    a = wp.array(np.arange(1, n + 1, dtype=np.float32), device="cpu")
    v = wp.array(np.ones((n, 3), np.float32), dtype=wp.vec3, device="cpu")
    e = wp.zeros(n, dtype=float, device="cpu")  # scratch: no binding
    y = wp.zeros(n, dtype=float, device="cpu")
    hist = wp.zeros(2, dtype=int, device="cpu")
    total = wp.zeros(1, dtype=float, device="cpu")
    g = Grid()
    g.cells = wp.zeros((n, 2), dtype=float, device="cpu")
    g.src = wp.array(np.arange(n, dtype=np.float32), device="cpu")
    g.n = n
    g.scale = 3.0
    gather = wp.array(np.array([3, 2, 1, 0], np.int32), device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_math, dim=n, inputs=[a, v, e], device="cpu")
        wp.launch(k_helpers, dim=n, inputs=[e, y, None], device="cpu")
        wp.launch(k_atomic_inplace, dim=n, inputs=[hist, y, total], device="cpu")
        wp.launch(k_struct, dim=n, inputs=[g, gather, y], device="cpu")
    path = tmp_path_factory.mktemp("access") / "access.wrp"
    rec.save(path, inputs={"a": a, "v": v, "gather": gather}, outputs={"y": y, "total": total, "hist": hist})
    return path


def _inspect_ops(path) -> list:
    out = subprocess.run([sys.executable, "-m", "wrpkit.cli", "inspect", str(path), "--ops", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["ops"]


def test_inspect_json_gives_every_launch_its_args(access_program):
    ops = _inspect_ops(access_program)
    rows = {op["kernel_key"].rsplit(".", 1)[-1]: op["args"] for op in ops if op["op"] == "KERNEL_LAUNCH"}
    math = {r["name"]: r for r in rows["k_math"]}
    assert math["a"]["access"] == "read" and math["a"]["binding"] == "a"
    assert math["v"]["access"] == "read" and math["v"]["type"] == "array(ndim=1, dtype=vec3f)"
    assert math["e"]["access"] == "write" and math["e"]["binding"] is None and math["e"]["region"] is not None
    helpers = {r["name"]: r for r in rows["k_helpers"]}
    assert helpers["x"]["region"] == math["e"]["region"] and helpers["x"]["access"] == "read"
    assert helpers["unused"]["region"] is None
    st = {r["name"]: r for r in rows["k_struct"]}
    assert {"g.cells", "g.src", "g.n", "gather", "out"} - set(st) == {"g.n"}
    assert st["g.cells"]["access"] == "readwrite" and st["g.cells"]["binding"] is None
    assert st["gather"]["access"] == "read" and st["gather"]["binding"] == "gather"
    for op in ops:
        if op["op"] == "KERNEL_LAUNCH":
            for r in op["args"]:
                assert set(r) == {"name", "type", "access", "region", "binding"}
                assert r["access"] in ("read", "write", "readwrite", "unused", "touches")
    # the launch's reads and writes are its args' accesses (one truth)
    launch = next(op for op in ops if op.get("kernel_key", "").endswith("k_math"))
    assert {w["region"] for w in launch["writes"]} == {math["e"]["region"]}
    assert {r["region"] for r in launch["reads"]} == {math["a"]["region"], math["v"]["region"]}
