"""Atomic, durable writes: a killed writer leaves the old files intact and nothing else;
concurrent writers never let a reader see a .wrp whose modules are missing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from wrpkit.formats.container import open_capture
from wrpkit.formats.convert import convert
from wrpkit.atomic_writes import atomic_write
from wrpkit.module_dirs import modules_dir_for
from wrpkit.checks.validate import validate_capture
from proc_helpers import ROOT



def _spawn(code: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _listing(d: Path) -> set:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


def test_killed_writer_leaves_old_file_and_no_temp_files(tmp_path):
    dest = tmp_path / "out.bin"
    dest.write_bytes(b"old contents")
    before = _listing(tmp_path)
    proc = _spawn(f"""
        import sys, time
        from wrpkit.atomic_writes import atomic_write
        def chunks():
            for i in range(1000):
                yield b"x" * (1 << 20)
                if i == 3:
                    print("ready", flush=True)
                    time.sleep(60)
        atomic_write({str(dest)!r}, chunks())
    """)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert dest.read_bytes() == b"old contents"
    assert _listing(tmp_path) == before


def test_killed_publish_keeps_a_loadable_pair(captures, tmp_path):
    dest = tmp_path / "g.wrp"
    convert(captures["views"], dest)
    old = dest.read_bytes()
    proc = _spawn(f"""
        import time
        from wrpkit import atomic_writes
        from wrpkit.formats.container import open_capture
        from wrpkit.formats.wrp1 import iter_wrp1_chunks
        with open_capture({str(captures["bsr"])!r}) as cap:
            mods = {{k: bytes(v) for k, v in cap.module_files().items()}}
            chunks = list(iter_wrp1_chunks(cap.program))
        def slow():
            for c in chunks:
                yield c
            print("ready", flush=True)
            time.sleep(60)
        atomic_writes.publish_wrp({str(dest)!r}, slow(), mods)
    """)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert dest.read_bytes() == old
    with open_capture(dest) as cap:
        assert validate_capture(cap) == []
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]


def test_atomic_write_failure_leaves_nothing(tmp_path):
    dest = tmp_path / "f.bin"

    def bad():
        yield b"abc"
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        atomic_write(dest, bad())
    assert list(tmp_path.iterdir()) == []


def test_concurrent_writers_and_a_reader_never_see_a_torn_pair(captures, tmp_path):
    dest = tmp_path / "shared.wrp"
    convert(captures["views"], dest)
    writers = [_spawn(f"""
        from wrpkit.formats.convert import convert
        for i in range(25):
            convert({str(src)!r}, {str(dest)!r})
    """) for src in (captures["views"], captures["bsr"])]
    reads = torn = 0
    deadline = time.time() + 120
    while any(w.poll() is None for w in writers) and time.time() < deadline:
        with open_capture(dest) as cap:
            problems = validate_capture(cap)
        reads += 1
        torn += bool(problems)
    for w in writers:
        assert w.wait(timeout=60) == 0, w.stderr.read()
    assert reads > 0 and torn == 0
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
    assert modules_dir_for(dest).is_dir()


def test_writeback_helper_is_done_before_the_write_returns_or_fails(tmp_path):
    """Writeback of a large file starts on a helper thread; it must not outlive the write, even a failed one."""
    import threading  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    piece = bytes(8 << 20)
    dest = tmp_path / "big.bin"
    assert atomic_write(dest, [piece] * 9) == 9 * len(piece)
    assert dest.stat().st_size == 9 * len(piece)
    assert not [t for t in threading.enumerate() if t.name == "wrpkit-writeback"]
    # A large typed view (as region data is) is written in pieces, straight from its buffer.
    values = np.arange(10_000_003, dtype=np.float32)
    assert atomic_write(dest, [b"head", memoryview(values), b"tail"]) == 8 + values.nbytes
    assert dest.read_bytes() == b"head" + values.tobytes() + b"tail"

    def failing():
        yield from [piece] * 9
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        atomic_write(tmp_path / "never.bin", failing())
    assert not (tmp_path / "never.bin").exists()
    assert not [t for t in threading.enumerate() if t.name == "wrpkit-writeback"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.bin"]
