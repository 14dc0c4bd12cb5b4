"""What the tests share to find the checkout and to run commands, in one place.

* :data:`TESTS_DIR`, :data:`ROOT`, :data:`LEGACY_FIXTURES`: where the helper
  modules (``tests/*.py``), the checkout and the committed legacy captures
  are, wherever the test file that uses them lives (tests sit in feature
  folders under ``tests/``; their helpers stay at ``tests/``).
* :func:`run`, :func:`wrp`, :func:`wrp_module`: a command in a fresh process,
  its output captured as text.
* :func:`invoke`, :func:`invoke_raising`: ``wrp ARGS`` in this process
  (click's ``CliRunner``).
* :func:`processes`: the processes a test started, read from /proc.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: ``tests/``: the helper modules, ``conftest.py`` and ``fixtures/``.
TESTS_DIR = Path(__file__).resolve().parent
#: The checkout.
ROOT = TESTS_DIR.parent
#: The captures of older Warp releases, ``tests/fixtures/legacy/<release>/``.
LEGACY_FIXTURES = TESTS_DIR / "fixtures" / "legacy"


def wrp_exe() -> str:
    """The installed ``wrp``: the one beside this interpreter (a venv's ``bin/wrp``), else ``wrp`` on PATH."""
    exe = Path(sys.executable).parent / "wrp"
    return str(exe) if exe.is_file() else "wrp"


def run(*args, timeout=300, env=None, cwd=None, **kw) -> subprocess.CompletedProcess:
    """``ARGS`` (each made a string) in a fresh process: stdout and stderr captured as text.

    ``env`` replaces the environment (``None``: this process's); other keywords go to ``subprocess.run``.
    """
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=cwd, **kw)


def wrp(*args, **kw) -> subprocess.CompletedProcess:
    """The installed ``wrp ARGS`` (:func:`wrp_exe`) as a user runs it; keywords as :func:`run`'s."""
    return run(wrp_exe(), *args, **kw)


def wrp_module(*args, env=None, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    """``python -m wrpkit.cli ARGS`` in a fresh process, the checkout first on ``PYTHONPATH``.

    ``env``: the environment to start from (``None``: this process's); ``PYTHONPATH`` is set on top of it.
    """
    env = dict(env or os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return run(sys.executable, "-m", "wrpkit.cli", *args, env=env, cwd=cwd, timeout=timeout)


def invoke(*args):
    """``wrp ARGS`` in this process (click's ``CliRunner``); an exception is kept on the result."""
    from click.testing import CliRunner  # noqa: PLC0415

    from wrpkit.cli import main  # noqa: PLC0415

    return CliRunner().invoke(main, [str(a) for a in args])


def invoke_raising(*args):
    """As :func:`invoke`, but an exception the command raises reaches the test."""
    from click.testing import CliRunner  # noqa: PLC0415

    from wrpkit.cli import main  # noqa: PLC0415

    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def processes(match) -> list:
    """``(pid, parent pid, argv, /proc entry)`` of every live process whose ``argv`` (a list of bytes)
    ``match(argv)`` accepts."""
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
            ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if match(argv):
            found.append((int(p.name), ppid, argv, p))
    return found


def native_or_skip(engine: str) -> None:
    """Skip the calling test, saying why, when ``engine`` is ``"native"`` and libwrp_replay is not installed."""
    if engine == "native":
        import pytest  # noqa: PLC0415

        from wrpkit.errors import WrpError  # noqa: PLC0415
        from wrpkit.run.replay.engines import native_paths  # noqa: PLC0415

        try:
            native_paths().require_library()
        except WrpError as e:
            pytest.skip(str(e))
