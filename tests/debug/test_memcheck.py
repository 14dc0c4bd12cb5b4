"""``wrp memcheck`` on programs with an out-of-bounds access planted where a user would not look.

Each case of ``tests/memcheck_program.py`` (a too-large launch, an off-by-one
over a ``wp.array2d``'s columns, a write through an indexed array, a read
before an array's start, a bad launch inside an IF inside a WHILE) is captured
at test time with stock Warp and with ``wrpkit.capture``, with and without
the bug.  The answer is held against Warp's own: the same step run eagerly in
Warp's debug mode, whose bounds assertion stops at the launch that went out
of bounds.
"""

from __future__ import annotations

import json
import re
import sys

import pytest
from proc_helpers import TESTS_DIR, run, wrp

# Each test plants an out-of-bounds access and finds it with guarded, stepped replays in a child: a
# fault caught, like the crash tests the fast lane leaves out. Making the captures and the Warp
# debug-mode runs they are held to takes about 20 s.
pytestmark = pytest.mark.slow

PROGRAM = TESTS_DIR / "memcheck_program.py"
KERNELS = TESTS_DIR / "memcheck_kernels.py"
CASES = ("launch", "rows", "indexed", "under", "nested")
#: What each planted bug is, as memcheck must name it: kernel, argument (0-based), its name, access,
#: flat element, side, and (nested) the path and WHILE iteration.
EXPECTED = {
    "launch": ("scale", 1, "y", "write", 64, "after the end", "0", None),
    "rows": ("fill_rows", 0, "a", "write", 32, "after the end", "1", None),
    "indexed": ("scatter", 0, "dst", "write", 64, "after the end", "1", None),
    "under": ("lookback", 0, "a", "read", -1, "before the start", "1", None),
    "nested": ("scale", 1, "y", "write", 64, "after the end", "0.1.0", 2),
}


@pytest.fixture(scope="module")
def captures(tmp_path_factory) -> dict:
    """``{(case, bug, how): path}`` for every case, with and without the bug, stock and wrpkit."""
    d = tmp_path_factory.mktemp("memcheck")
    out = {}
    for case in CASES:
        for bug in (1, 0):
            for how in ("stock", "wrpkit"):
                path = d / f"{case}-{bug}-{how}.wrp"
                r = run(sys.executable, PROGRAM, case, bug, how, path)
                assert r.returncode == 0, r.stderr
                out[(case, bug, how)] = path
    return out


@pytest.fixture(scope="module")
def eager(tmp_path_factory) -> dict:
    """``{case: kernel}``: the launch Warp's debug mode stopped at, run eagerly (no capture)."""
    out = {}
    for case in CASES:
        r = run(sys.executable, PROGRAM, case, 1, "eager-debug", "-")
        assert "Assertion failed" in r.stderr, (case, r.stdout, r.stderr)
        launches = re.findall(r"^LAUNCH (\d+) (\w+)$", r.stdout, re.M)
        assert launches and "DONE" not in r.stdout
        out[case] = launches[-1][1]
        ok = run(sys.executable, PROGRAM, case, 0, "eager-debug", "-")
        assert ok.returncode == 0 and "DONE" in ok.stdout, (case, ok.stderr)
    return out


def memcheck(path, *extra):
    r = wrp("memcheck", path, "--json", *extra)
    return r.returncode, json.loads(r.stdout), r


@pytest.mark.parametrize("how", ["stock", "wrpkit"])
@pytest.mark.parametrize("case", CASES)
def test_names_the_access_warps_debug_mode_stops_at(captures, eager, case, how):
    code, d, r = memcheck(captures[(case, 1, how)])
    assert code == 1, r.stderr
    v = d["violation"]
    kernel, arg, name, access, element, side, path, iteration = EXPECTED[case]
    assert v["kernel"] == kernel == eager[case]
    assert (v["access"], v["side"], v["path"], v["iteration"], v["kind"]) == (access, side, path, iteration,
                                                                              "KERNEL_LAUNCH")
    hit = [a for a in v["arguments"] if a["index"] == arg]
    assert hit, v["arguments"]
    assert hit[0]["element"] == element
    # a wrpkit capture knows its argument names; a stock one is numbered as inspect numbers it
    assert hit[0]["name"] == (name if how == "wrpkit" else f"arg{arg}")
    ops = wrp("inspect", captures[(case, 1, how)], "--ops", "--json")
    assert ops.returncode == 0


@pytest.mark.parametrize("how", ["stock", "wrpkit"])
@pytest.mark.parametrize("case", CASES)
def test_clean_without_the_bug(captures, case, how):
    code, d, r = memcheck(captures[(case, 0, how)])
    assert code == 0, r.stdout + r.stderr
    assert d["clean"] and d["violation"] is None
    assert d["passes"] == ["overrun", "underrun"] and d["ops"] > 0 and d["regions"] > 0
    assert d["unguarded"] == []


def test_both_engines_and_text(captures):
    for engine in ("python", "native"):
        r = wrp("memcheck", captures[("launch", 1, "wrpkit")], "--engine", engine)
        assert r.returncode == 1, r.stderr
        text = " ".join(r.stdout.split())
        assert "out-of-bounds write: op 0 kernel 'scale' writes region" in text
        assert "argument 1 (y float32) at element 64 of its 64" in text
        assert "not seen by memcheck:" in text
    r = wrp("memcheck", captures[("launch", 0, "wrpkit")])
    assert r.returncode == 0 and "no out-of-bounds access in 2 ops" in r.stdout


def test_kernels_names_stock_arguments_and_their_lines(captures):
    code, d, r = memcheck(captures[("launch", 1, "stock")], "--kernels", KERNELS)
    assert code == 1, r.stderr
    arg = [a for a in d["violation"]["arguments"] if a["index"] == 1][0]
    assert arg["name"] == "y"
    src = KERNELS.read_text().splitlines()
    want = [n for n, line in enumerate(src, 1) if line.strip() == "y[i] = x[i] * 2.0"]
    assert arg["lines"] == want


def test_strict_passes_only_when_every_region_was_guarded(captures):
    code, d, r = memcheck(captures[("nested", 0, "wrpkit")], "--strict")
    assert code == 0 and d["strict_failed"] is False and d["unguarded"] == [] and d["regions"] >= 5, r.stderr
    code, d, r = memcheck(captures[("nested", 1, "wrpkit")], "--strict")
    assert code == 1 and d["violation"] is not None and d["strict_failed"] is False


def test_refusals(captures, tmp_path):
    r = wrp("memcheck", captures[("launch", 1, "stock")], "--device", "cuda:0")
    assert r.returncode == 2 and "recorded for the CPU" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "cut.wrp"
    bad.write_bytes(captures[("launch", 1, "stock")].read_bytes()[:100])
    r = wrp("memcheck", bad)
    assert r.returncode == 3 and "Traceback" not in r.stderr
    r = wrp("memcheck", tmp_path / "missing.wrp")
    assert r.returncode == 2
    r = wrp("memcheck", "--help")
    assert r.returncode == 0 and "Examples:" in r.stdout


def test_compute_sanitizer_reports_are_read_in_the_captures_terms(captures):
    """A CUDA capture is checked by NVIDIA's compute-sanitizer on wrp-replay (no GPU here: its report,
    in the form its manual shows, is read against a real capture's kernel symbols)."""
    from wrpkit.debug.common import open_program  # noqa: PLC0415
    from wrpkit.debug.memcheck import sanitizer_violation  # noqa: PLC0415

    prog = open_program(captures[("launch", 1, "stock")]).model
    scale = next(k for k in prog.kernels if k.kernel_key == "scale")
    report = ("========= COMPUTE-SANITIZER\n"
              "========= Invalid __global__ write of size 4 bytes\n"
              f"=========     at {scale.forward_name}+0x1d0\n"
              "=========     by thread (64,0,0) in block (0,0,0)\n"
              "=========     Address 0x7f3a2c000100 is out of bounds\n"
              "=========     and is 1 bytes after the nearest allocation at 0x7f3a2c000000 of size 256 bytes\n")
    v = sanitizer_violation(report, prog)
    assert (v["kernel"], v["access"], v["thread"], v["block"], v["size"]) == ("scale", "write", [64, 0, 0],
                                                                            [0, 0, 0], 4)
    assert v["side"].startswith("Address 0x7f3a2c000100 is out of bounds")
    assert sanitizer_violation("========= ERROR SUMMARY: 0 errors\n", prog) is None


OVERLOADS = '''
import sys
from typing import Any
import numpy as np
import warp as wp

wp.config.quiet = True


@wp.kernel
def cast(dest: wp.array(dtype=Any), src: wp.array(dtype=Any)):
    i = wp.tid()
    dest[i] = dest.dtype(src[i])


big_src = wp.array(np.ones(64, np.float64))
big_dst = wp.zeros(64, dtype=wp.float64)
small_src = wp.array(np.ones(16, np.float32))
small_dst = wp.zeros(16, dtype=wp.float32)
wp.launch(cast, dim=64, inputs=[big_dst, big_src])
wp.launch(cast, dim=16, inputs=[small_dst, small_src])
wp.capture_begin(device="cpu", apic=True)
wp.launch(cast, dim=64, inputs=[big_dst, big_src])
wp.launch(cast, dim=16, inputs=[small_dst, small_src])
g = wp.capture_end()
wp.capture_save(g, sys.argv[1], inputs={"small_src": small_src}, outputs={"small_dst": small_dst})
'''


def test_a_generic_kernel_replayed_with_one_overload_is_caught_and_explained(tmp_path):
    """Warp's own fem examples launch a generic kernel (``_array_cast_kernel``) with two dtypes; the
    file records one overload, so the replay runs the float64 code on the float32 arrays, past their
    end (stock Warp's replay of fem/example_navier_stokes dies of heap corruption). memcheck names
    the launch and gives wrp check's lint-overloads finding as the cause."""
    script = tmp_path / "overloads.py"
    script.write_text(OVERLOADS)
    path = tmp_path / "cast.wrp"
    r = run(sys.executable, script, path)
    assert r.returncode == 0, r.stderr
    code, d, r = memcheck(path)
    assert code == 1, r.stderr
    v = d["violation"]
    assert (v["op"], v["kernel"], v["side"]) == (1, "cast", "after the end")
    assert v["byte_offset"] == 64 and v["region_size"] == 64  # 16 float32, read as float64
    assert "kernel 'cast' has 2 compiled overloads" in v["cause"] and "lint-overloads" in v["cause"]
