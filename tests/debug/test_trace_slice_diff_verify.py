"""wrp trace, wrp slice, wrp diff and wrpkit.verify on real captures made at test time."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import debug_programs as dp  # noqa: E402
from proc_helpers import invoke as wrp
import wrpkit  # noqa: E402

from proc_helpers import native_or_skip  # noqa: E402

ENGINES = ["python", "native"]




@pytest.fixture(scope="module")
def caps(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("debug")
    return {
        "chain": dp.capture_nan_chain(d / "chain.wrp"),
        "chain_again": dp.capture_nan_chain(d / "chain_again.wrp"),
        "chain_changed": dp.capture_nan_chain(d / "chain_changed.wrp", scale=2.0, dim=8),
        "while": dp.capture_while_nan(d / "while.wrp"),
    }


def _live(n_ops: int, x=None) -> dict:
    """Every binding of the chain program after its first ``n_ops`` launches, run live."""
    a = dp.nan_chain_arrays()
    if x is not None:
        a["x"].assign(x)
    dp.nan_chain_step(a, n_ops=n_ops)
    return {k: v.numpy() for k, v in a.items()}


def _sha(arr) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).view(np.uint8).data).hexdigest()[:32]


# ---------------------------------------------------------------------------
# trace
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_trace_finds_the_op_that_writes_nan(caps, engine):
    native_or_skip(engine)
    t = wrpkit.trace(caps["chain"], engine=engine, stop_at_nonfinite=True)
    nf = t.first_nonfinite
    assert nf is not None
    # op 2 is k_sqrt(3 - x): x = 0..15, so elements 4..15 become NaN
    assert (nf["index"], nf["path"], nf["iteration"], nf["op"], nf["kernel"]) == (2, "2", None, "KERNEL_LAUNCH",
                                                                                 "k_sqrt")
    assert (nf["binding"], nf["element"], nf["nan"], nf["inf"]) == ("w", 4, 12, 0)
    assert len(t.ops) == 3  # stopped there
    (z,) = nf["inputs"]  # k_sqrt reads z only
    assert (z["binding"], z["min"], z["max"], z["nan"]) == ("z", -12.0, 3.0, 0)
    # writes follow the argument access recorded at capture ("write"/"readwrite"; unrecorded counts as written)
    from wrpkit.formats.annotations import argument_access  # noqa: PLC0415
    from wrpkit.formats.container import open_capture  # noqa: PLC0415

    with open_capture(caps["chain"]) as cap:
        access = {k: v for (_, k), v in argument_access(cap.program).items()}
    arg_bindings = [("k_affine", ["x", "y"]), ("k_affine", ["y", "z"]), ("k_sqrt", ["z", "w"])]
    want = [[b for b, word in zip(names, access[k]) if word in (None, "write", "readwrite")]
            for k, names in arg_bindings]
    assert [[w["binding"] for w in o["writes"]] for o in t.ops] == want
    assert want[0] == ["y"] and "w" in want[2]  # k_affine only reads its source


@pytest.mark.parametrize("engine", ENGINES)
def test_trace_finds_nan_inside_a_while_body_at_its_iteration(caps, engine):
    native_or_skip(engine)
    t = wrpkit.trace(caps["while"], engine=engine, stop_at_nonfinite=True)
    assert [(o["path"], o["iteration"]) for o in t.ops] == [
        ("0", None), ("1.0", 0), ("1.1", 0), ("1.0", 1), ("1.1", 1), ("1.0", 2), ("1.1", 2)]
    nf = t.first_nonfinite
    assert (nf["index"], nf["path"], nf["iteration"], nf["kernel"], nf["binding"], nf["element"]) == (
        1, "1.1", 2, "k_sqrt", "out", 0)
    v = next(w for w in nf["inputs"] if w["binding"] == "v")
    assert v["min"] == v["max"] == -0.5  # 2.5 - 3


@pytest.mark.parametrize("engine", ENGINES)
def test_trace_digests_match_a_live_run_after_every_op(caps, engine):
    native_or_skip(engine)
    t = wrpkit.trace(caps["chain"], engine=engine)
    assert [o["index"] for o in t.ops] == [0, 1, 2, 3]
    for rec in t.ops:
        live = _live(rec["index"] + 1)
        for w in rec["writes"]:
            assert w["digest"] == _sha(live[w["binding"]]), (rec["index"], w["binding"])
            assert w["dtype"] == "float32"


def test_trace_while_runs_the_whole_loop_and_ends_like_stock_replay(caps):
    import programs  # noqa: PLC0415

    t = wrpkit.trace(caps["while"])
    # counter starts at 5: five iterations of two ops, after the first launch
    assert len(t.ops) == 1 + 5 * 2 and t.ops[-1]["iterations"] == [4]
    prog = wrpkit.load(caps["while"])
    stock = prog.run({}, outputs="*")
    last = {}
    for rec in t.ops:
        for w in rec["writes"]:
            last[w["binding"]] = w["digest"]
    for name, digest in last.items():
        assert digest == _sha(stock[name]), name
    assert programs  # the suite's helpers import


def test_trace_inputs_and_engines_agree_and_divergence_is_found(caps, tmp_path):
    native_or_skip("native")
    saved = wrpkit.trace(caps["chain"]).save(tmp_path / "py.trace")
    same = wrpkit.trace(caps["chain"], engine="native", against=saved)
    assert same.first_divergence is None
    x = np.full(dp.N, 10.0, np.float32)
    other = wrpkit.trace(caps["chain"], inputs={"x": x}, against=saved, stop_at_nonfinite=True)
    # op 0 reads x (recorded as read-only: not traced) and writes y
    assert other.first_divergence["index"] == 0 and other.first_divergence["binding"] == "y"
    assert other.first_nonfinite["index"] == 2 and other.first_nonfinite["element"] == 0  # sqrt(3 - 10)


def test_trace_dump_writes_typed_npy(caps, tmp_path):
    t = wrpkit.trace(caps["chain"], dump=tmp_path / "d")
    files = sorted((tmp_path / "d").iterdir())
    assert len(files) == sum(len(o["writes"]) for o in t.ops) >= 4  # one file per written region per op
    arr = np.load(files[0])
    assert arr.dtype == np.float32 and arr.shape == (dp.N,)


@pytest.mark.slow
def test_trace_cli_json_shape_and_exit_codes(caps, tmp_path):
    r = wrp("trace", caps["chain"], "--stop-at-nonfinite", "--json")
    assert r.exit_code == 1, r.output
    d = json.loads(r.output)
    assert set(d) >= {"ops", "first_nonfinite", "first_divergence"}
    assert d["first_divergence"] is None
    assert {"index", "path", "iteration", "op", "kernel", "region", "binding", "element"} <= set(d["first_nonfinite"])
    np.save(tmp_path / "x.npy", np.zeros(dp.N, np.float32))
    r = wrp("trace", caps["chain"], "--input", f"x={tmp_path / 'x.npy'}", "--save", tmp_path / "t.json")
    assert r.exit_code == 0, r.output  # no --stop-at-nonfinite: a full trace is success
    assert "k_sqrt" in r.output
    assert wrp("trace", caps["chain"], "--against", tmp_path / "t.json").exit_code == 1  # other inputs
    assert wrp("trace", caps["chain"], "--input", "nope=x.npy").exit_code == 2
    (tmp_path / "bad.wrp").write_bytes(b"WRP1" + bytes(60))
    assert wrp("trace", tmp_path / "bad.wrp").exit_code == 3


# ---------------------------------------------------------------------------
# slice
# ---------------------------------------------------------------------------


def _stock_replay(path: Path) -> dict:
    """Load with stock ``wp.capture_load`` in a fresh process, launch once, read every binding."""
    code = (
        "import sys, numpy as np, warp as wp\n"
        "wp.config.quiet = True\n"
        "g = wp.capture_load(sys.argv[1], device='cpu')\n"
        "wp.capture_launch(g)\n"
        "out = {}\n"
        "for n in ('x', 'y', 'z', 'w'):\n"
        "    a = wp.empty(4 * 16, dtype=wp.uint8, device='cpu')\n"
        "    g.get_param(n, a)\n"
        "    out[n] = a.numpy().view(np.float32)\n"
        "np.savez(sys.argv[2], **out)\n")
    out = path.with_suffix(".npz")
    subprocess.run([sys.executable, "-c", code, str(path), str(out)], check=True, capture_output=True)
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("start,stop", [(0, 1), (1, 3), (2, 4)])
def test_slice_replayed_by_stock_warp_reproduces_the_state(caps, tmp_path, start, stop):
    out = tmp_path / f"s{start}_{stop}.wrp"
    res = wrpkit.slice(caps["chain"], out, ops=(start, stop))
    assert (res.start, res.stop, res.ops) == (start, stop, stop - start)
    assert wrp("validate", out).exit_code == 0
    got = _stock_replay(out)
    want = _live(stop)
    for name in ("x", "y", "z", "w"):
        assert got[name].tobytes() == want[name].tobytes(), name


def test_slice_with_inputs_to_a_bundle(caps, tmp_path):
    x = np.linspace(-3, 3, dp.N).astype(np.float32)
    out = tmp_path / "mid.wrpk"
    wrpkit.slice(caps["chain"], out, ops=(1, 3), inputs={"x": x})
    got = wrpkit.load(out).run({}, outputs="*")
    want = _live(3, x=x)
    for name in ("y", "z", "w"):
        assert got[name].tobytes() == want[name].tobytes(), name
    r = wrp("slice", caps["chain"], "--ops", "3:9", "-o", tmp_path / "bad.wrp")
    assert r.exit_code == 2 and "outside" in r.output  # a bad range is a usage error, as `slice --help` says
    r = wrp("slice", caps["chain"], "--ops", "-1:", "-o", tmp_path / "last.wrp", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["start"] == 3


def test_slice_of_a_while_program_keeps_the_loop(caps, tmp_path):
    out = tmp_path / "loop.wrp"
    wrpkit.slice(caps["while"], out, ops=(1, 2))
    got = wrpkit.load(out).run({}, outputs="*")
    full = wrpkit.load(caps["while"]).run({}, outputs="*")
    for name in got:
        assert got[name].tobytes() == full[name].tobytes(), name


# ---------------------------------------------------------------------------
# diff
# ---------------------------------------------------------------------------


def test_diff_same_program_captured_twice_is_identical(caps):
    d = wrpkit.diff(caps["chain"], caps["chain_again"])
    assert d.identical, d.to_json()
    r = wrp("diff", caps["chain"], caps["chain_again"])
    assert r.exit_code == 0 and "identical" in r.output


def test_diff_reports_the_launch_dim_and_the_scalar(caps):
    d = wrpkit.diff(caps["chain"], caps["chain_changed"])
    assert not d.identical
    assert [(o["a"], o["b"], o["change"]) for o in d.ops] == [(i, i, "changed") for i in range(4)]
    first = d.ops[0]["fields"]
    assert first["dim"] == {"a": [16], "b": [8]}
    # k_affine(src, dst, a, b): arguments numbered from 0 as `wrp inspect` numbers them
    assert first["args"] == [{"param": 2, "name": "a", "type": "float32", "a": 1.0, "b": 2.0}]
    assert "args" not in d.ops[1]["fields"]  # only the dim changed there
    r = wrp("diff", caps["chain"], caps["chain_changed"], "--json")
    assert r.exit_code == 1
    j = json.loads(r.output)
    assert j["identical"] is False and j["ops"][0]["fields"]["dim"]["b"] == [8]


def test_diff_aligns_added_ops_and_bodies(caps):
    d = wrpkit.diff(caps["chain"], caps["while"])
    changes = {o["change"] for o in d.ops}
    assert "added" in changes or "removed" in changes
    assert any(o["kind"] == "WHILE" and o["change"] == "added" for o in d.ops)


def test_diff_invalid_input_exits_3(caps, tmp_path):
    (tmp_path / "junk.wrp").write_bytes(b"not a capture at all")
    assert wrp("diff", caps["chain"], tmp_path / "junk.wrp").exit_code == 3


# ---------------------------------------------------------------------------
# verify
# ---------------------------------------------------------------------------


def test_verify_passes_for_a_faithful_step():
    a = dp.nan_chain_arrays()
    before = a["x"].numpy().copy()
    rep = wrpkit.verify(lambda: dp.nan_chain_step(a, n_ops=2), {"x": a["x"]}, {"y": a["y"], "z": a["z"]})
    assert rep.ok and rep.mismatches == [] and rep.hint == ""
    assert np.array_equal(a["x"].numpy(), before) and not a["y"].numpy().any()  # arrays restored


def test_verify_catches_a_host_side_write():
    a = dp.nan_chain_arrays()

    def step():
        dp.nan_chain_step(a, n_ops=2)
        a["z"].numpy()[3] += 100.0  # host code: runs at capture time only

    rep = wrpkit.verify(step, {"x": a["x"]}, {"y": a["y"], "z": a["z"]})
    assert not rep.ok
    (mm,) = rep.mismatches
    assert (mm.binding, mm.count, mm.max_abs_error) == ("z", 1, 100.0)
    assert mm.first["index"] == 3 and mm.first["live"] - mm.first["replay"] == 100.0
    assert [w["kernel"] for w in mm.writers] == ["k_affine"] and mm.writers[0]["index"] == 1
    assert "host-side" in rep.hint


def test_verify_names_a_binding_nothing_in_the_capture_writes():
    a = dp.nan_chain_arrays()

    def step():
        dp.nan_chain_step(a, n_ops=1)
        a["w"].assign(np.ones(dp.N, np.float32))  # a host-to-device copy the capture does not hold on CPU

    rec = None
    with wrpkit.capture(device="cpu") as rec:
        dp.nan_chain_step(a, n_ops=1)
    rep = rec.verify(step, {"x": a["x"]}, {"y": a["y"], "w": a["w"]})
    assert not rep.ok and [m.binding for m in rep.mismatches] == ["w"]
    assert rep.mismatches[0].writers == [] and "nothing in the capture writes 'w'" in rep.hint


def test_native_api_mirrors_the_c_options_struct():
    # wrp_options_init zero-fills sizeof(wrp_options) bytes; a ctypes mirror that
    # lags behind an appended field let it write past the struct into Python's
    # heap, and the test process later crashed in the garbage collector.
    import ctypes  # noqa: PLC0415

    from wrpkit.run.replay import native_api  # noqa: PLC0415

    lib = native_api.library()
    scratch = ctypes.create_string_buffer(4096)
    lib.wrp_options_init(ctypes.cast(scratch, ctypes.POINTER(native_api._Options)))
    assert ctypes.c_uint32.from_buffer(scratch).value == ctypes.sizeof(native_api._Options)


_STEP_KERNELS = '''
import warp as wp


@wp.kernel
def grad(x: wp.array(dtype=float), g: wp.array(dtype=float)):
    i = wp.tid()
    g[i] = 2.0 * x[i]


@wp.kernel
def step(x: wp.array(dtype=float), g: wp.array(dtype=float), lr: float):
    i = wp.tid()
    x[i] = x[i] - lr * g[i]
'''

_STEP_CAPTURE = '''
import sys
import warp as wp
from sgd_kernels import grad, step

wp.config.quiet = True
lr, n = float(sys.argv[2]), int(sys.argv[3])
x = wp.ones(n, dtype=float, device="cpu")
g = wp.zeros(n, dtype=float, device="cpu")
wp.capture_begin(device="cpu", apic=True)
for _ in range(16):
    wp.launch(grad, dim=n, inputs=[x, g], device="cpu")
    wp.launch(step, dim=n, inputs=[x, g, lr], device="cpu")
wp.capture_save(wp.capture_end(device="cpu"), sys.argv[1], inputs={"x": x}, outputs={"g": g})
'''


@pytest.mark.slow  # 4 s: captures a loop twice and diffs
def test_diff_of_a_step_in_a_loop_reads_as_the_change_made(tmp_path):
    """A 32-launch SGD step captured by stock Warp three times: lr 0.1, lr 0.2, and 64 elements instead
    of 128. One changed scalar is one entry with its count; an array argument reads as its shape; with
    --kernels the scalar reads as the number it is."""
    import subprocess  # noqa: PLC0415

    (tmp_path / "sgd_kernels.py").write_text(_STEP_KERNELS)
    (tmp_path / "capture.py").write_text(_STEP_CAPTURE)
    for name, lr, n in (("a", "0.1", "128"), ("b", "0.2", "128"), ("c", "0.1", "64")):
        subprocess.run([sys.executable, "capture.py", f"{name}.wrp", lr, n], cwd=tmp_path, check=True,
                       capture_output=True)
    r = wrp("diff", tmp_path / "a.wrp", tmp_path / "b.wrp")
    assert r.exit_code == 1
    ops = r.output[r.output.index("ops ("):].splitlines()
    assert ops[0] == "ops (16 difference(s)):" and len(ops) == 3, r.output  # 16 launches, one entry
    assert "KERNEL_LAUNCH step (16 times)" in ops[1] and ops[2].strip().startswith("arg 2:")
    typed = wrp("diff", tmp_path / "a.wrp", tmp_path / "b.wrp", "--kernels", tmp_path / "sgd_kernels.py")
    assert "arg 2 (lr): 0.1 -> 0.2" in typed.output, typed.output
    assert len(typed.output.splitlines()) <= 10  # the whole one-kernel edit of the step
    shapes = wrp("diff", tmp_path / "a.wrp", tmp_path / "c.wrp")
    assert "arg 0: array shape (128,) -> (64,)" in shapes.output and "(16 times)" in shapes.output
    assert '"hex"' not in shapes.output
    d = json.loads(wrp("diff", tmp_path / "a.wrp", tmp_path / "c.wrp", "--json").output)
    arg0 = next(op for op in d["ops"] if op["kernel"] == "grad")["fields"]["args"][0]
    assert arg0["a"]["array"]["shape"] == [128] and arg0["b"]["array"]["shape"] == [64]
