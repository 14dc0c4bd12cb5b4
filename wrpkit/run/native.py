"""Where the C++ replayer ``wrp-replay`` is, and the environment it runs in.

One place for both, used by ``wrp replay --engine native``, ``wrp
export-runtime`` and ``wrp regress --engine native``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from ..errors import WrpError

NATIVE_EXE = "wrp-replay"


def find_native() -> Path:
    """Path of the ``wrp-replay`` executable.

    Looked for, in order: ``$WRP_REPLAY``, next to the Python executable,
    on ``PATH``, in ``wrpkit/_native/bin/``.

    Raises:
        WrpError: It is not built or installed.
    """
    exe = NATIVE_EXE + (".exe" if os.name == "nt" else "")
    candidates = []
    env = os.environ.get("WRP_REPLAY")
    if env:
        candidates.append(Path(env))
    candidates.append(Path(sys.executable).parent / exe)
    which = shutil.which(exe)
    if which:
        candidates.append(Path(which))
    candidates.append(Path(__file__).resolve().parents[1] / "_native" / "bin" / exe)
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise WrpError(
        f"the native replayer `{NATIVE_EXE}` is not built or installed (looked next to {sys.executable}, on PATH "
        f"and in wrpkit/_native/bin/)",
        hint="Install wrpkit with `pip install .` from the source tree, which builds it with CMake, "
             "or use --engine python.")


def native_env() -> dict:
    """The environment for ``wrp-replay``: this one, with ``WRP_WARP_LIB_DIR`` set to the warp-lang this
    Python uses (``warp.so``, ``warp-clang.so``), found without importing it, unless already set."""
    env = dict(os.environ)
    if not env.get("WRP_WARP_LIB_DIR"):
        import importlib.util  # noqa: PLC0415

        spec = importlib.util.find_spec("warp")
        if spec is not None and spec.origin:
            env["WRP_WARP_LIB_DIR"] = os.path.join(os.path.dirname(spec.origin), "bin")
    return env


__all__ = ["find_native", "native_env", "NATIVE_EXE"]
