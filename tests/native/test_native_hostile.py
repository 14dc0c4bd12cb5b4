"""Hostile files (truncated, bit-flipped, lying about lengths, odd module files,
not a regular file) must be refused by wrp-replay with a clear message and
exit status 3 (or 1), never a signal, crash or hang.
"""

from __future__ import annotations

import shutil
import struct

import pytest

from native_helpers import (
    Hostile,
    WARP_BIN,
    base_for_hostile,
    copy_capture,
    hostile_cases,
    materialize,
    op_offsets,
    run,
    special_cases,
)

pytestmark = pytest.mark.slow  # every test here builds native/ with CMake first


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
