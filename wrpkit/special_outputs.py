"""Special destinations: outputs written in place, never replaced.

An output that exists and is not a regular file (a character device such as ``/dev/null``, a
FIFO, a socket, a block device, or a symbolic link to one), or that names one of this process's
own files (``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``), is never replaced: the data is
staged in an unnamed temporary file, checked as a regular output is, then written in place into
the opened destination (:func:`write_in_place`).  A ``.wrp`` cannot go there (its
``<stem>_modules/`` has no place beside a device).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
from pathlib import Path
from typing import Iterable, Optional, Union

from .errors import WrpIOError, WrpUsageError
from .io_errors import os_reason
from .module_dirs import modules_dir_for

#: A path as callers pass it.
PathLike = Union[str, os.PathLike]

#: This process's own files by name: /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N.
_STREAMS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
_FD_PATH = re.compile(r"/(?:dev/fd|proc/(self|thread-self|\d+)(?:/task/\d+)?/fd)/(\d+)")
#: Bytes copied per write from the staging file into a special destination.
_COPY_PIECE = 1 << 20


def _own_fd(path: PathLike) -> Optional[int]:
    """The descriptor of this process that ``path`` names (``/dev/stdout``: 1, ``/dev/fd/5``: 5), following
    the symbolic links on the way (a link to ``/dev/stdout`` names it too); None for any other path."""
    p = os.path.abspath(os.fspath(path))
    for _ in range(40):  # the kernel's own limit on links followed
        p = os.path.normpath(p)
        if p in _STREAMS:
            return _STREAMS[p]
        m = _FD_PATH.fullmatch(p)
        if m and m.group(1) in (None, "self", "thread-self", str(os.getpid())):
            return int(m.group(2))
        try:
            target = os.readlink(p)
        except OSError:
            return None
        p = os.path.join(os.path.dirname(p), target)
    return None


def _special_kind(mode: int) -> Optional[str]:
    for test, kind in ((stat.S_ISCHR, "a character device"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return None


def special_output(path: PathLike) -> Optional[str]:
    """What an output is when it is written in place instead of replaced; None for a regular file or a new path.

    An output is written in place when it names one of this process's own
    files (``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``: ``"standard
    output"``, ``"standard error"``, ``"file descriptor N"``), or exists and is
    not a regular file or folder (``"a character device"``, ``"a FIFO"``,
    ``"a socket"``, ``"a block device"``), through symbolic links too: the path
    is the user's, and ``wrp convert x.wrp /dev/null.wrpk`` must never turn
    ``/dev/null`` into a regular file.
    """
    fd = _own_fd(path)
    if fd is not None:
        return {0: "standard input", 1: "standard output", 2: "standard error"}.get(fd, f"file descriptor {fd}")
    try:
        return _special_kind(os.stat(path).st_mode)
    except (OSError, ValueError):
        return None


def output_size(path: PathLike, written: int) -> int:
    """The size of an output just written: its file's size, or ``written`` for a special file
    (``/dev/null`` says 0 bytes, a FIFO what is still unread)."""
    if special_output(path) is not None:
        return written
    return os.stat(path).st_size


def refuse_wrp_beside(dest: Path, kind: str) -> WrpUsageError:
    return WrpUsageError(
        f"cannot write a .wrp to {dest}: it is {kind}, and a .wrp comes with its module files in "
        f"{modules_dir_for(dest).name}/ beside it, which has no place there",
        hint="Write a .wrpk there instead (one self-contained file), or name a regular file.")


def check_special_output(out: Path, kind: str, modules_beside: bool) -> None:
    """Refuse, before any long work, a special output that cannot be written (see
    :func:`wrpkit.output_paths.check_output_path`)."""
    if modules_beside:
        raise refuse_wrp_beside(out, kind)
    if kind == "a socket":
        raise WrpIOError(f"cannot write {out}: it is a socket, which cannot be opened as a file",
                         hint="Name a regular file, a FIFO or a device.")
    fd = _own_fd(out)
    if fd is not None:
        import fcntl  # noqa: PLC0415

        try:
            mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
        except OSError:
            raise _not_open(out, kind) from None
        if mode == os.O_RDONLY:
            raise WrpIOError(f"cannot write {out}: {kind} is open for reading only", hint="Name a file.")
        return
    if not os.access(out, os.W_OK):
        raise WrpIOError(f"cannot write {out}: {os.strerror(errno.EACCES)} (it is {kind})",
                         hint="Name a file you may write.")


def _not_open(out: Path, kind: str) -> WrpIOError:
    return WrpIOError(f"cannot write {out}: {kind} is not open",
                      hint="Open it for writing in the shell (e.g. >file, or 3>file for /dev/fd/3), or name a file.")


def _write_all(fd: int, data) -> None:
    """``os.write`` until all of ``data`` is written (a pipe takes part of it; a non-blocking one may wait)."""
    view = memoryview(data).cast("B")
    while view.nbytes:
        try:
            n = os.write(fd, view)
        except BlockingIOError:  # a descriptor the shell left non-blocking: wait until it takes more
            import select  # noqa: PLC0415

            select.select([], [fd], [])
            continue
        view = view[n:]


def _special_write_error(dest: Path, kind: str, e: OSError, fd_named: Optional[int]) -> BaseException:
    """The error of a write into a special destination that failed, as a user reads it."""
    if e.errno == errno.EPIPE:
        if fd_named == 1:
            return BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))  # stdout closed: exit 141, quietly
        return WrpIOError(f"cannot write {dest}: {os_reason(e)}: its reader closed it before the end",
                          hint="Keep the reading end open until the writer is done.")
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return WrpIOError(f"cannot write {dest}: {os_reason(e)}", hint=f"{dest} is {kind} that takes no more data; "
                          "write somewhere else.")
    if e.errno == errno.ENXIO:
        return WrpIOError(f"cannot write {dest}: {os_reason(e)} (it is {kind}, which cannot be opened to write)",
                          hint="Name a regular file, a FIFO or a device.")
    return WrpIOError(f"cannot write {dest}: {os_reason(e)}")


def write_in_place(dest: Path, kind: str, chunks: Iterable, progress, finish, before_publish,
                    durable: bool) -> int:
    """The special-destination route of :func:`wrpkit.atomic_writes.atomic_write`: staged, checked, then
    written in place.

    The bytes go to an unnamed temporary file (``$TMPDIR``) first, where
    ``finish`` may rewrite and check them exactly as for a regular output, so
    that a check that fails writes nothing to the destination.  Then the
    destination is opened to write (``O_WRONLY``: no ``O_CREAT``, no
    ``O_TRUNC``; a FIFO waits for its reader, as ``cat > fifo`` does), or for
    ``/dev/stdout``, ``/dev/fd/N`` its descriptor is used as it is, and the
    bytes are copied into it.
    """
    if kind == "a socket":
        raise WrpIOError(f"cannot write {dest}: it is a socket, which cannot be opened as a file",
                         hint="Name a regular file, a FIFO or a device.")
    import tempfile  # noqa: PLC0415

    try:
        stage = tempfile.TemporaryFile(prefix="wrpkit-out-")
    except OSError as e:
        raise WrpIOError(f"cannot write {dest}: cannot make its staging file in {tempfile.gettempdir()}: "
                         f"{os_reason(e)}", hint="Set TMPDIR to a folder with room, or write a regular file.") from None
    total = 0
    with stage:
        try:
            for c in chunks:
                n = c.nbytes if isinstance(c, memoryview) else len(c)
                stage.write(c)
                total += n
                if progress is not None:
                    progress(n)
            stage.flush()
            if finish is not None:
                finish(stage.fileno())
            if before_publish is not None:
                before_publish()
            size = os.fstat(stage.fileno()).st_size
        except OSError as e:
            raise WrpIOError(f"cannot write {dest}: {os_reason(e)} (while staging it in {tempfile.gettempdir()})",
                             hint="Free space there or set TMPDIR to a folder with room, or write a regular "
                                  "file.") from None
        fd_named = _own_fd(dest)
        if fd_named in (1, 2):
            for s in (sys.stdout, sys.stderr):  # what Python printed before comes first
                if s is not None:
                    s.flush()
        try:
            if fd_named is not None:
                out = os.dup(fd_named)
            else:
                out = os.open(dest, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
        except OSError as e:
            if e.errno == errno.EBADF:
                raise _not_open(dest, kind) from None
            raise _special_write_error(dest, kind, e, fd_named) from None
        try:
            offset = 0
            while offset < size:
                piece = os.pread(stage.fileno(), min(_COPY_PIECE, size - offset), offset)
                if not piece:
                    break
                _write_all(out, piece)
                offset += len(piece)
            if durable and _special_kind(os.fstat(out).st_mode) in (None, "a block device"):
                try:
                    os.fsync(out)  # a regular file behind /dev/stdout, or a disk: its data is on it
                except OSError as e:
                    if e.errno not in (errno.EINVAL, errno.EROFS, errno.ENOTSUP):
                        raise
        except OSError as e:
            raise _special_write_error(dest, kind, e, fd_named) from None
        finally:
            try:
                os.close(out)
            except OSError:
                pass
    return total


__all__ = ["special_output", "output_size", "refuse_wrp_beside", "check_special_output", "write_in_place"]
