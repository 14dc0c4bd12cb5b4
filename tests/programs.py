"""A library of real Warp programs for the wrpkit test suite.

Every :class:`WarpProgram` bundles a deterministic set of arrays
(``make_arrays``), the Warp calls that operate on them (``step``), the
names that are bound as ``capture_save`` inputs and outputs, and the operation
histogram that stock Warp 1.19.0 records for it on CPU (``op_counts``).

The same ``step`` is used both inside an APIC capture
(:func:`capture_to_file`) and for live execution (:func:`run_live`), so a
replay of the saved ``.wrp`` can be compared byte for byte against live
execution (:func:`replay_stock` does that replay with stock Warp).

Conventions
-----------
* ``make_arrays(device)`` returns a fresh ``dict``. Every binding name maps to
  a *base* ``wp.array`` (a whole allocation; Warp binds whole allocations,
  never views). Entries whose names start with ``_`` are auxiliary objects that
  must stay alive with the arrays (a ``wp.Mesh``, a ``BsrMatrix``, ...), they
  are never bound.
* ``step(arrays)`` issues the Warp operations. It may *replace* entries of the
  dict (e.g. a sparse-matrix array that Warp reallocates); bindings are
  resolved after ``step`` returns.
* ``op_counts`` counts op records at every nesting depth (ops inside
  ``IF``/``WHILE`` bodies included, the ``IF``/``WHILE`` records themselves
  included). Keys are APIC op names without the ``APIC_OP_`` prefix.
* All contents come from a fixed numpy seed, so two calls of ``make_arrays``
  give identical bytes. Two captures of a program give identical files only
  when it launches no kernel: stock Warp leaves the capture-time data
  pointers in launch value blobs (they are relocated at load) and mesh ids in
  mesh records.

``make_big`` builds the benchmark program (many tiny launches plus one large
region). It is intentionally not part of :data:`PROGRAMS`.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

import warp as wp
import warp.sparse as wps

# ``wp.config.quiet`` is not a Warp 1.19 setting (it is harmless to set); the
# log level is what silences the init banner and module-load messages.
wp.config.quiet = True
wp.config.log_level = wp.LOG_WARNING
wp.init()

SEED = 1234
"""Seed of every numpy generator used by ``make_arrays``."""

OP_NAMES = (
    "KERNEL_LAUNCH",
    "MEMCPY_D2D",
    "MEMSET",
    "MEMTILE",
    "IF",
    "WHILE",
    "SCAN",
    "SEGMENTED_SORT",
    "RADIX_SORT",
    "RUNLENGTH_ENCODE",
    "BSR_FROM_TRIPLETS",
    "BSR_TRANSPOSE",
    "REDUCTION",
)
"""Op names that can appear in ``WarpProgram.op_counts``."""


@dataclass
class WarpProgram:
    """A Warp program that can be captured to a ``.wrp`` file or run live.

    Attributes:
        name: Registry key; also used as the file stem by tests.
        make_arrays: ``device -> dict`` of fresh arrays with deterministic
            contents (see the module docstring for the ``_`` convention).
        step: Issues the Warp operations on a dict from ``make_arrays``.
        inputs: Binding names passed to ``capture_save(inputs=...)``.
        outputs: Binding names passed to ``capture_save(outputs=...)``.
        op_counts: Expected op histogram over all nesting depths.
        kernels: Kernel keys expected among the recorded launches, or ``None``.
        replay_matches_live: ``False`` when stock Warp's replay of the saved
            file is known to differ from live execution (see ``doc``).
        doc: One-paragraph description of what the program exercises.
    """

    name: str
    make_arrays: Callable[[str], dict[str, Any]]
    step: Callable[[dict[str, Any]], None]
    inputs: list[str]
    outputs: list[str]
    op_counts: dict[str, int]
    kernels: set[str] | None = None
    replay_matches_live: bool = True
    doc: str = ""

    @property
    def bindings(self) -> list[str]:
        """Input and output binding names, inputs first, without duplicates."""
        return list(dict.fromkeys([*self.inputs, *self.outputs]))

    @property
    def total_ops(self) -> int:
        """Number of op records at all depths."""
        return sum(self.op_counts.values())


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _rng() -> np.random.Generator:
    return np.random.default_rng(SEED)


def _binding_map(arrays: dict[str, Any], names: list[str]) -> dict[str, wp.array]:
    return {name: arrays[name] for name in names}


def capture_to_file(prog: WarpProgram, path: str | os.PathLike, device: str = "cpu") -> dict[str, Any]:
    """Capture ``prog.step`` on fresh arrays with ``apic=True`` and save it.

    Args:
        prog: The program.
        path: Destination ``.wrp`` path (Warp adds ``.wrp`` if missing and
            writes ``<stem>_modules/`` beside it).
        device: Warp device to capture on.

    Returns:
        The arrays dict the graph was captured on. On CPU nothing has executed,
        so their contents are still the ``make_arrays`` values.
    """
    arrays = prog.make_arrays(device)
    wp.capture_begin(device=device, apic=True)
    try:
        prog.step(arrays)
    finally:
        graph = wp.capture_end(device=device)
    wp.capture_save(
        graph,
        os.fspath(path),
        inputs=_binding_map(arrays, prog.inputs),
        outputs=_binding_map(arrays, prog.outputs),
    )
    return arrays


_CAPTURE_DIR = Path(tempfile.mkdtemp(prefix="wrpkit-captures-"))
atexit.register(shutil.rmtree, _CAPTURE_DIR, True)


@functools.lru_cache(maxsize=None)
def _capture_once(name: str, device: str, warp_version: str) -> Path:
    # Keyed by Warp version and device too: a .wrp is locked to both, so a
    # capture must never be served to a run of another Warp or device.
    path = _CAPTURE_DIR / warp_version / device.replace(":", "_") / f"{name}.wrp"
    path.parent.mkdir(parents=True, exist_ok=True)
    capture_to_file(PROGRAMS[name], path, device)
    return path


def cached_capture(name: str, device: str = "cpu") -> Path:
    """The one capture of a program for this test run, made with stock Warp on first use.

    Every test file asks here (``conftest.captures``, the native tests, the
    replay cases, the fuzz seeds), so each program is captured once per run.
    The file is shared: copy it before editing it.

    Args:
        name: A key of :data:`PROGRAMS`.
        device: Warp device to capture on.

    Returns:
        Path of the saved ``.wrp`` (its ``<stem>_modules/`` lies beside it).

    Raises:
        KeyError: ``name`` is not a registered program.
    """
    return _capture_once(name, device, wp.config.version)


def cached_captures(device: str = "cpu") -> dict[str, Path]:
    """``{name: Path of its .wrp}`` for every program of :data:`PROGRAMS`, from :func:`cached_capture`."""
    return {name: cached_capture(name, device) for name in PROGRAMS}


def run_live(prog: WarpProgram, device: str = "cpu") -> dict[str, np.ndarray]:
    """Run ``prog.step`` once, live, on fresh arrays.

    Returns:
        A numpy copy of every binding (inputs and outputs) after the step.
    """
    arrays = prog.make_arrays(device)
    prog.step(arrays)
    wp.synchronize_device(device)
    return {name: arrays[name].numpy().copy() for name in prog.bindings}


def replay_stock(prog: WarpProgram, path: str | os.PathLike, device: str = "cpu") -> dict[str, np.ndarray]:
    """Replay a saved program with stock Warp, from fresh input values.

    Loads ``path`` with ``wp.capture_load``, sets every input binding to the
    values ``make_arrays`` produces, launches the graph once and reads every
    binding back with ``get_param``.

    Returns:
        A numpy array per binding name, comparable with :func:`run_live`.
    """
    graph = wp.capture_load(os.fspath(path), device=device)
    fresh = prog.make_arrays(device)
    for name in prog.inputs:
        graph.set_param(name, fresh[name])
    wp.capture_launch(graph)
    wp.synchronize_device(device)
    result = {}
    for name in prog.bindings:
        out = wp.empty_like(fresh[name])
        graph.get_param(name, out)
        result[name] = out.numpy().copy()
    return result


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """``True`` when two arrays have identical shape, dtype and raw bytes."""
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------


@wp.kernel
def k_scalars(
    a_i8: wp.int8,
    a_u8: wp.uint8,
    a_i16: wp.int16,
    a_u16: wp.uint16,
    a_i32: wp.int32,
    a_u32: wp.uint32,
    a_i64: wp.int64,
    a_u64: wp.uint64,
    a_f16: wp.float16,
    a_f32: wp.float32,
    a_f64: wp.float64,
    a_bool: wp.bool,
    x: wp.array(dtype=wp.float64),
    ints: wp.array(dtype=wp.int64),
    floats: wp.array(dtype=wp.float64),
):
    i = wp.tid()
    sign = wp.float64(1.0)
    if a_bool:
        sign = wp.float64(-1.0)
    floats[i] = sign * x[i] * wp.float64(a_f32) + wp.float64(a_f16) + a_f64 * wp.float64(i)
    if i == 0:
        ints[0] = wp.int64(a_i8)
        ints[1] = wp.int64(a_u8)
        ints[2] = wp.int64(a_i16)
        ints[3] = wp.int64(a_u16)
        ints[4] = wp.int64(a_i32)
        ints[5] = wp.int64(a_u32)
        ints[6] = a_i64
        ints[7] = wp.int64(a_u64)


@wp.kernel
def k_vecmat_f32(
    v: wp.vec3,
    m33: wp.mat33,
    m44: wp.mat44,
    q: wp.quat,
    t: wp.transform,
    sv: wp.spatial_vector,
    pts: wp.array(dtype=wp.vec3),
    out_pts: wp.array(dtype=wp.vec3),
    out_sv: wp.array(dtype=wp.spatial_vector),
):
    i = wp.tid()
    p = pts[i]
    a = wp.transform_point(t, m33 * p + v)
    b = wp.quat_rotate(q, p)
    h = m44 * wp.vec4(p[0], p[1], p[2], 1.0)
    out_pts[i] = a + b + wp.vec3(h[0], h[1], h[2])
    out_sv[i] = sv * float(i + 1)


@wp.kernel
def k_vecmat_f64(
    v: wp.vec3d,
    m22: wp.mat22d,
    m33: wp.mat33d,
    q: wp.quatd,
    t: wp.transformd,
    sv: wp.spatial_vectord,
    pts: wp.array(dtype=wp.vec3d),
    out_pts: wp.array(dtype=wp.vec3d),
    out_m: wp.array(dtype=wp.mat22d),
    out_sv: wp.array(dtype=wp.spatial_vectord),
):
    i = wp.tid()
    p = pts[i]
    out_pts[i] = wp.transform_point(t, m33 * p) + wp.quat_rotate(q, v)
    out_m[i] = m22 * wp.float64(i)
    out_sv[i] = sv + sv * wp.float64(i)


@wp.struct
class Inner:
    """Nested struct: a scale and an offset."""

    scale: wp.float32
    offset: wp.vec3


@wp.struct
class Particles:
    """Struct with a nested struct, array fields and an optional array."""

    inner: Inner
    count: wp.int32
    pos: wp.array(dtype=wp.vec3)
    weights: wp.array(dtype=wp.float32)
    extra: wp.array(dtype=wp.float32)  # left as None (NULL relocations)


@wp.struct
class Outputs:
    """Struct holding only output arrays."""

    pos: wp.array(dtype=wp.vec3)
    total: wp.array(dtype=wp.float32)


@wp.kernel
def k_structs(p: Particles, o: Outputs, bias: Inner):
    i = wp.tid()
    w = p.weights[i]
    o.pos[i] = p.pos[i] * (p.inner.scale * w) + p.inner.offset + bias.offset * bias.scale
    wp.atomic_add(o.total, 0, w * float(p.count))


def _make_double_kernel(tag: str, dtype) -> wp.Kernel:
    """Build ``dst[i] = src[i] + src[i]`` for one dtype, as its own kernel key.

    Distinct keys matter: generic overloads of one kernel share a key, which
    stock APIC cannot tell apart (see the ``overloads`` program).
    """

    def double(src, dst):
        i = wp.tid()
        dst[i] = src[i] + src[i]

    double.__annotations__ = {"src": wp.array(dtype=dtype), "dst": wp.array(dtype=dtype)}
    return wp.kernel(double, name=f"k_double_{tag}")


@wp.kernel
def k_generic_double(src: wp.array(dtype=Any), dst: wp.array(dtype=Any)):
    i = wp.tid()
    dst[i] = src[i] + src[i]


# Declare the overloads up front so that the module is hashed and compiled
# once (an overload created lazily at launch time changes the module hash and
# forces a recompile of the whole module).
_GENERIC_DTYPES = (wp.int32, wp.float32, wp.vec3)
for _t in _GENERIC_DTYPES:
    wp.overload(k_generic_double, {"src": wp.array(dtype=_t), "dst": wp.array(dtype=_t)})
del _t


@wp.kernel
def k_2d(src: wp.array2d(dtype=wp.float32), dst: wp.array2d(dtype=wp.float32)):
    i, j = wp.tid()
    dst[i, j] = src[i, j] * 2.0 + float(i) - float(j)


@wp.kernel
def k_3d(src: wp.array3d(dtype=wp.vec3), dst: wp.array3d(dtype=wp.vec3)):
    i, j, k = wp.tid()
    dst[i, j, k] = wp.cross(src[i, j, k], wp.vec3(float(i), float(j), float(k) + 1.0))


@wp.kernel
def k_4d(src: wp.array4d(dtype=wp.mat22), dst: wp.array4d(dtype=wp.mat22)):
    i, j, k, l = wp.tid()
    dst[i, j, k, l] = wp.transpose(src[i, j, k, l]) * float(i + j + k + l)


@wp.kernel
def k_4d_f64(src: wp.array4d(dtype=wp.float64), dst: wp.array4d(dtype=wp.float64)):
    i, j, k, l = wp.tid()
    dst[i, j, k, l] = src[i, j, k, l] - wp.float64(i * 1000 + j * 100 + k * 10 + l)


@wp.kernel
def k_axpb(src: wp.array(dtype=wp.float32), dst: wp.array(dtype=wp.float32), a: wp.float32):
    i = wp.tid()
    dst[i] = src[i] * a + float(i)


@wp.kernel
def k_axpb_2d(src: wp.array2d(dtype=wp.float32), dst: wp.array2d(dtype=wp.float32), a: wp.float32):
    i, j = wp.tid()
    dst[i, j] = src[i, j] * a + float(10 * i + j)


@wp.kernel
def k_indexed(arr: wp.indexedarray(dtype=wp.float32), v: wp.float32):
    i = wp.tid()
    arr[i] = arr[i] * 2.0 + v


@wp.kernel
def k_indexed_2d(arr: wp.indexedarray2d(dtype=wp.float32), out: wp.array2d(dtype=wp.float32)):
    i, j = wp.tid()
    out[i, j] = arr[i, j] + float(j)
    arr[i, j] = -arr[i, j]


@wp.kernel
def k_tape_forward(
    x: wp.array(dtype=wp.float32),
    w: wp.array(dtype=wp.float32),
    y: wp.array(dtype=wp.float32),
):
    i = wp.tid()
    y[i] = wp.sin(x[i]) * w[i] + x[i] * x[i]


@wp.kernel
def k_tape_loss(y: wp.array(dtype=wp.float32), loss: wp.array(dtype=wp.float32)):
    i = wp.tid()
    wp.atomic_add(loss, 0, y[i] * y[i])


@wp.kernel
def k_add_const(x: wp.array(dtype=wp.float32), v: wp.float32):
    i = wp.tid()
    x[i] = x[i] + v


@wp.kernel
def k_counter_step(counter: wp.array(dtype=wp.int32), x: wp.array(dtype=wp.float32)):
    i = wp.tid()
    x[i] = x[i] * 0.5 + float(counter[0])
    if i == 0:
        counter[0] = counter[0] - 1


@wp.kernel
def k_residual_step(x: wp.array(dtype=wp.float32), tol: wp.float32, flag: wp.array(dtype=wp.int32)):
    # Sequential (dim=1) relaxation step: halve every value, then keep looping
    # while any value is above ``tol``.
    keep = int(0)
    for i in range(x.shape[0]):
        x[i] = x[i] * 0.5
        if wp.abs(x[i]) > tol:
            keep = 1
    flag[0] = keep


@wp.kernel
def k_parity(counter: wp.array(dtype=wp.int32), flag: wp.array(dtype=wp.int32)):
    flag[0] = counter[0] % 2


@wp.kernel
def k_dec(counter: wp.array(dtype=wp.int32)):
    counter[0] = counter[0] - 1


@wp.kernel
def k_diag_triplets(
    n: wp.int32,
    rows: wp.array(dtype=wp.int32),
    cols: wp.array(dtype=wp.int32),
    vals: wp.array(dtype=wp.float32),
):
    # Turn the first ``n`` triplets into a lower bidiagonal pattern.
    i = wp.tid()
    rows[i] = i % n
    cols[i] = wp.max(i % n - i // n, 0)
    vals[i] = vals[i] + 1.0


@wp.kernel
def k_mesh_query(
    mesh: wp.handle,
    queries: wp.array(dtype=wp.vec3),
    closest: wp.array(dtype=wp.vec3),
    dist: wp.array(dtype=wp.float32),
    faces: wp.array(dtype=wp.int32),
):
    i = wp.tid()
    p = queries[i]
    q = wp.mesh_query_point_no_sign(mesh, p, 100.0)
    cp = wp.mesh_eval_position(mesh, q.face, q.u, q.v)
    closest[i] = cp
    dist[i] = wp.length(cp - p)
    faces[i] = q.face


@wp.kernel
def k_tiny(counter: wp.array(dtype=wp.int32), step: wp.int32):
    counter[0] = counter[0] + step


@wp.kernel
def k_touch_big(big: wp.array(dtype=wp.uint8), stride: wp.int64):
    i = wp.tid()
    idx = wp.int64(i) * stride
    big[idx] = big[idx] + wp.uint8(1)


# ---------------------------------------------------------------------------
# Programs
# ---------------------------------------------------------------------------

PROGRAMS: dict[str, WarpProgram] = {}
"""Registry of programs by name."""


def _register(prog: WarpProgram) -> WarpProgram:
    if prog.name in PROGRAMS:
        raise ValueError(f"duplicate program {prog.name!r}")
    PROGRAMS[prog.name] = prog
    return prog


# -- scalars -----------------------------------------------------------------

_N_SCALARS = 8


def _scalars_arrays(device):
    rng = _rng()
    return {
        "x": wp.array(rng.standard_normal(_N_SCALARS), dtype=wp.float64, device=device),
        "ints": wp.zeros(8, dtype=wp.int64, device=device),
        "floats": wp.zeros(_N_SCALARS, dtype=wp.float64, device=device),
    }


def _scalars_step(a):
    wp.launch(
        k_scalars,
        dim=_N_SCALARS,
        inputs=[
            wp.int8(-7),
            wp.uint8(250),
            wp.int16(-30000),
            wp.uint16(65000),
            wp.int32(-2_000_000_000),
            wp.uint32(4_000_000_000),
            wp.int64(-(2**40) - 3),
            wp.uint64(2**63 + 5),
            wp.float16(1.5),
            wp.float32(0.75),
            wp.float64(1.0 / 3.0),
            True,
            a["x"],
            a["ints"],
            a["floats"],
        ],
        device=a["x"].device,
    )


_register(
    WarpProgram(
        name="scalars",
        make_arrays=_scalars_arrays,
        step=_scalars_step,
        inputs=["x"],
        outputs=["ints", "floats"],
        op_counts={"KERNEL_LAUNCH": 1},
        kernels={"k_scalars"},
        doc="One launch with a scalar argument of every width: int8..uint64, float16/32/64 and bool.",
    )
)


# -- vecmat ------------------------------------------------------------------

_N_VECMAT = 6


def _vecmat_arrays(device):
    rng = _rng()
    return {
        "pts": wp.array(rng.standard_normal((_N_VECMAT, 3)).astype(np.float32), dtype=wp.vec3, device=device),
        "pts_d": wp.array(rng.standard_normal((_N_VECMAT, 3)), dtype=wp.vec3d, device=device),
        "out_pts": wp.zeros(_N_VECMAT, dtype=wp.vec3, device=device),
        "out_sv": wp.zeros(_N_VECMAT, dtype=wp.spatial_vector, device=device),
        "out_pts_d": wp.zeros(_N_VECMAT, dtype=wp.vec3d, device=device),
        "out_m_d": wp.zeros(_N_VECMAT, dtype=wp.mat22d, device=device),
        "out_sv_d": wp.zeros(_N_VECMAT, dtype=wp.spatial_vectord, device=device),
    }


def _vecmat_step(a):
    device = a["pts"].device
    q = wp.quat_from_axis_angle(wp.vec3(0.0, 0.6, 0.8), 0.7)
    qd = wp.quatd(*[float(c) for c in q])
    wp.launch(
        k_vecmat_f32,
        dim=_N_VECMAT,
        inputs=[
            wp.vec3(1.0, -2.0, 0.5),
            wp.mat33(1.0, 0.1, 0.0, 0.2, 0.9, 0.0, 0.0, -0.3, 1.1),
            wp.mat44(*[float(i) * 0.125 for i in range(16)]),
            q,
            wp.transform(wp.vec3(0.5, 0.25, -1.0), q),
            wp.spatial_vector(1.0, 2.0, 3.0, 4.0, 5.0, 6.0),
            a["pts"],
            a["out_pts"],
            a["out_sv"],
        ],
        device=device,
    )
    wp.launch(
        k_vecmat_f64,
        dim=_N_VECMAT,
        inputs=[
            wp.vec3d(0.1, 0.2, 0.3),
            wp.mat22d(1.0, 2.0, 3.0, 4.0),
            wp.mat33d(2.0, 0.0, 0.0, 0.0, 3.0, 0.0, 0.5, 0.0, 1.0),
            qd,
            wp.transformd(wp.vec3d(-1.0, 0.0, 2.0), qd),
            wp.spatial_vectord(0.5, -0.5, 1.5, -1.5, 2.5, -2.5),
            a["pts_d"],
            a["out_pts_d"],
            a["out_m_d"],
            a["out_sv_d"],
        ],
        device=device,
    )


_register(
    WarpProgram(
        name="vecmat",
        make_arrays=_vecmat_arrays,
        step=_vecmat_step,
        inputs=["pts", "pts_d"],
        outputs=["out_pts", "out_sv", "out_pts_d", "out_m_d", "out_sv_d"],
        op_counts={"KERNEL_LAUNCH": 2},
        kernels={"k_vecmat_f32", "k_vecmat_f64"},
        doc="vec3/mat33/mat44/quat/transform/spatial_vector arguments, float32 and float64 variants.",
    )
)


# -- structs -----------------------------------------------------------------

_N_STRUCTS = 5


def _structs_arrays(device):
    rng = _rng()
    return {
        "pos": wp.array(rng.standard_normal((_N_STRUCTS, 3)).astype(np.float32), dtype=wp.vec3, device=device),
        "weights": wp.array(rng.random(_N_STRUCTS).astype(np.float32), dtype=wp.float32, device=device),
        "out_pos": wp.zeros(_N_STRUCTS, dtype=wp.vec3, device=device),
        "total": wp.zeros(1, dtype=wp.float32, device=device),
    }


def _structs_step(a):
    inner = Inner()
    inner.scale = 1.5
    inner.offset = wp.vec3(0.0, 1.0, 2.0)
    p = Particles()
    p.inner = inner
    p.count = 3
    p.pos = a["pos"]
    p.weights = a["weights"]
    p.extra = None
    o = Outputs()
    o.pos = a["out_pos"]
    o.total = a["total"]
    bias = Inner()
    bias.scale = -0.5
    bias.offset = wp.vec3(1.0, 1.0, 1.0)
    wp.launch(k_structs, dim=_N_STRUCTS, inputs=[p, o, bias], device=a["pos"].device)


_register(
    WarpProgram(
        name="structs",
        make_arrays=_structs_arrays,
        step=_structs_step,
        inputs=["pos", "weights"],
        outputs=["out_pos", "total"],
        op_counts={"KERNEL_LAUNCH": 1},
        kernels={"k_structs"},
        doc="@wp.struct arguments: a nested struct, array fields, a None array field, a struct of outputs.",
    )
)


# -- arrays_nd ---------------------------------------------------------------

_ND_SCALAR_TYPES = [
    ("i8", wp.int8, np.int8),
    ("u8", wp.uint8, np.uint8),
    ("i16", wp.int16, np.int16),
    ("u16", wp.uint16, np.uint16),
    ("i32", wp.int32, np.int32),
    ("u32", wp.uint32, np.uint32),
    ("i64", wp.int64, np.int64),
    ("u64", wp.uint64, np.uint64),
    ("f16", wp.float16, np.float16),
    ("f32", wp.float32, np.float32),
    ("f64", wp.float64, np.float64),
]
_ND_DOUBLE_KERNELS = {tag: _make_double_kernel(tag, wtype) for tag, wtype, _ in _ND_SCALAR_TYPES}
_ND_DOUBLE_KERNELS["vec3"] = _make_double_kernel("vec3", wp.vec3)


def _nd_arrays(device):
    rng = _rng()
    arrays = {}
    for tag, wtype, ntype in _ND_SCALAR_TYPES:
        if np.issubdtype(ntype, np.integer):
            info = np.iinfo(ntype)
            data = rng.integers(info.min, info.max, size=7, dtype=ntype, endpoint=True)
        else:
            data = rng.standard_normal(7).astype(ntype)
        arrays[f"src_{tag}"] = wp.array(data, dtype=wtype, device=device)
        arrays[f"dst_{tag}"] = wp.zeros(7, dtype=wtype, device=device)
    arrays["src_vec3_1d"] = wp.array(rng.standard_normal((5, 3)).astype(np.float32), dtype=wp.vec3, device=device)
    arrays["dst_vec3_1d"] = wp.zeros(5, dtype=wp.vec3, device=device)
    arrays["src_2d"] = wp.array(rng.standard_normal((3, 4)).astype(np.float32), dtype=wp.float32, device=device)
    arrays["dst_2d"] = wp.zeros((3, 4), dtype=wp.float32, device=device)
    arrays["src_3d"] = wp.array(rng.standard_normal((2, 3, 4, 3)).astype(np.float32), dtype=wp.vec3, device=device)
    arrays["dst_3d"] = wp.zeros((2, 3, 4), dtype=wp.vec3, device=device)
    m22 = rng.standard_normal((2, 2, 3, 2, 2, 2)).astype(np.float32)
    arrays["src_4d"] = wp.array(m22, dtype=wp.mat22, device=device)
    arrays["dst_4d"] = wp.zeros((2, 2, 3, 2), dtype=wp.mat22, device=device)
    arrays["src_4d_f64"] = wp.array(rng.standard_normal((2, 3, 2, 2)), dtype=wp.float64, device=device)
    arrays["dst_4d_f64"] = wp.zeros((2, 3, 2, 2), dtype=wp.float64, device=device)
    return arrays


def _nd_step(a):
    device = a["src_2d"].device
    for tag, _, _ in _ND_SCALAR_TYPES:
        wp.launch(_ND_DOUBLE_KERNELS[tag], dim=7, inputs=[a[f"src_{tag}"], a[f"dst_{tag}"]], device=device)
    wp.launch(_ND_DOUBLE_KERNELS["vec3"], dim=5, inputs=[a["src_vec3_1d"], a["dst_vec3_1d"]], device=device)
    wp.launch(k_2d, dim=a["src_2d"].shape, inputs=[a["src_2d"], a["dst_2d"]], device=device)
    wp.launch(k_3d, dim=a["src_3d"].shape, inputs=[a["src_3d"], a["dst_3d"]], device=device)
    wp.launch(k_4d, dim=a["src_4d"].shape, inputs=[a["src_4d"], a["dst_4d"]], device=device)
    wp.launch(k_4d_f64, dim=a["src_4d_f64"].shape, inputs=[a["src_4d_f64"], a["dst_4d_f64"]], device=device)


_ND_SRC = [f"src_{t}" for t, _, _ in _ND_SCALAR_TYPES] + ["src_vec3_1d", "src_2d", "src_3d", "src_4d", "src_4d_f64"]

_register(
    WarpProgram(
        name="arrays_nd",
        make_arrays=_nd_arrays,
        step=_nd_step,
        inputs=_ND_SRC,
        outputs=[s.replace("src_", "dst_", 1) for s in _ND_SRC],
        op_counts={"KERNEL_LAUNCH": len(_ND_SCALAR_TYPES) + 5},
        kernels={*(k.key for k in _ND_DOUBLE_KERNELS.values()), "k_2d", "k_3d", "k_4d", "k_4d_f64"},
        doc=(
            "Arrays of 1-4 dimensions: 1-D arrays of every scalar dtype and vec3 (one named kernel per dtype), "
            "2-D float32, 3-D vec3, 4-D mat22 and 4-D float64."
        ),
    )
)


# -- overloads (known stock-Warp replay bug) ---------------------------------


def _overloads_arrays(device):
    rng = _rng()
    return {
        "src_i32": wp.array(rng.integers(-1000, 1000, size=6, dtype=np.int32), dtype=wp.int32, device=device),
        "src_f32": wp.array(rng.standard_normal(6).astype(np.float32), dtype=wp.float32, device=device),
        "src_v3": wp.array(rng.standard_normal((6, 3)).astype(np.float32), dtype=wp.vec3, device=device),
        "dst_i32": wp.zeros(6, dtype=wp.int32, device=device),
        "dst_f32": wp.zeros(6, dtype=wp.float32, device=device),
        "dst_v3": wp.zeros(6, dtype=wp.vec3, device=device),
    }


def _overloads_step(a):
    device = a["src_i32"].device
    for tag in ("i32", "f32", "v3"):
        wp.launch(k_generic_double, dim=6, inputs=[a[f"src_{tag}"], a[f"dst_{tag}"]], device=device)


_register(
    WarpProgram(
        name="overloads",
        make_arrays=_overloads_arrays,
        step=_overloads_step,
        inputs=["src_i32", "src_f32", "src_v3"],
        outputs=["dst_i32", "dst_f32", "dst_v3"],
        op_counts={"KERNEL_LAUNCH": 3},
        kernels={"k_generic_double"},
        replay_matches_live=False,
        doc=(
            "Three overloads (int32, float32, vec3) of one generic kernel in one module. "
            "KNOWN STOCK-WARP BUG: APIC identifies a kernel by (module_hash, kernel_key) and every overload "
            "shares both, so the saved file holds a single kernel record (the int32 overload's entry points) and "
            "stock replay runs the int32 code for all three launches: dst_i32 matches live, dst_f32 and dst_v3 "
            "do not (integer adds of float bit patterns)."
        ),
    )
)


# -- views -------------------------------------------------------------------


def _views_arrays(device):
    rng = _rng()
    return {
        "a": wp.array(rng.standard_normal(16).astype(np.float32), dtype=wp.float32, device=device),
        "b": wp.array(rng.standard_normal((6, 5)).astype(np.float32), dtype=wp.float32, device=device),
        "out_a": wp.zeros(16, dtype=wp.float32, device=device),
        "out_b": wp.zeros((6, 5), dtype=wp.float32, device=device),
    }


def _views_step(a):
    device = a["a"].device
    src, b, out_a, out_b = a["a"], a["b"], a["out_a"], a["out_b"]
    # strided source -> odd elements of the output
    wp.launch(k_axpb, dim=8, inputs=[src[::2], out_a[1::2], 2.0], device=device)
    # offset + strided destination
    wp.launch(k_axpb, dim=6, inputs=[src[4:10], out_a[0:12:2], 3.0], device=device)
    # offset-only slices
    wp.launch(k_axpb, dim=4, inputs=[src[1:], out_a[12:], -1.0], device=device)
    # 2-D column slices (1-D views with a row stride)
    wp.launch(k_axpb, dim=6, inputs=[b[:, 2], out_b[:, 0], 0.5], device=device)
    # 2-D sub-block (offset + row stride) into another sub-block
    wp.launch(k_axpb_2d, dim=(3, 3), inputs=[b[1:4, 1:4], out_b[2:5, 2:5], 4.0], device=device)
    # 2-D every-other-row view
    wp.launch(k_axpb_2d, dim=(3, 2), inputs=[b[::2, 3:], out_b[1::2, :2], -2.0], device=device)


_register(
    WarpProgram(
        name="views",
        make_arrays=_views_arrays,
        step=_views_step,
        inputs=["a", "b"],
        outputs=["out_a", "out_b"],
        op_counts={"KERNEL_LAUNCH": 6},
        kernels={"k_axpb", "k_axpb_2d"},
        doc="Strided and offset views (a[::2], a[4:10], a[1:], b[:, 2], b[1:4, 1:4], b[::2, 3:]) as kernel args.",
    )
)


# -- indexedarray ------------------------------------------------------------


def _indexed_arrays(device):
    rng = _rng()
    return {
        "data": wp.array(rng.standard_normal(10).astype(np.float32), dtype=wp.float32, device=device),
        "idx": wp.array(np.array([1, 3, 5, 7, 9], dtype=np.int32), dtype=wp.int32, device=device),
        "data2d": wp.array(rng.standard_normal((4, 5)).astype(np.float32), dtype=wp.float32, device=device),
        "rows": wp.array(np.array([3, 0, 2], dtype=np.int32), dtype=wp.int32, device=device),
        "out2d": wp.zeros((3, 5), dtype=wp.float32, device=device),
    }


def _indexed_step(a):
    device = a["data"].device
    ia = wp.indexedarray1d(a["data"], [a["idx"]])
    wp.launch(k_indexed, dim=ia.size, inputs=[ia, 0.25], device=device)
    ia2 = wp.indexedarray2d(a["data2d"], [a["rows"], None])
    wp.launch(k_indexed_2d, dim=ia2.shape, inputs=[ia2, a["out2d"]], device=device)


_register(
    WarpProgram(
        name="indexedarray",
        make_arrays=_indexed_arrays,
        step=_indexed_step,
        inputs=["data", "idx", "data2d", "rows"],
        outputs=["data", "data2d", "out2d"],
        op_counts={"KERNEL_LAUNCH": 2},
        kernels={"k_indexed", "k_indexed_2d"},
        doc="wp.indexedarray arguments: 1-D with an index array, 2-D indexed on the first axis only.",
    )
)


# -- tape --------------------------------------------------------------------

_N_TAPE = 8


def _tape_arrays(device):
    rng = _rng()
    x = wp.array(rng.standard_normal(_N_TAPE).astype(np.float32), dtype=wp.float32, device=device, requires_grad=True)
    w = wp.array(rng.random(_N_TAPE).astype(np.float32), dtype=wp.float32, device=device, requires_grad=True)
    y = wp.zeros(_N_TAPE, dtype=wp.float32, device=device, requires_grad=True)
    loss = wp.zeros(1, dtype=wp.float32, device=device, requires_grad=True)
    return {
        "x": x,
        "w": w,
        "y": y,
        "loss": loss,
        "x_grad": x.grad,
        "w_grad": w.grad,
        "y_grad": y.grad,
        "loss_grad": loss.grad,
    }


def _tape_step(a):
    device = a["x"].device
    tape = wp.Tape()
    with tape:
        wp.launch(k_tape_forward, dim=_N_TAPE, inputs=[a["x"], a["w"], a["y"]], device=device)
        wp.launch(k_tape_loss, dim=_N_TAPE, inputs=[a["y"], a["loss"]], device=device)
    tape.backward(loss=a["loss"])


_register(
    WarpProgram(
        name="tape",
        make_arrays=_tape_arrays,
        step=_tape_step,
        inputs=["x", "w"],
        outputs=["y", "loss", "x_grad", "w_grad", "y_grad", "loss_grad"],
        op_counts={"KERNEL_LAUNCH": 4, "MEMTILE": 1},
        kernels={"k_tape_forward", "k_tape_loss"},
        doc=(
            "Two forward kernels under wp.Tape, then tape.backward(loss): loss.grad.fill_(1) (MEMTILE) and "
            "two adjoint launches (is_forward=0). No indexedarray: Warp notes CPU backward replay of "
            "indexedarray adjoints is broken."
        ),
    )
)


# -- copy --------------------------------------------------------------------


def _copy_arrays(device):
    rng = _rng()
    return {
        "src": wp.array(rng.standard_normal(12).astype(np.float32), dtype=wp.float32, device=device),
        "src_v": wp.array(rng.standard_normal((4, 3)).astype(np.float32), dtype=wp.vec3, device=device),
        "src_2d": wp.array(rng.integers(-100, 100, size=(3, 4), dtype=np.int32), dtype=wp.int32, device=device),
        "dst": wp.zeros(12, dtype=wp.float32, device=device),
        "dst_part": wp.zeros(8, dtype=wp.float32, device=device),
        "dst_v": wp.zeros(4, dtype=wp.vec3, device=device),
        "dst_2d": wp.zeros((3, 4), dtype=wp.int32, device=device),
    }


def _copy_step(a):
    device = a["src"].device
    wp.copy(a["dst"], a["src"])  # whole array
    wp.copy(a["dst_part"], a["src"], dest_offset=2, src_offset=5, count=6)  # sub-range
    a["dst_v"].assign(a["src_v"])  # array.assign(array)
    a["dst_2d"].assign(a["src_2d"])  # 2-D assign
    wp.launch(k_add_const, dim=12, inputs=[a["dst"], 1.0], device=device)  # consume a copy result
    wp.copy(a["dst_part"], a["dst"], dest_offset=0, src_offset=10, count=2)  # copy after the kernel


_register(
    WarpProgram(
        name="copy",
        make_arrays=_copy_arrays,
        step=_copy_step,
        inputs=["src", "src_v", "src_2d"],
        outputs=["dst", "dst_part", "dst_v", "dst_2d"],
        op_counts={"MEMCPY_D2D": 5, "KERNEL_LAUNCH": 1},
        kernels={"k_add_const"},
        doc="wp.copy (whole, with offsets/count) and array.assign between arrays (MEMCPY_D2D), plus a kernel.",
    )
)


# -- zero_fill ---------------------------------------------------------------


def _zero_fill_arrays(device):
    rng = _rng()
    return {
        "i32": wp.array(rng.integers(-9, 9, size=10, dtype=np.int32), dtype=wp.int32, device=device),
        "f64": wp.array(rng.standard_normal(6), dtype=wp.float64, device=device),
        "u8": wp.zeros(9, dtype=wp.uint8, device=device),
        "f32": wp.zeros(7, dtype=wp.float32, device=device),
        "i64": wp.zeros(5, dtype=wp.int64, device=device),
        "v3": wp.zeros(4, dtype=wp.vec3, device=device),
    }


def _zero_fill_step(a):
    a["i32"].zero_()  # MEMSET
    a["f64"].zero_()  # MEMSET
    a["u8"].fill_(0xA5)  # MEMTILE, 1-byte pattern
    a["f32"].fill_(2.5)  # MEMTILE, 4-byte pattern
    a["i64"].fill_(-(2**40) + 7)  # MEMTILE, 8-byte pattern
    a["v3"].fill_(wp.vec3(1.0, -2.0, 3.5))  # MEMTILE, 12-byte pattern
    a["f64"].fill_(0.125)  # MEMTILE after the MEMSET, 8-byte pattern


_register(
    WarpProgram(
        name="zero_fill",
        make_arrays=_zero_fill_arrays,
        step=_zero_fill_step,
        inputs=["i32", "f64"],
        outputs=["i32", "f64", "u8", "f32", "i64", "v3"],
        op_counts={"MEMSET": 2, "MEMTILE": 5},
        kernels=set(),
        doc="zero_() (MEMSET) and fill_() (MEMTILE) with 1, 4, 8 and 12-byte patterns.",
    )
)


# -- capture_if --------------------------------------------------------------


def _if_arrays(device):
    rng = _rng()
    return {
        "cond_true": wp.array([1], dtype=wp.int32, device=device),
        "cond_false": wp.array([0], dtype=wp.int32, device=device),
        "x": wp.array(rng.standard_normal(6).astype(np.float32), dtype=wp.float32, device=device),
        "y": wp.zeros(6, dtype=wp.float32, device=device),
    }


def _if_step(a):
    device = a["x"].device
    x, y = a["x"], a["y"]
    # true condition, both branches present -> on_true runs
    wp.capture_if(
        a["cond_true"],
        on_true=lambda: wp.launch(k_add_const, dim=6, inputs=[x, 1.0], device=device),
        on_false=lambda: wp.launch(k_add_const, dim=6, inputs=[x, -100.0], device=device),
    )
    # false condition, both branches present (two ops in on_false) -> on_false runs
    def on_false():
        wp.launch(k_axpb, dim=6, inputs=[x, y, 3.0], device=device)
        wp.launch(k_add_const, dim=6, inputs=[y, 0.5], device=device)

    wp.capture_if(
        a["cond_false"],
        on_true=lambda: wp.launch(k_add_const, dim=6, inputs=[y, 100.0], device=device),
        on_false=on_false,
    )
    # false condition, on_true only -> nothing runs
    wp.capture_if(a["cond_false"], on_true=lambda: y.zero_())


_register(
    WarpProgram(
        name="capture_if",
        make_arrays=_if_arrays,
        step=_if_step,
        inputs=["cond_true", "cond_false", "x"],
        outputs=["x", "y"],
        op_counts={"IF": 3, "KERNEL_LAUNCH": 5, "MEMSET": 1},
        kernels={"k_add_const", "k_axpb"},
        doc="wp.capture_if with a true and a false condition (both branches recorded) and an IF without else.",
    )
)


# -- capture_while -----------------------------------------------------------


def _while_arrays(device):
    rng = _rng()
    return {
        "counter": wp.array([5], dtype=wp.int32, device=device),
        "x": wp.array(rng.standard_normal(4).astype(np.float32), dtype=wp.float32, device=device),
        "flag": wp.array([1], dtype=wp.int32, device=device),
        "r": wp.array((rng.random(5) * 100.0).astype(np.float32), dtype=wp.float32, device=device),
    }


def _while_step(a):
    device = a["x"].device
    counter, x, flag, r = a["counter"], a["x"], a["flag"], a["r"]
    # counted loop: the body decrements the counter
    wp.capture_while(counter, lambda: wp.launch(k_counter_step, dim=4, inputs=[counter, x], device=device))
    # convergence loop: the body recomputes the flag from a residual
    wp.capture_while(flag, lambda: wp.launch(k_residual_step, dim=1, inputs=[r, 0.01, flag], device=device))


_register(
    WarpProgram(
        name="capture_while",
        make_arrays=_while_arrays,
        step=_while_step,
        inputs=["counter", "x", "flag", "r"],
        outputs=["counter", "x", "flag", "r"],
        op_counts={"WHILE": 2, "KERNEL_LAUNCH": 2},
        kernels={"k_counter_step", "k_residual_step"},
        doc="Two wp.capture_while loops: a counter decremented by the body, and a residual-convergence flag.",
    )
)


# -- nested_cond -------------------------------------------------------------


def _nested_arrays(device):
    rng = _rng()
    return {
        "counter": wp.array([6], dtype=wp.int32, device=device),
        "parity": wp.zeros(1, dtype=wp.int32, device=device),
        "gate": wp.array([1], dtype=wp.int32, device=device),
        "inner": wp.array([3], dtype=wp.int32, device=device),
        "x": wp.array(rng.standard_normal(4).astype(np.float32), dtype=wp.float32, device=device),
        "y": wp.zeros(4, dtype=wp.float32, device=device),
    }


def _nested_step(a):
    device = a["x"].device
    counter, parity, gate, inner, x, y = (a[k] for k in ("counter", "parity", "gate", "inner", "x", "y"))

    def while_body():
        wp.launch(k_parity, dim=1, inputs=[counter, parity], device=device)
        wp.capture_if(
            parity,
            on_true=lambda: wp.launch(k_add_const, dim=4, inputs=[x, 1.0], device=device),
            on_false=lambda: wp.launch(k_axpb, dim=4, inputs=[x, y, 0.5], device=device),
        )
        wp.launch(k_dec, dim=1, inputs=[counter], device=device)

    # IF inside a WHILE body
    wp.capture_while(counter, while_body)

    # WHILE inside an IF branch
    def if_body():
        wp.capture_while(
            inner,
            lambda: (
                wp.launch(k_add_const, dim=4, inputs=[y, 2.0], device=device),
                wp.launch(k_dec, dim=1, inputs=[inner], device=device),
            ),
        )

    wp.capture_if(gate, on_true=if_body)


_register(
    WarpProgram(
        name="nested_cond",
        make_arrays=_nested_arrays,
        step=_nested_step,
        inputs=["counter", "gate", "inner", "x"],
        outputs=["counter", "parity", "inner", "x", "y"],
        op_counts={"WHILE": 2, "IF": 2, "KERNEL_LAUNCH": 6},
        kernels={"k_parity", "k_add_const", "k_axpb", "k_dec"},
        doc="An IF (on a parity flag computed in the body) inside a WHILE, and a WHILE inside an IF branch.",
    )
)


# -- scan --------------------------------------------------------------------

_N_SCAN = 11


def _scan_arrays(device):
    rng = _rng()
    return {
        "src_i": wp.array(rng.integers(-5, 20, size=_N_SCAN, dtype=np.int32), dtype=wp.int32, device=device),
        "src_f": wp.array(rng.standard_normal(_N_SCAN).astype(np.float32), dtype=wp.float32, device=device),
        "inc_i": wp.zeros(_N_SCAN, dtype=wp.int32, device=device),
        "exc_i": wp.zeros(_N_SCAN, dtype=wp.int32, device=device),
        "inc_f": wp.zeros(_N_SCAN, dtype=wp.float32, device=device),
        "exc_f": wp.zeros(_N_SCAN, dtype=wp.float32, device=device),
    }


def _scan_step(a):
    wp.utils.array_scan(a["src_i"], a["inc_i"], inclusive=True)
    wp.utils.array_scan(a["src_i"], a["exc_i"], inclusive=False)
    wp.utils.array_scan(a["src_f"], a["inc_f"], inclusive=True)
    wp.utils.array_scan(a["src_f"], a["exc_f"], inclusive=False)


_register(
    WarpProgram(
        name="scan",
        make_arrays=_scan_arrays,
        step=_scan_step,
        inputs=["src_i", "src_f"],
        outputs=["inc_i", "exc_i", "inc_f", "exc_f"],
        op_counts={"SCAN": 4},
        kernels=set(),
        doc="wp.utils.array_scan, inclusive and exclusive, int32 and float32.",
    )
)


# -- radix_sort --------------------------------------------------------------

_N_SORT = 16


def _radix_arrays(device):
    rng = _rng()
    keys_i = np.zeros(2 * _N_SORT, dtype=np.int32)
    keys_i[:_N_SORT] = rng.integers(-1000, 1000, size=_N_SORT, dtype=np.int32)
    keys_f = np.zeros(2 * _N_SORT, dtype=np.float32)
    keys_f[:_N_SORT] = rng.standard_normal(_N_SORT).astype(np.float32)
    vals = np.zeros(2 * _N_SORT, dtype=np.int32)
    vals[:_N_SORT] = np.arange(_N_SORT, dtype=np.int32)
    return {
        "keys_i": wp.array(keys_i, dtype=wp.int32, device=device),
        "vals_i": wp.array(vals, dtype=wp.int32, device=device),
        "keys_f": wp.array(keys_f, dtype=wp.float32, device=device),
        "vals_f": wp.array(vals, dtype=wp.int32, device=device),
    }


def _radix_step(a):
    wp.utils.radix_sort_pairs(a["keys_i"], a["vals_i"], _N_SORT)
    wp.utils.radix_sort_pairs(a["keys_f"], a["vals_f"], _N_SORT)


_register(
    WarpProgram(
        name="radix_sort",
        make_arrays=_radix_arrays,
        step=_radix_step,
        inputs=["keys_i", "vals_i", "keys_f", "vals_f"],
        outputs=["keys_i", "vals_i", "keys_f", "vals_f"],
        op_counts={"RADIX_SORT": 2},
        kernels=set(),
        doc="wp.utils.radix_sort_pairs on int32 and float32 keys (buffers hold 2*count for scratch).",
    )
)


# -- segmented_sort ----------------------------------------------------------


def _segsort_arrays(device):
    rng = _rng()
    keys_f = np.zeros(2 * _N_SORT, dtype=np.float32)
    keys_f[:_N_SORT] = rng.standard_normal(_N_SORT).astype(np.float32)
    keys_i = np.zeros(2 * _N_SORT, dtype=np.int32)
    keys_i[:_N_SORT] = rng.integers(-50, 50, size=_N_SORT, dtype=np.int32)
    vals = np.zeros(2 * _N_SORT, dtype=np.int32)
    vals[:_N_SORT] = np.arange(_N_SORT, dtype=np.int32)
    return {
        "keys_f": wp.array(keys_f, dtype=wp.float32, device=device),
        "vals_f": wp.array(vals, dtype=wp.int32, device=device),
        "keys_i": wp.array(keys_i, dtype=wp.int32, device=device),
        "vals_i": wp.array(vals, dtype=wp.int32, device=device),
        # implicit ends: segments [0,5) [5,11) [11,16)
        "seg": wp.array(np.array([0, 5, 11, _N_SORT], dtype=np.int32), dtype=wp.int32, device=device),
        # explicit starts/ends: [0,8) [8,16)
        "seg_start": wp.array(np.array([0, 8], dtype=np.int32), dtype=wp.int32, device=device),
        "seg_end": wp.array(np.array([8, _N_SORT], dtype=np.int32), dtype=wp.int32, device=device),
    }


def _segsort_step(a):
    wp.utils.segmented_sort_pairs(a["keys_f"], a["vals_f"], _N_SORT, a["seg"])
    wp.utils.segmented_sort_pairs(a["keys_i"], a["vals_i"], _N_SORT, a["seg_start"], a["seg_end"])


_register(
    WarpProgram(
        name="segmented_sort",
        make_arrays=_segsort_arrays,
        step=_segsort_step,
        inputs=["keys_f", "vals_f", "keys_i", "vals_i", "seg", "seg_start", "seg_end"],
        outputs=["keys_f", "vals_f", "keys_i", "vals_i"],
        op_counts={"SEGMENTED_SORT": 2},
        kernels=set(),
        doc="wp.utils.segmented_sort_pairs: float32 keys with implicit segment ends, int32 keys with explicit ends.",
    )
)


# -- runlength ---------------------------------------------------------------

_N_RLE = 14


def _rle_arrays(device):
    values = np.array([3, 3, 3, 1, 1, 7, 7, 7, 7, -2, 5, 5, 0, 0], dtype=np.int32)
    assert values.size == _N_RLE
    return {
        "values": wp.array(values, dtype=wp.int32, device=device),
        "run_values": wp.zeros(_N_RLE, dtype=wp.int32, device=device),
        "run_lengths": wp.zeros(_N_RLE, dtype=wp.int32, device=device),
        "run_count": wp.zeros(1, dtype=wp.int32, device=device),
    }


def _rle_step(a):
    wp.utils.runlength_encode(
        a["values"], a["run_values"], a["run_lengths"], run_count=a["run_count"], value_count=_N_RLE
    )


_register(
    WarpProgram(
        name="runlength",
        make_arrays=_rle_arrays,
        step=_rle_step,
        inputs=["values"],
        outputs=["run_values", "run_lengths", "run_count"],
        op_counts={"RUNLENGTH_ENCODE": 1},
        kernels=set(),
        doc="wp.utils.runlength_encode with a device-side run_count.",
    )
)


# -- reduce ------------------------------------------------------------------


def _reduce_arrays(device):
    rng = _rng()
    return {
        "a": wp.array(rng.standard_normal(9).astype(np.float32), dtype=wp.float32, device=device),
        "b": wp.array(rng.standard_normal(9).astype(np.float32), dtype=wp.float32, device=device),
        "a64": wp.array(rng.standard_normal(12), dtype=wp.float64, device=device),
        "v": wp.array(rng.standard_normal((5, 3)).astype(np.float32), dtype=wp.vec3, device=device),
        "sum_a": wp.zeros(1, dtype=wp.float32, device=device),
        "inner_ab": wp.zeros(1, dtype=wp.float32, device=device),
        "sum_a64_strided": wp.zeros(1, dtype=wp.float64, device=device),
        "inner_a64": wp.zeros(1, dtype=wp.float64, device=device),
        "sum_v": wp.zeros(1, dtype=wp.vec3, device=device),
    }


def _reduce_step(a):
    wp.utils.array_sum(a["a"], out=a["sum_a"])
    wp.utils.array_inner(a["a"], a["b"], out=a["inner_ab"])
    wp.utils.array_sum(a["a64"][1::2], out=a["sum_a64_strided"])
    wp.utils.array_inner(a["a64"], a["a64"], out=a["inner_a64"])
    wp.utils.array_sum(a["v"], out=a["sum_v"])


_register(
    WarpProgram(
        name="reduce",
        make_arrays=_reduce_arrays,
        step=_reduce_step,
        inputs=["a", "b", "a64", "v"],
        outputs=["sum_a", "inner_ab", "sum_a64_strided", "inner_a64", "sum_v"],
        op_counts={"REDUCTION": 5},
        kernels=set(),
        doc="wp.utils.array_sum / array_inner: float32, float64 (strided view), vec3 sum.",
    )
)


# -- bsr ---------------------------------------------------------------------

_BSR_ROWS = 6
_BSR_COLS = 5
_BSR_NNZ = 12


def _bsr_arrays(device):
    rng = _rng()
    rows = rng.integers(0, _BSR_ROWS, size=_BSR_NNZ, dtype=np.int32)
    cols = rng.integers(0, _BSR_COLS, size=_BSR_NNZ, dtype=np.int32)
    vals = rng.standard_normal((_BSR_NNZ, 2, 2)).astype(np.float32)
    A = wps.bsr_zeros(_BSR_ROWS, _BSR_COLS, block_type=wp.mat22, device=device, nnz_capacity=_BSR_NNZ)
    At = wps.bsr_zeros(_BSR_COLS, _BSR_ROWS, block_type=wp.mat22, device=device, nnz_capacity=_BSR_NNZ)
    # bsr_zeros leaves the capacity beyond nnz uninitialised; zero it so that
    # live runs and replays are byte-comparable.
    for m in (A, At):
        m.offsets.zero_()
        m.columns.zero_()
        m.values.zero_()
    return {
        "rows": wp.array(rows, dtype=wp.int32, device=device),
        "cols": wp.array(cols, dtype=wp.int32, device=device),
        "vals": wp.array(vals, dtype=wp.mat22, device=device),
        "_A": A,
        "_At": At,
        "A_offsets": A.offsets,
        "A_columns": A.columns,
        "A_values": A.values,
        "At_offsets": At.offsets,
        "At_columns": At.columns,
        "At_values": At.values,
    }


def _bsr_step(a):
    A, At = a["_A"], a["_At"]
    wps.bsr_set_from_triplets(A, a["rows"], a["cols"], a["vals"])
    wps.bsr_set_transpose(At, A)
    # Warp may reallocate the matrix arrays; bind whatever they are now.
    for prefix, m in (("A", A), ("At", At)):
        a[f"{prefix}_offsets"] = m.offsets
        a[f"{prefix}_columns"] = m.columns
        a[f"{prefix}_values"] = m.values


_register(
    WarpProgram(
        name="bsr",
        make_arrays=_bsr_arrays,
        step=_bsr_step,
        inputs=["rows", "cols", "vals"],
        outputs=["A_offsets", "A_columns", "A_values", "At_offsets", "At_columns", "At_values"],
        op_counts={"BSR_FROM_TRIPLETS": 1, "BSR_TRANSPOSE": 1, "KERNEL_LAUNCH": 2},
        kernels={"_bsr_accumulate_triplet_values", "_bsr_transpose_values"},
        doc="warp.sparse bsr_set_from_triplets (mat22 blocks, duplicate triplets summed) then bsr_set_transpose.",
    )
)


# -- mesh --------------------------------------------------------------------

_CUBE_POINTS = np.array(
    [
        [-0.5, -0.5, -0.5],
        [0.5, -0.5, -0.5],
        [0.5, 0.5, -0.5],
        [-0.5, 0.5, -0.5],
        [-0.5, -0.5, 0.5],
        [0.5, -0.5, 0.5],
        [0.5, 0.5, 0.5],
        [-0.5, 0.5, 0.5],
    ],
    dtype=np.float32,
)
_CUBE_INDICES = np.array(
    [0, 1, 2, 0, 2, 3, 4, 6, 5, 4, 7, 6, 0, 3, 7, 0, 7, 4, 1, 5, 6, 1, 6, 2, 0, 4, 5, 0, 5, 1, 3, 2, 6, 3, 6, 7],
    dtype=np.int32,
)
_N_MESH_QUERIES = 10


def _mesh_arrays(device):
    rng = _rng()
    mesh = wp.Mesh(
        points=wp.array(_CUBE_POINTS, dtype=wp.vec3, device=device),
        indices=wp.array(_CUBE_INDICES, dtype=wp.int32, device=device),
    )
    return {
        "_mesh": mesh,
        "queries": wp.array(
            (rng.standard_normal((_N_MESH_QUERIES, 3)) * 1.5).astype(np.float32), dtype=wp.vec3, device=device
        ),
        "closest": wp.zeros(_N_MESH_QUERIES, dtype=wp.vec3, device=device),
        "dist": wp.zeros(_N_MESH_QUERIES, dtype=wp.float32, device=device),
        "faces": wp.zeros(_N_MESH_QUERIES, dtype=wp.int32, device=device),
    }


def _mesh_step(a):
    wp.launch(
        k_mesh_query,
        dim=_N_MESH_QUERIES,
        inputs=[a["_mesh"].id, a["queries"], a["closest"], a["dist"], a["faces"]],
        device=a["queries"].device,
    )


_register(
    WarpProgram(
        name="mesh",
        make_arrays=_mesh_arrays,
        step=_mesh_step,
        inputs=["queries"],
        outputs=["closest", "dist", "faces"],
        op_counts={"KERNEL_LAUNCH": 1},
        kernels={"k_mesh_query"},
        doc="mesh_query_point_no_sign on a unit-cube wp.Mesh passed as a wp.handle (saved as a mesh record).",
    )
)


# -- big (benchmarks; not registered) ----------------------------------------


def make_big(launches: int = 10_000, region_bytes: int = 256 * 2**20) -> WarpProgram:
    """Build a benchmark program: ``launches`` tiny launches and one large region.

    The graph has ``launches - 1`` single-thread launches of ``k_tiny`` on a
    1-element counter plus one launch of ``k_touch_big`` that increments 16
    bytes spread over a ``region_bytes``-byte ``uint8`` array, so the saved
    file carries one region of ``region_bytes`` bytes.

    The large array is zero-initialised (cheap to create and to compare).
    """
    if launches < 1:
        raise ValueError("launches must be >= 1")
    if region_bytes < 16:
        raise ValueError("region_bytes must be >= 16")
    touches = 16
    stride = region_bytes // touches

    def make_arrays(device):
        return {
            "counter": wp.zeros(1, dtype=wp.int32, device=device),
            "big": wp.zeros(region_bytes, dtype=wp.uint8, device=device),
        }

    def step(a):
        device = a["counter"].device
        wp.launch(k_touch_big, dim=touches, inputs=[a["big"], stride], device=device)
        for i in range(launches - 1):
            wp.launch(k_tiny, dim=1, inputs=[a["counter"], (i % 7) + 1], device=device)

    return WarpProgram(
        name=f"big_{launches}_{region_bytes}",
        make_arrays=make_arrays,
        step=step,
        inputs=["counter", "big"],
        outputs=["counter", "big"],
        op_counts={"KERNEL_LAUNCH": launches},
        kernels={"k_tiny", "k_touch_big"} if launches > 1 else {"k_touch_big"},
        doc=f"{launches} tiny kernel launches and one {region_bytes}-byte region (benchmark input).",
    )
