"""An ``OSError`` as the I/O error a user reads: the path, the reason in words, a hint that fixes it."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from .errors import WrpIOError


def os_reason(e: BaseException) -> str:
    """The operating system's reason for ``e`` in words ("No space left on device"), without errno or path."""
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def cannot_write(dest: Path, e: OSError) -> WrpIOError:
    """The I/O error of an output that cannot be written, with a hint that fixes its cause."""
    d = dest.parent if str(dest.parent) else Path(".")
    hint = None
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = f"Make {d} writable, or write somewhere else."
    elif e.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = f"Free space on the file system of {d}, or write somewhere else."
    return WrpIOError(f"cannot write {dest}: {os_reason(e)}", hint=hint)


def io_error(e: OSError, path=None, doing: str = "access") -> WrpIOError:
    """An ``OSError`` as the I/O error a user reads: ``cannot <doing> <path>: <reason in words>`` (exit 1).

    A resource limit is :func:`wrpkit.limits.resource_error`'s instead: too many open files (exit 1),
    out of memory or address space, as mapping a file under ``ulimit -v`` (exit 3, with the numbers).

    Args:
        e: The error.
        path: The path to name; default the one the error names.
        doing: ``"read"``, ``"write"``, ``"create folder"``, ...
    """
    where = path if path is not None else (e.filename if getattr(e, "filename", None) is not None else None)
    if isinstance(where, bytes):
        where = os.fsdecode(where)
    if e.errno in (errno.ENOMEM, errno.EMFILE, errno.ENFILE):  # a resource limit, not the file: in its words
        from .limits import resource_error  # noqa: PLC0415

        return resource_error(e, f"{doing} {where}" if where is not None else doing)
    hint = None
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = "Free space on that file system, or write somewhere else."
    elif e.errno in (errno.EACCES, errno.EPERM) and doing in ("read", "access"):
        hint = "Give this user read access to it (and search access to its folders), or copy it somewhere readable."
    elif e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = "Make that place writable, or write somewhere else."
    what = f"{doing} {where}" if where is not None else doing
    return WrpIOError(f"cannot {what}: {os_reason(e)}", hint=hint)


__all__ = ["os_reason", "cannot_write", "io_error"]
