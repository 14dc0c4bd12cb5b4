"""wrpkit.capture / wrpkit.save: real Warp captures with typed signatures."""

from __future__ import annotations

import hashlib
import numpy as np
import pytest

import replay_cases as rc
import warp as wp
import wrpkit
from wrpkit.formats import annotations as ann
from wrpkit.formats import wrp1
from wrpkit.formats.container import open_capture
from wrpkit.errors import WrpBindingError, WrpError, WrpFormatError
from wrpkit.formats.wrp1_layout import SECTION_ANNOTATIONS
from wrpkit.run.warp_bridge.dtypes import dtype_from_warp, warp_dtype

# ---------------------------------------------------------------------------
# Kernels and arrays local to these tests
# ---------------------------------------------------------------------------


@wp.kernel
def k_saxpy(a: wp.float32, x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    y[i] = a * x[i] + y[i]


@wp.struct
class Body:
    mass: wp.float32
    pos: wp.vec3
    rot: wp.quat
    tag: wp.int16


@wp.kernel
def k_bodies(bodies: wp.array(dtype=Body), out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    b = bodies[i]
    out[i] = b.pos * b.mass
    bodies[i].mass = b.mass + 1.0


@wp.kernel
def k_scale_view(src: wp.array(dtype=wp.float32), dst: wp.array(dtype=wp.float32)):
    i = wp.tid()
    dst[i] = src[i] * 2.0


N = 8


def _saxpy_arrays():
    rng = np.random.default_rng(7)
    return {
        "x": wp.array(rng.standard_normal(N).astype(np.float32), dtype=wp.float32, device="cpu"),
        "y": wp.array(rng.standard_normal(N).astype(np.float32), dtype=wp.float32, device="cpu"),
    }


def _saxpy_step(a):
    wp.launch(k_saxpy, dim=N, inputs=[2.5, a["x"], a["y"]], device="cpu")


def _saxpy_live():
    a = _saxpy_arrays()
    _saxpy_step(a)
    return {k: v.numpy() for k, v in a.items()}


@pytest.fixture(scope="module")
def saxpy_file():
    a = _saxpy_arrays()
    with wrpkit.capture(device="cpu") as rec:
        _saxpy_step(a)
    path = rec.save(rc.tmpdir("capture") / "saxpy", inputs={"x": a["x"], "y": a["y"]}, outputs={"y": a["y"]})
    return path, rec


# ---------------------------------------------------------------------------
# Capturing
# ---------------------------------------------------------------------------


def test_annotations_is_the_submodule():
    import types

    import wrpkit.formats.annotations as ann  # noqa: PLC0415

    # No `from __future__ import annotations` in a package __init__ may shadow the submodule.
    assert isinstance(wrpkit.formats.annotations, types.ModuleType) and wrpkit.formats.annotations is ann


def test_capture_context_manager_gives_a_launchable_recording():
    a = _saxpy_arrays()
    with wrpkit.capture(device="cpu") as rec:
        assert not rec.complete
        _saxpy_step(a)
    assert rec.complete and rec.device.is_cpu
    rec.launch()  # live replay of the captured work
    expect = _saxpy_live()
    assert rc.same_bytes(a["y"].numpy(), expect["y"])
    assert rec.program.op_counts() == {"KERNEL_LAUNCH": 1}


def test_begin_end_capture():
    a = _saxpy_arrays()
    pending = wrpkit.begin_capture(device="cpu")
    _saxpy_step(a)
    rec = wrpkit.end_capture()
    assert rec is pending and rec.complete
    rec.launch()
    assert rc.same_bytes(a["y"].numpy(), _saxpy_live()["y"])


def test_end_capture_without_begin_fails():
    with pytest.raises(WrpError, match="no wrpkit capture"):
        wrpkit.end_capture()


def test_capture_parameters_mirror_warp():
    import inspect

    params = dict(inspect.signature(wp.capture_begin).parameters)
    params.pop("apic")
    # wrpkit's own options come after Warp's, keyword-only: call_sites (where each op was issued).
    own = ["call_sites"]
    mine = inspect.signature(wrpkit.capture).parameters
    assert list(mine) == list(params) + own
    assert list(inspect.signature(wrpkit.begin_capture).parameters) == list(params) + own
    assert all(mine[n].kind is inspect.Parameter.KEYWORD_ONLY for n in own)
    for name, p in params.items():
        assert mine[name].default == p.default


def test_exception_in_block_ends_the_capture():
    a = _saxpy_arrays()
    with pytest.raises(ZeroDivisionError):
        with wrpkit.capture(device="cpu") as rec:
            _saxpy_step(a)
            1 / 0  # noqa: B018
    assert not rec.complete
    # Warp is not left capturing: a new capture works.
    with wrpkit.capture(device="cpu") as rec2:
        _saxpy_step(a)
    assert rec2.complete


def test_recording_before_end_cannot_launch():
    rec = wrpkit.begin_capture(device="cpu")
    try:
        with pytest.raises(WrpError, match="not ended"):
            rec.launch()
    finally:
        wrpkit.end_capture()


# ---------------------------------------------------------------------------
# Saving
# ---------------------------------------------------------------------------


def test_saved_file_has_annotations_section_and_signature(saxpy_file):
    path, rec = saxpy_file
    assert path.suffix == ".wrp" and path.is_file()
    data = path.read_bytes()
    assert int.from_bytes(data[12:16], "little") == 4  # METADATA, MEMORY, OPERATIONS + ANNOTATIONS
    assert SECTION_ANNOTATIONS.to_bytes(4, "little") in data[64:64 + 4 * 32]
    prog = wrp1.decode_wrp1(data)
    a = ann.read_annotations(prog)
    assert a is not None and a.producer.startswith("wrpkit")
    sigs = a.signature_map()
    assert set(sigs) == {"x", "y"}
    assert sigs["x"].is_input and not sigs["x"].is_output
    assert sigs["y"].is_input and sigs["y"].is_output
    f32 = ann.DataType("float32", ann.ScalarKind.FLOAT32, (), 4)
    assert sigs["x"] == ann.ArraySignature("x", f32, (N,), (4,), 0, True, False)
    # re-encoding the decoded program is byte-identical (the section round-trips)
    assert wrp1.encode_wrp1(prog) == data
    # the recording's model is the saved program
    assert rec.program.annotations == prog.annotations


def test_in_place_binding_is_written_like_stock_warp(saxpy_file):
    path, _ = saxpy_file
    prog = wrp1.decode_wrp1(path.read_bytes())
    names = [(b.name, b.region_id) for b in prog.bindings]
    # stock Warp writes inputs then outputs; "y" twice, one region
    assert [n for n, _ in names] == ["x", "y", "y"]
    assert names[1][1] == names[2][1]


def test_stock_capture_load_replays_a_wrpkit_file(saxpy_file):
    path, _ = saxpy_file
    g = wp.capture_load(str(path), device="cpu")
    assert set(g.params) == {"x", "y"}
    fresh = _saxpy_arrays()
    g.set_param("x", fresh["x"])
    g.set_param("y", fresh["y"])
    wp.capture_launch(g)
    out = wp.empty(N, dtype=wp.float32, device="cpu")
    g.get_param("y", out)
    assert rc.same_bytes(out.numpy(), _saxpy_live()["y"])


def test_stock_capture_load_equals_program_run_for_every_program():
    for name in rc.program_names():
        prog = rc.programs.PROGRAMS[name]
        path = rc.wrpkit_capture(name)
        stock = rc.programs.replay_stock(prog, path, "cpu")
        run = wrpkit.load(path).run(rc.fresh_inputs(name), outputs="*")
        for b in prog.bindings:
            assert rc.same_raw_bytes(stock[b], run[b]), (name, b)


def test_module_digests_and_kernel_signatures(saxpy_file):
    path, _ = saxpy_file
    with open_capture(path) as cap:
        a = ann.read_annotations(cap.program)
        files = cap.module_files()
        digests = a.digest_map()
        assert set(digests) == set(files)
        for fname, data in files.items():
            assert digests[fname].sha256 == hashlib.sha256(bytes(data)).digest()
            assert digests[fname].size == len(data)
        (ks,) = a.kernel_signatures
        assert ks.kernel_key == "k_saxpy"
        assert ks.module_hash == cap.program.kernels[0].module_hash
        assert [x.name for x in ks.arguments] == ["a", "x", "y"]
        assert ks.arguments[0].type == "float32" and ks.arguments[0].value_size == 4 and ks.arguments[0].ndim == 0
        assert ks.arguments[1].type == "array(ndim=1, dtype=float32)" and ks.arguments[1].ndim == 1
        assert ks.arguments[1].value_size == 56 and ks.arguments[1].dtype.name == "float32"


def test_save_plain_warp_graph(tmp_path):
    a = _saxpy_arrays()
    wp.capture_begin(device="cpu", apic=True)
    _saxpy_step(a)
    g = wp.capture_end(device="cpu")
    path = wrpkit.save(g, tmp_path / "plain", inputs={"x": a["x"], "y": a["y"]}, outputs={"y": a["y"]})
    assert path == tmp_path / "plain.wrp"
    p = wrpkit.load(path)
    assert p.signature["y"].dtype.name == "float32"
    out = p.run(outputs="*")
    assert rc.same_bytes(out["y"], _saxpy_live()["y"])


def test_repeated_saves_keep_only_their_bindings(tmp_path):
    a = _saxpy_arrays()
    with wrpkit.capture(device="cpu") as rec:
        _saxpy_step(a)
    p1 = rec.save(tmp_path / "one.wrp", inputs={"x": a["x"]}, outputs={"y": a["y"]})
    p2 = rec.save(tmp_path / "two.wrp", inputs={"y": a["y"]})
    assert [b.name for b in wrp1.decode_wrp1(p1.read_bytes()).bindings] == ["x", "y"]
    assert [b.name for b in wrp1.decode_wrp1(p2.read_bytes()).bindings] == ["y"]
    assert set(wp.capture_load(str(p2), device="cpu").params) == {"y"}


def test_save_rejects_bad_bindings(tmp_path):
    a = _saxpy_arrays()
    with wrpkit.capture(device="cpu") as rec:
        _saxpy_step(a)
    with pytest.raises(WrpBindingError, match="must be a wp.array"):
        rec.save(tmp_path / "bad", inputs={"x": a["x"].numpy()})
    with pytest.raises(WrpBindingError, match="different arrays"):
        rec.save(tmp_path / "bad", inputs={"y": a["x"]}, outputs={"y": a["y"]})
    with pytest.raises(WrpError, match="does not exist"):
        rec.save(tmp_path / "missing" / "dir" / "f.wrp", inputs={"x": a["x"]})
    assert not list(tmp_path.iterdir())


def test_save_rejects_graph_without_apic(tmp_path):
    a = _saxpy_arrays()
    wp.capture_begin(device="cpu")  # apic=False
    _saxpy_step(a)
    g = wp.capture_end(device="cpu")
    with pytest.raises(WrpError, match="apic=True"):
        wrpkit.save(g, tmp_path / "x.wrp", inputs={"x": a["x"]})


# ---------------------------------------------------------------------------
# Typed signatures: every kind of element type, shapes, strides, offsets
# ---------------------------------------------------------------------------

_TYPED = [
    ("b", wp.bool, (5,)),
    ("i8", wp.int8, (5,)),
    ("u8", wp.uint8, (5,)),
    ("i16", wp.int16, (5,)),
    ("u16", wp.uint16, (5,)),
    ("i32", wp.int32, (5,)),
    ("u32", wp.uint32, (5,)),
    ("i64", wp.int64, (5,)),
    ("u64", wp.uint64, (5,)),
    ("f16", wp.float16, (5,)),
    ("f32_2d", wp.float32, (3, 4)),
    ("f64_3d", wp.float64, (2, 3, 2)),
    ("v3", wp.vec3, (4,)),
    ("v2h", wp.vec2h, (3,)),
    ("v4d_2d", wp.vec4d, (2, 2)),
    ("m22", wp.mat22, (3,)),
    ("m33d", wp.mat33d, (2,)),
    ("m23", wp.types.matrix((2, 3), wp.float32), (2,)),
    ("q", wp.quat, (3,)),
    ("qd", wp.quatd, (2,)),
    ("t", wp.transform, (3,)),
    ("td", wp.transformd, (2,)),
    ("sv", wp.spatial_vector, (2,)),
    ("sm", wp.spatial_matrix, (1,)),
    ("body", Body, (4,)),
    ("f32_4d", wp.float32, (2, 1, 2, 3)),
]


def _typed_arrays():
    rng = np.random.default_rng(3)
    out = {}
    for name, dt, shape in _TYPED:
        a = wp.zeros(shape, dtype=dt, device="cpu")
        raw = a.numpy()
        if raw.dtype.names is None:
            buf = rng.integers(0, 100, size=raw.shape).astype(raw.dtype)
        else:
            buf = np.zeros(raw.shape, dtype=raw.dtype)
            buf["mass"] = np.arange(raw.shape[0]) + 1
            buf["pos"] = rng.standard_normal((raw.shape[0], 3))
            buf["rot"] = [0, 0, 0, 1]
            buf["tag"] = np.arange(raw.shape[0]) - 2
        out[name] = wp.array(buf, dtype=dt, device="cpu")
    big = wp.array(rng.standard_normal((6, 5)).astype(np.float32), dtype=wp.float32, device="cpu")
    out["_big"] = big
    return out


@pytest.fixture(scope="module")
def typed_file():
    a = _typed_arrays()
    views = {
        "view_strided": a["_big"][::2, 1],  # 1-D view with a row stride and an offset
        "view_block": a["_big"][1:4, 2:5],  # 2-D sub-block
    }
    dst = wp.zeros(3, dtype=wp.float32, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_bodies, dim=4, inputs=[a["body"], a["v3"]], device="cpu")
        wp.launch(k_scale_view, dim=3, inputs=[views["view_strided"], dst], device="cpu")
    inputs = {name: a[name] for name, _, _ in _TYPED}
    inputs.update(views)
    path = rec.save(rc.tmpdir("capture") / "typed", inputs=inputs, outputs={"dst": dst, "v3": a["v3"]})
    arrays = dict(inputs, dst=dst)
    return path, arrays, {k: v.numpy().copy() for k, v in arrays.items()}


def test_typed_signatures_round_trip(typed_file):
    path, arrays, snap = typed_file
    p = wrpkit.load(path)
    assert set(p.signature) == set(arrays)
    for name, arr in arrays.items():
        sig = p.signature[name]
        assert sig is not None, name
        assert sig.dtype == dtype_from_warp(arr.dtype), name
        assert sig.shape == tuple(arr.shape), name
        assert sig.strides == tuple(arr.strides), name
        assert sig.is_input == (name in dict(_TYPED_NAMES, view_strided=1, view_block=1)), name
        assert sig.is_output == (name in ("dst", "v3")), name
        # numpy mapping equals what Warp's own .numpy() gives
        assert sig.numpy_dtype() == snap[name].dtype, name
        assert sig.numpy_shape() == snap[name].shape, name
    assert p.signature["view_strided"].byte_offset == 4
    assert p.signature["view_block"].byte_offset == (1 * 5 + 2) * 4
    assert p.signature["f32_2d"].byte_offset == 0
    body = p.signature["body"].dtype
    assert [f.name for f in body.fields] == ["mass", "pos", "rot", "tag"]
    assert body.fields[1].type.name == "vec3f" and body.fields[2].type.name == "quatf"
    assert ann.numpy_dtype(body) == np.dtype(Body.numpy_dtype())


_TYPED_NAMES = {name: 1 for name, _, _ in _TYPED}


def test_typed_bindings_read_back_as_saved(typed_file):
    path, arrays, snap = typed_file
    p = wrpkit.load(path)
    for name in arrays:
        got = p.get(name)
        if got.dtype.names:  # struct padding bytes are unspecified: compare fields
            assert got.dtype == snap[name].dtype and got.shape == snap[name].shape
            assert all(np.array_equal(got[f], snap[name][f]) for f in got.dtype.names), name
            continue
        assert rc.same_bytes(got, snap[name]), name  # nothing ran yet: the saved contents
        assert rc.same_bytes(p.numpy(name), snap[name]), name


def test_typed_program_runs_like_live(typed_file):
    path, arrays, snap = typed_file
    out = wrpkit.load(path).run(outputs="*")
    bodies = snap["body"].copy()
    expect_v3 = (bodies["pos"] * bodies["mass"][:, None]).astype(np.float32)
    assert np.array_equal(out["v3"], expect_v3)
    assert np.array_equal(out["body"]["mass"], bodies["mass"] + 1)
    assert np.array_equal(out["dst"], snap["view_strided"] * 2)


def test_dtype_mapping_to_warp_and_back():
    for _, dt, _ in _TYPED:
        d = dtype_from_warp(dt)
        assert d.size == wp.types.type_size_in_bytes(dt)
        w = warp_dtype(d)
        if d.fields:
            assert w is None
        else:
            assert wp.types.type_size_in_bytes(w) == d.size
            assert dtype_from_warp(w) == d or dtype_from_warp(w).shape == d.shape
    assert dtype_from_warp(float).name == "float32"
    assert ann.numpy_dtype(dtype_from_warp(wp.vec3)) == np.dtype(("<f4", (3,)))
    with pytest.raises(TypeError):
        dtype_from_warp(wp.array(dtype=wp.float32))


# ---------------------------------------------------------------------------
# Annotations codec
# ---------------------------------------------------------------------------


def test_annotations_codec_round_trip():
    body = dtype_from_warp(Body)
    a = ann.Annotations(
        producer="wrpkit test",
        signature=(ann.ArraySignature("b", body, (2, 3), (216, 72), 8, True, False),
                   ann.ArraySignature("v", dtype_from_warp(wp.vec3d), (4,), (24,), 0, False, True)),
        kernel_signatures=(ann.KernelSignature("k", "ab" * 32, (
            ann.KernelArgument("x", "array(ndim=1, dtype=float32)", 56, dtype_from_warp(wp.float32), 1),
            ann.KernelArgument("s", "float32", 4, dtype_from_warp(wp.float32), 0),
            ann.KernelArgument("h", "opaque", 8, None, 0))),),
        module_digests=(ann.ModuleDigest.of("m.o", b"abc"),),
    )
    data = ann.encode_annotations(a)
    assert data[4:8] == b"WRPK"
    assert ann.decode_annotations(data) == a
    assert ann.decode_annotations(ann.encode_annotations(ann.decode_annotations(data))) == a
    assert ann.ModuleDigest.of("m.o", b"abc").matches(b"abc")
    assert not ann.ModuleDigest.of("m.o", b"abc").matches(b"abd")


@pytest.mark.parametrize("junk", [b"", b"WRPK", b"\x00" * 16, b"\x08\x00\x00\x00WRPK\xff\xff\xff\x7f" * 3])
def test_annotations_decode_rejects_garbage(junk):
    with pytest.raises(WrpFormatError):
        ann.decode_annotations(junk)


def test_view_region_respects_offset_and_strides():
    region = np.arange(40, dtype=np.uint8)
    sig = ann.ArraySignature("v", dtype_from_warp(wp.uint16), (3, 2), (12, 2), 2)
    v = ann.view_region(region, sig)
    assert v.shape == (3, 2) and v.dtype == np.uint16
    assert np.array_equal(v, region.view(np.uint16)[1:].reshape(-1)[:18].reshape(3, 6)[:, :2])
    with pytest.raises(WrpBindingError):
        ann.view_region(region, ann.ArraySignature("v", dtype_from_warp(wp.uint16), (5,), (8,), 8))


# ---------------------------------------------------------------------------
# CUDA (skipped without a GPU)
# ---------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.skipif(wp.get_cuda_device_count() == 0, reason="needs a CUDA device")
def test_cuda_capture_save_load_run(tmp_path):
    rng = np.random.default_rng(1)
    x = wp.array(rng.standard_normal(N).astype(np.float32), device="cuda:0")
    y = wp.array(rng.standard_normal(N).astype(np.float32), device="cuda:0")
    x0, y0 = x.numpy(), y.numpy()
    wp.load_module(device="cuda:0")
    with wrpkit.capture(device="cuda:0") as rec:
        wp.launch(k_saxpy, dim=N, inputs=[2.5, x, y], device="cuda:0")
    path = rec.save(tmp_path / "saxpy_cuda", inputs={"x": x, "y": y}, outputs={"y": y})
    p = wrpkit.load(path, device="cuda:0")
    out = p.run({"x": x0, "y": y0}, outputs="*")
    expect = _saxpy_live()  # same math on the CPU
    assert np.allclose(out["y"], 2.5 * x0 + y0, rtol=1e-6)
    assert p.signature["y"].is_input and p.signature["y"].is_output
    assert expect["y"].shape == out["y"].shape
