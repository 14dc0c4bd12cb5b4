"""One table of crash signals: wrpkit/errors.py CRASH_SIGNALS.  native/cli/crash_signals.h is generated
from it (tools/gen_crash_signals.py); the committed header must be what the script writes now, and
compiled, it must name the same signals with the same numbers as Python sees on this platform."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from wrpkit.errors import CRASH_SIGNAL_NUMBERS, CRASH_SIGNALS

ROOT = Path(__file__).resolve().parent.parent
HEADER = ROOT / "native" / "cli" / "crash_signals.h"
sys.path.insert(0, str(ROOT / "tools"))

import gen_crash_signals  # noqa: E402


def test_committed_header_matches_the_python_table():
    assert HEADER.read_text() == gen_crash_signals.render(), (
        "native/cli/crash_signals.h drifted from wrpkit/errors.py CRASH_SIGNALS: run python tools/gen_crash_signals.py")


def test_check_mode_fails_on_a_stale_header(tmp_path):
    cmd = [sys.executable, str(ROOT / "tools" / "gen_crash_signals.py")]
    fresh, stale = tmp_path / "fresh.h", tmp_path / "stale.h"
    assert subprocess.run(cmd + ["--out", str(fresh)], capture_output=True).returncode == 0
    assert subprocess.run(cmd + ["--check", "--out", str(fresh)], capture_output=True).returncode == 0
    stale.write_text(fresh.read_text().replace('    {SIGBUS, "SIGBUS"', '    // {SIGBUS, "SIGBUS"', 1))
    res = subprocess.run(cmd + ["--check", "--out", str(stale)], capture_output=True, text=True)
    assert res.returncode == 1 and "stale" in res.stderr


def test_table_names_real_signals_with_meanings():
    assert list(CRASH_SIGNALS) == ["SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT"]
    assert all(isinstance(m, str) and len(m) > 10 for m in CRASH_SIGNALS.values())
    assert CRASH_SIGNAL_NUMBERS == {int(getattr(signal, n)): n for n in CRASH_SIGNALS}
    # Not a crash: a kill from a person or the OOM killer, an interrupt.
    assert not {signal.SIGKILL, signal.SIGTERM, signal.SIGINT} & set(CRASH_SIGNAL_NUMBERS)


def test_python_users_name_signals_from_the_table():
    from wrpkit.run.isolate import _signal_name

    for num, name in CRASH_SIGNAL_NUMBERS.items():
        assert _signal_name(num) == name
    assert _signal_name(int(signal.SIGKILL)) == "SIGKILL"


PRINTER = r"""
#include <cstdio>
#include "crash_signals.h"
int main() {
    for (const wrpcli::CrashSignal& s : wrpcli::kCrashSignals) std::printf("%d %s|%s\n", s.number, s.name, s.meaning);
}
"""


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
def test_compiled_header_agrees_with_python(tmp_path):
    src = tmp_path / "p.cpp"
    src.write_text(PRINTER)
    exe = tmp_path / "p"
    subprocess.run(["c++", "-std=c++17", "-I", str(HEADER.parent), str(src), "-o", str(exe)], check=True)
    rows = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    seen = {}
    for row in rows:
        head, meaning = row.split("|", 1)
        num, name = head.split(" ")
        seen[int(num)] = name
        assert meaning == CRASH_SIGNALS[name]
    assert seen == CRASH_SIGNAL_NUMBERS
