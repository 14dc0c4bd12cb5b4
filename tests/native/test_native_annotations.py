"""Typed signatures (wrpkit's ANNOTATIONS section) read by wrp-replay: shapes
of inputs and outputs, kept through .wrpk, and bad or misaligned ones refused.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from native_helpers import CLEAN_ENV, WARP_BIN, convert_with_cli, copy_capture, run, sections

pytestmark = pytest.mark.slow  # every test here builds native/ with CMake first


FLOAT32 = 11  # ScalarKind.FLOAT32 in schema/wrp.fbs


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
    from wrpk_manifests import misaligned_annotations, with_annotations  # noqa: PLC0415

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
