"""wrp-replay built with AddressSanitizer / UBSan (WRP_SANITIZE=ON) on the
hostile set.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from native_helpers import (
    CLEAN_ENV,
    WARP_BIN,
    convert_with_cli,
    hostile_cases,
    materialize,
    run,
    special_cases,
    tamper_cases,
)

pytestmark = pytest.mark.slow  # every test here builds native/ with CMake first


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
