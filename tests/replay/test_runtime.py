"""wrpkit.load / wrpkit.run.load.program.Program: replays of real Warp captures."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import replay_cases as rc
import warp as wp
import wrpkit
from wrpkit.formats import annotations as ann
from wrpkit.errors import (
                           WrpBindingError,
                           WrpDeviceError,
                           WrpError,
                           WrpModuleError,
                           WrpValidationError,
                           WrpVersionError,
                           )
from wrpkit.run.load.program import Program

PROGRAMS = rc.program_names()
SAMPLES = rc.sample_names()


# ---------------------------------------------------------------------------
# Every program and every sample, byte for byte against live execution
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_run_matches_live(name):
    prog = rc.programs.PROGRAMS[name]
    p = wrpkit.load(rc.wrpkit_capture(name))
    assert isinstance(p, Program)
    assert set(p.bindings) == set(prog.bindings)
    out = p.run(rc.fresh_inputs(name), outputs="*")
    want = rc.expected(name)
    for b in prog.bindings:
        assert p.signature[b] is not None
        # typed exactly like wp.array.numpy() of the live array
        assert rc.same_bytes(out[b], want[b]), (name, b)


@pytest.mark.parametrize("name", PROGRAMS)
def test_stock_file_run_matches_live(name):
    """Files written by stock wp.capture_save (no signature): raw bytes."""
    prog = rc.programs.PROGRAMS[name]
    p = wrpkit.load(rc.stock_capture(name))
    assert all(s is None for s in p.signature.values())
    out = p.run(rc.fresh_inputs(name), outputs="*")
    want = rc.expected(name)
    for b in prog.bindings:
        assert out[b].dtype == np.uint8 and out[b].ndim == 1
        assert rc.same_raw_bytes(out[b], want[b]), (name, b)


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_run_matches_live(name):
    live = rc.sample_live(name)
    wrp, inputs_npz, expected_npz = rc.sample_capture(name)
    with np.load(inputs_npz) as z:
        inputs = {k: z[k] for k in z.files}
    out = wrpkit.load(wrp).run(inputs, outputs="*")
    for b, v in live.items():
        assert rc.same_raw_bytes(out[b], v), (name, b)
    typed = wrpkit.load(rc.sample_wrpkit_capture(name)).run(rc.sample_inputs(name), outputs="*")
    for b, v in live.items():
        assert rc.same_bytes(typed[b], v), (name, b)


def test_run_without_inputs_uses_the_saved_contents():
    name = "scalars" if "scalars" in PROGRAMS else PROGRAMS[0]
    out = wrpkit.load(rc.wrpkit_capture(name)).run(outputs="*")
    want = rc.expected(name)
    for b, v in want.items():
        assert rc.same_bytes(out[b], v)


# ---------------------------------------------------------------------------
# Loading from bytes and bundles
# ---------------------------------------------------------------------------


def _module_files(path):
    mdir = path.with_name(path.stem + "_modules")
    return {f.name: f.read_bytes() for f in mdir.iterdir()}


def test_load_from_bytes_with_modules():
    name = "views" if "views" in PROGRAMS else PROGRAMS[0]
    path = rc.wrpkit_capture(name)
    p = wrpkit.load(path.read_bytes(), modules=_module_files(path))
    assert p.path is None
    out = p.run(rc.fresh_inputs(name), outputs="*")
    for b, v in rc.expected(name).items():
        assert rc.same_bytes(out[b], v)


def test_load_from_bytes_without_modules_fails():
    path = rc.wrpkit_capture(PROGRAMS[0])
    with pytest.raises(WrpModuleError, match="missing"):
        wrpkit.load(path.read_bytes())


def test_load_wrpk_bundle(tmp_path):
    from wrpkit.formats.container import open_capture
    from wrpkit.formats.wrpk.builder import encode_wrpk

    name = "copy" if "copy" in PROGRAMS else PROGRAMS[0]
    path = rc.wrpkit_capture(name)
    with open_capture(path) as cap:
        data = encode_wrpk(cap.program, cap.module_files())
    bundle = tmp_path / f"{name}.wrpk"
    bundle.write_bytes(data)
    for src in (bundle, data):
        p = wrpkit.load(src)
        assert p.signature == wrpkit.load(path).signature
        out = p.run(rc.fresh_inputs(name), outputs="*")
        for b, v in rc.expected(name).items():
            assert rc.same_bytes(out[b], v)


def test_save_wrpk_bundle_directly(tmp_path):
    name = _with_kernels()
    prog = rc.programs.PROGRAMS[name]
    arrays = prog.make_arrays("cpu")
    with wrpkit.capture(device="cpu") as rec:
        prog.step(arrays)
    path = rec.save(tmp_path / f"{name}.wrpk", inputs={n: arrays[n] for n in prog.inputs},
                    outputs={n: arrays[n] for n in prog.outputs})
    assert path.suffix == ".wrpk" and path.read_bytes()[:4] == b"WRPK"
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{name}.wrpk"]  # no modules dir
    out = wrpkit.load(path).run(rc.fresh_inputs(name), outputs="*")
    for b, v in rc.expected(name).items():
        assert rc.same_bytes(out[b], v)


# ---------------------------------------------------------------------------
# Accessors
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def counter_file():
    @wp.kernel
    def k_accumulate(x: wp.array(dtype=wp.float32), acc: wp.array(dtype=wp.float32), v: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        acc[i] = acc[i] + x[i]
        v[i] = v[i] + wp.vec3(x[i], 1.0, 2.0)

    x = wp.array(np.arange(6, dtype=np.float32), device="cpu")
    acc = wp.zeros(6, dtype=wp.float32, device="cpu")
    v = wp.zeros(6, dtype=wp.vec3, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_accumulate, dim=6, inputs=[x, acc, v], device="cpu")
    return rec.save(rc.tmpdir("runtime") / "counter", inputs={"x": x, "acc": acc}, outputs={"acc": acc, "v": v})


def test_repeat_accumulates(counter_file):
    p = wrpkit.load(counter_file)
    x = np.linspace(0, 1, 6, dtype=np.float32)
    out = p.run({"x": x, "acc": np.zeros(6, np.float32)}, repeat=5, outputs="*")
    expect = np.zeros(6, np.float32)
    for _ in range(5):
        expect = expect + x
    assert np.array_equal(out["acc"], expect)
    assert out["v"].shape == (6, 3) and out["v"].dtype == np.float32
    assert np.array_equal(out["v"][:, 1], np.full(6, 5, np.float32))
    # repeat=0: only set and read
    out0 = p.run({"acc": np.ones(6, np.float32)}, repeat=0, outputs="*")
    assert np.array_equal(out0["acc"], np.ones(6, np.float32))


def test_numpy_view_is_zero_copy(counter_file):
    p = wrpkit.load(counter_file)
    acc = p.numpy("acc")
    assert acc.ctypes.data == p.graph.get_param_ptr("acc")
    acc[:] = 10.0  # writing the view is writing the input
    p.set("x", np.ones(6, np.float32))
    p.launch()
    assert np.array_equal(acc, np.full(6, 11.0, np.float32))  # the view sees the replay
    assert np.array_equal(p.get("acc"), acc)
    del p  # the view keeps the program alive
    assert np.array_equal(acc, np.full(6, 11.0, np.float32))


def test_warp_array_accessor(counter_file):
    p = wrpkit.load(counter_file)
    v = p.array("v")
    assert isinstance(v, wp.array) and v.dtype == wp.vec3 and v.shape == (6,)
    assert v.ptr == p.graph.get_param_ptr("v")
    p.set("x", np.full(6, 2.0, np.float32))
    p.launch()
    assert np.array_equal(v.numpy()[:, 0], np.full(6, 2.0, np.float32))
    x = p.array("x")
    x.fill_(3.0)  # writes through to the binding
    assert np.array_equal(p.get("x"), np.full(6, 3.0, np.float32))


def test_set_get_and_wp_array_inputs(counter_file):
    p = wrpkit.load(counter_file)
    p.set("x", wp.array(np.full(6, 4.0, np.float32), device="cpu"))
    with pytest.raises(WrpBindingError, match="raw bytes"):  # the file records acc's dtype and shape
        p.set("acc", np.zeros(6, np.float32).tobytes())
    p.set("acc", np.zeros(6, np.float32))
    p.launch()
    assert np.array_equal(p.get("acc"), np.full(6, 4.0, np.float32))
    assert p.bindings == {"x": 24, "acc": 24, "v": 72}
    assert p.inputs == ["x", "acc"] and p.outputs == ["acc", "v"]


def test_whole_regions_as_bytes(counter_file):
    # The byte-level interface the contained replay's child uses: no typing, whole regions.
    p = wrpkit.load(counter_file)
    vec = np.arange(18, dtype=np.float32).reshape(6, 3)
    p.write_bytes("v", vec.view(np.uint8).reshape(-1))
    p.write_bytes("x", np.full(6, 0.5, np.float32).view(np.uint8))
    assert np.array_equal(p.get("v"), vec)  # typed read of what was written as bytes
    live = p.region_bytes("v")  # CPU: Warp's memory itself, no copy
    assert live.dtype == np.uint8 and live.ctypes.data == p.graph.get_param_ptr("v")
    copy = p.read_bytes("v")
    p.launch()
    vec[:, 0] += 0.5
    vec[:, 1] += 1.0
    vec[:, 2] += 2.0
    assert np.array_equal(live.view(np.float32).reshape(6, 3), vec)  # the view sees the replay
    assert np.array_equal(copy.view(np.float32).reshape(6, 3), vec - [0.5, 1.0, 2.0])  # the copy does not
    assert np.array_equal(p.read_bytes("v"), live)
    with pytest.raises(WrpBindingError, match="holds 72 bytes, not 71"):
        p.write_bytes("v", np.zeros(71, np.uint8))
    with pytest.raises(WrpBindingError, match="unknown binding"):
        p.read_bytes("nope")
    p.close()
    with pytest.raises(WrpError, match="closed"):
        p.region_bytes("v")


# ---------------------------------------------------------------------------
# Binding errors
# ---------------------------------------------------------------------------


def test_unknown_binding_lists_known_names(counter_file):
    p = wrpkit.load(counter_file)
    with pytest.raises(WrpBindingError, match="unknown binding 'nope'.*'x', 'acc', 'v'") as e:
        p.run({"nope": np.zeros(6, np.float32)})
    assert e.value.exit_code == 2
    with pytest.raises(WrpBindingError, match="unknown binding"):
        p.get("nope")


def test_input_size_mismatch(counter_file):
    p = wrpkit.load(counter_file)
    with pytest.raises(WrpBindingError, match=r"has shape \(5,\) .* shape \(6,\)"):
        p.run({"x": np.zeros(5, np.float32)})


def test_input_dtype_mismatch(counter_file):
    p = wrpkit.load(counter_file)
    with pytest.raises(WrpBindingError, match="dtype float64 .* float32"):
        p.run({"x": np.zeros(3, np.float64)})  # 24 bytes, wrong dtype
    with pytest.raises(WrpBindingError, match="dtype int32"):
        p.set("v", np.zeros((6, 3), np.int32))


def test_inputs_are_all_checked_before_any_is_written(counter_file):
    p = wrpkit.load(counter_file)
    before = p.get("x")
    with pytest.raises(WrpBindingError):
        p.run({"x": np.full(6, 9, np.float32), "acc": np.zeros(2, np.float32)})
    assert np.array_equal(p.get("x"), before)


def test_untyped_binding_accepts_any_dtype_of_the_right_size():
    name = PROGRAMS[0]
    p = wrpkit.load(rc.stock_capture(name))
    b = next(iter(p.bindings))
    size = p.bindings[b]
    p.set(b, np.zeros(size, np.uint8))
    with pytest.raises(WrpBindingError, match="bytes"):
        p.set(b, np.zeros(size + 1, np.uint8))


def test_view_binding_accepts_the_view_shape(tmp_path):
    @wp.kernel
    def k_double_it(a: wp.array(dtype=wp.float32)):
        i = wp.tid()
        a[i] = a[i] * 2.0

    base = wp.array(np.arange(10, dtype=np.float32), device="cpu")
    view = base[1::3]  # 3 elements: 1, 4, 7
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_double_it, dim=3, inputs=[view], device="cpu")
    path = rec.save(tmp_path / "view", inputs={"v": view}, outputs={"v": view})
    p = wrpkit.load(path)
    sig = p.signature["v"]
    assert sig.shape == (3,) and sig.strides == (12,) and sig.byte_offset == 4
    assert p.bindings["v"] == 40  # the whole base allocation is the binding
    out = p.run({"v": np.array([1, 2, 3], np.float32)})  # view-shaped input
    assert np.array_equal(out["v"], [2, 4, 6])
    whole = np.arange(10, dtype=np.float32) + 100  # the whole region is not the binding's shape
    with pytest.raises(WrpBindingError, match="shape"):
        p.run({"v": whole})


# ---------------------------------------------------------------------------
# File errors: version, device, modules
# ---------------------------------------------------------------------------


def test_version_mismatch_is_a_clear_error(tmp_path):
    src = rc.wrpkit_capture(PROGRAMS[0])
    dst = rc.rewrite_capture(src, tmp_path, lambda prog: setattr(prog, "warp_version", "1.18.0"))
    with pytest.raises(WrpVersionError) as e:
        wrpkit.load(dst)
    msg = str(e.value)
    assert "1.18.0" in msg and wp.config.version in msg and "recapture" in msg
    assert e.value.exit_code == 3
    # stock Warp refuses it too
    with pytest.raises(RuntimeError):
        wp.capture_load(str(dst), device="cpu")


def test_device_family_mismatch():
    with pytest.raises(WrpDeviceError, match="captured for CPU") as e:
        wrpkit.load(rc.wrpkit_capture(PROGRAMS[0]), device="cuda:0")
    assert e.value.exit_code == 2  # the wrong device is a usage error in every route


def test_device_type_edited_to_cuda(tmp_path):
    def edit(prog):
        prog.device_type = 0
        prog.target_arch = 86

    dst = rc.rewrite_capture(rc.wrpkit_capture(PROGRAMS[0]), tmp_path, edit)
    with pytest.raises((WrpDeviceError, WrpValidationError)):
        wrpkit.load(dst, device="cpu")


def test_unknown_device_string():
    with pytest.raises(WrpDeviceError, match="unknown device"):
        wrpkit.load(rc.wrpkit_capture(PROGRAMS[0]), device="tpu")


def _with_kernels():
    for name in PROGRAMS:
        if rc.programs.PROGRAMS[name].op_counts.get("KERNEL_LAUNCH"):
            return name
    pytest.skip("no program launches kernels")


def test_missing_module_file(tmp_path):
    dst = rc.copy_capture(rc.wrpkit_capture(_with_kernels()), tmp_path)
    mdir = dst.with_name(dst.stem + "_modules")
    victim = sorted(mdir.iterdir())[0]
    victim.unlink()
    with pytest.raises(WrpModuleError, match="missing") as e:
        wrpkit.load(dst)
    assert victim.name in str(e.value) and e.value.exit_code == 3
    shutil.rmtree(mdir)
    with pytest.raises(WrpModuleError, match="missing"):
        wrpkit.load(dst)


def test_empty_module_file(tmp_path):
    dst = rc.copy_capture(rc.wrpkit_capture(_with_kernels()), tmp_path)
    victim = sorted(dst.with_name(dst.stem + "_modules").iterdir())[0]
    victim.write_bytes(b"")
    with pytest.raises(WrpModuleError, match="empty"):
        wrpkit.load(dst)


def test_altered_module_file_fails_its_digest(tmp_path):
    dst = rc.copy_capture(rc.wrpkit_capture(_with_kernels()), tmp_path)
    victim = sorted(dst.with_name(dst.stem + "_modules").iterdir())[0]
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(WrpModuleError, match="SHA-256"):
        wrpkit.load(dst)


def test_not_a_capture(tmp_path):
    bad = tmp_path / "bad.wrp"
    bad.write_bytes(b"hello world" * 10)
    with pytest.raises(WrpError):
        wrpkit.load(bad)
    with pytest.raises(WrpError):
        wrpkit.load(tmp_path / "missing.wrp")
    with pytest.raises(WrpError):
        wrpkit.load(12345)


def test_signature_that_does_not_fit_its_region_is_refused(tmp_path):
    src = rc.wrpkit_capture(PROGRAMS[0])

    def edit(prog):
        a = ann.read_annotations(prog)
        s = a.signature[0]
        bad = ann.ArraySignature(s.name, s.dtype, (s.shape[0] * 1000,) + s.shape[1:], s.strides, 0,
                                 s.is_input, s.is_output)
        prog.annotations = ann.encode_annotations(ann.Annotations(a.producer, (bad,) + a.signature[1:],
                                                                  a.kernel_signatures, a.module_digests))

    dst = rc.rewrite_capture(src, tmp_path, edit)
    # Refused by validation (the annotations rule), before Warp sees the file.
    with pytest.raises(WrpError, match=r"annotations\.signature\[0\].*outside region"):
        wrpkit.load(dst)


# ---------------------------------------------------------------------------
# Many launches (functional; timings are in bench/bench_replay.py)
# ---------------------------------------------------------------------------


def test_many_launch_graph_repeat():
    prog = rc.programs.make_big(launches=500, region_bytes=1024)
    arrays = prog.make_arrays("cpu")
    with wrpkit.capture(device="cpu") as rec:
        prog.step(arrays)
    path = rec.save(rc.tmpdir("runtime") / "big", inputs={n: arrays[n] for n in prog.inputs},
                    outputs={n: arrays[n] for n in prog.outputs})
    p = wrpkit.load(path)
    once = p.run(outputs="*")
    live = rc.programs.run_live(prog, "cpu")
    assert rc.same_bytes(once["counter"], live["counter"]) and rc.same_bytes(once["big"], live["big"])
    twice = p.run(repeat=1, outputs="*")
    assert twice["counter"][0] == 2 * live["counter"][0]


# ---------------------------------------------------------------------------
# CUDA (skipped without a GPU)
# ---------------------------------------------------------------------------

needs_cuda = pytest.mark.skipif(wp.get_cuda_device_count() == 0, reason="needs a CUDA device")


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("name", PROGRAMS)
def test_cuda_program_run_matches_live(name, tmp_path):
    prog = rc.programs.PROGRAMS[name]
    if name in ("mesh",):
        pytest.skip("mesh capture on CUDA is covered by Warp's own tests")
    prog.step(prog.make_arrays("cuda:0"))  # builds every kernel the step launches before the capture
    arrays = prog.make_arrays("cuda:0")
    try:
        with wrpkit.capture(device="cuda:0") as rec:
            prog.step(arrays)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"not capturable on CUDA: {e}")
    path = rec.save(tmp_path / name, inputs={n: arrays[n] for n in prog.inputs},
                    outputs={n: arrays[n] for n in prog.outputs})
    out = wrpkit.load(path, device="cuda:0").run(rc.fresh_inputs(name), outputs="*")
    live = rc.programs.run_live(prog, "cuda:0")
    for b in prog.bindings:
        assert out[b].shape == live[b].shape and out[b].dtype == live[b].dtype
        if prog.replay_matches_live and out[b].dtype.kind in "iub":
            assert np.array_equal(out[b], live[b]), (name, b)


@pytest.mark.cuda
@needs_cuda
def test_cuda_file_refused_on_cpu(tmp_path):
    x = wp.zeros(4, dtype=wp.float32, device="cuda:0")
    with wrpkit.capture(device="cuda:0") as rec:
        x.zero_()
    path = rec.save(tmp_path / "z", inputs={"x": x})
    with pytest.raises(WrpDeviceError, match="captured for CUDA"):
        wrpkit.load(path, device="cpu")
    assert wrpkit.load(path, device="cuda:0").run(outputs="*")["x"].shape == (4,)


def test_a_module_no_kernel_uses_need_not_be_present(tmp_path):
    """Warp loads only the modules the kernels are in; wrpkit requires exactly those files."""
    import parity_cases as pc  # noqa: PLC0415

    case = next(c for c in pc.CASES if c.name == "module_file_no_kernel_uses_is_missing")
    path = pc.build(case, tmp_path)
    assert not (path.with_name(path.stem + "_modules") / "wp_unused_abababa.cpu0000.o").exists()
    prog = wrpkit.load(path)
    assert prog.run()  # replays
    # A module a kernel is in is still required.
    used = next(path.with_name(path.stem + "_modules").iterdir())
    used.unlink()
    with pytest.raises(WrpError, match="missing"):
        wrpkit.load(path)
