"""The CMake build of native/: what the binaries link, the generated Python
FlatBuffers, and wrp-replay's help and usage errors.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from native_helpers import ROOT, WARP_BIN, run

pytestmark = pytest.mark.slow  # every test here builds native/ with CMake first


def needed_libraries(path: Path) -> set:
    readelf = shutil.which("readelf")
    if not readelf:
        pytest.skip("readelf is not installed")
    out = subprocess.run([readelf, "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return {line.split("[")[1].split("]")[0] for line in out.splitlines() if "(NEEDED)" in line}


def test_binaries_link_only_the_c_and_cxx_runtime(native):
    # ... and OpenSSL's libcrypto (a system library), which checks signed captures.
    allowed = {"libc.so.6", "libdl.so.2", "libpthread.so.0", "libstdc++.so.6", "libgcc_s.so.1", "libm.so.6",
               "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "libcrypto.so.3"}
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
    wide = [ln for ln in res.stdout.splitlines() if len(ln) > 80]
    assert not wide, wide  # 80 columns, as every wrp command
    run(native.exe, check_rc=2)
    f = next(iter(caps.values()))
    for bad in (["--repeat", "0"], ["--repeat", "x"], ["--warmup", "-1"], ["--input", "novalue"], ["--bogus"],
                ["--device", "gpu"], ["--device", "cuda:x"], ["--output", "a=o.npy", "--output", "b=o.npy"]):
        res = run(native.exe, f, *bad, "--warp-lib-dir", WARP_BIN)
        assert res.returncode == 2, (bad, res.stderr)
        assert res.stderr.startswith("wrp-replay: error:"), res.stderr
