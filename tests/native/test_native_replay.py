"""wrp-replay replays compared bit for bit with stock ``wp.capture_load`` +
``wp.capture_launch`` of the same file, run with ``env -i PATH=/usr/bin:/bin``
to show that no Python is involved; its inputs, options and Warp errors.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import warp as wp

from native_helpers import (
    CLEAN_ENV,
    PROGRAMS,
    WARP_BIN,
    _relocation_to_missing_region,
    copy_capture,
    metadata_fields,
    npy_input,
    run,
)

pytestmark = pytest.mark.slow  # every test here builds native/ with CMake first


def stock_replay(path: Path, inputs: dict, names: list, device="cpu") -> dict:
    """Replay with stock wp.capture_load + wp.capture_launch; raw bytes of each binding."""
    import ctypes  # noqa: PLC0415

    graph = wp.capture_load(os.fspath(path), device=device)
    for name, arr in inputs.items():
        src = np.ascontiguousarray(arr)
        ptr = graph.get_param_ptr(name)
        assert graph.params[name]["size"] == src.nbytes
        ctypes.memmove(ptr, src.ctypes.data, src.nbytes)
    wp.capture_launch(graph)
    wp.synchronize_device(device)
    return {n: ctypes.string_at(graph.get_param_ptr(n), graph.params[n]["size"]) for n in names}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_replay_matches_stock_warp(native, caps, tmp_path, name):
    prog = PROGRAMS[name]
    path = caps[name]
    fresh = prog.make_arrays("cpu")
    inputs = {n: npy_input(fresh[n]) for n in prog.inputs}
    args = [path, "--device", "cpu", "--warp-lib-dir", WARP_BIN, "--json"]
    for n, a in inputs.items():
        np.save(tmp_path / f"in_{n}.npy", a)
        args += ["--input", f"{n}={tmp_path / f'in_{n}.npy'}"]
    for n in prog.bindings:
        args += ["--output", f"{n}={tmp_path / f'out_{n}.npy'}"]
    res = run(native.exe, *args, check_rc=0)  # env -i PATH=/usr/bin:/bin
    report = json.loads(res.stdout)
    assert {b["name"] for b in report["bindings"]} == set(prog.bindings)

    expected = stock_replay(path, {n: a.view(np.uint8).reshape(-1) for n, a in inputs.items()}, prog.bindings)
    for n in prog.bindings:
        got = np.load(tmp_path / f"out_{n}.npy")
        assert got.dtype == np.uint8 and got.tobytes() == expected[n], f"binding {n} differs from stock Warp"


def test_inputs_repeat_warmup_and_json(native, caps, tmp_path):
    path = caps["local_saxpb"]
    x = np.linspace(-2, 2, 16, dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    res = run(native.exe, path, "--input", f"x={tmp_path / 'x.npy'}", "--output", f"y={tmp_path / 'y.npy'}",
              "--repeat", "5", "--warmup", "2", "--json", "--warp-lib-dir", WARP_BIN, check_rc=0)
    report = json.loads(res.stdout)
    t = report["timings"]
    assert t["repeat"] == 5 and t["warmup"] == 2 and t["count"] == 5 and "replays_ms" not in t
    assert t["min_ms"] <= t["median_ms"] <= t["max_ms"]
    assert report["outputs"] == [{"name": "y", "path": str(tmp_path / "y.npy"), "dtype": "|u1", "shape": [64]}]
    y = np.load(tmp_path / "y.npy").view(np.float32)
    np.testing.assert_array_equal(y, x * np.float32(3.0) + np.arange(16, dtype=np.float32))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left behind

    text = run(native.exe, path, "--repeat", "3", "--output", f"y={tmp_path / 'y2.npy'}", "--warp-lib-dir",
               WARP_BIN, check_rc=0).stdout
    assert "3 replays after" in text and "median" in text and "output y" in text and "(64,)" in text


def test_bad_inputs_are_usage_errors(native, caps, tmp_path):
    path = caps["local_saxpb"]
    cases = {
        "short": np.zeros(15, np.float32),
        "fortran": np.asfortranarray(np.zeros((4, 4), np.float32)),
        "object": np.array([None] * 8, dtype=object),
        "bigendian": np.zeros(16, ">f4"),
    }
    for label, arr in cases.items():
        np.save(tmp_path / f"{label}.npy", arr, allow_pickle=True)
        res = run(native.exe, path, "--input", f"x={tmp_path / label}.npy", "--warp-lib-dir", WARP_BIN)
        assert res.returncode == 2, (label, res.stderr)
        assert f"{label}.npy" in res.stderr
    (tmp_path / "garbage.npy").write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'}")
    res = run(native.exe, path, "--input", f"x={tmp_path / 'garbage.npy'}", "--warp-lib-dir", WARP_BIN)
    assert res.returncode == 2
    res = run(native.exe, path, "--input", f"nope={tmp_path / 'short.npy'}", "--warp-lib-dir", WARP_BIN)
    assert res.returncode == 2 and "no binding named \"nope\"" in res.stderr and "x, y" in res.stderr
    # Fortran order is fine when it is also C order (one non-trivial dimension).
    np.save(tmp_path / "col.npy", np.asfortranarray(np.ones((16, 1), np.float32)))
    run(native.exe, path, "--input", f"x={tmp_path / 'col.npy'}", "--warp-lib-dir", WARP_BIN, check_rc=0)


def npy_bytes(arr: np.ndarray, version: int) -> bytes:
    """An .npy file of format `version` (1, 2 or 3) written by hand."""
    header = f"{{'descr': '{arr.dtype.str}', 'fortran_order': False, 'shape': {arr.shape}, }}".encode()
    size = 4 if version > 1 else 2
    pad = (-(10 + (size - 2) + len(header) + 1)) % 64
    header += b" " * pad + b"\n"
    return b"\x93NUMPY" + bytes([version, 0]) + len(header).to_bytes(size, "little") + header + arr.tobytes()


def test_npy_format_versions(native, caps, tmp_path):
    path = caps["local_saxpb"]
    x = np.arange(16, dtype=np.float32) - 4
    for version in (1, 2, 3):
        f = tmp_path / f"x{version}.npy"
        f.write_bytes(npy_bytes(x, version))
        np.testing.assert_array_equal(np.load(f), x)  # the hand-written file is a valid .npy
        run(native.exe, path, "--input", f"x={f}", "--output", f"y={tmp_path / f'y{version}.npy'}",
            "--warp-lib-dir", WARP_BIN, check_rc=0)
        y = np.load(tmp_path / f"y{version}.npy").view(np.float32)
        np.testing.assert_array_equal(y, x * np.float32(3.0) + np.arange(16, dtype=np.float32))
    bad = bytearray(npy_bytes(x, 1))
    bad[6] = 4  # format 4.0 does not exist
    (tmp_path / "v4.npy").write_bytes(bytes(bad))
    res = run(native.exe, path, "--input", f"x={tmp_path / 'v4.npy'}", "--warp-lib-dir", WARP_BIN, check_rc=2)
    assert "format version 4.0" in res.stderr


def test_skip_checks_skips_only_semantic_checks(native, caps, tmp_path):
    src, path = _relocation_to_missing_region(caps, tmp_path / "s")
    run(native.exe, path, "--list", check_rc=3)
    run(native.exe, path, "--list", "--skip-checks", check_rc=0)
    truncated = copy_capture(src, tmp_path / "t", data=path.read_bytes()[:-3])
    run(native.exe, truncated, "--list", "--skip-checks", check_rc=3)  # structure is always checked


def test_list_needs_no_warp(native, caps):
    res = run(native.exe, caps["local_norms"], "--list", "--json", env={"PATH": "/nonexistent"}, check_rc=0)
    report = json.loads(res.stdout)
    assert [(b["name"], b["size"]) for b in report["bindings"]] == [("v", 72), ("n", 24)]


def test_warp_location(native, caps, tmp_path):
    path = caps["local_saxpb"]
    # With no help at all it finds the warp/bin of the environment it was built for (recorded at build
    # time), wherever the binary is: here a build directory that no relative path leads from.
    run(native.exe, path, check_rc=0)
    run(native.exe, path, env={**CLEAN_ENV, "WRP_WARP_LIB_DIR": str(WARP_BIN)}, check_rc=0)
    res = run(native.exe, path, env={**CLEAN_ENV, "WRP_WARP_LIB_DIR": str(tmp_path)}, check_rc=1)
    assert str(tmp_path) in res.stderr and "--warp-lib-dir" in res.stderr
    # An installed layout: <prefix>/bin/wrp-replay finds
    # <prefix>/lib/pythonX.Y/site-packages/warp/bin on its own.
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    shutil.copy2(native.exe, prefix / "bin" / "wrp-replay")
    site = prefix / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    site.mkdir(parents=True)
    os.symlink(WARP_BIN.parent, site / "warp")
    run(prefix / "bin" / "wrp-replay", path, env={"PATH": str(tmp_path)}, check_rc=0)


def test_version_and_device_mismatch(native, caps, tmp_path):
    buf = bytearray(caps["local_saxpb"].read_bytes())
    f = metadata_fields(buf)
    installed = wp.__version__.encode()
    assert buf[f["version"]:f["version"] + len(installed)] == installed
    other = b"9.99.9"[: len(installed)].ljust(len(installed), b"9")
    buf[f["version"]:f["version"] + len(installed)] = other
    path = copy_capture(caps["local_saxpb"], tmp_path / "v", data=bytes(buf))
    res = run(native.exe, path, "--warp-lib-dir", WARP_BIN, check_rc=3)
    assert f"recorded with Warp {other.decode()}" in res.stderr
    assert f"recapture with {wp.__version__}" in res.stderr
    res = run(native.exe, caps["local_saxpb"], "--device", "cuda:0", "--warp-lib-dir", WARP_BIN, check_rc=2)
    assert "captured for the CPU" in res.stderr


def test_warp_failures_carry_warps_own_message(native, caps, tmp_path):
    """A module that needs a symbol the JIT cannot resolve: Warp's message is in ours."""
    for name, path in caps.items():
        module = next(path.with_name(path.stem + "_modules").iterdir())
        raw = module.read_bytes()
        if b"sinf\0" in raw or b"sqrtf\0" in raw:
            break
    else:
        pytest.skip("no capture whose module calls sinf or sqrtf")
    g = copy_capture(path, tmp_path / "jit")
    target = g.with_name("g_modules") / module.name
    target.write_bytes(raw.replace(b"sinf\0", b"sinq\0").replace(b"sqrtf\0", b"sqrtq\0"))
    res = run(native.exe, g, "--warp-lib-dir", WARP_BIN, check_rc=1)
    assert "warp-clang could not link kernel" in res.stderr
    assert "Symbols not found" in res.stderr and ("sinq" in res.stderr or "sqrtq" in res.stderr)


def _approved(exe, path, answer, *extra, close=True):
    """wrp-replay PATH --approve-fd N ...: ``answer`` written to N (then closed unless ``close`` is False)."""
    import subprocess  # noqa: PLC0415

    read_end, write_end = os.pipe()
    proc = subprocess.Popen([str(exe), str(path), "--json", "--warp-lib-dir", WARP_BIN, "--approve-fd",
                             str(read_end), *map(str, extra)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=CLEAN_ENV, pass_fds=(read_end,))
    os.close(read_end)
    try:
        if answer:
            os.write(write_end, answer)
        if close:
            os.close(write_end)
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"wrp-replay --approve-fd {extra} waited for an answer it did not need")
    finally:
        if not close:
            os.close(write_end)
    return proc.returncode, out, err


def test_approve_fd_waits_for_the_callers_go_ahead(native, caps):
    """--approve-fd: 'y' replays; end of file or any other answer withdraws before anything is allocated;
    --approve-above lets a file no larger go on without asking."""
    path = caps["local_saxpb"]
    rc, out, err = _approved(native.exe, path, b"y")
    assert rc == 0, err
    assert json.loads(out)["timings"]["count"] == 1
    for answer in (b"", b"n"):
        rc, out, err = _approved(native.exe, path, answer)
        assert rc == 1, (answer, out, err)
        msg = json.loads(out)["error"]
        assert "withdrew" in msg and "nothing was allocated" in msg, msg
    # the file declares a few bytes: nothing is read from the pipe (never written, never closed)
    rc, out, err = _approved(native.exe, path, b"", "--approve-above", "1M", close=False)
    assert rc == 0, err
    # --list validates only: it never asks
    rc, out, err = _approved(native.exe, path, b"", "--list", close=False)
    assert rc == 0, err
    res = run(native.exe, path, "--approve-above", "1M", check_rc=2)
    assert "--approve-above needs --approve-fd" in res.stderr


def test_outputs_that_are_devices_or_fifos_are_written_in_place(native, caps, tmp_path):
    """--output to /dev/full, /dev/null (also through a symbolic link) or a FIFO: the node stays what
    it is; a full device is exit 1 naming the path; a FIFO's reader gets a whole .npy."""
    import stat  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import threading  # noqa: PLC0415

    path = caps["local_saxpb"]
    link = tmp_path / "full"
    link.symlink_to("/dev/full")
    for dest in ("/dev/full", str(link)):
        res = run(native.exe, path, "--output", f"y={dest}", "--warp-lib-dir", WARP_BIN)
        assert res.returncode == 1 and f"cannot write {dest}: No space left on device" in res.stderr, res.stderr
        assert stat.S_ISCHR(os.stat(dest).st_mode) and link.is_symlink()
    run(native.exe, path, "--output", "y=/dev/null", "--warp-lib-dir", WARP_BIN, check_rc=0)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    fifo = tmp_path / "y.fifo"
    os.mkfifo(fifo)
    got = {}
    reader = threading.Thread(target=lambda: got.update(data=fifo.read_bytes()))
    reader.start()
    res = subprocess.run([str(native.exe), str(path), "--output", f"y={fifo}", "--warp-lib-dir", str(WARP_BIN)],
                         capture_output=True, text=True, timeout=120)
    reader.join(timeout=60)
    assert res.returncode == 0, res.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert np.load(__import__("io").BytesIO(got["data"])).nbytes == 64
