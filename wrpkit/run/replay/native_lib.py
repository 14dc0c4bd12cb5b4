"""Where ``libwrp_replay`` is: the one search, for the engines, the C API through ctypes and the
SIGBUS guard (:mod:`wrpkit.run.load.file_guard`), which may not import the engines (they import it)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

NATIVE_LIB = "libwrp_replay.so" if sys.platform != "darwin" else "libwrp_replay.dylib"
#: ``wrpkit/_native/``: what ``pip install .`` puts beside the package (library, header, wrp-replay).
PACKAGE_NATIVE = Path(__file__).resolve().parents[2] / "_native"  # wrpkit/run/replay/ -> wrpkit/


def find_library() -> Optional[Path]:
    """``$WRP_REPLAY_LIB``, else ``wrpkit/_native/lib/``; an editable install puts the built library in
    site-packages, beside the source tree, hence the ``sys.path`` entries.  None when none is built."""
    candidates = [Path(os.environ["WRP_REPLAY_LIB"])] if os.environ.get("WRP_REPLAY_LIB") else []
    candidates += [PACKAGE_NATIVE / "lib" / NATIVE_LIB, PACKAGE_NATIVE / NATIVE_LIB]
    candidates += [Path(p) / "wrpkit" / "_native" / "lib" / NATIVE_LIB for p in sys.path if p]
    return next((c for c in candidates if c.is_file()), None)


def find_memguard() -> Optional[Path]:
    """``libwrp_memguard`` (``wrp memcheck``'s guard-page allocator), beside ``libwrp_replay``; None when not built."""
    lib = find_library()
    if lib is None:
        return None
    guard = lib.with_name("libwrp_memguard.so" if sys.platform != "darwin" else "libwrp_memguard.dylib")
    return guard if guard.is_file() else None
