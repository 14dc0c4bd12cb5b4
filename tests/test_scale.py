"""Replays that scale with the capture (issue 24).

Containment without copies: a contained replay (``wrp replay``, either
engine, ``.wrp`` or ``.wrpk``) writes no file unless ``--output`` asks (seen
with strace), its child maps the user's file itself, and the outputs table is
computed where the data is, with the same figures in both engines as numpy
computes over an in-process replay.  Every capture is made with stock Warp
(or ``wrpkit.capture``) at test time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import warp as wp

import wrpkit
from wrpkit.checks.binding_stats import stats

wp.config.quiet = True
N = 4096


@wp.kernel
def k_spin(pos: wp.array(dtype=wp.vec3), count: wp.array(dtype=wp.int32), scale: wp.float32):
    i = wp.tid()
    p = pos[i]
    pos[i] = wp.vec3(p[1], -p[0], p[2] * scale)
    wp.atomic_add(count, i % 7, 1)


@wp.kernel
def k_poison(pos: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    if i == 5:
        pos[i] = wp.vec3(wp.nan, wp.inf, 1.0)  # a planted bug: the table must count it


def _typed_capture(path: Path) -> Path:
    """A capture with a signature: vec3 positions (input/output) and an int32 counter."""
    rng = np.random.default_rng(7)
    pos = wp.array(rng.standard_normal((N, 3)).astype(np.float32), dtype=wp.vec3, device="cpu")
    count = wp.zeros(7, dtype=wp.int32, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_spin, dim=N, inputs=[pos, count, 1.5], device="cpu")
        wp.launch(k_poison, dim=N, inputs=[pos], device="cpu")
    rec.save(path, inputs={"pos": pos}, outputs={"pos": pos, "count": count})
    return path


def _stock_capture(path: Path) -> Path:
    """A stock capture_save (no signature): the outputs are raw bytes."""
    pos = wp.array(np.ones((N, 3), np.float32), dtype=wp.vec3, device="cpu")
    count = wp.zeros(7, dtype=wp.int32, device="cpu")
    wp.capture_begin(device="cpu", apic=True)
    wp.launch(k_spin, dim=N, inputs=[pos, count, 2.0], device="cpu")
    graph = wp.capture_end(device="cpu")
    wp.capture_save(graph, str(path), inputs={"pos": pos}, outputs={"count": count})
    return path


@pytest.fixture(scope="module")
def typed(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("typed")
    wrp = _typed_capture(d / "typed.wrp")
    wrpk = d / "typed.wrpk"
    assert _cli("convert", wrp, wrpk).returncode == 0
    return {"wrp": wrp, "wrpk": wrpk}


@pytest.fixture(scope="module")
def stock(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("stock")
    wrp = _stock_capture(d / "stock.wrp")
    wrpk = d / "stock.wrpk"
    assert _cli("convert", wrp, wrpk).returncode == 0
    return {"wrp": wrp, "wrpk": wrpk}


def _wrp_exe() -> str:
    exe = Path(sys.executable).parent / "wrp"
    return str(exe) if exe.is_file() else "wrp"


def _cli(*args, cwd=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([_wrp_exe(), *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd)
    return proc


def _native_or_skip():
    try:
        from wrpkit.cli.replay import find_native  # noqa: PLC0415

        find_native()
    except wrpkit.WrpError:
        pytest.skip("wrp-replay is not built")


#: A system call that makes, changes or removes a file (as strace -f prints it).
_WRITES = re.compile(r"(open(at)?\(.*(O_WRONLY|O_RDWR|O_CREAT|O_TRUNC))|\b(creat|rename(at2?)?|unlink(at)?|"
                     r"mkdir(at)?|link(at)?|truncate)\(")


def _file_writes(trace: str) -> list:
    """The successful calls of ``trace`` that made, changed or removed a file on disk."""
    out = []
    for line in trace.splitlines():
        if not _WRITES.search(line) or re.search(r"= -1 E", line):
            continue
        if re.search(r'"/dev/(null|tty|pts/\d+)"', line):
            continue
        out.append(line)
    return out


@pytest.mark.parametrize("engine", ["python", "native"])
@pytest.mark.parametrize("kind", ["wrp", "wrpk"])
def test_contained_replay_writes_no_file(typed, engine, kind, tmp_path):
    """No temp folder, no private copy of the capture, no outputs file: bindings pass through memory."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    if engine == "native":
        _native_or_skip()
    log = tmp_path / "strace.txt"
    proc = subprocess.run(["strace", "-f", "-qq", "-o", str(log), "-e",
                           "trace=open,openat,creat,rename,renameat,renameat2,unlink,unlinkat,mkdir,mkdirat,"
                           "link,linkat,truncate", _wrp_exe(), "replay", str(typed[kind]), "--engine", engine,
                           "--json", "--repeat", "3"], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["outputs"]["pos"]["nan"] == 1 and report["outputs"]["pos"]["inf"] == 1
    writes = _file_writes(log.read_text())
    assert writes == [], "\n".join(writes[:10])
    assert sorted(os.listdir(tmp_path)) == ["strace.txt"]


def test_output_is_the_only_file_written(typed, tmp_path):
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    log = tmp_path / "strace.txt"
    out = tmp_path / "out.npz"
    proc = subprocess.run(["strace", "-f", "-qq", "-o", str(log), "-e", "trace=openat,rename,renameat2,mkdir",
                           _wrp_exe(), "replay", str(typed["wrp"]), "--output", str(out)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    writes = _file_writes(log.read_text())
    assert writes and all(str(tmp_path) in w for w in writes), "\n".join(writes[:10])
    with np.load(out) as z:
        assert z["pos"].shape == (N, 3)


@pytest.mark.parametrize("kind", ["wrp", "wrpk"])
def test_outputs_table_is_the_same_in_both_engines_and_matches_numpy(typed, kind):
    """The child (or wrp-replay) summarises Warp's memory in place: the figures are numpy's over a replay."""
    _native_or_skip()
    want = wrpkit.load(typed[kind]).run()
    reports = {}
    for engine in ("python", "native"):
        proc = _cli("replay", typed[kind], "--engine", engine, "--json")
        assert proc.returncode == 0, proc.stderr
        reports[engine] = json.loads(proc.stdout)["outputs"]
    for name in ("pos", "count"):
        expect = stats(want[name])
        for engine, outs in reports.items():
            got = outs[name]
            assert got["shape"] == expect["shape"] and got["dtype"] == expect["dtype"], (engine, got)
            assert (got["nan"], got["inf"]) == (expect["nan"], expect["inf"]), (engine, got)
            assert got["min"] == expect["min"] and got["max"] == expect["max"], (engine, got)
            assert got["mean"] == pytest.approx(expect["mean"], rel=1e-12), (engine, got)
    assert reports["python"]["pos"]["nan"] == 1


def test_stock_outputs_are_raw_unless_typed(stock):
    """A stock file records no dtype: raw bytes, unless --dtype types the binding (then the numbers agree)."""
    _native_or_skip()
    for engine in ("python", "native"):
        proc = _cli("replay", stock["wrp"], "--engine", engine, "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["outputs"]["count"]["raw"] is True
    want = np.frombuffer(wrpkit.load(stock["wrp"]).run()["count"].tobytes(), np.int32)
    for engine in ("python", "native"):
        proc = _cli("replay", stock["wrpk"], "--engine", engine, "--json", "--dtype", "count=int32")
        assert proc.returncode == 0, proc.stderr
        got = json.loads(proc.stdout)["outputs"]["count"]
        assert got["dtype"] == "int32" and got["min"] == int(want.min()) and got["max"] == int(want.max())
