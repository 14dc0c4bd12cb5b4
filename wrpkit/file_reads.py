"""Safe reads: read-only mappings of untrusted files, and whole-file reads.

:func:`map_file` opens a path without following a final symlink, insists on a regular file (a
FIFO would hang a reader, a directory makes no sense) and maps it read-only, so that decoders see
a zero-copy buffer and large region data is paged in only if someone reads it.  Every failure to
read is a :class:`~wrpkit.errors.WrpIOError` (exit 1) naming the path and the reason in words.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
from pathlib import Path
from typing import Optional, Union

from .errors import WrpError, WrpFormatError, WrpIOError, WrpNotFoundError
from .io_errors import os_reason

#: A path as callers pass it.
PathLike = Union[str, os.PathLike]


#: The guard of mapped files against a file that changes under the reader (truncated while it is read:
#: the next load from a page past its new end is a SIGBUS, which Python cannot turn into an exception).
#: Set by a higher layer (:func:`wrpkit.run.load.file_guard.install`, from the ``wrp`` command line and the
#: children that replay, trace and profile): called as ``guard(mm, size, path, what)`` for every mapping
#: :func:`map_file` makes; returns a callable that removes the guard (called before unmapping), or None.
_MAP_GUARD = None


def set_map_guard(guard) -> None:
    """Install ``guard`` (see :data:`_MAP_GUARD`) for the mappings made from now on; None removes it."""
    global _MAP_GUARD
    _MAP_GUARD = guard


def file_changed_message(what: str, path) -> str:
    """The words for a file that changed (was truncated) while it was read: the same in Python and C++."""
    return (f"{what} {path} changed while being read (it was truncated or rewritten by another program); "
            "run again once it is complete")


class MappedFile:
    """A read-only view of a whole file; ``buffer`` is a ``memoryview``.

    Use as a context manager, or keep it alive as long as views of it are
    in use.  Empty files get an empty ``bytes`` buffer (mmap cannot map 0 bytes).
    """

    def __init__(self, path: Path, mm, size: int, st: Optional[os.stat_result] = None, unguard=None):
        self.path = path
        self._mmap = mm
        self.size = size
        #: ``os.fstat`` of the file as it was mapped (who it is: device, inode, mtime).
        self.stat = st
        self.buffer = memoryview(mm) if mm is not None else memoryview(b"")
        self._unguard = unguard

    def close(self) -> None:
        # Views handed out keep the mapping alive; closing with exported
        # views raises BufferError, in which case the GC unmaps later.
        try:
            self.buffer.release()
            if self._mmap is not None:
                if self._unguard is not None and not self._mmap.closed:
                    self._mmap.close()  # BufferError with views out: then stays guarded until the GC unmaps it
                    self._unguard()
                else:
                    self._mmap.close()
        except BufferError:
            pass

    def drop_pages(self) -> None:
        """Unmap the resident pages (they stay in the page cache; a later read faults them back in)."""
        if self._mmap is not None and hasattr(mmap, "MADV_DONTNEED"):
            try:
                self._mmap.madvise(mmap.MADV_DONTNEED)
            except (OSError, ValueError):
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_regular(path: PathLike, what: str = "file", *, follow_symlinks: bool = False) -> int:
    """Open ``path`` read-only; return the fd.

    Args:
        path: The file.
        what: Its role, for messages.
        follow_symlinks: Follow a final symbolic link.  True for paths the
            user typed (trusted, as for every Unix tool); False (the default)
            for names that come from inside a file, such as module files.

    Raises:
        WrpError: The path is missing, a symlink (unless followed), or not a regular file.
    """
    p = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    # O_NONBLOCK so that opening a FIFO never blocks waiting for a writer.
    flags |= getattr(os, "O_NONBLOCK", 0)
    # A path the user typed that is missing or not a file is a usage error (exit 2) in every
    # command; a name read from inside a file keeps the plain error its caller maps.
    usage = WrpNotFoundError if follow_symlinks else WrpError
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        raise usage(f"{what} not found: {p}", hint="Check the path.") from None
    except IsADirectoryError:
        raise usage(f"{what} is a directory, not a file: {p}", hint="Pass a regular file.") from None
    except OSError as e:
        if not follow_symlinks and os.path.islink(p):
            raise WrpError(f"{what} is a symbolic link, which wrpkit does not follow for names read from a file: "
                           f"{p}", hint="Replace the link with a copy of the file it points to.") from None
        raise WrpIOError(f"cannot read {what} {p}: {e.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise usage(f"{what} is {kind}: {p}", hint="Pass a regular file.")
    return fd


def map_file(path: PathLike, what: str = "file", *, prefetch: bool = False,
             follow_symlinks: bool = False) -> MappedFile:
    """Map a regular file read-only.

    Args:
        path: The file.
        what: Its role, for messages ("capture", "module file").
        prefetch: The caller will read the whole file (load, convert): map
            every page up front (``MAP_POPULATE``), which costs far less than
            one page fault per 4 KiB page.  Leave it off for callers that read
            a small part of a large file (inspect).
        follow_symlinks: See :func:`open_regular`.

    Returns:
        A :class:`MappedFile`.

    Raises:
        WrpError: The file is missing, a symlink, a FIFO or a directory.
        WrpIOError: It exists but cannot be read or mapped (exit 1).
    """
    fd = open_regular(path, what, follow_symlinks=follow_symlinks)
    try:
        st = os.fstat(fd)
        size = st.st_size
        if not size:
            mm = None
        elif prefetch and hasattr(mmap, "MAP_POPULATE"):
            mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE, prot=mmap.PROT_READ)
        else:
            mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as e:
        if isinstance(e, OSError) and e.errno in (errno.ENOMEM, errno.EMFILE, errno.ENFILE):
            from .limits import resource_error  # noqa: PLC0415  (no address space for it: exit 3, with the numbers)

            raise resource_error(e, f"map {what} {path}", requested=locals().get("size")) from None
        raise WrpIOError(f"cannot read {what} {path}: {os_reason(e)}") from None
    finally:
        os.close(fd)
    unguard = _MAP_GUARD(mm, size, path, what) if mm is not None and _MAP_GUARD is not None else None
    return MappedFile(Path(path), mm, size, st, unguard)


def read_file(path: PathLike, what: str = "file", max_size: int = 1 << 34, *,
              follow_symlinks: bool = False) -> bytes:
    """Read a whole regular file (no FIFOs; no final symlink unless ``follow_symlinks``) into memory.

    The bytes are read once into memory, so that whatever is checked in them
    is exactly what is used, even if the file changes afterwards.
    """
    fd = open_regular(path, what, follow_symlinks=follow_symlinks)
    try:
        size = os.fstat(fd).st_size
        if size > max_size:
            raise WrpError(f"{what} {path} is {size} bytes, above the limit of {max_size}")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(size + 1)
    except OSError as e:
        raise WrpIOError(f"cannot read {what} {path}: {os_reason(e)}") from None
    finally:
        os.close(fd)
    if len(data) != size:
        raise WrpFormatError(file_changed_message(what, path))  # exit 3, as a mapped file that changed
    return data


def read_user_text(path: PathLike, what: str = "file") -> str:
    """The text of a small file the user named (a trace, a profile): a FIFO or ``<(...)`` too.

    Raises:
        WrpNotFoundError: It is missing or a directory (a usage error, exit 2).
        WrpIOError: It exists but cannot be read (exit 1), with the reason in words.
        UnicodeDecodeError: It is not UTF-8 text (the caller says what it expected).
    """
    try:
        return Path(path).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        raise WrpNotFoundError(f"{what} not found: {path}", hint="Check the path.") from None
    except IsADirectoryError:
        raise WrpNotFoundError(f"{what} is a directory, not a file: {path}", hint="Pass a regular file.") from None
    except OSError as e:
        raise WrpIOError(f"cannot read {what} {path}: {os_reason(e)}") from None


__all__ = ["PathLike", "MappedFile", "map_file", "set_map_guard", "file_changed_message", "read_file",
           "read_user_text", "open_regular"]
