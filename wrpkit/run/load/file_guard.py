"""A file truncated while it is read: one line naming it and exit 3, never a death by SIGBUS.

wrpkit maps the files it reads (:func:`wrpkit.file_reads.map_file`).  When another program
truncates a mapped file, the next load from a page past its new end is a SIGBUS, and a Python
signal handler cannot help: it would run only after the faulting load returned, which it never
does.  ``libwrp_replay`` has the handler that can (``native/src/mapped_file.cpp``): it knows the
ranges of the files registered with it (``wrp_guard_mapping``), and for a fault inside one writes
the prepared line and ends the process with exit 3 (``docs/exit-codes.md``); a fault anywhere
else goes to the disposition it replaced.

:func:`install` puts every mapping :mod:`wrpkit.file_reads` makes from then on under that handler.
The ``wrp`` command line installs it, and so do the children that replay, trace and profile.
Without the library (not built), nothing is installed and a truncated file is the SIGBUS it was.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import weakref
from pathlib import Path

from ... import file_reads
from ..replay.native_lib import find_library as _find_library

#: The exit code of a process a file truncated under it ended (``docs/exit-codes.md``: 3, a file that
#: cannot be used), and the words its line always holds.
FILE_CHANGED_EXIT = 3
CHANGED_WORDS = "changed while being read"
_GUARDED = False  # whether this process guarded a mapping (else aliases have nothing to name)

class _PyBuffer(ctypes.Structure):
    # Python's Py_buffer (the stable buffer ABI): only `buf` is read.
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.py_object), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]


def _address(obj) -> int:
    """Where the bytes of ``obj`` (a buffer, such as a read-only mmap) start."""
    view = _PyBuffer()
    get = ctypes.pythonapi.PyObject_GetBuffer
    get.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
    get.restype = ctypes.c_int
    release = ctypes.pythonapi.PyBuffer_Release
    release.argtypes = [ctypes.POINTER(_PyBuffer)]
    release.restype = None
    if get(obj, ctypes.byref(view), 0) != 0:  # PyBUF_SIMPLE
        raise BufferError("no buffer")
    try:
        return int(view.buf or 0)
    finally:
        release(ctypes.byref(view))


@functools.lru_cache(maxsize=None)
def _library():
    """``libwrp_replay``'s two guard functions, or None where the library is not built (or too old)."""
    path = _find_library()
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(os.fspath(path))
        guard, unguard = lib.wrp_guard_mapping, lib.wrp_unguard_mapping
    except (OSError, AttributeError):
        return None
    guard.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    guard.restype = ctypes.c_int
    unguard.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    unguard.restype = None
    alias = getattr(lib, "wrp_guard_alias", None)
    if alias is not None:
        alias.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        alias.restype = None
    return guard, unguard, alias


def _guard(mm, size: int, path, what: str):
    """:data:`wrpkit.file_reads._MAP_GUARD`: register ``mm`` with the library; returns its unguard (run once:
    at close, or when the mapping is collected)."""
    lib = _library()
    if lib is None:
        return None
    guard, unguard, _ = lib
    try:
        at = _address(mm)
    except (BufferError, TypeError, ValueError):
        return None
    line = f"error: {file_reads.file_changed_message(what, path)}".encode("utf-8", "backslashreplace")
    if not at or not guard(at, size, line):
        return None
    global _GUARDED
    _GUARDED = True
    return weakref.finalize(mm, unguard, at, size)


def guard_alias(owner, at: int, size: int, original: int) -> None:
    """``[at, at + size)`` now maps pages of the file mapped at ``original`` a second time (the WRP1 image of
    :mod:`wrpkit.run.load.mapped_image`): a fault there names that file too, until ``owner`` (the mapping that
    holds ``at``) is collected.  Nothing where no file was guarded."""
    lib = _library() if _GUARDED else None
    if lib is None or lib[2] is None:
        return
    _, unguard, alias = lib
    alias(at, size, original)
    weakref.finalize(owner, unguard, at, size)


def guard_mapping(mm, size: int, path, what: str = "capture"):
    """Guard one mapping made without :func:`wrpkit.file_reads.map_file` (the replay child's capture); the
    guard goes when ``mm`` is collected.  Returns its unguard, or None where nothing was guarded."""
    return _guard(mm, size, path, what) if mm is not None and size else None


def guard_received(mm, size: int, fd: int, what: str = "capture"):
    """:func:`guard_mapping` for a file a parent handed over as ``fd``: guarded under the name the system
    gives it (``/proc/self/fd/N``), unless it is a memory file (no other program can truncate one)."""
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    if not path.startswith("/") or path.startswith("/memfd:") or path.endswith(" (deleted)"):
        return None
    return guard_mapping(mm, size, path, what)


def file_changed_error(returncode: int, output: str):
    """The error of a child that a file truncated under it ended (exit 3 and the guard's line in ``output``):
    a :class:`~wrpkit.errors.WrpError` naming the file (exit 3), or None for any other end."""
    from ...errors import WrpFormatError  # noqa: PLC0415

    if returncode != FILE_CHANGED_EXIT:
        return None
    for line in reversed(output.strip().splitlines()):
        text = line.strip()
        if text.startswith("error: ") and CHANGED_WORDS in text:
            return WrpFormatError(text[len("error: "):])
    return None


def install() -> None:
    """Guard the files :func:`wrpkit.file_reads.map_file` maps from now on (idempotent; the library is loaded
    at the first mapping)."""
    file_reads.set_map_guard(_guard)


__all__ = ["install", "guard_mapping", "guard_received", "file_changed_error", "FILE_CHANGED_EXIT"]
