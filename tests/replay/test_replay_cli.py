"""`wrp replay`: real captures replayed through the command, and every error case."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

import replay_cases as rc
from proc_helpers import wrp_module
import warp as wp
from wrpkit.errors import WrpBindingError, WrpDeviceError, WrpModuleError, WrpVersionError
from wrpkit.checks.binding_stats import stats
from wrpkit.checks.compare import compare_binding
from wrpkit.cli.replay import replay
from wrpkit.run.replay.engines import native_paths

PROGRAMS = rc.program_names()
SAMPLES = rc.sample_names()
ROOT = rc.ROOT


def invoke(*args):
    return CliRunner().invoke(replay, [str(a) for a in args], catch_exceptions=False)


def read_npz(path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def write_npz(path, **arrays):
    np.savez(path, **arrays)
    return path


def _kernel_program():
    for name in PROGRAMS:
        if rc.programs.PROGRAMS[name].op_counts.get("KERNEL_LAUNCH"):
            return name
    pytest.skip("no program launches kernels")


# ---------------------------------------------------------------------------
# Every program and sample, byte for byte against live execution
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROGRAMS)
def test_replay_program_matches_live(name, tmp_path):
    inputs = write_npz(tmp_path / "in.npz", **rc.fresh_inputs(name))
    out = tmp_path / "out.npz"
    r = invoke(rc.wrpkit_capture(name), "--inputs", inputs, "--output", out, "--json")
    assert r.exit_code == 0, r.stderr
    report = json.loads(r.stdout)
    got = read_npz(out)
    want = rc.expected(name)
    prog = rc.programs.PROGRAMS[name]
    assert set(got) == set(prog.bindings)
    for b in prog.bindings:
        assert rc.same_bytes(got[b], want[b]), (name, b)
    assert set(report["outputs"]) == set(prog.outputs)
    for b in prog.outputs:
        assert report["outputs"][b]["numpy_shape"] == list(want[b].shape)


@pytest.mark.parametrize("name", PROGRAMS)
def test_replay_stock_program_matches_live(name, tmp_path):
    """A stock file has no signature; outputs are typed like the given inputs / golden."""
    want = rc.expected(name)
    inputs = write_npz(tmp_path / "in.npz", **rc.fresh_inputs(name))
    golden = write_npz(tmp_path / "golden.npz", **want)
    out = tmp_path / "out.npz"
    # --equal-nan: some programs write NaN (overloads), and the live run wrote the same NaN
    r = invoke(rc.stock_capture(name), "--inputs", inputs, "--check", golden, "--rtol", 0, "--atol", 0,
               "--equal-nan", "--output", out, "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["check"]["ok"] is True
    got = read_npz(out)
    for b, v in want.items():
        assert rc.same_bytes(got[b], v), (name, b)


@pytest.mark.parametrize("name", SAMPLES)
def test_replay_sample(name, tmp_path):
    wrp, inputs, expected = rc.sample_capture(name)
    live = rc.sample_live(name)
    out = tmp_path / "out.npz"
    r = invoke(wrp, "--inputs", inputs, "--check", expected, "--output", out)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "check passed" in r.stdout
    got = read_npz(out)
    for b, v in live.items():
        assert rc.same_raw_bytes(got[b], v), (name, b)
    # the same sample captured by wrpkit: typed outputs
    out2 = tmp_path / "out2.npz"
    r = invoke(rc.sample_wrpkit_capture(name), "--inputs", inputs, "--output", out2, "--json")
    assert r.exit_code == 0, r.stderr
    got = read_npz(out2)
    for b, v in live.items():
        assert rc.same_bytes(got[b], v), (name, b)


def test_replay_through_the_wrp_entry_point(tmp_path):
    """`python -m wrpkit.cli replay ...` in a fresh process."""
    name = SAMPLES[0] if SAMPLES else PROGRAMS[0]
    wrp, inputs, expected = rc.sample_capture(name) if SAMPLES else (rc.wrpkit_capture(name), None, None)
    out = tmp_path / "out.npz"
    cmd = [sys.executable, "-m", "wrpkit.cli", "replay", str(wrp), "--output", str(out), "--json"]
    if inputs is not None:
        cmd += ["--inputs", str(inputs), "--check", str(expected)]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)  # stdout is exactly one JSON object
    assert report["ok"] is True and out.is_file()


def test_input_option_per_binding(tmp_path):
    name = _kernel_program()
    inputs = rc.fresh_inputs(name)
    args = []
    for i, (b, v) in enumerate(inputs.items()):
        np.save(tmp_path / f"{i}.npy", v)
        args += ["--input", f"{b}={tmp_path / f'{i}.npy'}"]
    out = tmp_path / "out.npz"
    r = invoke(rc.wrpkit_capture(name), *args, "--output", out)
    assert r.exit_code == 0, r.stderr
    got = read_npz(out)
    for b, v in rc.expected(name).items():
        assert rc.same_bytes(got[b], v)


# ---------------------------------------------------------------------------
# Report contents
# ---------------------------------------------------------------------------


def test_json_report_keys_and_stats(tmp_path):
    name = _kernel_program()
    r = invoke(rc.wrpkit_capture(name), "--repeat", 3, "--warmup", 2, "--json")
    assert r.exit_code == 0
    rep = json.loads(r.stdout)
    assert list(rep) == ["file", "device", "engine", "engine_reason", "warp_version", "repeat", "warmup", "timings",
                         "outputs", "unset_inputs", "warnings", "check", "output", "npy_outputs", "ok"]
    # the default (--engine auto): the native engine wherever wrp-replay is installed
    assert rep["engine"] == ("native" if _native_available() else "python") and "--engine auto" in rep["engine_reason"]
    assert rep["repeat"] == 3 and rep["warmup"] == 2 and rep["device"] == "cpu"
    host = rep["timings"]["host_ms"]
    assert host["count"] == 3 and host["min"] <= host["median"] <= host["max"]
    assert rep["timings"]["device_ms"] is None  # CPU
    for s in rep["outputs"].values():
        assert set(s) == {"shape", "numpy_shape", "dtype", "min", "max", "mean", "nan", "inf"}


def test_table_report(tmp_path):
    name = _kernel_program()
    r = invoke(rc.wrpkit_capture(name), "--repeat", 2)
    assert r.exit_code == 0
    for word in ("host wall", "min", "median", "max", "outputs", "NaN", "Inf"):
        assert word in r.stdout


def test_nan_and_inf_are_counted(tmp_path):
    @wp.kernel
    def k_div(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
        i = wp.tid()
        y[i] = x[i] / x[i + 1]

    import wrpkit

    x = wp.array(np.array([0, 0, 1, 0, 2], np.float32), device="cpu")
    y = wp.zeros(4, dtype=wp.float32, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_div, dim=4, inputs=[x, y], device="cpu")
    path = rec.save(tmp_path / "div", inputs={"x": x}, outputs={"y": y})
    rep = json.loads(invoke(path, "--json").stdout)
    s = rep["outputs"]["y"]  # [0/0, 0/1, 1/0, 0/2] = [nan, 0, inf, 0]
    assert s["nan"] == 1 and s["inf"] == 1 and s["min"] == 0 and s["max"] == 0


def test_large_repeat_shows_progress_and_succeeds():
    name = _kernel_program()
    r = invoke(rc.wrpkit_capture(name), "--repeat", 1500)
    assert r.exit_code == 0, r.stderr


# ---------------------------------------------------------------------------
# --check
# ---------------------------------------------------------------------------


def test_check_mismatch_exits_1_with_errors_per_binding(tmp_path):
    name = _kernel_program()
    want = rc.expected(name)
    prog = rc.programs.PROGRAMS[name]
    bad = dict(want)
    b = next(n for n in prog.outputs if want[n].dtype.kind == "f") if any(
        want[n].dtype.kind == "f" for n in prog.outputs) else prog.outputs[0]
    bad[b] = want[b] + (1 if want[b].dtype.kind != "f" else 0.5)
    golden = write_npz(tmp_path / "golden.npz", **bad)
    inputs = write_npz(tmp_path / "in.npz", **rc.fresh_inputs(name))
    r = invoke(rc.wrpkit_capture(name), "--inputs", inputs, "--check", golden, "--json")
    assert r.exit_code == 1
    rep = json.loads(r.stdout)
    assert rep["ok"] is False and rep["check"]["ok"] is False
    assert rep["check"]["bindings"][b]["ok"] is False
    assert rep["check"]["bindings"][b]["max_abs"] > 0
    assert "max_rel" in rep["check"]["bindings"][b]
    others = [n for n in bad if n != b]
    assert all(rep["check"]["bindings"][n]["ok"] for n in others)
    r = invoke(rc.wrpkit_capture(name), "--inputs", inputs, "--check", golden)
    assert r.exit_code == 1 and "MISMATCH" in r.stdout and b in r.stderr


def test_check_tolerances():
    a = np.array([1.0, 2.0, np.nan], np.float32)
    same = compare_binding(a, a.copy(), 0, 0)  # NaN == NaN only with --equal-nan
    assert not same["ok"] and same["nan_both"] == 1 and same["first_index"] == 2 and same["max_abs"] == 0
    assert compare_binding(a, a.copy(), 0, 0, equal_nan=True)["ok"]
    res = compare_binding(a, np.array([1.0, 2.001, np.nan], np.float32), 1e-5, 0, equal_nan=True)
    assert not res["ok"] and res["max_abs"] == pytest.approx(0.001, rel=1e-2)
    assert res["max_rel"] == pytest.approx(0.0005, rel=1e-2)
    assert compare_binding(a, np.array([1.0, 2.001, np.nan], np.float32), 1e-3, 0, equal_nan=True)["ok"]
    assert not compare_binding(np.arange(3), np.arange(3) + 1, 1, 1)["ok"]  # integers compare exactly
    assert not compare_binding(np.arange(3), np.arange(4), 0, 0)["ok"]


def test_stats_and_compare_of_a_large_binding_match_numpy():
    """Outputs are summarized and compared slice by slice; the results equal whole-array numpy."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal(3_000_017).astype(np.float32)
    a[[5, 1_048_576, 2_999_999]] = np.nan
    a[[7, 2_097_152]] = [np.inf, -np.inf]
    s = stats(a)
    finite = a[np.isfinite(a)]
    assert (s["nan"], s["inf"]) == (3, 2)
    assert s["min"] == float(finite.min()) and s["max"] == float(finite.max())
    assert s["mean"] == pytest.approx(float(finite.astype(np.float64).mean()), rel=1e-9, abs=1e-12)
    ints = rng.integers(0, 200, 3_000_017, dtype=np.uint8)
    si = stats(ints)
    assert (si["min"], si["max"]) == (int(ints.min()), int(ints.max()))
    assert si["mean"] == pytest.approx(float(ints.astype(np.float64).mean()), rel=1e-12)
    assert stats(np.array([True, False, True]))["mean"] == pytest.approx(2 / 3)

    b = a.copy()
    assert compare_binding(a, b, 0, 0, equal_nan=True)["ok"]
    b[2_500_000] += 1.0  # in the third slice
    res = compare_binding(a, b, 1e-6, 0, equal_nan=True)
    assert res["mismatches"] == 1 and res["first_index"] == 2_500_000
    assert not res["ok"] and res["max_abs"] == pytest.approx(1.0, rel=1e-6)
    c = ints.copy()
    c[-1] ^= 1
    res = compare_binding(ints, c, 0, 0)
    assert not res["ok"] and res["max_abs"] == 1.0


# ---------------------------------------------------------------------------
# Errors: clear message, non-zero exit, nothing written
# ---------------------------------------------------------------------------


def _assert_fails(result, exit_code, *words, out=None):
    assert result.exit_code == exit_code, (result.exit_code, result.stdout, result.stderr)
    assert "error:" in result.stderr
    for w in words:
        assert w in result.stderr, (w, result.stderr)
    assert "Traceback" not in result.stderr
    if out is not None:
        assert not out.exists(), "nothing may be written on error"
        assert not list(out.parent.glob(f".{out.name}.*")), "no temporary file left"


def test_error_device_mismatch(tmp_path):
    out = tmp_path / "out.npz"
    r = invoke(rc.wrpkit_capture(PROGRAMS[0]), "--device", "cuda:0", "--output", out)
    _assert_fails(r, WrpDeviceError.exit_code, "captured for CPU", "cuda:0", out=out)


def test_error_device_type_edited(tmp_path):
    def edit(prog):
        prog.device_type = 0
        prog.target_arch = 86

    dst = rc.rewrite_capture(rc.wrpkit_capture(PROGRAMS[0]), tmp_path / "f", edit)
    out = tmp_path / "out.npz"
    r = invoke(dst, "--output", out)
    assert r.exit_code != 0 and "error:" in r.stderr and not out.exists()


def test_error_version_mismatch(tmp_path):
    dst = rc.rewrite_capture(rc.wrpkit_capture(PROGRAMS[0]), tmp_path / "f", lambda p: setattr(p, "warp_version", "1.18.2"))
    out = tmp_path / "out.npz"
    r = invoke(dst, "--output", out)
    _assert_fails(r, WrpVersionError.exit_code, "1.18.2", wp.config.version, "recapture", out=out)


@pytest.mark.parametrize("how", ["missing", "empty", "no_dir"])
def test_error_module_files(tmp_path, how):
    dst = rc.copy_capture(rc.wrpkit_capture(_kernel_program()), tmp_path / "f")
    mdir = dst.with_name(dst.stem + "_modules")
    victim = sorted(mdir.iterdir())[0]
    if how == "missing":
        victim.unlink()
    elif how == "empty":
        victim.write_bytes(b"")
    else:
        import shutil

        shutil.rmtree(mdir)
    out = tmp_path / "out.npz"
    r = invoke(dst, "--output", out)
    _assert_fails(r, WrpModuleError.exit_code, victim.name, "missing" if how != "empty" else "empty", out=out)


def test_error_input_size(tmp_path):
    name = _kernel_program()
    inputs = rc.fresh_inputs(name)
    b, v = next(iter(inputs.items()))
    inputs[b] = np.concatenate([v.reshape(-1), v.reshape(-1)[:1]])
    out = tmp_path / "out.npz"
    r = invoke(rc.wrpkit_capture(name), "--inputs", write_npz(tmp_path / "in.npz", **inputs), "--output", out)
    _assert_fails(r, WrpBindingError.exit_code, repr(b), "shape", out=out)  # the file records b's shape


def test_error_input_dtype(tmp_path):
    name = _kernel_program()
    inputs = rc.fresh_inputs(name)
    b = next(n for n, v in inputs.items() if v.dtype != np.uint8)
    v = inputs[b]
    bad = np.frombuffer(v.tobytes(), dtype=np.uint8 if v.dtype != np.uint8 else np.int8)
    out = tmp_path / "out.npz"
    r = invoke(rc.wrpkit_capture(name), "--input", f"{b}={_save(tmp_path / 'x.npy', bad)}", "--output", out)
    _assert_fails(r, WrpBindingError.exit_code, "dtype", repr(b), out=out)


def _save(path, arr):
    np.save(path, arr)
    return path


def test_error_unknown_binding(tmp_path):
    name = _kernel_program()
    out = tmp_path / "out.npz"
    r = invoke(rc.wrpkit_capture(name), "--inputs", write_npz(tmp_path / "in.npz", nope=np.zeros(3)), "--output",
               out)
    known = rc.programs.PROGRAMS[name].bindings[0]
    _assert_fails(r, WrpBindingError.exit_code, "unknown binding 'nope'", repr(known), out=out)
    r = invoke(rc.wrpkit_capture(name), "--check", write_npz(tmp_path / "g.npz", nope=np.zeros(3)), "--output", out)
    _assert_fails(r, WrpBindingError.exit_code, "unknown binding 'nope'", out=out)


@pytest.mark.parametrize("what", ["npz", "npy", "pickle", "missing", "npy_is_npz", "bad_item"])
def test_error_bad_input_files(tmp_path, what):
    name = _kernel_program()
    b = rc.programs.PROGRAMS[name].inputs[0]
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"this is not numpy" * 5)
    out = tmp_path / "out.npz"
    if what == "npz":
        args = ["--inputs", bad]
    elif what == "npy":
        args = ["--input", f"{b}={bad}"]
    elif what == "pickle":
        p = tmp_path / "obj.npy"
        np.save(p, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        args = ["--input", f"{b}={p}"]
    elif what == "missing":
        args = ["--inputs", tmp_path / "nope.npz"]
    elif what == "npy_is_npz":
        args = ["--input", f"{b}={write_npz(tmp_path / 'z.npz', a=np.zeros(2))}"]
    else:
        args = ["--input", "no-equals-sign"]
    r = invoke(rc.wrpkit_capture(name), *args, "--output", out)
    _assert_fails(r, WrpBindingError.exit_code, out=out)


def test_error_bad_golden(tmp_path):
    bad = tmp_path / "g.npz"
    bad.write_bytes(b"PK\x03\x04 broken")
    out = tmp_path / "out.npz"
    r = invoke(rc.wrpkit_capture(PROGRAMS[0]), "--check", bad, "--output", out)
    _assert_fails(r, WrpBindingError.exit_code, "golden", out=out)


def test_error_not_a_capture_and_missing_file(tmp_path):
    bad = tmp_path / "x.wrp"
    bad.write_bytes(b"garbage" * 30)
    out = tmp_path / "out.npz"
    r = invoke(bad, "--output", out)
    assert r.exit_code == 3 and "error:" in r.stderr and not out.exists()
    r = invoke(tmp_path / "missing.wrp", "--output", out)
    assert r.exit_code == 2 and "does not exist" in r.stderr and not out.exists()  # a typed path: usage error


def test_output_dir_missing_is_created(tmp_path):
    """Every command creates the missing parent folders of its outputs, as `wrp convert` does (issue 23)."""
    r = invoke(rc.wrpkit_capture(PROGRAMS[0]), "--output", tmp_path / "no" / "out.npz")
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "no" / "out.npz") as z:
        assert z.files


def test_output_never_overwrites_an_input(tmp_path):
    name = _kernel_program()
    inputs = write_npz(tmp_path / "in.npz", **rc.fresh_inputs(name))
    before = inputs.read_bytes()
    r = invoke(rc.wrpkit_capture(name), "--inputs", inputs, "--output", inputs)
    assert r.exit_code != 0 and inputs.read_bytes() == before


def test_errors_through_the_wrp_group(tmp_path):
    """The lead's `wrp` group gives the same exit codes and messages."""
    from wrpkit.cli import main

    dst = rc.rewrite_capture(rc.wrpkit_capture(PROGRAMS[0]), tmp_path / "f", lambda p: setattr(p, "warp_version", "0.0.1"))
    r = CliRunner().invoke(main, ["replay", str(dst)])
    assert r.exit_code == WrpVersionError.exit_code and "0.0.1" in r.stderr and "recapture" in r.stderr


def test_output_is_written_atomically_as_npz(tmp_path):
    name = _kernel_program()
    out = tmp_path / "out.npz"
    out.write_bytes(b"old")
    r = invoke(rc.wrpkit_capture(name), "--output", out)
    assert r.exit_code == 0
    data = out.read_bytes()
    assert data[:2] == b"PK"
    assert set(read_npz(io.BytesIO(data))) == set(rc.programs.PROGRAMS[name].bindings)
    assert [p.name for p in tmp_path.iterdir()] == ["out.npz"]


# ---------------------------------------------------------------------------
# Native engine
# ---------------------------------------------------------------------------


def _native_available() -> bool:
    try:
        native_paths().require_replayer()
        return True
    except Exception:  # noqa: BLE001
        return False


@pytest.mark.skipif(_native_available(), reason="wrp-replay is installed")
def test_native_engine_missing_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("WRP_REPLAY", raising=False)
    out = tmp_path / "out.npz"
    r = invoke(rc.wrpkit_capture(PROGRAMS[0]), "--engine", "native", "--output", out)
    _assert_fails(r, 1, "wrp-replay", "not built or installed", "pip install .", out=out)


@pytest.mark.skipif(not _native_available(), reason="wrp-replay is not built")
@pytest.mark.parametrize("name", PROGRAMS)
def test_native_engine_matches_python(name, tmp_path):
    inputs = write_npz(tmp_path / "in.npz", **rc.fresh_inputs(name))
    out = tmp_path / "out.npz"
    r = invoke(rc.wrpkit_capture(name), "--engine", "native", "--inputs", inputs, "--output", out, "--json")
    assert r.exit_code == 0, r.stderr
    got = read_npz(out)
    for b, v in rc.expected(name).items():
        assert rc.same_bytes(got[b], v), (name, b)


@pytest.mark.skipif(not _native_available(), reason="wrp-replay is not built")
@pytest.mark.parametrize("name", SAMPLES)
def test_native_engine_sample_check(name, tmp_path):
    wrp, inputs, expected = rc.sample_capture(name)
    out = tmp_path / "out.npz"
    r = invoke(wrp, "--engine", "native", "--inputs", inputs, "--check", expected, "--output", out, "--repeat", 2,
               "--warmup", 1, "--json")
    # repeat 2 replays twice: in-place bindings may drift from the one-step golden; the run itself must work
    assert r.exit_code in (0, 1), r.stderr
    rep = json.loads(r.stdout)
    assert rep["engine"] == "native" and rep["timings"]["host_ms"]["count"] == 2
    r = invoke(wrp, "--engine", "native", "--inputs", inputs, "--check", expected, "--rtol", 0, "--atol", 0)
    assert r.exit_code == 0, r.stdout + r.stderr


@pytest.mark.skipif(not _native_available(), reason="wrp-replay is not built")
def test_native_engine_errors_are_checked_first(tmp_path):
    dst = rc.rewrite_capture(rc.wrpkit_capture(PROGRAMS[0]), tmp_path / "f", lambda p: setattr(p, "warp_version", "1.0.0"))
    out = tmp_path / "out.npz"
    r = invoke(dst, "--engine", "native", "--output", out)
    _assert_fails(r, WrpVersionError.exit_code, "1.0.0", "recapture", out=out)


# ---------------------------------------------------------------------------
# --engine auto (the default): the native engine wherever the options allow it
# ---------------------------------------------------------------------------


@pytest.mark.skipif(not _native_available(), reason="wrp-replay is not built")
def test_default_engine_is_native_and_says_so(tmp_path):
    name = _kernel_program()
    inputs = write_npz(tmp_path / "in.npz", **rc.fresh_inputs(name))
    out = {e: tmp_path / f"{e}.npz" for e in ("default", "python")}
    r = invoke(rc.wrpkit_capture(name), "--inputs", inputs, "--output", out["default"], "--json")
    assert r.exit_code == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["engine"] == "native", rep
    assert "--engine auto" in rep["engine_reason"] and "no option needs the python engine" in rep["engine_reason"]
    # the text report names the engine and the reason on a line of its own
    r = invoke(rc.wrpkit_capture(name), "--inputs", inputs)
    assert r.exit_code == 0, r.stderr
    assert "native engine" in r.stdout and "engine: native (--engine auto: no option needs" in r.stdout
    # --engine python still forces the python engine, and the outputs are the same bytes
    r = invoke(rc.wrpkit_capture(name), "--inputs", inputs, "--output", out["python"], "--engine", "python", "--json")
    assert r.exit_code == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["engine"] == "python" and rep["engine_reason"] == "--engine python"
    a, b = read_npz(out["default"]), read_npz(out["python"])
    assert set(a) == set(b) and all(rc.same_bytes(a[k], b[k]) for k in a)
    r = invoke(rc.wrpkit_capture(name), "--engine", "native", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["engine_reason"] == "--engine native"


def test_auto_picks_python_where_an_option_needs_it():
    """A CUDA device: only the python engine times replays on the device (device_ms); wrp-replay times the host."""
    from wrpkit.run.replay.engines import choose_engine

    for device in ("cuda", "cuda:0", None):
        c = choose_engine("auto", device=device, replayer_found=True)
        assert c.name == "python" and c.auto and "needs the python engine" in c.reason and "device" in c.reason
    assert choose_engine("auto", device="cpu", replayer_found=True).name == "native"
    c = choose_engine("auto", device="cpu", needs_python="--foo: only the python engine", replayer_found=True)
    assert (c.name, c.reason) == ("python", "--foo: only the python engine")
    for forced in ("python", "native"):
        for device in ("cpu", "cuda:0"):
            c = choose_engine(forced, device=device, replayer_found=False)
            assert (c.name, c.reason, c.auto) == (forced, f"--engine {forced}", False)
    with pytest.raises(Exception, match="no engine"):
        choose_engine("fast")


@pytest.mark.cuda
@pytest.mark.skipif(wp.get_cuda_device_count() == 0, reason="needs a CUDA device")
def test_auto_on_cuda_picks_python_and_says_why(tmp_path):
    name = _kernel_program()
    r = invoke(rc.wrpkit_capture(name), "--device", "cuda:0", "--json")
    if r.exit_code == WrpDeviceError.exit_code:
        pytest.skip("the capture is a CPU one")
    rep = json.loads(r.stdout)
    assert rep["engine"] == "python" and "--device cuda:0 needs the python engine" in rep["engine_reason"]


def test_auto_falls_back_to_python_without_the_native_replayer(tmp_path, monkeypatch):
    """wrp-replay not found anywhere (not $WRP_REPLAY, not beside Python, not on PATH, not in the package):
    the default replays with the python engine and says so; --engine native is the clear error it was."""
    import wrpkit.run.replay.engines as engines

    # $WRP_REPLAY and PATH point nowhere; the copy beside this Python (the venv's) cannot be moved, so the
    # one search (_find_replayer, which native_paths() and choose_engine() use) is told it found nothing
    monkeypatch.setenv("WRP_REPLAY", str(tmp_path / "nowhere" / "wrp-replay"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(engines, "_find_replayer", lambda: None)
    assert engines.native_paths().replayer is None
    name = _kernel_program()
    inputs = write_npz(tmp_path / "in.npz", **rc.fresh_inputs(name))
    out = tmp_path / "out.npz"
    r = invoke(rc.wrpkit_capture(name), "--inputs", inputs, "--output", out, "--json")
    assert r.exit_code == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["engine"] == "python" and "wrp-replay is not built or installed" in rep["engine_reason"]
    assert "python engine replayed instead" in rep["engine_reason"]
    got = read_npz(out)
    for b, v in rc.expected(name).items():
        assert rc.same_bytes(got[b], v), (name, b)
    r = invoke(rc.wrpkit_capture(name), "--inputs", inputs)
    assert r.exit_code == 0 and "engine: python (--engine auto: wrp-replay is not built" in r.stdout.replace("\n", " ")
    r = invoke(rc.wrpkit_capture(name), "--engine", "native", "--output", tmp_path / "n.npz")
    _assert_fails(r, 1, "wrp-replay", "not built or installed", out=tmp_path / "n.npz")


@pytest.mark.skipif(not _native_available(), reason="wrp-replay is not built")
def test_auto_falls_back_to_python_when_the_native_replayer_cannot_run(tmp_path, monkeypatch):
    """wrp-replay found but unable to load Warp's runtime (its warp.so missing): the default falls back to the
    python engine, says why, and writes the same bytes; --engine native still fails as before."""
    monkeypatch.setenv("WRP_WARP_LIB_DIR", str(tmp_path / "no-warp"))
    name = _kernel_program()
    inputs = write_npz(tmp_path / "in.npz", **rc.fresh_inputs(name))
    for extra in ([], ["--inputs", inputs, "--output", tmp_path / "out.npz"]):  # prestarted, and started later
        r = invoke(rc.wrpkit_capture(name), *extra, "--json")
        assert r.exit_code == 0, r.stderr
        rep = json.loads(r.stdout)
        assert rep["engine"] == "python", rep
        why = rep["engine_reason"]
        assert "the native engine could not run" in why and "Warp runtime not found" in why
    got = read_npz(tmp_path / "out.npz")
    for b, v in rc.expected(name).items():
        assert rc.same_bytes(got[b], v), (name, b)
    r = invoke(rc.wrpkit_capture(name), "--engine", "native")
    assert r.exit_code == 1 and "Warp runtime not found" in r.stderr


# ---------------------------------------------------------------------------
# CUDA (skipped without a GPU)
# ---------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.skipif(wp.get_cuda_device_count() == 0, reason="needs a CUDA device")
def test_cuda_replay_reports_device_time(tmp_path):
    import wrpkit

    @wp.kernel
    def k_inc(x: wp.array(dtype=wp.float32)):
        i = wp.tid()
        x[i] = x[i] + 1.0

    x = wp.zeros(1024, dtype=wp.float32, device="cuda:0")
    wp.load_module(device="cuda:0")
    with wrpkit.capture(device="cuda:0") as rec:
        wp.launch(k_inc, dim=1024, inputs=[x], device="cuda:0")
    path = rec.save(tmp_path / "inc", inputs={"x": x}, outputs={"x": x})
    out = tmp_path / "out.npz"
    r = invoke(path, "--device", "cuda:0", "--repeat", 4, "--json", "--output", out)
    assert r.exit_code == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["timings"]["device_ms"]["count"] == 4
    assert np.array_equal(read_npz(out)["x"], np.full(1024, 4, np.float32))
    r = invoke(path, "--device", "cpu")
    _assert_fails(r, WrpDeviceError.exit_code, "captured for CUDA")


# ---------------------------------------------------------------------------
# --timeout
# ---------------------------------------------------------------------------

TIMEOUT_MESSAGE = "the replay did not finish within 1 s (a WHILE loop that does not end?); no output was written"


def _wrp(*args, cwd, env=None, timeout=120):
    """``python -m wrpkit.cli ARGS`` in a fresh process (``--timeout`` ends its process: no CliRunner)."""
    t0 = time.monotonic()
    p = wrp_module(*args, env=env, cwd=cwd, timeout=timeout)
    return p, time.monotonic() - t0


def endless_capture(dst_dir):
    """A valid capture whose replay never ends in practice (see ``replay_cases.endless_while``)."""
    return rc.rewrite_capture(rc.stock_capture("capture_while"), dst_dir, rc.endless_while)


def test_timeout_stops_an_endless_while(tmp_path):
    path = endless_capture(tmp_path / "f")
    p, _ = _wrp("validate", path, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr  # structurally valid: only a timeout can stop it
    work = tmp_path / "o"
    work.mkdir()
    p, wall = _wrp("replay", path, "--timeout", 1, "--output", "out.npz", cwd=work)
    assert p.returncode == 124, (p.returncode, p.stdout, p.stderr)
    assert wall < 30, wall
    assert f"error: {TIMEOUT_MESSAGE}" in p.stderr and "hint:" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert list(work.iterdir()) == [], "no output and no temporary file may be left"


@pytest.mark.slow  # six commands that each wait out a 1.5 s timeout
def test_one_deadline_says_the_same_words_on_every_route(tmp_path):
    """A --timeout is one deadline, whichever process waits on it: the Python engine's child, wrp-replay,
    a trace's child, a Program's replay child.  Each names the seconds the user gave (not what was left
    when the wait began) and, for several replays, their count; each ends within a few seconds of it."""
    import wrpkit  # noqa: PLC0415
    from wrpkit.errors import WrpTimeoutError, timeout_hint, timeout_message  # noqa: PLC0415

    path = endless_capture(tmp_path / "f")
    for engine in ("python", "native"):
        for repeat, replays in (("1", 1), ("2", 3)):
            p, wall = _wrp("replay", path, "--timeout", 1.5, "--engine", engine, "--repeat", repeat,
                           "--warmup", "1" if replays == 3 else "0", cwd=tmp_path)
            assert p.returncode == 124, (engine, p.returncode, p.stderr)
            text = " ".join(p.stderr.split())
            assert f"error: {timeout_message(1.5, replays)}" in text, (engine, replays, p.stderr)
            assert f"hint: {timeout_hint(replays)}" in text, (engine, replays, p.stderr)
            assert wall < 30, (engine, wall)
    p, _ = _wrp("trace", path, "--timeout", 1.5, cwd=tmp_path)
    assert p.returncode == 124 and timeout_message(1.5) in " ".join(p.stderr.split()), p.stderr
    prog = wrpkit.load(path, isolate=True)
    try:
        with pytest.raises(WrpTimeoutError) as e:
            prog.run(timeout=1.5, repeat=2)
        assert e.value.message == timeout_message(1.5, 2) and e.value.hint == timeout_hint(2)
    finally:
        prog.close()


def test_timeout_does_not_disturb_a_normal_replay(tmp_path):
    name = "capture_while" if "capture_while" in PROGRAMS else _kernel_program()
    wrp = rc.wrpkit_capture(name)
    r = invoke(wrp, "--output", tmp_path / "plain.npz")
    assert r.exit_code == 0, r.stderr
    r = invoke(wrp, "--timeout", 30, "--output", tmp_path / "timed.npz")
    assert r.exit_code == 0, r.stderr
    plain, timed = read_npz(tmp_path / "plain.npz"), read_npz(tmp_path / "timed.npz")
    assert plain.keys() == timed.keys()
    for b in plain:
        assert rc.same_bytes(plain[b], timed[b]), b
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.npz", "timed.npz"]


@pytest.mark.parametrize("value", ["0", "-1", "abc", "nan", "inf", "0.0"])
def test_timeout_must_be_a_positive_number(value, tmp_path):
    out = tmp_path / "out.npz"
    r = CliRunner().invoke(replay, [str(rc.wrpkit_capture(PROGRAMS[0])), "--timeout", value, "--output", str(out)])
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert "--timeout" in r.stderr and not out.exists()


# ---------------------------------------------------------------------------
# The library function under the command
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_replay_file_returns_a_report_and_prints_nothing(tmp_path, capfd):
    """`wrpkit.run.replay.replay_file.replay_file` is `wrp replay` without printing: the same report, as data."""
    from wrpkit.run.replay.replay_file import ReplayReport, replay_file  # noqa: PLC0415

    name = _kernel_program()
    path = rc.wrpkit_capture(name)
    inputs = write_npz(tmp_path / "in.npz", **rc.fresh_inputs(name))
    first = replay_file(path, inputs_npz=inputs, output=tmp_path / "out.npz", repeat=2)
    assert isinstance(first, ReplayReport) and first.ok and first.exit_code == 0 and first.check is None
    assert first.timings["host_ms"]["count"] == 2 and first.output == str(tmp_path / "out.npz")
    golden = read_npz(tmp_path / "out.npz")
    wrong = {k: v.copy() for k, v in golden.items()}
    target = next(k for k, v in wrong.items() if v.size and v.dtype.kind == "f")
    wrong[target].reshape(-1)[0] += 1.0
    write_npz(tmp_path / "wrong.npz", **wrong)
    bad = replay_file(path, inputs_npz=inputs, golden=tmp_path / "wrong.npz")
    assert not bad.ok and bad.exit_code == 1 and bad.mismatched() == [target]
    assert bad.check["bindings"][target]["first_index"] == 0
    good = replay_file(path, inputs_npz=inputs, golden=tmp_path / "out.npz")
    assert good.ok and good.mismatched() == []
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # the library never prints
    # The command prints this same report.
    r = invoke(path, "--inputs", inputs, "--check", tmp_path / "wrong.npz", "--json")
    assert r.exit_code == 1
    rep = json.loads(r.stdout)
    assert list(rep) == list(bad.to_json())
    assert rep["check"]["bindings"] == bad.to_json()["check"]["bindings"]


def _children_started_here() -> list:
    """``(pid, argv)`` of this process's live children that are replay children or wrp-replay."""
    from proc_helpers import processes  # noqa: PLC0415

    return [(pid, argv) for pid, ppid, argv, _ in
            processes(lambda argv: b"wrpkit.run.contain.child" in argv or any(a.endswith(b"wrp-replay") for a in argv))
            if ppid == os.getpid()]


@pytest.mark.parametrize("engine", ["python", "native"])
def test_a_replay_that_fails_early_leaves_no_child_behind(engine, tmp_path):
    """The child each engine starts ahead (before the file is read) ends with a command that failed before
    it was used: a usage error, a refused budget, a bad golden. It used to outlive the command in-process
    (a caller of the CLI's main(), a test runner) and hold Warp and a core."""
    if engine == "native":
        try:
            native_paths().require_replayer()
        except Exception as e:  # noqa: BLE001
            pytest.skip(f"wrp-replay is not installed: {e}")
    name = _kernel_program()
    cap = rc.wrpkit_capture(name)
    bad_golden = tmp_path / "golden.npz"
    bad_golden.write_bytes(b"not a zip")
    for extra in (["--dtype", "x=vec7q"], ["--max-memory", "1"], ["--check", bad_golden], []):
        r = invoke(cap, "--engine", engine, *extra)
        assert (r.exit_code == 0) is (not extra), (extra, r.output)
        deadline = time.monotonic() + 5
        while _children_started_here() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _children_started_here() == [], (extra, _children_started_here())


# ---------------------------------------------------------------------------
# --output NAME=Y.npy: one binding, as --input NAME=X.npy reads one
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["python", "native"])
def test_output_name_equals_path_writes_that_binding_alone(tmp_path, engine):
    if engine == "native" and native_paths().replayer is None:
        pytest.skip("wrp-replay is not installed")
    name = _kernel_program()
    path = rc.wrpkit_capture(name)
    inputs = write_npz(tmp_path / "in.npz", **rc.fresh_inputs(name))
    out = tmp_path / "all.npz"
    first = next(iter(read_npz(inputs)))
    r = invoke(path, "--inputs", inputs, "--output", out, "--output", f"{first}=" + str(tmp_path / "one.npy"),
               "--engine", engine, "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["npy_outputs"] == {first: str(tmp_path / "one.npy")}
    one = np.load(tmp_path / "one.npy")
    whole = read_npz(out)[first]
    assert one.dtype == whole.dtype and one.shape == whole.shape and one.tobytes() == whole.tobytes()
    # A value of neither form, a second .npz and an unknown binding are usage errors; nothing is written.
    for bad in (["--output", tmp_path / "y.npy"], ["--output", out, "--output", tmp_path / "b.npz"],
                ["--output", f"nosuch={tmp_path / 'n.npy'}"]):
        r = invoke(path, *bad, "--engine", engine)
        assert r.exit_code == 2, (bad, r.stderr)
    assert not (tmp_path / "y.npy").exists() and not (tmp_path / "n.npy").exists()
