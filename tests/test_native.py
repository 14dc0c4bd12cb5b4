"""Tests of native/: libwrp_replay.so, its C API and the wrp-replay executable.

The project is built with CMake into a temporary directory once per session
(and once more with WRP_SANITIZE=ON for the AddressSanitizer test).  Captures
are made with stock Warp at test time (tests/programs.py's one capture
cache, and two small programs defined here), and every replay through
wrp-replay is compared bit for bit with stock ``wp.capture_load`` +
``wp.capture_launch`` of the same file.  Replays run with ``env -i
PATH=/usr/bin:/bin`` to show that no Python is involved.

Hostile files (truncated, bit-flipped, lying about lengths, odd module files,
not a regular file) must be refused with a clear message and exit status 3
(or 1), never a signal, crash or hang.

.wrpk bundles (made with ``python -m wrpkit.cli convert X.wrp X.wrpk``) are
read in place: the WRP1 image the library rebuilds from each is compared byte
for byte with the .wrp (test tool ``wrpk-unpack``), every replay with the
.wrp's, and tampering anywhere must give exit status 3 with an integrity
message naming the blob.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import warp as wp

sys.path.insert(0, os.path.dirname(__file__))

import parity_cases  # noqa: E402
from conftest import cmake_python_args  # noqa: E402
from wrpk_manifests import program_manifest, shared_if_bodies, shared_launch, wrap_manifest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WARP_BIN = Path(wp.__file__).resolve().parent / "bin"
CLEAN_ENV = {"PATH": "/usr/bin:/bin"}  # what `env -i PATH=/usr/bin:/bin` leaves

import programs  # noqa: E402 - the shared registry of real Warp programs (tests/programs.py)

PROGRAMS = dict(programs.PROGRAMS)

wp.init()


# ---------------------------------------------------------------------------
# Programs of this file (the typed-signature and CUDA tests need a known layout)
# ---------------------------------------------------------------------------


@wp.kernel
def k_saxpb(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32), a: wp.float32):
    i = wp.tid()
    y[i] = x[i] * a + float(i)


@wp.kernel
def k_vec_norms(v: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = wp.length(v[i])


@dataclass
class LocalProgram:
    name: str
    make_arrays: object
    step: object
    inputs: list
    outputs: list

    @property
    def bindings(self):
        return list(dict.fromkeys([*self.inputs, *self.outputs]))


def _saxpb_arrays(device):
    return {
        "x": wp.array(np.arange(16, dtype=np.float32) * 0.5, dtype=wp.float32, device=device),
        "y": wp.zeros(16, dtype=wp.float32, device=device),
    }


def _saxpb_step(a):
    wp.launch(k_saxpb, dim=16, inputs=[a["x"], a["y"], 3.0], device=a["x"].device)


def _norms_arrays(device):
    rng = np.random.default_rng(7)
    return {
        "v": wp.array(rng.standard_normal((6, 3)).astype(np.float32), dtype=wp.vec3, device=device),
        "n": wp.zeros(6, dtype=wp.float32, device=device),
    }


def _norms_step(a):
    a["n"].zero_()
    wp.launch(k_vec_norms, dim=6, inputs=[a["v"], a["n"]], device=a["v"].device)


LOCAL = {
    "saxpb": LocalProgram("saxpb", _saxpb_arrays, _saxpb_step, ["x"], ["y"]),
    "norms": LocalProgram("norms", _norms_arrays, _norms_step, ["v"], ["n"]),
}


def local_capture(prog, path, device="cpu"):
    arrays = prog.make_arrays(device)
    wp.capture_begin(device=device, apic=True)
    try:
        prog.step(arrays)
    finally:
        graph = wp.capture_end(device=device)
    wp.capture_save(graph, os.fspath(path), inputs={n: arrays[n] for n in prog.inputs},
                    outputs={n: arrays[n] for n in prog.outputs})
    return arrays



# ---------------------------------------------------------------------------
# Build and capture fixtures
# ---------------------------------------------------------------------------


@dataclass
class Build:
    dir: Path
    exe: Path
    lib: Path
    include: Path


def cmake_build(tmp_path_factory, name, *args, targets=()) -> Path:
    cmake = shutil.which("cmake")
    if not cmake:
        pytest.skip("cmake is not installed: the native tests need CMake >= 3.18 and a C++17 compiler")
    bdir = tmp_path_factory.mktemp(name)
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    steps = [[cmake, "-S", str(ROOT), "-B", str(bdir), *gen, *cmake_python_args(), *args],
             [cmake, "--build", str(bdir), "--parallel", str(os.cpu_count() or 2)]
             + (["--target", *targets] if targets else [])]
    for cmd in steps:
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}")
    return bdir


@pytest.fixture(scope="session")
def native(tmp_path_factory) -> Build:
    bdir = cmake_build(tmp_path_factory, "native-build", "-DCMAKE_BUILD_TYPE=Release",
                       targets=["all", "wrpk-unpack", "sha256-check"])  # test tools are not part of `all`
    return Build(bdir, bdir / "native" / "wrp-replay", bdir / "native" / "libwrp_replay.so",
                 ROOT / "native" / "include")


@pytest.fixture(scope="session")
def asan_exe(tmp_path_factory) -> Path:
    # -O0 compiles faster; only the executable is needed.
    bdir = cmake_build(tmp_path_factory, "native-asan", "-DCMAKE_BUILD_TYPE=Debug", "-DWRP_SANITIZE=ON",
                       targets=["wrp-replay"])
    return bdir / "native" / "wrp-replay"


@pytest.fixture(scope="session")
def caps(tmp_path_factory) -> dict:
    """``{name: Path of its .wrp}`` for every program (the run's one capture cache) and this file's own."""
    d = tmp_path_factory.mktemp("native-captures")
    out = programs.cached_captures()
    for name, prog in LOCAL.items():
        local_capture(prog, d / f"local_{name}.wrp")
        out[f"local_{name}"] = d / f"local_{name}.wrp"
    return out


def run(exe, *args, env=None, timeout=60, check_rc=None):
    """Run ``exe``; a signal or a hang is always a failure."""
    try:
        res = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, errors="replace",
                             env=CLEAN_ENV if env is None else env, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{exe} {' '.join(map(str, args))} hung for {timeout} s")
    assert res.returncode >= 0, f"killed by signal {-res.returncode}: {args}\n{res.stderr}"
    if check_rc is not None:
        assert res.returncode == check_rc, f"{args}: rc {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res


def copy_capture(src: Path, dst_dir: Path, stem="g", data: bytes = None) -> Path:
    """Copy a capture (``.wrp`` and ``<stem>_modules/``), optionally replacing its bytes."""
    dst_dir.mkdir(parents=True, exist_ok=True)
    dst = dst_dir / f"{stem}.wrp"
    dst.write_bytes(src.read_bytes() if data is None else data)
    mods = src.with_name(src.stem + "_modules")
    if mods.is_dir():
        shutil.copytree(mods, dst_dir / f"{stem}_modules", dirs_exist_ok=True)
    return dst


def npy_input(arr: wp.array) -> np.ndarray:
    """A binding's contents as an .npy-able array: typed when plain, else raw bytes."""
    a = arr.numpy()
    return a if a.dtype.fields is None else np.frombuffer(a.tobytes(), np.uint8)


# ---------------------------------------------------------------------------
# Minimal WRP1 walker (only what the mutations need)
# ---------------------------------------------------------------------------


def sections(buf):
    n = struct.unpack_from("<I", buf, 12)[0]
    return [struct.unpack_from("<IIQQQ", buf, 64 + 32 * i) for i in range(n)]


def metadata_fields(buf):
    """File offsets of interesting metadata fields."""
    off = sections(buf)[0][2]
    pos = off + 4
    vlen = struct.unpack_from("<I", buf, pos)[0]
    f = {"version_len": pos, "version": pos + 4}
    pos += 4 + vlen
    f["arch"] = pos
    f["num_modules"], f["num_kernels"], f["num_bindings"] = pos + 4, pos + 8, pos + 12
    nmod = struct.unpack_from("<I", buf, pos + 4)[0]
    pos += 24
    modules = []
    for _ in range(nmod):
        rec = {"at": pos}
        for key in ("hash", "name", "filename"):
            rec[key] = pos
            pos += 4 + struct.unpack_from("<I", buf, pos)[0]
        rec["arch"] = pos
        pos += 4
        for _ in range(3):
            pos += 4 + struct.unpack_from("<I", buf, pos)[0]
        pos += 2 + 16
        modules.append(rec)
    f["modules"] = modules
    f["kernels_at"] = pos
    return f


def op_offsets(buf):
    """``[(offset, type, total_size)]`` of the top-level ops."""
    _, _, off, size, _ = sections(buf)[2]
    count = struct.unpack_from("<I", buf, off)[0]
    pos, out = off + 4, []
    for _ in range(count):
        t, n = struct.unpack_from("<II", buf, pos)
        out.append((pos, t, n))
        pos += n
    return out


def record_bytes(buf):
    """Offsets of record bytes (no region contents and no launch argument values)."""
    secs = sections(buf)
    out = list(range(0, secs[0][2]))  # header and section table
    out += list(range(secs[0][2], secs[0][2] + secs[0][3]))  # metadata
    mem = secs[1][2]
    count = struct.unpack_from("<I", buf, mem)[0]
    pos = mem + 4
    out += list(range(mem, pos))
    for _ in range(count):
        out += list(range(pos, pos + 24))
        size, has = struct.unpack_from("<QB", buf, pos + 8)
        pos += 24 + (size if has else 0)

    def walk(pos, end):
        res = []
        while pos < end:
            t, n = struct.unpack_from("<II", buf, pos)
            if t == 1:
                kl, hl, np_, _, nr, vds = struct.unpack_from("<HHHHII", buf, pos + 64)
                res += list(range(pos, pos + n - vds))
            elif t in (7, 8):
                res += list(range(pos, pos + 40))
                res += walk(pos + 40, pos + n)
            else:
                res += list(range(pos, pos + n))
            pos += n
        return res

    ops = secs[2][2]
    out += list(range(ops, ops + 4)) + walk(ops + 4, ops + secs[2][3])
    return out


# ---------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------


def needed_libraries(path: Path) -> set:
    readelf = shutil.which("readelf")
    if not readelf:
        pytest.skip("readelf is not installed")
    out = subprocess.run([readelf, "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return {line.split("[")[1].split("]")[0] for line in out.splitlines() if "(NEEDED)" in line}


def test_binaries_link_only_the_c_and_cxx_runtime(native):
    allowed = {"libc.so.6", "libdl.so.2", "libpthread.so.0", "libstdc++.so.6", "libgcc_s.so.1", "libm.so.6",
               "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}
    for binary in (native.exe, native.lib):
        needed = needed_libraries(binary)
        assert needed <= allowed, (binary, needed - allowed)
        assert not any("python" in n for n in needed)
    nm = shutil.which("nm")
    if nm:
        syms = subprocess.run([nm, "-D", "--defined-only", str(native.lib)], capture_output=True, text=True).stdout
        exported = {line.split()[-1] for line in syms.splitlines() if line.split()[1:2] == ["T"]}
        assert exported and all(s.startswith("wrp_") for s in exported), exported


def test_build_generates_python_flatbuffers(native):
    gen = native.dir / "python_fbs" / "wrpkit" / "formats" / "fbs"
    assert (gen / "Annotations.py").is_file() and (gen / "Program.py").is_file()
    assert not (ROOT / "native" / "wrp_generated.h").exists()  # generated code stays in the build tree


def test_help_and_usage_errors(native, caps):
    res = run(native.exe, "--help", check_rc=0)
    assert "--input NAME=" in res.stdout and "exit status" in res.stdout
    run(native.exe, check_rc=2)
    f = next(iter(caps.values()))
    for bad in (["--repeat", "0"], ["--repeat", "x"], ["--warmup", "-1"], ["--input", "novalue"], ["--bogus"],
                ["--device", "gpu"], ["--device", "cuda:x"], ["--output", "a=o.npy", "--output", "b=o.npy"]):
        res = run(native.exe, f, *bad, "--warp-lib-dir", WARP_BIN)
        assert res.returncode == 2, (bad, res.stderr)
        assert res.stderr.startswith("wrp-replay: error:"), res.stderr


# ---------------------------------------------------------------------------
# Replays compared with stock Warp
# ---------------------------------------------------------------------------


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


def _relocation_to_missing_region(caps, dst: Path) -> tuple:
    """``(source capture, copy in dst)``: local_saxpb with its first launch's relocation 0 pointing at
    region 999 (structurally valid, semantically invalid)."""
    src = caps["local_saxpb"]
    data = bytearray(src.read_bytes())
    op = op_offsets(data)[0][0]
    kl, hl, nparams = struct.unpack_from("<HHH", data, op + 64)
    struct.pack_into("<i", data, op + 80 + kl + hl + 16 * nparams + 4, 999)  # relocation 0 -> region 999
    return src, copy_capture(src, dst, data=bytes(data))


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


# ---------------------------------------------------------------------------
# Typed signatures (wrpkit's ANNOTATIONS section)
# ---------------------------------------------------------------------------


# Builds an Annotations FlatBuffer with the Python code the build generated
# from schema/wrp.fbs, in a child process so that its `wrpkit.formats.fbs` package
# does not shadow the repository's `wrpkit` in this one.
ANNOTATIONS_SCRIPT = r"""
import json, sys
import flatbuffers
from wrpkit.formats.fbs import Annotations, ArraySignature, DataType, ModuleDigest
spec = json.load(sys.stdin)
ann = Annotations.AnnotationsT()
ann.producer = "test_native"
ann.signature = []
for name, scalar, dshape, size, shape, strides in spec["signatures"]:
    s = ArraySignature.ArraySignatureT()
    s.name, s.shape, s.strides, s.isInput, s.isOutput = name, shape, strides, True, True
    s.dtype = DataType.DataTypeT()
    s.dtype.name, s.dtype.scalar, s.dtype.shape, s.dtype.size = "t", scalar, dshape, size
    ann.signature.append(s)
ann.moduleDigests = []
for filename, sha, size in spec["digests"]:
    d = ModuleDigest.ModuleDigestT()
    d.binaryFilename, d.sha256, d.size = filename, bytes.fromhex(sha), size
    ann.moduleDigests.append(d)
b = flatbuffers.Builder(256)
b.Finish(ann.Pack(b), file_identifier=b"WRPK")
sys.stdout.buffer.write(bytes(b.Output()))
"""

FLOAT32 = 11  # ScalarKind.FLOAT32 in schema/wrp.fbs


@pytest.fixture(scope="session")
def annotations(native):
    """``annotations(signatures, digests) -> bytes`` of an Annotations FlatBuffer."""
    pytest.importorskip("flatbuffers")

    def make(signatures, digests=()):
        spec = {"signatures": signatures, "digests": [(f, sha.hex(), n) for f, sha, n in digests]}
        env = {**os.environ, "PYTHONPATH": str(native.dir / "python_fbs")}
        res = subprocess.run([sys.executable, "-c", ANNOTATIONS_SCRIPT], input=json.dumps(spec).encode(),
                             capture_output=True, env=env, check=True)
        return res.stdout

    return make


def annotate(wrp: bytes, payload: bytes) -> bytes:
    """Append an ANNOTATIONS section ("WRPA") to a 3-section .wrp."""
    secs = sections(wrp)
    assert len(secs) == 3
    out = bytearray(wrp[:64])
    struct.pack_into("<I", out, 12, 4)
    for t, fl, off, n, raw in secs:
        out += struct.pack("<IIQQQ", t, fl, off + 32, n, raw)
    out += struct.pack("<IIQQQ", 0x41505257, 0, len(wrp) + 32, len(payload), len(payload))
    return bytes(out) + wrp[160:] + payload


def test_typed_signature_shapes_inputs_and_outputs(native, caps, annotations, tmp_path):
    src = caps["local_norms"]
    F32 = FLOAT32
    data = annotate(src.read_bytes(), annotations([("v", F32, [3], 12, [6], [12]), ("n", F32, [], 4, [3], [8])]))
    path = copy_capture(src, tmp_path / "typed", data=data)
    listing = json.loads(run(native.exe, path, "--list", "--json", check_rc=0).stdout)
    v, n = listing["bindings"]
    assert (v["dtype"], v["numpy_dtype"], v["shape"], v["strides"]) == ("t", "<f4", [6], [12])
    assert (n["shape"], n["strides"]) == ([3], [8])  # a strided view: every other element

    vec = np.arange(18, dtype=np.float32).reshape(6, 3)
    np.save(tmp_path / "v.npy", vec)
    res = run(native.exe, path, "--input", f"v={tmp_path / 'v.npy'}", "--output", f"n={tmp_path / 'n.npy'}",
              "--output", f"v={tmp_path / 'vo.npy'}", "--warp-lib-dir", WARP_BIN, check_rc=0)
    assert "dtype <f4" in res.stdout
    got = np.load(tmp_path / "n.npy")
    assert got.dtype == np.float32 and got.shape == (3,)
    np.testing.assert_allclose(got, np.linalg.norm(vec, axis=1)[::2], rtol=1e-6)
    vo = np.load(tmp_path / "vo.npy")
    assert vo.shape == (6, 3) and np.array_equal(vo, vec)

    np.save(tmp_path / "vi.npy", vec.astype(np.int32))  # right size, wrong scalar type
    res = run(native.exe, path, "--input", f"v={tmp_path / 'vi.npy'}", "--warp-lib-dir", WARP_BIN, check_rc=2)
    assert "does not match binding \"v\"" in res.stderr and "float32" in res.stderr


def test_wrpk_keeps_typed_signatures_and_module_digests(native, caps, annotations, tmp_path):
    """A .wrp with wrpkit's annotations, bundled: the same typed bindings, the module digest still checked."""
    import hashlib  # noqa: PLC0415

    src = caps["local_norms"]
    module = next(src.with_name(src.stem + "_modules").iterdir())
    sha = hashlib.sha256(module.read_bytes()).digest()
    payload = annotations([("v", FLOAT32, [3], 12, [6], [12]), ("n", FLOAT32, [], 4, [3], [8])],
                          [(module.name, sha, module.stat().st_size)])
    wrp = copy_capture(src, tmp_path / "typed", data=annotate(src.read_bytes(), payload))
    bundle = tmp_path / "typed.wrpk"
    convert_with_cli([(wrp, bundle)])
    a = json.loads(run(native.exe, wrp, "--list", "--json", check_rc=0).stdout)
    b = json.loads(run(native.exe, bundle, "--list", "--json", check_rc=0).stdout)
    assert a["bindings"] == b["bindings"] and b["bindings"][1]["strides"] == [8]
    vec = np.arange(18, dtype=np.float32).reshape(6, 3)
    np.save(tmp_path / "v.npy", vec)
    run(native.exe, bundle, "--input", f"v={tmp_path / 'v.npy'}", "--output", f"n={tmp_path / 'n.npy'}",
        "--warp-lib-dir", WARP_BIN, check_rc=0)
    np.testing.assert_allclose(np.load(tmp_path / "n.npy"), np.linalg.norm(vec, axis=1)[::2], rtol=1e-6)
    # A digest that does not match the bundled binary: the same semantic check as for a .wrp (and
    # skipped, like it, by --skip-checks); the bundle's own checksums are intact.
    bad = annotations([], [(module.name, bytes(32), module.stat().st_size)])
    wrp = copy_capture(src, tmp_path / "digest", data=annotate(src.read_bytes(), bad))
    convert_with_cli([(wrp, tmp_path / "digest.wrpk")])
    res = run(native.exe, tmp_path / "digest.wrpk", "--list", check_rc=3)
    assert "does not match" in res.stderr and "(in the bundle)" in res.stderr
    run(native.exe, tmp_path / "digest.wrpk", "--list", "--skip-checks", check_rc=0)


def test_misaligned_annotation_vectors_are_refused(native, asan_exe, caps, tmp_path):
    """Regression (found by fuzz_wrp1): int64 vectors at addresses 4 mod 8 in the annotations were read
    in place, undefined behaviour that UBSan reports; they are refused now, cleanly."""
    from test_fuzz_native import misaligned_annotations, with_annotations  # noqa: PLC0415

    if "views" not in caps:
        pytest.skip("tests/programs.py has no 'views' program")
    src = caps["views"]
    path = copy_capture(src, tmp_path / "m", data=with_annotations(src.read_bytes(), misaligned_annotations("a")))
    env = {**CLEAN_ENV, "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=87",
           "ASAN_OPTIONS": "detect_leaks=1:exitcode=86"}
    for exe, run_env in ((native.exe, None), (asan_exe, env)):
        res = run(exe, path, "--list", env=run_env, check_rc=3)
        assert "annotations.signature[0].shape" in res.stderr and "not 8-byte aligned" in res.stderr, res.stderr
        assert "runtime error" not in res.stderr


def test_bad_annotations_are_refused(native, caps, annotations, tmp_path):
    src = caps["local_norms"]
    F32 = FLOAT32
    mods = src.with_name(src.stem + "_modules")
    module = next(mods.iterdir())
    bad = {
        "view_too_large": [("n", F32, [], 4, [7], [4])],
        "negative_reach": [("n", F32, [], 4, [2], [-4])],
        "unknown_binding": [("zz", F32, [], 4, [1], [4])],
        "size_not_scalars": [("n", F32, [3], 4, [1], [4])],
    }
    for label, sigs in bad.items():
        path = copy_capture(src, tmp_path / label, data=annotate(src.read_bytes(), annotations(sigs)))
        res = run(native.exe, path, "--list", check_rc=3)
        assert "annotations.signature[0]" in res.stderr, (label, res.stderr)
    good = annotate(src.read_bytes(), annotations([], [(module.name, b"\0" * 32, module.stat().st_size)]))
    res = run(native.exe, copy_capture(src, tmp_path / "digest", data=good), "--list", check_rc=3)
    assert "does not match" in res.stderr and "SHA-256" in res.stderr
    import hashlib  # noqa: PLC0415

    sha = hashlib.sha256(module.read_bytes()).digest()
    good = annotate(src.read_bytes(), annotations([], [(module.name, sha, module.stat().st_size)]))
    run(native.exe, copy_capture(src, tmp_path / "digest_ok", data=good), "--warp-lib-dir", WARP_BIN, check_rc=0)
    broken = bytearray(good)
    broken[-20] ^= 0xFF  # inside the FlatBuffer
    res = run(native.exe, copy_capture(src, tmp_path / "fb", data=bytes(broken)), "--list")
    assert res.returncode in (0, 3) and "Traceback" not in res.stderr


# ---------------------------------------------------------------------------
# C API
# ---------------------------------------------------------------------------

C_SMOKE = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "wrp_replay.h"

/* Two threads, two programs: each replays its own program with its own
 * inputs; the library serializes the Warp calls. */
struct job { wrp_program *p; float base; int failures; };

static void *worker(void *arg) {
    struct job *j = (struct job *)arg; float x[16], y[16]; int it, i;
    for (it = 0; it < 200; it++) {
        for (i = 0; i < 16; i++) x[i] = j->base + (float)(it + i);
        if (wrp_program_set(j->p, "x", x, sizeof x) || wrp_program_run(j->p, 1) ||
            wrp_program_get(j->p, "y", y, sizeof y)) { j->failures++; continue; }
        for (i = 0; i < 16; i++) if (y[i] != x[i] * 3.0f + (float)i) j->failures++;
    }
    return NULL;
}

static void *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb"); void *buf; long len;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END); len = ftell(f); fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)len); *n = fread(buf, 1, (size_t)len, f); fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    wrp_options o; wrp_program *p = NULL; wrp_binding_info info; size_t idx, n, wrp_n, mod_n, i;
    float x[16], y[16]; void *ptr; wrp_module_bytes mod; void *wrp_bytes;
    if (argc < 4) return 2;
    wrp_options_init(&o);
    if (wrp_program_open("/nonexistent.wrp", &o, &p) != WRP_ERR_INVALID_FILE || p) return 10;
    printf("open-error: %s\n", wrp_last_error());
    if (wrp_program_open(argv[1], &o, &p) != WRP_OK) { printf("%s\n", wrp_last_error()); return 11; }
    n = wrp_program_num_bindings(p);
    for (i = 0; i < n; i++) {
        if (wrp_program_binding(p, i, &info) != WRP_OK) return 12;
        printf("binding %s %llu\n", info.name, (unsigned long long)info.size);
    }
    if (wrp_program_find_binding(p, "y", &idx) != WRP_OK || idx != 1) return 13;
    if (wrp_program_set(p, "x", x, 3) != WRP_ERR_INVALID_ARGUMENT) return 14;
    printf("size-error: %s\n", wrp_last_error());
    if (wrp_program_get(p, "nope", y, sizeof y) != WRP_ERR_INVALID_ARGUMENT) return 15;
    for (i = 0; i < 16; i++) x[i] = (float)i;
    if (wrp_program_set(p, "x", x, sizeof x) != WRP_OK) return 16;
    if (wrp_program_run(p, 2) != WRP_OK) { printf("%s\n", wrp_last_error()); return 17; }
    if (wrp_program_get(p, "y", y, sizeof y) != WRP_OK) return 18;
    for (i = 0; i < 16; i++) if (y[i] != x[i] * 3.0f + (float)i) return 19;
    if (wrp_program_data_ptr(p, "x", &ptr, &n) != WRP_OK || n != sizeof x) return 20;
    ((float *)ptr)[0] = 100.0f;
    if (wrp_program_run(p, 1) != WRP_OK || wrp_program_get(p, "y", y, sizeof y) != WRP_OK) return 21;
    if (y[0] != 300.0f) return 22;
    wrp_program_destroy(p);
    p = NULL;

    wrp_bytes = slurp(argv[1], &wrp_n);
    mod.filename = argv[3]; mod.data = slurp(argv[2], &mod_n); mod.size = mod_n;
    if (wrp_program_open_memory(wrp_bytes, wrp_n, &mod, 0, &o, &p) != WRP_ERR_INVALID_FILE) return 23;
    printf("missing-module: %s\n", wrp_last_error());
    if (wrp_program_open_memory(wrp_bytes, wrp_n, &mod, 1, &o, &p) != WRP_OK) { printf("%s\n", wrp_last_error()); return 24; }
    free(wrp_bytes); free((void *)mod.data);  /* the program keeps what it needs */
    if (wrp_program_set(p, "x", x, sizeof x) != WRP_OK || wrp_program_run(p, 1) != WRP_OK) return 25;
    if (wrp_program_get(p, "y", y, sizeof y) != WRP_OK || y[5] != 20.0f) return 26;
    wrp_program_destroy(p);
    wrp_program_destroy(NULL);
    {
        struct job jobs[2] = {{NULL, 0.0f, 0}, {NULL, 1000.0f, 0}};
        pthread_t t[2];
        for (i = 0; i < 2; i++) if (wrp_program_open(argv[1], &o, &jobs[i].p) != WRP_OK) return 27;
        for (i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, &jobs[i]);
        for (i = 0; i < 2; i++) pthread_join(t[i], NULL);
        for (i = 0; i < 2; i++) { if (jobs[i].failures) return 28; wrp_program_destroy(jobs[i].p); }
    }
    printf("ok %s\n", wrp_library_version());
    return 0;
}
"""


def compile_c_smoke(native, tmp_path, lib_dir: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    src = tmp_path / "smoke.c"
    src.write_text(C_SMOKE)
    exe = tmp_path / "smoke"
    subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-I", str(native.include), str(src),
                    "-L", str(lib_dir), "-lwrp_replay", "-pthread", f"-Wl,-rpath,{lib_dir}", "-o", str(exe)], check=True)
    return exe


def test_c_api_from_c(native, caps, tmp_path):
    path = caps["local_saxpb"]
    module = next(path.with_name(path.stem + "_modules").iterdir())
    exe = compile_c_smoke(native, tmp_path, native.lib.parent)
    res = run(exe, path, module, module.name, env={**CLEAN_ENV, "WRP_WARP_LIB_DIR": str(WARP_BIN)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "open-error: cannot open file /nonexistent.wrp" in res.stdout
    assert "binding x 64" in res.stdout and "binding y 64" in res.stdout
    assert "size-error: binding \"x\" is 64 bytes, but 3 were given" in res.stdout
    assert "missing-module: module file " in res.stdout
    assert res.stdout.splitlines()[-1].startswith("ok ")


def test_library_finds_warp_relative_to_its_install(native, caps, tmp_path):
    # site-packages/wrpkit/_native/lib/libwrp_replay.so -> site-packages/warp/bin
    site = tmp_path / "site-packages"
    lib_dir = site / "wrpkit" / "_native" / "lib"
    lib_dir.mkdir(parents=True)
    shutil.copy2(native.lib, lib_dir / native.lib.name)
    os.symlink(WARP_BIN.parent, site / "warp")
    path = caps["local_saxpb"]
    module = next(path.with_name(path.stem + "_modules").iterdir())
    exe = compile_c_smoke(native, tmp_path, lib_dir)
    res = run(exe, path, module, module.name, env=CLEAN_ENV)
    assert res.returncode == 0, res.stdout + res.stderr


# ---------------------------------------------------------------------------
# .wrpk bundles: read in place (mmap), checked, replayed like the .wrp
# ---------------------------------------------------------------------------


def convert_with_cli(jobs, parallel=3):
    """Run ``python -m wrpkit.cli convert SRC DST`` for every ``(src, dst)``, a few at a time."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    pending = list(jobs)
    while pending:
        batch, pending = pending[:parallel], pending[parallel:]
        procs = [(src, dst, subprocess.Popen([sys.executable, "-m", "wrpkit.cli", "convert", "-q", str(src), str(dst)],
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                             env=env)) for src, dst in batch]
        for src, dst, proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0 and dst.is_file(), f"convert {src} {dst} failed:\n{out}\n{err}"


@pytest.fixture(scope="session")
def bundles(caps, tmp_path_factory) -> dict:
    """``{name: Path of X.wrpk}``: every capture of ``caps`` through ``wrp convert X.wrp X.wrpk``."""
    d = tmp_path_factory.mktemp("native-bundles")
    out = {name: d / f"{name}.wrpk" for name in caps}
    convert_with_cli([(caps[name], out[name]) for name in caps])
    return out


def wrpk_layout(path: Path):
    """``(header, {blob name: (file offset, length)})`` of a bundle, read with wrpkit's own decoder."""
    from wrpkit.formats import wrpk  # noqa: PLC0415

    buf = path.read_bytes()
    header = wrpk.read_header(buf)
    prog = wrpk.decode_wrpk(buf)
    base = np.frombuffer(buf, np.uint8).ctypes.data

    def where(view):
        return int(np.frombuffer(view, np.uint8).ctypes.data - base), len(view)

    blobs = {}
    for r in prog.regions:
        if r.has_initial_data and r.size:
            blobs[f"region {r.region_id} initial data"] = where(r.data)
    for mod in prog.modules:
        if mod.binary is not None and len(mod.binary):
            blobs[f"module {mod.binary_filename}"] = where(mod.binary)
    return header, blobs


def test_wrpk_image_is_the_wrp_and_modules_come_from_the_bundle(native, caps, bundles, tmp_path):
    """The WRP1 image the library rebuilds from each bundle is byte-identical to the .wrp, and the module
    binaries it hands to Warp are the files of <stem>_modules/."""
    for name, bundle in bundles.items():
        out = tmp_path / f"{name}.wrp"
        res = subprocess.run([str(native.dir / "native" / "wrpk-unpack"), str(bundle), str(out)],
                             capture_output=True, text=True)
        assert res.returncode == 0, f"{name}: {res.stderr}"
        assert out.read_bytes() == caps[name].read_bytes(), f"{name}: the rebuilt WRP1 image differs from the .wrp"
        mods = caps[name].with_name(caps[name].stem + "_modules")
        want = {p.name: p.read_bytes() for p in mods.iterdir()} if mods.is_dir() else {}
        got_dir = tmp_path / f"{name}_modules"
        got = {p.name: p.read_bytes() for p in got_dir.iterdir()} if got_dir.is_dir() else {}
        assert got == want, name


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_wrpk_replay_is_bit_identical_to_wrp(native, caps, bundles, tmp_path, name):
    prog = PROGRAMS[name]
    fresh = prog.make_arrays("cpu")
    inputs = {n: npy_input(fresh[n]) for n in prog.inputs}
    common = []
    for n, a in inputs.items():
        np.save(tmp_path / f"in_{n}.npy", a)
        common += ["--input", f"{n}={tmp_path / f'in_{n}.npy'}"]
    reports = {}
    for kind, path in (("wrp", caps[name]), ("wrpk", bundles[name])):
        args = [path, "--warp-lib-dir", WARP_BIN, "--json", *common]
        for n in prog.bindings:
            args += ["--output", f"{n}={tmp_path / f'{kind}_{n}.npy'}"]
        reports[kind] = json.loads(run(native.exe, *args, check_rc=0).stdout)
    assert reports["wrp"]["bindings"] == reports["wrpk"]["bindings"]
    assert reports["wrp"]["device"] == reports["wrpk"]["device"] == "cpu"
    for n in prog.bindings:
        a, b = np.load(tmp_path / f"wrp_{n}.npy"), np.load(tmp_path / f"wrpk_{n}.npy")
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), f"binding {n} differs"


def test_wrpk_moved_alone_replays(native, bundles, tmp_path):
    d = tmp_path / "elsewhere" / "deeper"
    d.mkdir(parents=True)
    bundle = d / "renamed.bin"  # recognized by its magic, not its name
    shutil.copy2(bundles["local_saxpb"], bundle)
    x = np.linspace(-1, 1, 16, dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    res = run(native.exe, bundle, "--input", f"x={tmp_path / 'x.npy'}", "--output", f"y={tmp_path / 'y.npy'}",
              "--warp-lib-dir", WARP_BIN, "--json", check_rc=0)
    assert json.loads(res.stdout)["file"] == str(bundle)
    y = np.load(tmp_path / "y.npy").view(np.float32)
    np.testing.assert_array_equal(y, x * np.float32(3.0) + np.arange(16, dtype=np.float32))
    assert sorted(p.name for p in d.iterdir()) == ["renamed.bin"]  # nothing unpacked beside it
    # A symbolic link the user names is followed, as for a .wrp.
    os.symlink(bundle, d / "link.wrpk")
    run(native.exe, d / "link.wrpk", "--list", check_rc=0)


def tamper_cases(bundle: Path, seed=11):
    """``[(kind, position, blob name or None)]``: bytes of a bundle to flip, covering every part of it."""
    header, blobs = wrpk_layout(bundle)
    rng = random.Random(seed)
    mend = 128 + header.manifest_size
    cases = [("header", pos, None) for pos in range(128)]
    cases += [("manifest", pos, None)
              for pos in sorted({128, 129, 132, mend - 1, *rng.sample(range(128, mend), min(48, mend - 128))})]
    cases += [("padding", pos, None) for pos in range(mend, header.blob_area_offset)]
    ends = sorted((off, off + n) for off, n in blobs.values())
    for (_, end), (start, _) in zip(ends, ends[1:]):
        cases += [("padding", pos, None) for pos in range(end, start)]
    for name, (off, n) in blobs.items():
        for pos in sorted({off, off + n - 1, off + n // 2, *rng.sample(range(off, off + n), min(12, n))}):
            cases.append(("blob", pos, name))
    return header, blobs, cases


def test_wrpk_tampering_is_an_integrity_error_naming_the_blob(native, bundles, tmp_path):
    bundle = bundles["local_norms"]  # region data of 72 and 24 bytes: zero padding after each
    data = bundle.read_bytes()
    header, blobs, cases = tamper_cases(bundle)
    assert any(k.startswith("module ") for k in blobs) and any(k.startswith("region ") for k in blobs), blobs
    seen = set()
    for i, (kind, pos, name) in enumerate(cases):
        b = bytearray(data)
        b[pos] ^= 1 << (i % 8)
        path = tmp_path / f"t{i}.wrpk"
        path.write_bytes(bytes(b))
        res = run(native.exe, path, "--list")
        msg = f"{kind} byte {pos}: rc {res.returncode}\n{res.stderr}"
        assert res.returncode == 3, msg
        assert res.stderr.startswith("wrp-replay: error: ") and " at byte " in res.stderr, msg
        if kind == "blob":
            assert f"SHA-256 of {name} does not match" in res.stderr and "integrity" in res.stderr, msg
        elif kind == "manifest" or 48 <= pos < 80:  # the manifest, or the header's checksum of it
            assert "SHA-256 of the manifest" in res.stderr and "integrity" in res.stderr, msg
        elif kind == "padding":
            assert "padding" in res.stderr, msg
        seen.add(kind)
        path.unlink()
    assert seen == {"header", "manifest", "padding", "blob"}
    # A tampered module is refused before Warp is loaded, not by Warp.
    name, (off, n) = next((k, v) for k, v in blobs.items() if k.startswith("module "))
    b = bytearray(data)
    b[off + n // 3] ^= 0x40
    (tmp_path / "mod.wrpk").write_bytes(bytes(b))
    res = run(native.exe, tmp_path / "mod.wrpk", "--warp-lib-dir", WARP_BIN, check_rc=3)
    assert f"SHA-256 of {name} does not match" in res.stderr
    # Truncated and extended bundles.
    for cut in (0, 7, 8, 127, 128, 200, header.blob_area_offset, len(data) - 1):
        (tmp_path / "cut.wrpk").write_bytes(data[:cut] if cut >= 4 else b"WRPK"[:cut])
        res = run(native.exe, tmp_path / "cut.wrpk", "--list")
        assert res.returncode == 3, (cut, res.stderr)
    (tmp_path / "long.wrpk").write_bytes(data + b"\0")
    res = run(native.exe, tmp_path / "long.wrpk", "--list", check_rc=3)
    assert "trailing bytes" in res.stderr
    text_mode = data[:4] + b"\n" + data[6:]  # "\r\n" -> "\n": a text-mode transfer
    (tmp_path / "text.wrpk").write_bytes(text_mode)
    res = run(native.exe, tmp_path / "text.wrpk", "--list", check_rc=3)
    assert "text-mode" in res.stderr


def test_wrpk_no_verify_skips_only_blob_hashes(native, bundles, tmp_path):
    bundle = bundles["local_saxpb"]
    data = bundle.read_bytes()
    header, blobs = wrpk_layout(bundle)
    region_blobs = sorted((k, v) for k, v in blobs.items() if k.startswith("region "))
    args = ["--output", f"y={tmp_path / 'y.npy'}", "--warp-lib-dir", WARP_BIN]
    run(native.exe, bundle, *args, check_rc=0)
    clean = np.load(tmp_path / "y.npy").tobytes()
    changed = False
    for name, (off, n) in region_blobs:  # region data: refused with checks, replayed without
        b = bytearray(data)
        b[off] ^= 0x20
        path = tmp_path / "r.wrpk"
        path.write_bytes(bytes(b))
        res = run(native.exe, path, *args, check_rc=3)
        assert name in res.stderr
        run(native.exe, path, "--no-verify", *args, check_rc=0)
        changed = changed or np.load(tmp_path / "y.npy").tobytes() != clean
    assert changed, "flipping a byte of the initial data changed no output"
    # The header, the manifest (its own checksum) and the layout are checked regardless.
    for pos, what in ((128 + header.manifest_size // 2, "SHA-256 of the manifest"), (90, "reserved"),
                      (header.blob_area_offset - 1 if header.blob_area_offset > 128 + header.manifest_size else 60,
                       "")):
        b = bytearray(data)
        b[pos] ^= 1
        path = tmp_path / "h.wrpk"
        path.write_bytes(bytes(b))
        res = run(native.exe, path, "--no-verify", "--list", check_rc=3)
        assert what in res.stderr, res.stderr
    assert "--no-verify" in run(native.exe, "--help", check_rc=0).stdout


def test_wrpk_validation_rules_are_the_wrp_rules(native, caps, tmp_path):
    """A bundle of a semantically invalid program is refused with the field path of the .wrp message."""
    _, bad = _relocation_to_missing_region(caps, tmp_path / "s")
    convert_with_cli([(bad, tmp_path / "bad.wrpk")])
    wrp_msg = run(native.exe, bad, "--list", check_rc=3).stderr
    wrpk_msg = run(native.exe, tmp_path / "bad.wrpk", "--list", check_rc=3).stderr
    assert "ops[0] (KERNEL_LAUNCH) at byte " in wrp_msg and "relocation 0 region_id 999 does not exist" in wrp_msg
    # The image is byte-identical to the .wrp: same field, same offset, said to be an offset of the .wrp form.
    note = " of the bundle's program as a .wrp (wrp convert BUNDLE.wrpk X.wrp)"
    assert wrpk_msg == re.sub(r"( at byte \d+)(: )", lambda m: m.group(1) + note + m.group(2), wrp_msg, count=1)
    run(native.exe, tmp_path / "bad.wrpk", "--list", "--skip-checks", check_rc=0)


def test_while_body_must_touch_its_condition(native, caps, tmp_path):
    """A WHILE whose body never reads or writes its condition's region could never end (Warp would spin
    to its 2^24-iteration guard): refused, in a .wrp and in a .wrpk, like wrpkit's validate does."""
    from wrpkit import model as m  # noqa: PLC0415
    from wrpkit.formats.wrp1 import decode_wrp1, encode_wrp1  # noqa: PLC0415

    src = caps["local_saxpb"]
    for label, touched, rc in (("untouched", False, 3), ("touched", True, 0)):
        prog = decode_wrp1(src.read_bytes())
        if touched:
            cond = prog.regions[-1].region_id  # y, which the launch writes
        else:
            cond = prog.regions[-1].region_id + 1
            prog.regions.append(m.Region(cond, 4, 4, True, data=struct.pack("<i", 1)))
        prog.ops = [m.While(cond, 0, list(prog.ops))]
        path = copy_capture(src, tmp_path / label, data=encode_wrp1(prog))
        bundle = tmp_path / f"{label}.wrpk"
        convert_with_cli([(path, bundle)])
        for f in (path, bundle):
            res = run(native.exe, f, "--list", check_rc=rc)
            if rc:
                assert f"WHILE body never touches its condition region {cond}" in res.stderr, res.stderr
        if rc:
            run(native.exe, path, "--list", "--skip-checks", check_rc=0)


# --timeout: a valid file whose WHILE loops never end in practice (tests/replay_cases.py endless_while)

NATIVE_TIMEOUT_MESSAGE = "the replay did not finish within 1 s (a WHILE loop that does not end?); no output was written"


def _endless(caps, dst_dir) -> Path:
    if "capture_while" not in caps:
        pytest.skip("tests/programs.py has no capture_while")
    import replay_cases  # noqa: PLC0415

    path = replay_cases.rewrite_capture(caps["capture_while"], dst_dir, replay_cases.endless_while)
    py_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    res = subprocess.run([sys.executable, "-m", "wrpkit.cli", "validate", str(path)], capture_output=True, text=True,
                         env=py_env, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr  # structurally valid: only a timeout can stop it
    return path


def test_timeout_stops_an_endless_while(native, caps, tmp_path):
    path = _endless(caps, tmp_path / "f")
    run(native.exe, path, "--list", check_rc=0)
    for extra in ([], ["--json"]):
        out_dir = tmp_path / f"o{len(extra)}"
        out_dir.mkdir()
        t0 = time.monotonic()
        res = run(native.exe, path, "--timeout", "1", "--output", f"counter={out_dir / 'out.npy'}", "--output",
                  f"x={out_dir / 'x.npy'}", "--warp-lib-dir", WARP_BIN, *extra, check_rc=124)
        assert time.monotonic() - t0 < 30
        assert f"wrp-replay: error: {NATIVE_TIMEOUT_MESSAGE}\n" == res.stderr, res.stderr
        if extra:
            assert json.loads(res.stdout) == {"error": NATIVE_TIMEOUT_MESSAGE, "exit_code": 124}
        else:
            assert res.stdout == ""
        assert list(out_dir.iterdir()) == [], "no output and no temporary file may be left"


def test_timeout_stops_an_endless_while_through_wrp_engine_native(native, caps, tmp_path):
    path = _endless(caps, tmp_path / "f")
    work, tmp = tmp_path / "o", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    env = {**os.environ, "WRP_REPLAY": str(native.exe), "TMPDIR": str(tmp),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "wrpkit.cli", "replay", str(path), "--engine", "native", "--timeout",
                          "1", "--output", "out.npz"], capture_output=True, text=True, env=env, cwd=work, timeout=120)
    assert time.monotonic() - t0 < 30
    assert res.returncode == 124, (res.returncode, res.stdout, res.stderr)
    assert f"error: {NATIVE_TIMEOUT_MESSAGE}" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert list(work.iterdir()) == [] and list(tmp.iterdir()) == [], "no output and no temporary file may be left"


def test_timeout_does_not_disturb_a_normal_replay(native, caps, tmp_path):
    name = "capture_while" if "capture_while" in caps else "local_saxpb"
    binding = "x" if name == "capture_while" else "y"
    outs = []
    for extra in ([], ["--timeout", "30"]):
        out = tmp_path / f"out{len(extra)}.npy"
        res = run(native.exe, caps[name], "--output", f"{binding}={out}", "--warp-lib-dir", WARP_BIN, *extra,
                  check_rc=0)
        assert "error" not in res.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out0.npy", "out2.npy"]


@pytest.mark.parametrize("value", ["0", "-1", "abc", "nan", "inf", ""])
def test_timeout_must_be_a_positive_number(native, caps, value, tmp_path):
    out = tmp_path / "y.npy"
    res = run(native.exe, caps["local_saxpb"], "--timeout", value, "--output", f"y={out}", "--warp-lib-dir", WARP_BIN,
              check_rc=2)
    assert "--timeout needs a number of seconds above 0" in res.stderr, res.stderr
    assert not out.exists()


@pytest.mark.parametrize("case", parity_cases.CASES, ids=lambda c: c.name)
def test_rule_parity_native(native, case, tmp_path):
    """wrp-replay gives the verdict ``wrp validate`` gives on every variant of tests/parity_cases.py (each
    breaks one rule that once lived on one side only; test_validate.py checks the Python side)."""
    import parity_cases as pc  # noqa: PLC0415

    run(native.exe, pc.base_capture(case), "--list", check_rc=0)
    path = pc.build(case, tmp_path / "v")
    res = run(native.exe, path, "--list", check_rc=0 if case.accept else 3)
    assert case.accept or case.native in res.stderr, res.stderr
    py_code, py_out = pc.python_validate(path)
    assert (py_code == 0) == case.accept, py_out


def test_wrpk_of_hostile_variants_gets_the_wrp_verdict(native, caps, tmp_path):
    """Every hostile .wrp that wrpkit can bundle gets the same verdict as a .wrpk as it does as a .wrp."""
    try:
        import hostile  # noqa: PLC0415

        variants = hostile.generate(base_for_hostile(caps), tmp_path / "hv")
    except Exception as e:  # noqa: BLE001 - another engineer's module may be mid-change
        pytest.skip(f"tests/hostile.py is not usable: {e!r}")
    from wrpkit.formats.convert import convert  # noqa: PLC0415
    from wrpkit.errors import WrpError  # noqa: PLC0415

    compared = refused = 0
    for v in variants:
        if v.name in ("module_symlink", "module_fifo", "module_hardlink") or v.path.is_symlink() \
                or not v.path.is_file():
            continue  # properties of files on disk, which a bundle does not have
        dst = v.path.with_name("g.wrpk")
        try:
            convert(v.path, dst)
        except (WrpError, OSError, ValueError):
            continue
        a = run(native.exe, v.path, "--list")
        b = run(native.exe, dst, "--list")
        assert a.returncode == b.returncode, f"{v.name}: .wrp rc {a.returncode}, .wrpk rc {b.returncode}\n" \
                                             f"{a.stderr}\n{b.stderr}"
        compared += 1
        refused += b.returncode != 0
    assert compared >= 20 and refused >= 10, (compared, refused)


def test_wrpk_nesting_depth_limit(native, caps, tmp_path):
    """IF bodies nest 64 deep at most (wrpkit's and Warp's limit); the manifest Verifier accepts that depth."""
    from wrpkit import model as m  # noqa: PLC0415
    from wrpkit.formats.wrp1 import decode_wrp1  # noqa: PLC0415
    from wrpkit.formats.wrpk import encode_wrpk  # noqa: PLC0415

    src = caps["local_saxpb"]
    module = next(src.with_name(src.stem + "_modules").iterdir())
    for depth, rc in ((64, 0), (65, 3), (200, 3)):
        prog = decode_wrp1(src.read_bytes())
        ops = list(prog.ops)
        for _ in range(depth):
            ops = [m.If(prog.regions[0].region_id, 0, ops, [])]
        prog.ops = ops
        path = tmp_path / f"deep{depth}.wrpk"
        path.write_bytes(encode_wrpk(prog, {module.name: module.read_bytes()}))
        res = run(native.exe, path, "--list", check_rc=rc)
        if rc:
            assert "nested deeper than 64" in res.stderr or "failed verification" in res.stderr, res.stderr


def test_sha256_matches_hashlib_on_every_block_boundary(native, tmp_path):
    """libwrp_replay's SHA-256 (on the CPU's SHA extensions where it has them) and its portable code
    both give hashlib's digests, for every length around the 64-byte block and padding boundaries."""
    import hashlib  # noqa: PLC0415
    import random  # noqa: PLC0415

    rng = random.Random(7)
    lengths = [*range(0, 200), 1000, 4095, 4096, 65536 + 55, (1 << 20) + 3]
    files = []
    for n in lengths:
        f = tmp_path / f"b{n}"
        f.write_bytes(rng.randbytes(n))
        files.append(f)
    res = subprocess.run([str(native.dir / "native" / "sha256-check"), *map(str, files)], capture_output=True,
                         text=True, check=True)
    lines = res.stdout.splitlines()
    assert lines[0] in ("accelerated: yes", "accelerated: no")
    for f, line in zip(files, lines[1:], strict=True):
        fast, plain, name = line.split()
        want = hashlib.sha256(f.read_bytes()).hexdigest()
        assert (fast, plain, name) == (want, want, str(f))


def test_wrpk_shared_tables_cannot_blow_up(native, tmp_path):
    """One 64 KiB launch referenced 12000 times from a 112 KB manifest would be 790 MB as WRP1: refused
    up front, quickly, instead of allocated.  (The 12000 entries are within the entry bound, a quarter
    of the manifest's size, and the 24001 table visits within the Verifier's, 2 x its size + 8.)"""
    pytest.importorskip("flatbuffers")
    manifest = program_manifest(ops=[shared_launch], op_count=12000)
    path = tmp_path / "bomb.wrpk"
    path.write_bytes(wrap_manifest(manifest))
    res = run(native.exe, path, "--list", check_rc=3, timeout=20)
    assert "would exceed" in res.stderr, res.stderr


@pytest.mark.parametrize("n_ifs, body_len, message", [
    (5, 200, "entries in all"),  # the Verifier's visits fit its bound; the entry bound refuses
    (2000, 20000, "failed verification"),  # 80 million visits: the Verifier's bound refuses first
])
def test_wrpk_ifs_sharing_one_body_are_refused_quickly(native, tmp_path, n_ifs, body_len, message):
    """IF tables sharing one body vector are walked once per IF; both readers bound the entries walked
    (tests/test_wrpk.py checks the Python side with the same files)."""
    pytest.importorskip("flatbuffers")
    path = tmp_path / "dag.wrpk"
    path.write_bytes(shared_if_bodies(n_ifs, body_len))
    res = run(native.exe, path, "--list", check_rc=3, timeout=20)
    assert message in res.stderr, res.stderr


C_WRPK = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "wrp_replay.h"

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb"); unsigned char *buf; long len;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END); len = ftell(f); fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)len + 1); *n = fread(buf + 1, 1, (size_t)len, f); fclose(f);
    return buf;  /* the file starts at buf + 1: an odd address */
}

static int replay(wrp_program *p) {
    float x[16], y[16]; int i;
    for (i = 0; i < 16; i++) x[i] = (float)(2 * i);
    if (wrp_program_set(p, "x", x, sizeof x) || wrp_program_run(p, 1) || wrp_program_get(p, "y", y, sizeof y))
        return 1;
    for (i = 0; i < 16; i++) if (y[i] != x[i] * 3.0f + (float)i) return 1;
    return 0;
}

int main(int argc, char **argv) {
    wrp_options o; wrp_program *p = NULL; size_t n; unsigned char *buf; long region_byte;
    if (argc < 3) return 2;
    region_byte = atol(argv[2]);
    wrp_options_init(&o);
    if (o.verify_checksums != 1) return 10;
    if (wrp_program_open(argv[1], &o, &p) != WRP_OK) { printf("%s\n", wrp_last_error()); return 11; }
    if (replay(p)) return 12;
    wrp_program_destroy(p); p = NULL;
    buf = slurp(argv[1], &n);
    if (wrp_program_open_memory(buf + 1, n, NULL, 0, &o, &p) != WRP_OK) { printf("%s\n", wrp_last_error()); return 13; }
    memset(buf, 0xAB, n + 1);  /* the program keeps nothing of the caller's buffer */
    free(buf);
    if (replay(p)) return 14;
    wrp_program_destroy(p); p = NULL;
    buf = slurp(argv[1], &n);
    buf[1 + region_byte] ^= 1;
    if (wrp_program_open_memory(buf + 1, n, NULL, 0, &o, &p) != WRP_ERR_INVALID_FILE || p) return 15;
    printf("tampered: %s\n", wrp_last_error());
    o.verify_checksums = 0;
    if (wrp_program_open_memory(buf + 1, n, NULL, 0, &o, &p) != WRP_OK) { printf("%s\n", wrp_last_error()); return 16; }
    wrp_program_destroy(p);
    free(buf);
    printf("ok\n");
    return 0;
}
"""


def test_wrpk_c_api(native, bundles, tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    (tmp_path / "wrpk.c").write_text(C_WRPK)
    exe = tmp_path / "wrpk_smoke"
    lib_dir = native.lib.parent
    subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-I", str(native.include),
                    str(tmp_path / "wrpk.c"), "-L", str(lib_dir), "-lwrp_replay", f"-Wl,-rpath,{lib_dir}", "-o",
                    str(exe)], check=True)
    bundle = bundles["local_saxpb"]
    _, blobs = wrpk_layout(bundle)
    name, (off, n) = next((k, v) for k, v in sorted(blobs.items()) if k.startswith("region "))
    res = run(exe, bundle, off + n // 2, env={**CLEAN_ENV, "WRP_WARP_LIB_DIR": str(WARP_BIN)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"tampered: regions[" in res.stdout and f"SHA-256 of {name} does not match" in res.stdout, res.stdout


# ---------------------------------------------------------------------------
# CUDA
# ---------------------------------------------------------------------------


def have_cuda() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        return wp.get_cuda_device_count() > 0
    except Exception:  # noqa: BLE001
        return False


def cuda_variant(buf: bytes, arch=86) -> bytes:
    """The same graph claiming to be a CUDA capture (binary-only modules)."""
    b = bytearray(buf)
    b[24] = 0
    struct.pack_into("<I", b, 28, arch)
    f = metadata_fields(b)
    struct.pack_into("<I", b, f["arch"], arch)
    for m in f["modules"]:
        struct.pack_into("<I", b, m["arch"], arch)
    return bytes(b)


@pytest.mark.skipif(have_cuda(), reason="a CUDA device is present")
def test_cuda_without_a_device_is_a_clean_error(native, caps, tmp_path):
    src = caps["local_saxpb"]
    path = copy_capture(src, tmp_path / "cuda", data=cuda_variant(src.read_bytes()))
    run(native.exe, path, "--list", check_rc=0)  # a valid CUDA file
    res = run(native.exe, path, "--device", "cuda:0", "--warp-lib-dir", WARP_BIN, check_rc=2)  # an absent device is a usage error, as in wrp replay
    assert "no CUDA device cuda:0" in res.stderr
    res = run(native.exe, path, "--device", "cpu", "--warp-lib-dir", WARP_BIN, check_rc=2)
    assert "captured for CUDA" in res.stderr


@pytest.mark.cuda
@pytest.mark.skipif(not have_cuda(), reason="no CUDA device (nvidia-smi absent or no GPU)")
@pytest.mark.parametrize("name", sorted(LOCAL))
def test_cuda_replay_matches_stock_warp(native, tmp_path, name):
    prog = LOCAL[name]
    path = tmp_path / f"{name}.wrp"
    fresh = local_capture(prog, path, device="cuda:0")
    inputs = {n: npy_input(fresh[n]) for n in prog.inputs}
    args = [path, "--device", "cuda:0", "--warp-lib-dir", WARP_BIN]
    for n, a in inputs.items():
        np.save(tmp_path / f"in_{n}.npy", a)
        args += ["--input", f"{n}={tmp_path / f'in_{n}.npy'}"]
    for n in prog.bindings:
        args += ["--output", f"{n}={tmp_path / f'out_{n}.npy'}"]
    run(native.exe, *args, env={**os.environ}, check_rc=0)
    graph = wp.capture_load(os.fspath(path), device="cuda:0")
    for n, a in inputs.items():
        graph.set_param(n, wp.array(a.view(fresh[n].numpy().dtype).reshape(fresh[n].numpy().shape),
                                    dtype=fresh[n].dtype, device="cuda:0"))
    wp.capture_launch(graph)
    for n in prog.bindings:
        out = wp.empty_like(fresh[n])
        graph.get_param(n, out)
        assert np.load(tmp_path / f"out_{n}.npy").tobytes() == out.numpy().tobytes(), n


# ---------------------------------------------------------------------------
# Hostile files
# ---------------------------------------------------------------------------


@dataclass
class Hostile:
    name: str
    data: bytes = None       # the .wrp bytes (None: `setup` builds the case)
    must_refuse: bool = True
    setup: object = None     # callable(dir) -> path, for special files
    refusal: int = 3         # the exit code of a refusal: 3 (the file), or 2 for a path that is missing or no file


def base_for_hostile(caps) -> Path:
    for name in ("tape", "structs", "views", "local_norms"):
        if name in caps:
            return caps[name]


def hostile_cases(caps, dense=False):
    """Self-contained hostile variants of one real capture."""
    src = base_for_hostile(caps)
    data = src.read_bytes()
    size = len(data)
    cases = []
    # Truncation at section boundaries and at many offsets.
    cuts = {0, 1, 3, 4, 8, 63, 64, 65, 96, 159, 160, 161, size - 1}
    for _, _, off, n, _ in sections(data):
        cuts |= {off - 1, off + 1, off + 4, off + n - 1}
    cuts |= set(range(0, size, max(1, size // (60 if dense else 25))))
    cases += [Hostile(f"truncate_{c}", data[:c]) for c in sorted(cuts) if 0 <= c < size]
    # One flipped bit in every byte of the header and section table: always invalid.
    for pos in range(0, 160, 1 if dense else 3):
        b = bytearray(data)
        b[pos] ^= 1 << (pos % 8)
        cases.append(Hostile(f"flip_header_{pos}", bytes(b)))
    # Flipped bits in records: refused, or still a valid file that replays.
    rng = random.Random(4)
    recs = [p for p in record_bytes(data) if p >= 160]
    for pos in sorted(rng.sample(recs, min(len(recs), 400 if dense else 120))):
        b = bytearray(data)
        b[pos] ^= 1 << rng.randrange(8)
        cases.append(Hostile(f"flip_record_{pos}", bytes(b), must_refuse=False))
    # Lengths and counts that lie.
    f = metadata_fields(data)
    mem, ops = sections(data)[1][2], sections(data)[2][2]
    first_op = op_offsets(data)[0]
    lies = [(f["version_len"], "<I", 2**32 - 1), (f["num_modules"], "<I", 2**32 - 1),
            (f["num_kernels"], "<I", 2**28), (f["num_bindings"], "<I", 2**31),
            (f["modules"][0]["filename"], "<I", 2**31 - 1), (mem, "<I", 2**32 - 1), (mem + 4 + 8, "<Q", 2**63),
            (mem + 4 + 8, "<Q", 2**40), (ops, "<I", 2**32 - 1), (first_op[0] + 4, "<I", 2**32 - 1),
            (first_op[0] + 4, "<I", 7), (64 + 32 + 16, "<Q", 2**64 - 1), (64 + 8, "<Q", 2**63)]
    if first_op[1] == 1:
        lies += [(first_op[0] + 72, "<I", 2**32 - 1), (first_op[0] + 76, "<I", 2**32 - 1),
                 (first_op[0] + 64, "<H", 0xFFFF), (first_op[0] + 28, "<Q", 2**40),
                 (first_op[0] + 8, "<I", 0)]
    for i, (pos, fmt, val) in enumerate(lies):
        b = bytearray(data)
        struct.pack_into(fmt, b, pos, val)
        cases.append(Hostile(f"lie_{i}_{pos}", bytes(b)))
    # Ops Warp reserves, or that hold process-local pointers, or are unknown.
    for t in (3, 17, 18, 19, 20, 0xFFFFFFFF):
        b = bytearray(data)
        struct.pack_into("<I", b, first_op[0], t)
        cases.append(Hostile(f"op_type_{t}", bytes(b)))
    cases.append(Hostile("trailing_byte", data + b"\0"))
    cases.append(Hostile("not_wrp", b"PK\x03\x04" + bytes(200)))
    return src, cases


def special_cases(src: Path):
    """Files that are not what they claim, and broken module directories."""
    data = src.read_bytes()
    mods = src.with_name(src.stem + "_modules")
    module = next(mods.iterdir()).name

    def with_modules(edit):
        def setup(d):
            path = copy_capture(src, d)
            edit(d / "g_modules")
            return path
        return setup

    def garbage(md):
        (md / module).write_bytes(os.urandom(4096))

    def truncated(md):
        (md / module).write_bytes((md / module).read_bytes()[:300])

    def renamed_symbols(md):
        raw = (md / module).read_bytes()
        (md / module).write_bytes(raw.replace(b"_cpu_forward", b"_cpu_fXrward"))

    def broken_sections(md):
        raw = bytearray((md / module).read_bytes())
        struct.pack_into("<Q", raw, 40, len(raw) - 8)  # section header table past the end
        (md / module).write_bytes(bytes(raw))

    def symlinked(md):
        real = md.parent / "real.o"
        (md / module).rename(real)
        os.symlink(real, md / module)

    def fifo(md):
        (md / module).unlink()
        os.mkfifo(md / module)

    def directory(md):
        (md / module).unlink()
        (md / module).mkdir()

    def dir_symlink(md):
        shutil.move(str(md), str(md.parent / "real_modules"))
        os.symlink(md.parent / "real_modules", md)

    def wrp_fifo(d):
        d.mkdir(parents=True, exist_ok=True)
        os.mkfifo(d / "g.wrp")
        return d / "g.wrp"

    def wrp_dir(d):
        (d / "g.wrp").mkdir(parents=True)
        return d / "g.wrp"

    def wrp_symlink(d):
        copy_capture(src, d, stem="real")
        os.symlink(d / "real.wrp", d / "g.wrp")
        return d / "g.wrp"

    def wrp_empty(d):
        d.mkdir(parents=True, exist_ok=True)
        (d / "g.wrp").write_bytes(b"")
        return d / "g.wrp"

    def no_module_dir(d):
        d.mkdir(parents=True)
        (d / "g.wrp").write_bytes(data)
        return d / "g.wrp"

    return [
        Hostile("module_dir_missing", setup=no_module_dir),
        Hostile("module_missing", setup=with_modules(lambda md: (md / module).unlink())),
        Hostile("module_empty", setup=with_modules(lambda md: (md / module).write_bytes(b""))),
        Hostile("module_garbage", setup=with_modules(garbage)),
        Hostile("module_truncated", setup=with_modules(truncated)),
        Hostile("module_wrong_symbols", setup=with_modules(renamed_symbols)),
        Hostile("module_broken_sections", setup=with_modules(broken_sections)),
        Hostile("module_symlink", setup=with_modules(symlinked)),
        Hostile("module_fifo", setup=with_modules(fifo)),
        Hostile("module_directory", setup=with_modules(directory)),
        Hostile("modules_dir_symlink", setup=with_modules(dir_symlink), must_refuse=False),
        # A path that is no regular file is a usage error (2), as in every wrp command.
        Hostile("wrp_fifo", setup=wrp_fifo, refusal=2),
        Hostile("wrp_directory", setup=wrp_dir, refusal=2),
        Hostile("wrp_symlink", setup=wrp_symlink, must_refuse=False),
        Hostile("wrp_empty", setup=wrp_empty),
        Hostile("wrp_missing", setup=lambda d: d / "absent.wrp", refusal=2),
    ]


def materialize(case: Hostile, src: Path, d: Path) -> Path:
    return case.setup(d) if case.setup else copy_capture(src, d, data=case.data)


def check_hostile(exe, path, case: Hostile, env=None, timeout=30):
    args = [path, "--warp-lib-dir", WARP_BIN]
    res = run(exe, *args, env=env, timeout=timeout)
    msg = f"{case.name}: rc {res.returncode}\n{res.stderr}"
    assert res.returncode in (0, 1, case.refusal), msg
    if case.must_refuse:
        assert res.returncode in (1, case.refusal), msg
    if res.returncode:
        assert res.stderr.startswith("wrp-replay: error: "), msg
        assert "internal error" not in res.stderr, msg
    return res


def test_hostile_files_are_refused_cleanly(native, caps, tmp_path):
    src, cases = hostile_cases(caps, dense=True)
    refused = 0
    for i, case in enumerate(cases):
        path = materialize(case, src, tmp_path / f"c{i}")
        res = check_hostile(native.exe, path, case)
        refused += res.returncode != 0
        if case.must_refuse and res.returncode == 3 and case.data:
            assert " at byte " in res.stderr, f"{case.name}: message names no byte offset: {res.stderr}"
        shutil.rmtree(tmp_path / f"c{i}", ignore_errors=True)
    assert refused > len(cases) // 2


def test_hostile_special_files_and_modules(native, caps, tmp_path):
    src = base_for_hostile(caps)
    for i, case in enumerate(special_cases(src)):
        path = materialize(case, src, tmp_path / f"s{i}")
        res = check_hostile(native.exe, path, case, timeout=15)
        if not case.must_refuse:  # paths the user typed are followed (VALIDATION-RULES.md)
            assert res.returncode == 0, f"{case.name}: {res.stderr}"
            continue
        assert res.returncode == case.refusal, f"{case.name}: {res.stderr}"
        if case.name.startswith("module"):
            assert "module" in res.stderr and ("_modules" in res.stderr or "recapture" in res.stderr), res.stderr


def test_hostile_messages_name_field_and_offset(native, caps, tmp_path):
    src = caps["local_saxpb"]
    data = bytearray(src.read_bytes())
    op, _, _ = op_offsets(data)[0]
    # relocation 0 of the first launch: point it at region 999
    kl, hl, nparams = struct.unpack_from("<HHH", data, op + 64)
    reloc0 = op + 80 + kl + hl + 16 * nparams
    struct.pack_into("<i", data, reloc0 + 4, 999)
    res = run(native.exe, copy_capture(src, tmp_path / "r", data=bytes(data)), "--list", check_rc=3)
    assert f"ops[0] (KERNEL_LAUNCH) at byte {reloc0}: relocation 0 region_id 999 does not exist" in res.stderr
    # an array whose frozen shape reaches past its region
    data = bytearray(src.read_bytes())
    vds = struct.unpack_from("<I", data, op + 76)[0]
    total = struct.unpack_from("<I", data, op + 4)[0]
    struct.pack_into("<i", data, op + total - vds + 16, 1000)  # x.shape[0]
    res = run(native.exe, copy_capture(src, tmp_path / "s", data=bytes(data)), "--list", check_rc=3)
    assert "array data (shape and strides at this offset) reaches outside region" in res.stderr


def test_tests_hostile_generator_variants(native, caps, tmp_path):
    """The project's shared hostile generator (tests/hostile.py), when available."""
    try:
        import hostile  # noqa: PLC0415

        variants = hostile.generate(base_for_hostile(caps), tmp_path / "hostile")
    except Exception as e:  # noqa: BLE001 - another engineer's module may be mid-change
        pytest.skip(f"tests/hostile.py is not usable: {e!r}")
    for v in variants:
        # A hard link is an ordinary regular file with the right bytes; this
        # reader accepts it (it refuses symbolic links, FIFOs and directories).
        # A FILE that is no regular file (FIFO, directory) is a usage error (2), as in every wrp command.
        refusal = 2 if v.category == "not-a-file" and v.name in ("wrp_fifo", "wrp_directory") else 3
        check_hostile(native.exe, v.path, Hostile(v.name, must_refuse=v.must_refuse, refusal=refusal))


# ---------------------------------------------------------------------------
# AddressSanitizer / UBSan
# ---------------------------------------------------------------------------


def test_asan_hostile_set(asan_exe, caps, tmp_path):
    """The hostile set under ASan+UBSan: no sanitizer report, same outcomes."""
    env = {**CLEAN_ENV, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=86",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=87"}
    src, cases = hostile_cases(caps)
    cases += special_cases(src)
    # Only the validation path is instrumented in a meaningful way; replays of
    # still-valid variants load Warp (not instrumented), whose own allocations
    # are not leaks of ours.
    for i, case in enumerate(cases):
        path = materialize(case, src, tmp_path / f"a{i}")
        res = run(asan_exe, path, "--list", env=env, timeout=60)
        assert "Sanitizer" not in res.stderr and "runtime error" not in res.stderr, f"{case.name}:\n{res.stderr}"
        assert res.returncode in (0, case.refusal), f"{case.name}: rc {res.returncode}\n{res.stderr}"
        shutil.rmtree(tmp_path / f"a{i}", ignore_errors=True)
    # Tampered .wrpk bundles: header, manifest, padding, every blob.
    tampered, bundle = tmp_path / "n.wrpk", tmp_path / "b.wrpk"
    convert_with_cli([(caps["local_norms"], tampered), (caps["local_saxpb"], bundle)])
    data = tampered.read_bytes()
    _, _, tampers = tamper_cases(tampered, seed=5)
    for i, (kind, pos, _) in enumerate(tampers[::3]):
        b = bytearray(data)
        b[pos] ^= 0x80 >> (i % 8)
        path = tmp_path / f"k{i}.wrpk"
        path.write_bytes(bytes(b))
        for extra in ([], ["--no-verify"]):
            res = run(asan_exe, path, "--list", *extra, env=env, timeout=60)
            assert "Sanitizer" not in res.stderr and "runtime error" not in res.stderr, f"{kind} {pos}:\n{res.stderr}"
            assert res.returncode in (0, 3), f"{kind} {pos}: rc {res.returncode}\n{res.stderr}"
    full = {**env, "ASAN_OPTIONS": "detect_leaks=0:exitcode=86"}
    prog_path = caps["local_saxpb"]
    np.save(tmp_path / "x.npy", np.ones(16, np.float32))
    res = run(asan_exe, prog_path, "--input", f"x={tmp_path / 'x.npy'}", "--output", f"y={tmp_path / 'y.npy'}",
              "--warp-lib-dir", WARP_BIN, env=full, timeout=120)
    assert res.returncode == 0 and "Sanitizer" not in res.stderr, res.stderr
    res = run(asan_exe, bundle, "--input", f"x={tmp_path / 'x.npy'}", "--output", f"y={tmp_path / 'yk.npy'}",
              "--warp-lib-dir", WARP_BIN, env=full, timeout=120)
    assert res.returncode == 0 and "Sanitizer" not in res.stderr, res.stderr
    assert np.load(tmp_path / "y.npy").tobytes() == np.load(tmp_path / "yk.npy").tobytes()


def test_wrpk_with_shared_operation_tables_rebuilds_the_wrp(native, caps, tmp_path):
    """wrpkit's writer shares one table among identical ops (a step loop); the C++ reader must expand
    every reference, giving back exactly the WRP1 bytes of the looped program."""
    from wrpkit.formats import wrp1, wrpk  # noqa: PLC0415
    from wrpkit.formats.container import open_capture  # noqa: PLC0415

    name = "views" if "views" in caps else sorted(caps)[0]
    with open_capture(caps[name]) as cap:
        prog, files = cap.program, cap.module_files()
        prog.ops = list(prog.ops) * 3
        looped = tmp_path / "looped.wrpk"
        looped.write_bytes(wrpk.encode_wrpk(prog, files))
        want = wrp1.encode_wrp1(prog)
    shared = wrpk.decode_wrpk(looped.read_bytes())
    n = len(shared.ops) // 3
    assert any(shared.ops[i] is shared.ops[i + n] for i in range(n))  # the bundle really shares tables
    out = tmp_path / "looped.wrp"
    res = subprocess.run([str(native.dir / "native" / "wrpk-unpack"), str(looped), str(out)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == want
    run(native.exe, looped, "--warp-lib-dir", WARP_BIN, check_rc=0)  # and it replays


# ---------------------------------------------------------------------------
# Captures of older Warp releases (formats 3, 10, 13-16): validated under
# their own format's rules, listed, and refused for replay with the upgrade
# command (tests/fixtures/legacy/, written by each release's capture_save).
# The rule-by-rule agreement with wrp validate is in tests/parity_cases.py.
# ---------------------------------------------------------------------------

LEGACY_ROOT = ROOT / "tests" / "fixtures" / "legacy"
LEGACY = sorted(LEGACY_ROOT.glob("*/*.wrp"))


@pytest.fixture(scope="session")
def legacy_bundles(tmp_path_factory) -> dict:
    """``{fixture .wrp: its .wrpk}``, converted with ``wrp convert`` (in the fixture's own format)."""
    d = tmp_path_factory.mktemp("legacy-bundles")
    out = {src: d / f"{src.parent.name}-{src.stem}.wrpk" for src in LEGACY}
    convert_with_cli(list(out.items()))
    return out


def _format_of(path: Path) -> int:
    return struct.unpack_from("<I", path.read_bytes(), 4)[0]


def test_every_legacy_fixture_and_its_bundle_validates_and_says_who_wrote_it(native, legacy_bundles):
    from wrpkit.formats.wrp1 import decode_wrp1  # noqa: PLC0415
    from wrpkit.formats.wrp1_layout import describe_format, upgrade_message  # noqa: PLC0415

    manifests = {p.parent.name: json.loads(p.read_text()) for p in LEGACY_ROOT.glob("*/manifest.json")}
    assert len(LEGACY) == sum(len(m["cases"]) for m in manifests.values()) >= 40
    assert {_format_of(p) for p in LEGACY} == {3, 10, 13, 14, 15, 16}
    for src in LEGACY:
        version = _format_of(src)
        names = list(dict.fromkeys(b.name for b in decode_wrp1(src.read_bytes()).bindings))
        for path in (src, legacy_bundles[src]):
            listing = json.loads(run(native.exe, path, "--list", "--json", check_rc=0).stdout)
            assert listing["format_version"] == version, path
            assert listing["format"] == describe_format(version)
            assert (src.parent.name in listing["format"]) if version != 13 else "no released Warp" in listing["format"]
            assert listing["upgrade"] == upgrade_message(version) and listing["warp_version"] == ""
            assert [b["name"] for b in listing["bindings"]] == names, path
            text = run(native.exe, path, "--list", check_rc=0).stdout.splitlines()
            assert text[0] == describe_format(version) and "`wrp upgrade IN OUT" in " ".join(text[1:3]), text
            assert max(map(len, text)) <= 80, text
            assert text[-len(names) - 1] == f"{len(names)} binding(s):"


def test_legacy_replay_is_refused_after_validation_and_writes_nothing(native, legacy_bundles, tmp_path):
    from wrpkit.formats.wrp1_layout import upgrade_message  # noqa: PLC0415

    for src in LEGACY:
        version = _format_of(src)
        for path in (src, legacy_bundles[src]):
            out = tmp_path / "out.npy"
            res = run(native.exe, path, "--output", f"{_first_binding(native, path)}={out}", "--warp-lib-dir",
                      WARP_BIN, check_rc=3)
            assert res.stderr == f"wrp-replay: error: {upgrade_message(version)}\n", res.stderr
            assert ("--kernels" in res.stderr) == (version == 3)
            res = run(native.exe, path, "--json", "--warp-lib-dir", WARP_BIN, check_rc=3)
            assert json.loads(res.stdout) == {"error": upgrade_message(version), "exit_code": 3}
            assert list(tmp_path.iterdir()) == [], f"{path}: wrote {list(tmp_path.iterdir())}"
    # Validation comes first: a broken old file is an invalid file, named by field and offset.
    src = LEGACY_ROOT / "1.14.0" / "saxpy.wrp"
    data = bytearray(src.read_bytes())
    at = 160 + struct.unpack_from("<Q", data, 64 + 32 + 16)[0] + struct.unpack_from("<Q", data, 64 + 16)[0] + 4
    data[at + 57] = 1  # the launch's reserved _pad1 in format 10
    res = run(native.exe, copy_capture(src, tmp_path / "bad", data=bytes(data)), "--warp-lib-dir", WARP_BIN,
              check_rc=3)
    assert f"ops[0] (KERNEL_LAUNCH) at byte {at + 57}: pad byte _pad1+0 must be zero" in res.stderr, res.stderr


def _first_binding(native, path) -> str:
    return json.loads(run(native.exe, path, "--list", "--json", check_rc=0).stdout)["bindings"][0]["name"]


def test_legacy_bundle_images_are_the_fixtures_byte_for_byte(native, legacy_bundles, tmp_path):
    """The .wrpk reader re-encodes an old program in its own format: the image is the original .wrp."""
    for src, bundle in legacy_bundles.items():
        out = tmp_path / f"{bundle.stem}.wrp"
        res = subprocess.run([str(native.dir / "native" / "wrpk-unpack"), str(bundle), str(out)],
                             capture_output=True, text=True)
        assert res.returncode == 0, f"{bundle.name}: {res.stderr}"
        assert out.read_bytes() == src.read_bytes(), f"{bundle.name}: the rebuilt WRP1 image differs from the .wrp"


def test_legacy_formats_through_the_c_api(native):
    """wrp_program_open_memory: validate_only succeeds and reports the format; a replay open fails with
    WRP_ERR_INCOMPATIBLE (7) and the upgrade message; WRP_ERR_INVALID_FILE (2) still comes first."""
    import ctypes  # noqa: PLC0415

    from wrpkit.debug.native_api import _Module, _Options  # noqa: PLC0415
    from wrpkit.formats.wrp1_layout import describe_format, upgrade_message  # noqa: PLC0415

    lib = ctypes.CDLL(str(native.lib))
    lib.wrp_last_error.restype = ctypes.c_char_p
    lib.wrp_program_open_memory.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(_Module),
                                            ctypes.c_size_t, ctypes.POINTER(_Options), ctypes.POINTER(ctypes.c_void_p)]
    for fn in ("wrp_program_format_description", "wrp_program_upgrade_message", "wrp_program_warp_version"):
        getattr(lib, fn).argtypes = [ctypes.c_void_p]
        getattr(lib, fn).restype = ctypes.c_char_p
    lib.wrp_program_format_version.argtypes = [ctypes.c_void_p]
    lib.wrp_program_format_version.restype = ctypes.c_uint32
    lib.wrp_program_destroy.argtypes = [ctypes.c_void_p]

    class OpInfo(ctypes.Structure):
        _fields_ = [("summary", ctypes.c_char_p), ("kind", ctypes.c_char_p), ("kernel", ctypes.c_char_p),
                    ("module", ctypes.c_char_p), ("module_verified", ctypes.c_int), ("note", ctypes.c_char_p)]

    lib.wrp_program_op_info.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(OpInfo)]

    def open_(data: bytes, mdir: Path, validate_only: int):
        opts = _Options()
        lib.wrp_options_init(ctypes.byref(opts))
        opts.validate_only = validate_only
        files = [(p.name.encode(), p.read_bytes()) for p in mdir.iterdir()] if mdir.is_dir() else []
        mods = (_Module * max(1, len(files)))(*[_Module(n, ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p), len(b))
                                               for n, b in files])
        handle = ctypes.c_void_p()
        rc = lib.wrp_program_open_memory(data, len(data), mods, len(files), ctypes.byref(opts), ctypes.byref(handle))
        return rc, handle, (lib.wrp_last_error() or b"").decode()

    for rel, case in (("1.13.0", "struct"), ("1.14.0", "backward"), ("format13", "bsr_transpose"),
                      ("1.17.0", "capture_while"), ("1.18.0", "scan")):
        src = LEGACY_ROOT / rel / f"{case}.wrp"
        version, mdir = _format_of(src), src.with_name(f"{case}_modules")
        rc, handle, err = open_(src.read_bytes(), mdir, 1)
        assert rc == 0, err
        try:
            assert lib.wrp_program_format_version(handle) == version
            assert lib.wrp_program_format_description(handle).decode() == describe_format(version)
            assert lib.wrp_program_upgrade_message(handle).decode() == upgrade_message(version)
            assert lib.wrp_program_warp_version(handle) == b""
            info = OpInfo()  # the launch's kernel key, read at the format's own offsets
            assert lib.wrp_program_op_info(handle, 0, ctypes.byref(info)) == 0
            if info.kind == b"KERNEL_LAUNCH":
                kernels = json.loads((LEGACY_ROOT / rel / "manifest.json").read_text())["cases"][case]["kernels"]
                assert info.kernel.decode() in [k["key"] for k in kernels], info.summary
        finally:
            lib.wrp_program_destroy(handle)
        rc, handle, err = open_(src.read_bytes(), mdir, 0)
        assert (rc, handle.value, err) == (7, None, upgrade_message(version))
        rc, _, err = open_(src.read_bytes()[:-1], mdir, 0)
        assert rc == 2 and "sections" in err, err


def test_asan_legacy_fixtures_and_parity_variants(asan_exe, legacy_bundles, tmp_path):
    """Every legacy fixture, its bundle and every legacy parity variant under ASan+UBSan: the verdicts of the
    release build, no sanitizer report."""
    import parity_cases as pc  # noqa: PLC0415

    env = {**CLEAN_ENV, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=86",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=87"}
    jobs = [(p, "--list", 0) for p in LEGACY] + [(b, "--list", 0) for b in legacy_bundles.values()]
    jobs += [(p, "--json", 3) for p in LEGACY[::4]]
    for i, case in enumerate(pc.LEGACY_CASES):
        jobs.append((pc.build(case, tmp_path / f"v{i}"), "--list", 0 if case.accept else 3))
    for path, flag, rc in jobs:
        res = run(asan_exe, path, flag, env=env, timeout=60)
        assert "Sanitizer" not in res.stderr and "runtime error" not in res.stderr, f"{path}:\n{res.stderr}"
        assert res.returncode == rc, f"{path} {flag}: rc {res.returncode}\n{res.stderr}"
