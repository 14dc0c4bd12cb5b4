"""Compile a small C++ program against a generated header and return what it prints (the tests that hold
generated C++ tables to their Python source)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

#: Skips a test where no C++ compiler is installed.
needs_cxx = pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")


def printed_lines(source: str, include_dir: Path, work: Path) -> list:
    """Build ``source`` (C++17) with ``include_dir`` on the include path in ``work``, run it, return its stdout lines.

    Raises:
        subprocess.CalledProcessError: The program does not compile or exits non-zero.
    """
    src, exe = work / "printer.cpp", work / "printer"
    src.write_text(source)
    subprocess.run(["c++", "-std=c++17", "-I", str(include_dir), str(src), "-o", str(exe)], check=True)
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()


def assert_generator_current(generator: Path, header: Path, edit: tuple, work: Path) -> None:
    """The committed ``header`` is what ``generator`` writes now, and ``--check`` catches a header
    edited by hand (``edit``: ``(old, new)`` text, replaced once in a copy in ``work``)."""
    import sys  # noqa: PLC0415

    res = subprocess.run([sys.executable, str(generator), "--check"], capture_output=True, text=True)
    assert res.returncode == 0, (f"{header} drifted from its source: run python {generator}", res.stderr)
    edited = work / header.name
    text = header.read_text()
    assert edit[0] in text, edit
    edited.write_text(text.replace(edit[0], edit[1], 1))
    res = subprocess.run([sys.executable, str(generator), "--check", "--out", str(edited)], capture_output=True,
                         text=True)
    assert res.returncode == 1 and "stale" in res.stderr, res.stderr
