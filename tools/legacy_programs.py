"""Capture and replay programs for the legacy WRP1 fixtures.

This file is executed by the interpreter of an *old* Warp release (1.13 .. 1.18),
inside a throw-away venv made by ``tools/make_legacy_fixtures.py``.  It must
therefore not import ``wrpkit`` and must only use Warp API that exists in every
one of those releases (``capture_begin(apic=True)``, ``capture_save(graph, path,
inputs=, outputs=)``, ``capture_load(path, device=)``, ``Graph.set_param`` and
``Graph.get_param``).

Sub-commands (all work on one release folder ``--out``):

``capture``
    For every case this release supports: write the case's kernel module file(s)
    (``<case>_kernels*.py``) into ``--out``, import them under their file stem
    (so module names, and with them kernel keys and module hashes, are stable),
    capture the case on ``cpu`` with ``apic=True`` and ``capture_save`` it to
    ``<case>.wrp`` + ``<case>_modules/``.  Writes ``<case>_inputs.npz`` (the
    values the replay sets) and a ``_cases.json`` work file.

``replay --case NAME``
    In a fresh process: ``capture_load`` the case, ``set_param`` every input
    from ``<case>_inputs.npz``, ``capture_launch`` once, ``get_param`` every
    binding and write ``<case>_expected.npz``.

``to-format13 --keep DIR``
    Rewrite every captured (format-14, Warp 1.15) ``<case>.wrp`` as a format-13
    writer lays it out (see :func:`rewrite_to_format_13`); move the format-14
    file and its ``<case>_expected.npz`` into ``DIR``.

``compare --against DIR``
    Exit 1, naming each difference, unless every case's ``<case>_expected.npz``
    equals ``DIR``'s bit for bit.

``manifest``
    Turn ``_cases.json`` into ``manifest.json``.

``EXTRA_CASES`` (``bsr_transpose``, Warp 1.15+ API) are captured only when
``--case`` names them; no release folder has them.

The capture-time contents of every array come from seed ``CAPTURE_SEED``; the
values the replay sets come from seed ``INPUT_SEED``, so a replay that ignores
``set_param`` does not reproduce the expected outputs.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import struct
import sys
import textwrap

import numpy as np

CAPTURE_SEED = 7
INPUT_SEED = 1234
N = 32
MAGIC = b"WRP1"

# ---------------------------------------------------------------------------
# Kernel module sources. Each one is written to ``<out>/<module>.py`` and
# imported under the name ``<module>``. Keep them free of version-specific API.
# ---------------------------------------------------------------------------

HEADER = "import warp as wp\n\n"
NO_BWD = 'wp.set_module_options({"enable_backward": False})\n\n'

SOURCES = {
    "saxpy_kernels": HEADER + NO_BWD + textwrap.dedent(
        """\
        @wp.kernel
        def saxpy(a: float, x: wp.array(dtype=float), y: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = a * x[i] + y[i]
        """
    ),
    "struct_kernels": HEADER + NO_BWD + textwrap.dedent(
        """\
        @wp.struct
        class Params:
            scale: float
            offset: wp.vec3
            count: int


        @wp.kernel
        def apply_params(p: Params, v: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
            i = wp.tid()
            if i < p.count:
                out[i] = v[i] * p.scale + p.offset
            else:
                out[i] = v[i]
        """
    ),
    "struct_array_kernels": HEADER + NO_BWD + textwrap.dedent(
        """\
        @wp.struct
        class Buffers:
            src: wp.array(dtype=float)
            dst: wp.array(dtype=float)
            gain: float


        @wp.kernel
        def apply_buffers(b: Buffers):
            i = wp.tid()
            b.dst[i] = b.src[i] * b.gain + float(i)
        """
    ),
    "capture_if_kernels": HEADER + NO_BWD + textwrap.dedent(
        """\
        @wp.kernel
        def set_flag(x: wp.array(dtype=float), flag: wp.array(dtype=wp.int32)):
            if x[0] > 0.0:
                flag[0] = 1
            else:
                flag[0] = 0


        @wp.kernel
        def add_one(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = x[i] + 1.0


        @wp.kernel
        def sub_one(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = x[i] - 1.0
        """
    ),
    "capture_while_kernels": HEADER + NO_BWD + textwrap.dedent(
        """\
        @wp.kernel
        def init_loop(iters: wp.array(dtype=wp.int32), counter: wp.array(dtype=wp.int32), cond: wp.array(dtype=wp.int32)):
            counter[0] = iters[0]
            if iters[0] > 0:
                cond[0] = 1
            else:
                cond[0] = 0


        @wp.kernel
        def relax(x: wp.array(dtype=float)):
            i = wp.tid()
            x[i] = x[i] * 0.5 + 1.0


        @wp.kernel
        def step_loop(counter: wp.array(dtype=wp.int32), cond: wp.array(dtype=wp.int32)):
            counter[0] = counter[0] - 1
            if counter[0] > 0:
                cond[0] = 1
            else:
                cond[0] = 0
        """
    ),
    "backward_kernels": HEADER + 'wp.set_module_options({"enable_backward": True})\n\n' + textwrap.dedent(
        """\
        @wp.kernel
        def poly(x: wp.array(dtype=float), w: wp.array(dtype=float), y: wp.array(dtype=float)):
            i = wp.tid()
            y[i] = w[i] * x[i] * x[i] + x[i]
        """
    ),
    "collision_kernels_a": HEADER + NO_BWD + textwrap.dedent(
        """\
        @wp.kernel
        def scale(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = x[i] * 2.0
        """
    ),
    "collision_kernels_b": HEADER + NO_BWD + textwrap.dedent(
        """\
        @wp.kernel
        def scale(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = x[i] * 3.0 + 1.0
        """
    ),
}

# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------


def _f32(rng, n=N):
    return rng.standard_normal(n).astype(np.float32)


def make_saxpy(rng):
    return {"x": _f32(rng), "y": _f32(rng), "out": np.zeros(N, np.float32)}


def make_struct(rng):
    return {"v": rng.standard_normal((N, 3)).astype(np.float32), "out": np.zeros((N, 3), np.float32)}


def make_struct_array(rng):
    return {"src": _f32(rng), "dst": np.zeros(N, np.float32)}


def make_capture_if(rng):
    x = _f32(rng)
    return {"x": x, "flag": np.zeros(1, np.int32), "out": np.zeros(N, np.float32)}


def make_capture_while(rng):
    return {
        "x": _f32(rng),
        "iters": np.array([int(rng.integers(3, 7))], np.int32),
        "counter": np.zeros(1, np.int32),
        "cond": np.zeros(1, np.int32),
    }


def make_backward(rng):
    return {
        "x": _f32(rng),
        "w": _f32(rng),
        "y": np.zeros(N, np.float32),
        "y_grad": np.ones(N, np.float32) + np.float32(0.25) * _f32(rng),
        "x_grad": np.zeros(N, np.float32),
        "w_grad": np.zeros(N, np.float32),
    }


def make_scan(rng):
    return {"values": rng.integers(-50, 50, N).astype(np.int32), "prefix": np.zeros(N, np.int32)}


def make_radix_sort(rng):
    # radix_sort_pairs needs 2*count elements of scratch in both arrays.
    keys = np.zeros(2 * N, np.int32)
    keys[:N] = rng.integers(0, 1000, N)
    vals = np.zeros(2 * N, np.int32)
    vals[:N] = np.arange(N, dtype=np.int32)
    return {"keys": keys, "values": vals}


def make_collision(rng):
    return {"x": _f32(rng), "out_a": np.zeros(N, np.float32), "out_b": np.zeros(N, np.float32)}


def step_saxpy(wp, mods, a):
    wp.launch(mods["saxpy_kernels"].saxpy, dim=N, inputs=[2.5, a["x"], a["y"], a["out"]], device="cpu")


def step_struct(wp, mods, a):
    m = mods["struct_kernels"]
    p = m.Params()
    p.scale = 1.5
    p.offset = wp.vec3(0.25, -0.5, 2.0)
    p.count = N - 5
    wp.launch(m.apply_params, dim=N, inputs=[p, a["v"], a["out"]], device="cpu")


def step_struct_array(wp, mods, a):
    m = mods["struct_array_kernels"]
    b = m.Buffers()
    b.src = a["src"]
    b.dst = a["dst"]
    b.gain = -0.75
    wp.launch(m.apply_buffers, dim=N, inputs=[b], device="cpu")


def step_capture_if(wp, mods, a):
    m = mods["capture_if_kernels"]
    wp.launch(m.set_flag, dim=1, inputs=[a["x"], a["flag"]], device="cpu")
    wp.capture_if(
        a["flag"],
        on_true=lambda: wp.launch(m.add_one, dim=N, inputs=[a["x"], a["out"]], device="cpu"),
        on_false=lambda: wp.launch(m.sub_one, dim=N, inputs=[a["x"], a["out"]], device="cpu"),
    )


def step_capture_while(wp, mods, a):
    m = mods["capture_while_kernels"]
    wp.launch(m.init_loop, dim=1, inputs=[a["iters"], a["counter"], a["cond"]], device="cpu")

    def body():
        wp.launch(m.relax, dim=N, inputs=[a["x"]], device="cpu")
        wp.launch(m.step_loop, dim=1, inputs=[a["counter"], a["cond"]], device="cpu")

    wp.capture_while(a["cond"], body)


def step_backward(wp, mods, a):
    m = mods["backward_kernels"]
    wp.launch(m.poly, dim=N, inputs=[a["x"], a["w"]], outputs=[a["y"]], device="cpu")
    wp.launch(
        m.poly,
        dim=N,
        inputs=[a["x"], a["w"]],
        outputs=[a["y"]],
        adj_inputs=[a["x_grad"], a["w_grad"]],
        adj_outputs=[a["y_grad"]],
        adjoint=True,
        device="cpu",
    )


def step_scan(wp, mods, a):
    wp.utils.array_scan(a["values"], a["prefix"], inclusive=True)


def step_radix_sort(wp, mods, a):
    wp.utils.radix_sort_pairs(a["keys"], a["values"], N)


def step_collision(wp, mods, a):
    wp.launch(mods["collision_kernels_a"].scale, dim=N, inputs=[a["x"], a["out_a"]], device="cpu")
    wp.launch(mods["collision_kernels_b"].scale, dim=N, inputs=[a["x"], a["out_b"]], device="cpu")


BSR_ROWS, BSR_COLS, BSR_PER_ROW = 6, 5, 2  # source matrix: 6x5 blocks (float), 2 non-zeros per row


def make_bsr_transpose(rng):
    # A compact 6x5 source (2 sorted, distinct columns per row; the columns depend on the seed, so the
    # replay transposes another topology than the capture) and a padded 5x6 destination whose rows can
    # hold every source row: capacity offsets [0, 6, 12, ...], so the transpose never overflows.
    cols = np.concatenate([np.sort(rng.choice(BSR_COLS, BSR_PER_ROW, replace=False)) for _ in range(BSR_ROWS)])
    cap = BSR_ROWS * BSR_COLS
    return {
        "src_offsets": np.arange(0, BSR_ROWS * BSR_PER_ROW + 1, BSR_PER_ROW, dtype=np.int32),
        "src_columns": cols.astype(np.int32),
        "src_values": rng.standard_normal(BSR_ROWS * BSR_PER_ROW).astype(np.float32),
        "dst_offsets": np.arange(0, cap + 1, BSR_ROWS, dtype=np.int32),
        "dst_row_counts": np.zeros(BSR_COLS, np.int32),
        "dst_columns": np.zeros(cap, np.int32),
        "dst_values": np.zeros(cap, np.float32),
    }


def step_bsr_transpose(wp, mods, a):
    # Warp 1.15+ only: records APIC_OP_BSR_TRANSPOSE; a padded destination adds the int32 tail in format 14.
    import warp.sparse as sp  # noqa: PLC0415

    def matrix(nrow, ncol, offsets, columns, values, row_counts=None):
        m = sp.bsr_matrix_t(wp.float32)()
        m.nrow, m.ncol, m.nnz = nrow, ncol, columns.shape[0]
        m.offsets, m.columns, m.values, m.row_counts = offsets, columns, values, row_counts
        return m

    src = matrix(BSR_ROWS, BSR_COLS, a["src_offsets"], a["src_columns"], a["src_values"])
    dst = matrix(BSR_COLS, BSR_ROWS, a["dst_offsets"], a["dst_columns"], a["dst_values"], a["dst_row_counts"])
    sp.bsr_set_transpose(dst, src, topology="padded")


# name: (kernel modules, make, step, inputs, outputs, wp dtype per array, min format, doc)
CASES = {
    "saxpy": (["saxpy_kernels"], make_saxpy, step_saxpy, ["x", "y"], ["out"], {}, 0,
              "one launch: out = 2.5*x + y (float scalar + three arrays)"),
    "struct": (["struct_kernels"], make_struct, step_struct, ["v"], ["out"], {"v": "vec3", "out": "vec3"}, 0,
               "a @wp.struct argument by value {float, vec3, int} plus vec3 arrays"),
    "struct_array": (["struct_array_kernels"], make_struct_array, step_struct_array, ["src"], ["dst"], {}, 0,
                     "a @wp.struct argument holding two arrays and a float (pointers inside a struct)"),
    "capture_if": (["capture_if_kernels"], make_capture_if, step_capture_if, ["x"], ["out", "flag"], {}, 10,
                   "launch that sets a flag, then wp.capture_if(flag, add_one, sub_one)"),
    "capture_while": (["capture_while_kernels"], make_capture_while, step_capture_while, ["x", "iters"],
                      ["counter", "cond"], {}, 10,
                      "init launch, then wp.capture_while(cond) over two launches; x is updated in place"),
    "backward": (["backward_kernels"], make_backward, step_backward, ["x", "w", "y_grad"],
                 ["y", "x_grad", "w_grad"], {}, 0,
                 "forward launch and an adjoint (adjoint=True) launch of the same kernel"),
    "scan": ([], make_scan, step_scan, ["values"], ["prefix"], {}, 14,
             "wp.utils.array_scan, int32, inclusive"),
    "radix_sort": ([], make_radix_sort, step_radix_sort, ["keys", "values"], [], {}, 14,
                   "wp.utils.radix_sort_pairs, int32 keys, 32 pairs (arrays hold 2*count)"),
    "collision": (["collision_kernels_a", "collision_kernels_b"], make_collision, step_collision, ["x"],
                  ["out_a", "out_b"], {}, 0,
                  "two kernels with the same key 'scale' in two modules (1.14 keeps one kernel record)"),
}

#: Cases that ``capture`` makes only when ``--case`` names them (no release folder has them).
EXTRA_CASES = {
    "bsr_transpose": ([], make_bsr_transpose, step_bsr_transpose, ["src_columns", "src_values"],
                      ["dst_offsets", "dst_row_counts", "dst_columns", "dst_values"], {}, 14,
                      "wp.sparse.bsr_set_transpose(topology='padded') of a 6x5 float BSR (Warp 1.15+): "
                      "BSR_TRANSPOSE, then the _bsr_transpose_values launch"),
}
ALL_CASES = {**CASES, **EXTRA_CASES}


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def init_warp(cache_dir):
    import warp as wp  # noqa: PLC0415

    wp.config.kernel_cache_dir = cache_dir
    # Generic x86-64 target: the committed objects must not need this host's ISA extensions.
    if hasattr(wp.config, "cpu_compiler_flags"):
        wp.config.cpu_compiler_flags = ""
    if hasattr(wp, "LOG_WARNING"):
        wp.config.log_level = wp.LOG_WARNING
    else:
        wp.config.quiet = True
    wp.init()
    import warp.utils  # noqa: F401, PLC0415

    return wp


def import_module_file(out, name):
    path = os.path.join(out, name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def read_format(path):
    with open(path, "rb") as f:
        head = f.read(8)
    assert head[:4] == MAGIC, head
    return struct.unpack_from("<I", head, 4)[0]


def top_level_ops(path):
    """Top-level op types of the OPERATIONS section (layout identical in every release)."""
    data = open(path, "rb").read()
    nsec = struct.unpack_from("<I", data, 12)[0]
    table = struct.unpack_from("<Q", data, 16)[0]
    for i in range(nsec):
        typ, _flags, off, size, _usize = struct.unpack_from("<IIQQQ", data, table + 32 * i)
        if typ == 3:
            count = struct.unpack_from("<I", data, off)[0]
            pos, ops = off + 4, []
            for _ in range(count):
                op, tot = struct.unpack_from("<II", data, pos)
                ops.append(op)
                pos += tot
            return ops
    return []


# ---------------------------------------------------------------------------
# Format 13: what a format-13 writer would have written
# ---------------------------------------------------------------------------
#
# No released wheel writes format 13; Warp 1.15 to 1.18 load it.  Warp 1.15's
# warp/native/apic_types.h (APIC_FORMAT_VERSION 14, APIC_MIN_SUPPORTED_FORMAT_VERSION
# 13) names the one difference: the int32 row-capacity tail after a padded
# BSR_TRANSPOSE record is "appended after the fixed record (format version >= 14)".
# The version is in two places: the file header's u32 at byte 4 and the metadata
# section's first u32 (apic.cpp writes APIC_FORMAT_VERSION to both).  Everything
# else is the same bytes.

OP_IF, OP_WHILE, OP_BSR_TRANSPOSE = 7, 8, 15
COND_RECORD_SIZE = 40  # APICCondRecord, op header included; the branches follow
BSR_TRANSPOSE_RECORD_SIZE = 116  # APICBsrTransposeRecord, op header included; the tail follows


def _ops_without_bsr_tails(data, pos, count, removed):
    """``(bytes, end)``: the ``count`` ops at ``pos`` with every BSR_TRANSPOSE tail dropped.

    IF/WHILE branches are rewritten too, and their sizes fixed.  Each dropped
    tail's byte count is appended to ``removed``.
    """
    out = bytearray()
    for _ in range(count):
        op, total = struct.unpack_from("<II", data, pos)
        end = pos + total
        if op in (OP_IF, OP_WHILE):
            a_size, a_count, b_size, b_count = struct.unpack_from("<IIII", data, pos + 24)
            a, a_end = _ops_without_bsr_tails(data, pos + COND_RECORD_SIZE, a_count, removed)
            b, b_end = _ops_without_bsr_tails(data, a_end, b_count, removed)
            assert a_end == pos + COND_RECORD_SIZE + a_size and b_end == a_end + b_size == end, "bad IF/WHILE"
            rec = bytearray(data[pos:pos + COND_RECORD_SIZE])
            struct.pack_into("<I", rec, 4, COND_RECORD_SIZE + len(a) + len(b))
            struct.pack_into("<I", rec, 24, len(a))
            struct.pack_into("<I", rec, 32, len(b))
            out += rec + a + b
        elif op == OP_BSR_TRANSPOSE:
            assert total >= BSR_TRANSPOSE_RECORD_SIZE, "short BSR_TRANSPOSE record"
            removed.append(total - BSR_TRANSPOSE_RECORD_SIZE)
            rec = bytearray(data[pos:pos + BSR_TRANSPOSE_RECORD_SIZE])
            struct.pack_into("<I", rec, 4, BSR_TRANSPOSE_RECORD_SIZE)
            out += rec
        else:
            out += data[pos:end]
        pos = end
    return bytes(out), pos


def rewrite_to_format_13(data):
    """``(bytes, tail bytes removed)``: a format-14 file as a format-13 writer lays it out.

    Sets the header's and the metadata's version to 13 and drops the tail of
    every BSR_TRANSPOSE record (fixing op, branch and section sizes).  Needs the
    layout Warp 1.15 writes: three uncompressed sections, OPERATIONS last.
    """
    magic, version, _flags, nsec, table = struct.unpack_from("<4sIIIQ", data, 0)
    assert magic == MAGIC and version == 14, f"not a format-14 WRP1 file ({magic!r}, version {version})"
    out = bytearray(data)
    struct.pack_into("<I", out, 4, 13)
    ops_entry = None
    for i in range(nsec):
        at = table + 32 * i
        typ, flags, off, size, usize = struct.unpack_from("<IIQQQ", data, at)
        assert flags == 0 and size == usize, f"section {typ} is compressed or flagged ({flags})"
        if typ == 1:
            assert struct.unpack_from("<I", data, off)[0] == 14, "metadata version is not 14"
            struct.pack_into("<I", out, off, 13)
        elif typ == 3:
            ops_entry = (at, off, size)
    at, off, size = ops_entry
    assert off + size == len(data), "OPERATIONS is not the last section"
    removed = []
    count = struct.unpack_from("<I", data, off)[0]
    ops, end = _ops_without_bsr_tails(data, off + 4, count, removed)
    assert end == off + size, "op sizes do not add up to the OPERATIONS section"
    body = struct.pack("<I", count) + ops
    struct.pack_into("<QQ", out, at + 16, len(body), len(body))
    return bytes(out[:off]) + body, sum(removed)


FORMAT13_NOTE = (
    "Format 13 is loaded by Warp 1.15 to 1.18 but written by no released wheel. These files were captured and "
    "saved by Warp 1.15.0 (format 14), then rewritten as a format-13 writer lays them out "
    "(tools/legacy_programs.py to-format13): the header's u32 at byte 4 and the metadata's first u32 set to 13, "
    "and the int32 tail of every BSR_TRANSPOSE record dropped (apic_types.h: the tail is 'format version >= 14'), "
    "with the op, branch and section sizes fixed. Nothing else changes. Warp 1.15.0 then loaded and replayed each "
    "rewritten file in a fresh process: <case>_expected.npz holds those outputs, and they equal, bit for bit, "
    "what 1.15.0 replayed from its own format-14 file (checked at creation; 'rewritten_from' describes that file)."
)


def wp_dtype_name(np_arr, override):
    if override:
        return override
    return {"float32": "float32", "int32": "int32"}[str(np_arr.dtype)]


def to_wp(wp, arr, dtype_name):
    dtype = {"vec3": wp.vec3, "float32": wp.float32, "int32": wp.int32}[dtype_name]
    return wp.array(arr, dtype=dtype, device="cpu")


# ---------------------------------------------------------------------------
# Sub-commands
# ---------------------------------------------------------------------------


def cmd_capture(args):
    wp = init_warp(args.kernel_cache)
    fmt_expected = None
    results, absent = {}, {}
    names = args.case or list(CASES)
    for name in names:
        mod_names, make, step, inputs, outputs, overrides, min_fmt, doc = ALL_CASES[name]
        if fmt_expected is not None and fmt_expected < min_fmt:
            absent[name] = f"needs format >= {min_fmt}; this release writes {fmt_expected}"
            continue
        for m in mod_names:
            with open(os.path.join(args.out, m + ".py"), "w") as f:
                f.write(SOURCES[m])
        mods = {m: import_module_file(args.out, m) for m in mod_names}
        cap_np = make(np.random.default_rng(CAPTURE_SEED))
        in_np = make(np.random.default_rng(INPUT_SEED))
        dtypes = {k: wp_dtype_name(v, overrides.get(k)) for k, v in cap_np.items()}
        arrays = {k: to_wp(wp, v, dtypes[k]) for k, v in cap_np.items()}
        # make sure the modules are compiled and loaded before the capture
        for m in mods.values():
            wp.load_module(m, device="cpu")
        wrp = os.path.join(args.out, name + ".wrp")
        try:
            wp.capture_begin(device="cpu", apic=True)
            try:
                step(wp, mods, arrays)
            finally:
                graph = wp.capture_end(device="cpu")
            wp.capture_save(
                graph,
                wrp,
                inputs={k: arrays[k] for k in inputs},
                outputs={k: arrays[k] for k in outputs},
            )
        except Exception as e:  # noqa: BLE001
            absent[name] = f"{type(e).__name__}: {e}".strip()
            print(f"[{wp.__version__}] case {name}: not captured: {absent[name]}", file=sys.stderr)
            for m in mod_names:
                os.remove(os.path.join(args.out, m + ".py"))
            continue
        fmt = read_format(wrp)
        fmt_expected = fmt
        if fmt < min_fmt:
            # the release captured it, but not as the op we want (e.g. scan executed eagerly)
            pass
        np.savez(os.path.join(args.out, name + "_inputs.npz"), **{k: in_np[k] for k in inputs})
        kernels = []
        for m in mod_names:
            for attr in sorted(vars(mods[m])):
                obj = getattr(mods[m], attr)
                if isinstance(obj, wp.Kernel):
                    kernels.append({"key": obj.key, "module": obj.module.name, "source_file": m + ".py"})
        mod_dir = os.path.join(args.out, name + "_modules")
        results[name] = {
            "doc": doc,
            "wrp": name + ".wrp",
            "modules_dir": name + "_modules",
            "module_files": sorted(os.listdir(mod_dir)) if os.path.isdir(mod_dir) else [],
            "kernel_sources": [m + ".py" for m in mod_names],
            "kernels": kernels,
            "inputs_file": name + "_inputs.npz",
            "expected_file": name + "_expected.npz",
            "inputs": inputs,
            "outputs": outputs,
            "bindings": {
                k: {"dtype": dtypes[k], "shape": list(arrays[k].shape), "numpy_shape": list(cap_np[k].shape),
                    "numpy_dtype": str(cap_np[k].dtype)}
                for k in dict.fromkeys(inputs + outputs)
            },
            "format_version": fmt,
            "top_level_ops": top_level_ops(wrp),
            "file_size": os.path.getsize(wrp),
        }
        print(f"[{wp.__version__}] case {name}: format {fmt}, ops {results[name]['top_level_ops']}")
    # a case whose op is missing from this format is reported absent (checked after the first capture)
    fmt = next((r["format_version"] for r in results.values()), None)
    for name in list(results):
        if fmt is not None and fmt < ALL_CASES[name][6]:
            absent[name] = f"needs format >= {ALL_CASES[name][6]}; this release writes {fmt}"
            _remove_case(args.out, name, results.pop(name))
    with open(os.path.join(args.out, "_cases.json"), "w") as f:
        json.dump(
            {
                "warp_version": wp.__version__,
                "cpu_compiler_flags": getattr(wp.config, "cpu_compiler_flags", None),
                "cases": results,
                "absent": absent,
            },
            f,
            indent=2,
        )


def _remove_case(out, name, info):
    import shutil  # noqa: PLC0415

    for p in [info["wrp"], info["inputs_file"], *info["kernel_sources"]]:
        if os.path.exists(os.path.join(out, p)):
            os.remove(os.path.join(out, p))
    shutil.rmtree(os.path.join(out, info["modules_dir"]), ignore_errors=True)


def cmd_replay(args):
    wp = init_warp(args.kernel_cache)
    work = json.load(open(os.path.join(args.out, "_cases.json")))
    info = work["cases"][args.case[0]]
    graph = wp.capture_load(os.path.join(args.out, info["wrp"]), device="cpu")
    inputs = np.load(os.path.join(args.out, info["inputs_file"]))
    for name in info["inputs"]:
        graph.set_param(name, to_wp(wp, inputs[name], info["bindings"][name]["dtype"]))
    wp.capture_launch(graph)
    wp.synchronize_device("cpu")
    result = {}
    for name, b in info["bindings"].items():
        out = to_wp(wp, np.zeros(b["numpy_shape"], b["numpy_dtype"]), b["dtype"])
        graph.get_param(name, out)
        result[name] = out.numpy().copy()
    np.savez(os.path.join(args.out, info["expected_file"]), **result)
    print(f"[{wp.__version__}] replayed {args.case[0]}")


def cmd_to_format13(args):
    """Rewrite every case to format 13; keep the format-14 file and its replay outputs in ``--keep``."""
    import hashlib  # noqa: PLC0415
    import shutil  # noqa: PLC0415

    path = os.path.join(args.out, "_cases.json")
    work = json.load(open(path))
    os.makedirs(args.keep, exist_ok=True)
    for name, info in work["cases"].items():
        wrp = os.path.join(args.out, info["wrp"])
        data = open(wrp, "rb").read()
        new, removed = rewrite_to_format_13(data)
        shutil.copy(wrp, os.path.join(args.keep, info["wrp"]))
        os.replace(os.path.join(args.out, info["expected_file"]), os.path.join(args.keep, info["expected_file"]))
        with open(wrp, "wb") as f:
            f.write(new)
        info["rewritten_from"] = {
            "format_version": info["format_version"],
            "file_size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "bsr_transpose_tail_bytes_removed": removed,
        }
        info["format_version"] = read_format(wrp)
        info["top_level_ops"] = top_level_ops(wrp)
        info["file_size"] = len(new)
        print(f"case {name}: format {info['rewritten_from']['format_version']} -> {info['format_version']}, "
              f"{removed} BSR_TRANSPOSE tail bytes dropped")
    work["derivation"] = FORMAT13_NOTE
    with open(path, "w") as f:
        json.dump(work, f, indent=2)


def cmd_compare(args):
    """Exit 1, naming every difference, unless each case's replay outputs equal ``--against``'s bit for bit."""
    work = json.load(open(os.path.join(args.out, "_cases.json")))
    bad = []
    for name, info in work["cases"].items():
        got = np.load(os.path.join(args.out, info["expected_file"]))
        want = np.load(os.path.join(args.against, info["expected_file"]))
        for k in sorted(set(got.files) | set(want.files)):
            if k not in got.files or k not in want.files:
                bad.append(f"{name}: binding {k} is in only one of the two replays")
                continue
            a, b = got[k], want[k]
            if a.dtype != b.dtype or a.shape != b.shape:
                bad.append(f"{name}: {k} is {a.dtype}{list(a.shape)} here, {b.dtype}{list(b.shape)} there")
            elif a.tobytes() != b.tobytes():
                ua, ub = a.reshape(-1).view(f"u{a.itemsize}"), b.reshape(-1).view(f"u{b.itemsize}")
                diff = np.flatnonzero(ua != ub)
                i = int(diff[0])
                bad.append(f"{name}: {k} differs in {diff.size} of {ua.size} elements; first at flat index {i}: "
                           f"{a.reshape(-1)[i]!r} here, {b.reshape(-1)[i]!r} there")
        if not any(m.startswith(name + ":") for m in bad):
            print(f"case {name}: replay outputs equal {args.against}'s bit for bit ({len(want.files)} bindings)")
    if bad:
        print("replay outputs differ:\n  " + "\n  ".join(bad), file=sys.stderr)
        sys.exit(1)


def cmd_manifest(args):
    work = json.load(open(os.path.join(args.out, "_cases.json")))
    fmts = sorted({c["format_version"] for c in work["cases"].values()})
    manifest = {
        "warp_version": work["warp_version"],
        "format_version": fmts[0] if len(fmts) == 1 else fmts,
        "generated_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "generator": "tools/make_legacy_fixtures.py (programs: tools/legacy_programs.py)",
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}, device cpu",
        "cpu_compiler_flags": work.get("cpu_compiler_flags"),
        "capture_seed": CAPTURE_SEED,
        "input_seed": INPUT_SEED,
        "notes": (
            "Arrays hold CAPTURE_SEED data at capture time (that is the memory snapshot in the .wrp); "
            "the replay sets every binding listed in 'inputs' from <case>_inputs.npz, launches once and reads "
            "every binding with get_param into <case>_expected.npz (replayed by the producing release in a "
            "fresh process). Kernel sources: the <module>.py files, imported under their file stem as module "
            "name."
        ),
        "cases": work["cases"],
        "absent": work["absent"],
    }
    if "derivation" in work:
        manifest["derivation"] = work["derivation"]
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=False)
        f.write("\n")
    os.remove(os.path.join(args.out, "_cases.json"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = {"capture": cmd_capture, "replay": cmd_replay, "to-format13": cmd_to_format13,
                "compare": cmd_compare, "manifest": cmd_manifest}
    p.add_argument("command", choices=list(commands))
    p.add_argument("--out", required=True)
    p.add_argument("--kernel-cache", required=False)
    p.add_argument("--case", action="append")
    p.add_argument("--keep", help="to-format13: folder for the format-14 files and their replay outputs")
    p.add_argument("--against", help="compare: folder holding the other replay's <case>_expected.npz")
    args = p.parse_args(argv)
    commands[args.command](args)


if __name__ == "__main__":
    main()
