"""One table of crash signals: wrpkit/errors.py CRASH_SIGNALS.  native/cli/crash_signals.h is generated
from it (tools/gen_crash_signals.py); the committed header must be what the script writes now, and
compiled, it must name the same signals with the same numbers as Python sees on this platform."""

from __future__ import annotations

import signal

from header_printer import assert_generator_current, needs_cxx, printed_lines
from wrpkit.errors import CRASH_SIGNAL_NUMBERS, CRASH_SIGNALS
from proc_helpers import ROOT



def test_committed_header_is_what_the_generator_writes_and_check_catches_drift(tmp_path):
    assert_generator_current(ROOT / "tools" / "gen_crash_signals.py", ROOT / "native" / "cli" / "crash_signals.h",
                             ("SIGBUS, ", "SIGUSR1, "), tmp_path)


def test_table_names_real_signals_with_meanings():
    assert list(CRASH_SIGNALS) == ["SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT"]
    assert all(isinstance(m, str) and len(m) > 10 for m in CRASH_SIGNALS.values())
    assert CRASH_SIGNAL_NUMBERS == {int(getattr(signal, n)): n for n in CRASH_SIGNALS}
    # Not a crash: a kill from a person or the OOM killer, an interrupt.
    assert not {signal.SIGKILL, signal.SIGTERM, signal.SIGINT} & set(CRASH_SIGNAL_NUMBERS)


def test_python_users_name_signals_from_the_table():
    from wrpkit.run.contain.served import signal_name

    for num, name in CRASH_SIGNAL_NUMBERS.items():
        assert signal_name(num) == name
    assert signal_name(int(signal.SIGKILL)) == "SIGKILL"


PRINTER = r"""
#include <cstdio>
#include "crash_signals.h"
int main() {
    for (const wrpcli::CrashSignal& s : wrpcli::kCrashSignals) std::printf("%d %s|%s\n", s.number, s.name, s.meaning);
}
"""


@needs_cxx
def test_compiled_header_agrees_with_python(tmp_path):
    seen = {}
    for row in printed_lines(PRINTER, ROOT / "native" / "cli", tmp_path):
        head, meaning = row.split("|", 1)
        num, name = head.split(" ")
        seen[int(num)] = name
        assert meaning == CRASH_SIGNALS[name]
    assert seen == CRASH_SIGNAL_NUMBERS
