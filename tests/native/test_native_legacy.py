"""Captures of older Warp releases (formats 3, 10, 13-16): validated under
their own format's rules, listed, and refused for replay with the upgrade
command (tests/fixtures/legacy/, written by each release's capture_save).
The rule-by-rule agreement with wrp validate is in tests/parity_cases.py.
"""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import pytest

from native_helpers import CLEAN_ENV, LEGACY, LEGACY_ROOT, WARP_BIN, copy_capture, run

pytestmark = pytest.mark.slow  # every test here builds native/ with CMake first


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

    from wrpkit.run.replay.native_api import _Module, _Options  # noqa: PLC0415
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
