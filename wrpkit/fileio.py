"""Safe file access: read-only mappings of untrusted files and atomic writes.

Reading: :func:`map_file` opens a path without following a final symlink,
insists on a regular file (a FIFO would hang a reader, a directory makes no
sense) and maps it read-only, so that decoders see a zero-copy buffer and
large region data is paged in only if someone reads it.

Writing: :func:`atomic_write` writes to a temporary file in the destination
directory, checks every write and the close, fsyncs and publishes with one
``os.replace``; a crash leaves the old file or the new one, never a torn one,
and no temporary file behind.  :func:`publish_wrp` publishes a ``.wrp`` and
its ``<stem>_modules/`` so that a reader never sees a ``.wrp`` whose modules
are missing.

Special destinations: an output that exists and is not a regular file (a
character device such as ``/dev/null``, a FIFO, a socket, a block device, or
a symbolic link to one), or that names one of this process's own files
(``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``), is never replaced: the data
is staged in an unnamed temporary file, checked as a regular output is, then
written in place into the opened destination (:func:`special_output`).  A
``.wrp`` cannot go there (its ``<stem>_modules/`` has no place beside a device).

Every failure to read or write is a :class:`~wrpkit.errors.WrpIOError`
(exit 1) naming the path and the operating system's reason in words, and a
failed write leaves nothing behind: no temporary file, no folder it made.
"""

from __future__ import annotations

import errno
import functools
import mmap
import os
import re
import stat
import sys
from pathlib import Path
from typing import Iterable, Mapping, Optional, Union

from .errors import (WrpError, WrpFormatError, WrpIOError, WrpModuleError, WrpNotFoundError, WrpOutOfMemoryError,
                     WrpUsageError)

PathLike = Union[str, os.PathLike]


#: The guard of mapped files against a file that changes under the reader (truncated while it is read:
#: the next load from a page past its new end is a SIGBUS, which Python cannot turn into an exception).
#: Set by a higher layer (:func:`wrpkit.run.file_guard.install`, from the ``wrp`` command line and the
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
        raise WrpIOError(f"cannot read {what} {path}: {_reason(e)}") from None
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
        raise WrpIOError(f"cannot read {what} {path}: {_reason(e)}") from None
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
        raise WrpIOError(f"cannot read {what} {path}: {_reason(e)}") from None


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


#: Large views are written in pieces of this size, so that writeback starts
#: as the file grows (see _WRITEBACK_STEP).
_WRITE_PIECE = 8 << 20
_LINKABLE: dict = {}  # st_dev -> whether unnamed files can be given a name there


def _link_anonymous(fd: int, target: str) -> bool:
    """Give the unnamed file ``fd`` the name ``target``; False if this system can't."""
    try:
        import ctypes  # noqa: PLC0415

        libc = ctypes.CDLL(None, use_errno=True)
        # linkat(fd, "", AT_FDCWD, target, AT_EMPTY_PATH)
        if libc.linkat(fd, b"", -100, os.fsencode(target), 0x1000) == 0:
            return True
    except (OSError, AttributeError):
        pass
    try:
        os.link(f"/proc/self/fd/{fd}", target, follow_symlinks=True)
        return True
    except OSError:
        return False


def _open_anonymous(d: Path):
    """An unnamed file in ``d`` (Linux O_TMPFILE), or None where unsupported.

    A writer killed before publishing leaves nothing behind: the file only
    gets a name once it is complete.  Whether such a file can later be named
    is probed once per file system.
    """
    flag = getattr(os, "O_TMPFILE", 0)
    if not flag:
        return None
    try:
        dev = os.stat(d).st_dev
        fd = os.open(d, flag | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError:
        return None
    if dev not in _LINKABLE:
        probe = str(d / f".wrpkit-probe.{os.getpid()}.{os.urandom(6).hex()}")
        _LINKABLE[dev] = _link_anonymous(fd, probe)
        if _LINKABLE[dev]:
            os.unlink(probe)
            os.close(fd)
            fd = os.open(d, flag | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), 0o644)
    if not _LINKABLE[dev]:
        os.close(fd)
        return None
    return fd


_WRITEBACK_STEP = 32 << 20


class _Writeback:
    """Asks Linux to start writing written ranges to disk (sync_file_range, a
    hint only), on a helper thread.

    Starting writeback can block while the disk queue is full (70 ms of a
    0.23 s conversion, measured); the writer should be writing meanwhile.
    """

    def __init__(self, fd: int):
        self.fd = fd
        self.thread = None
        self.queue = None

    def start(self, offset: int, length: int) -> None:
        """Start writing back ``[offset, offset + length)`` soon; returns at once."""
        if _sync_file_range() is None:
            return
        if self.thread is None:
            import queue  # noqa: PLC0415
            import threading  # noqa: PLC0415

            self.queue = queue.SimpleQueue()
            self.thread = threading.Thread(target=self._run, name="wrpkit-writeback", daemon=True)
            self.thread.start()
        self.queue.put((offset, length))

    def _run(self) -> None:
        sync_file_range = _sync_file_range()
        while True:
            item = self.queue.get()
            if item is None:
                return
            sync_file_range(self.fd, *item, 2)  # SYNC_FILE_RANGE_WRITE: start, do not wait

    def close(self) -> None:
        """Wait until every range asked for has been started (call before the fd is closed)."""
        if self.thread is not None:
            self.queue.put(None)
            self.thread.join()
            self.thread = None


@functools.lru_cache(maxsize=None)
def _sync_file_range():
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes  # noqa: PLC0415

        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


# ---------------------------------------------------------------------------
# Special destinations: written in place, never replaced
# ---------------------------------------------------------------------------

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


def _refuse_wrp_beside(dest: Path, kind: str) -> WrpUsageError:
    return WrpUsageError(
        f"cannot write a .wrp to {dest}: it is {kind}, and a .wrp comes with its module files in "
        f"{modules_dir_for(dest).name}/ beside it, which has no place there",
        hint="Write a .wrpk there instead (one self-contained file), or name a regular file.")


def _check_special(out: Path, kind: str, modules_beside: bool) -> None:
    """Refuse, before any long work, a special output that cannot be written (see :func:`check_output_path`)."""
    if modules_beside:
        raise _refuse_wrp_beside(out, kind)
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
        return WrpIOError(f"cannot write {dest}: {_reason(e)}: its reader closed it before the end",
                          hint="Keep the reading end open until the writer is done.")
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return WrpIOError(f"cannot write {dest}: {_reason(e)}", hint=f"{dest} is {kind} that takes no more data; "
                          "write somewhere else.")
    if e.errno == errno.ENXIO:
        return WrpIOError(f"cannot write {dest}: {_reason(e)} (it is {kind}, which cannot be opened to write)",
                          hint="Name a regular file, a FIFO or a device.")
    return WrpIOError(f"cannot write {dest}: {_reason(e)}")


def _write_in_place(dest: Path, kind: str, chunks: Iterable, progress, finish, before_publish,
                    durable: bool) -> int:
    """The special-destination route of :func:`atomic_write`: staged, checked, then written in place.

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
                         f"{_reason(e)}", hint="Set TMPDIR to a folder with room, or write a regular file.") from None
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
            raise WrpIOError(f"cannot write {dest}: {_reason(e)} (while staging it in {tempfile.gettempdir()})",
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


def atomic_write(path: PathLike, chunks: Iterable, progress=None, finish=None, before_publish=None,
                 writeback: bool = True, durable: bool = True) -> int:
    """Write ``chunks`` to ``path`` atomically and (by default) durably.

    The data goes to an unnamed temporary file in the destination directory
    (a named ``.<name>.<pid>.*.tmp`` one where the OS has no O_TMPFILE); every
    write and the close are checked, the file is fsynced, and one rename
    publishes it.  A crash at any point leaves the old file or the new one,
    never a torn one.

    Args:
        path: Destination.  Missing parent folders are created.
        chunks: Iterable of bytes-like objects, written in order.
        progress: Optional callable taking the number of bytes just written.
        finish: Optional callable taking the file descriptor, called once
            every chunk is written and before the file is synced and
            published; it may overwrite earlier bytes with ``os.pwrite``
            (a header that depends on what follows it) or raise to abandon
            the write.
        before_publish: Optional callable run once the file is complete and
            synced, just before it is renamed into place (to publish files
            it refers to first); raising abandons the write.
        writeback: Ask Linux to start writing back every 32 MiB as the file
            grows (see :class:`_Writeback`).  False leaves it all to the
            final fsync, which measured faster for ``wrp upgrade`` on a
            host whose disk other writers keep busy (bench_upgrade.py).
        durable: False skips the fsyncs (and the writeback hints): the
            rename is still atomic, so a reader never sees a torn file, but
            after a power loss the new file may be lost, as with ``cp``.
            For batches that sync once at the end.

    A destination that exists and is not a regular file (a device, a FIFO,
    ``/dev/stdout``: :func:`special_output`) is written in place, never
    replaced: the bytes are staged and checked in an unnamed temporary file
    first (``finish`` runs there), then copied into it.

    Returns:
        Bytes written.

    Raises:
        WrpIOError: A write failed (the path and the reason in words); the
            destination is left as it was, and no temporary file or folder
            this call made remains.
        WrpError: The destination is a directory.
        Whatever ``finish`` raises, with the same guarantee.
    """
    dest = Path(path)
    kind = special_output(dest)
    if kind is not None:
        return _write_in_place(dest, kind, chunks, progress, finish, before_publish, durable)
    d, made = _make_parents(dest)
    try:
        return _atomic_write_file(dest, d, chunks, progress, finish, before_publish, writeback, durable)
    except BaseException:
        remove_empty_folders(made)
        raise


def _atomic_write_file(dest: Path, d: Path, chunks, progress, finish, before_publish, writeback: bool,
                       durable: bool) -> int:
    """The regular-file route of :func:`atomic_write`, into the existing folder ``d``."""
    if dest.is_dir():
        raise WrpError(f"output {dest} is a directory")
    fd = _open_anonymous(d)
    tmp = None
    if fd is None:
        import tempfile  # noqa: PLC0415  (only where O_TMPFILE is missing: keeps start-up cheap)

        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.{os.getpid()}.", suffix=".tmp", dir=d)
        except OSError as e:
            raise _cannot_write(dest, e) from None
    total = 0
    hints = _Writeback(fd) if writeback and durable else None
    try:
        with os.fdopen(fd, "wb", closefd=False) as f:
            flushed = 0

            def put(piece, n):
                nonlocal flushed
                f.write(piece)
                if hints is not None and total + n - flushed >= _WRITEBACK_STEP:
                    # Start writing back what is written so far, so that the
                    # final fsync does not wait for the whole file.
                    f.flush()
                    hints.start(flushed, total + n - flushed)
                    flushed = total + n

            for c in chunks:
                n = c.nbytes if isinstance(c, memoryview) else len(c)
                if isinstance(c, memoryview) and n > _WRITE_PIECE:
                    # Written straight from the caller's buffer (usually the
                    # mapped input file): the data is copied once, by write().
                    c = c.cast("B") if c.format != "B" or c.ndim != 1 else c
                    for i in range(0, n, _WRITE_PIECE):
                        k = min(_WRITE_PIECE, n - i)
                        put(c[i:i + k], k)
                        total += k
                else:
                    put(c, n)
                    total += n
                if progress is not None:
                    progress(n)
            f.flush()
            if hints is not None:
                hints.close()
            if finish is not None:
                finish(fd)
            if durable:
                os.fsync(fd)
        if tmp is None:
            # Give the finished file a unique name, then rename it into place.
            tmp = str(d / f".{dest.name}.{os.getpid()}.{os.urandom(6).hex()}.tmp")
            if not _link_anonymous(fd, tmp):
                tmp = None
                raise OSError(f"cannot name the finished temporary file for {dest}")
        else:
            os.chmod(tmp, 0o644)
        if before_publish is not None:
            before_publish()
        os.replace(tmp, dest)
        tmp = None
    except BaseException as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if isinstance(e, WrpError) or not isinstance(e, OSError):
            raise
        raise _cannot_write(dest, e) from None
    finally:
        if hints is not None:
            hints.close()
        os.close(fd)
    if durable:
        _fsync_dir(d)
    return total


def modules_dir_for(path: PathLike) -> Path:
    """``<stem>_modules`` beside a ``.wrp`` path, as Warp names it."""
    p = Path(path)
    return p.with_name(p.stem + "_modules")


def find_modules_dir(path: PathLike) -> Path:
    """The modules folder of a ``.wrp`` the user named.

    ``<stem>_modules/`` beside ``path``; when ``path`` is a symbolic link and
    there is no such folder beside the link, the one beside its target.  A
    symbolic link to the folder is followed (the path is the user's).

    Returns:
        The first candidate that is a directory, else the one beside ``path``.
    """
    first = modules_dir_for(path)
    if first.is_dir() or not os.path.islink(path):
        return first
    beside_target = modules_dir_for(os.path.realpath(path))
    return beside_target if beside_target.is_dir() else first


def sibling_modules_dirs(path: PathLike, needed: Iterable) -> list:
    """Other ``*_modules/`` folders beside ``path`` that hold every file in ``needed``.

    Used to name the folder of a ``.wrp`` that was renamed without its modules.
    """
    p = Path(path)
    needed = [n for n in needed if is_plain_basename(n)]
    if not needed:
        return []
    own = modules_dir_for(p).name
    out = []
    try:
        entries = sorted(p.parent.iterdir()) if str(p.parent) else sorted(Path(".").iterdir())
    except OSError:
        return []
    for d in entries[:10000]:
        if d.name.endswith("_modules") and d.name != own and d.is_dir():
            if all((d / n).is_file() for n in needed):
                out.append(d)
    return out


def is_plain_basename(name: str) -> bool:
    """True for a non-empty file name with no directory part (Warp's rule, plus NUL)."""
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\:\0")


def _reason(e: BaseException) -> str:
    """The operating system's reason for ``e`` in words ("No space left on device"), without errno or path."""
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def _cannot_write(dest: Path, e: OSError) -> WrpIOError:
    """The I/O error of an output that cannot be written, with a hint that fixes its cause."""
    d = dest.parent if str(dest.parent) else Path(".")
    hint = None
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = f"Make {d} writable, or write somewhere else."
    elif e.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = f"Free space on the file system of {d}, or write somewhere else."
    return WrpIOError(f"cannot write {dest}: {_reason(e)}", hint=hint)


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
    return WrpIOError(f"cannot {doing} {where}: {_reason(e)}" if where is not None else f"cannot {doing}: {_reason(e)}",
                      hint=hint)


def publish_wrp(path: PathLike, wrp_chunks: Iterable, modules: Mapping, progress=None, finish=None,
                writeback: bool = True, durable: bool = True) -> int:
    """Publish a ``.wrp`` and its module files so that readers never see a torn pair.

    Module files are content-addressed by Warp (their names carry the module
    hash).  The ``.wrp`` is written and synced under a temporary name first;
    then each module file is published atomically into ``<stem>_modules/``,
    and only then is the ``.wrp`` renamed into place.  At every instant the
    ``.wrp`` in place names only module files that exist, and a write that
    fails (or whose ``finish`` check fails) publishes nothing.

    Args:
        path: Destination ``.wrp``.
        wrp_chunks: The ``.wrp`` bytes as chunks.
        modules: ``{binary_filename: bytes-like}``.
        progress: Optional callable taking byte counts as they are written.
        finish: Passed to :func:`atomic_write` for the ``.wrp`` (the last
            file published): it may still abandon the ``.wrp``.
        writeback: Passed to :func:`atomic_write` for the ``.wrp``.
        durable: Passed to :func:`atomic_write` for every file.

    Returns:
        Bytes written in all.

    Raises:
        WrpModuleError: A module file name is not a plain basename.
        WrpError: A write failed.
    """
    dest = Path(path)
    kind = special_output(dest)
    if kind is not None:
        raise _refuse_wrp_beside(dest, kind)
    mdir = modules_dir_for(dest)
    for name in modules:
        if not is_plain_basename(name):
            raise WrpModuleError(f"module file name {name!r} is not a plain file name")
    if modules and (mdir.is_symlink() or (mdir.exists() and not mdir.is_dir())):
        raise WrpError(f"{mdir} exists and is not a directory")
    written = [0]
    made = []

    def publish_modules():
        # The .wrp is complete, checked and synced but not yet in place.
        if modules:
            try:
                mdir.mkdir()
                made.append(mdir)
            except FileExistsError:
                pass
            except OSError as e:
                raise _cannot_write(mdir, e) from None
            for name, data in modules.items():
                written[0] += atomic_write(mdir / name, [data], progress, durable=durable)

    try:
        return atomic_write(dest, wrp_chunks, progress, finish, publish_modules, writeback, durable) + written[0]
    except BaseException:
        if made:  # a folder this call made for module files that never got their .wrp
            for name in modules:
                try:
                    os.unlink(mdir / name)
                except OSError:
                    pass
            remove_empty_folders(made)
        raise


def pwrite_all(fd: int, data, offset: int) -> None:
    """``os.pwrite`` until all of ``data`` is written at ``offset``."""
    view = memoryview(data).cast("B")
    while view.nbytes:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def _probe_writable(d: Path, dest: Path) -> None:
    """Create and remove a temporary file in ``d``: the one honest test of writability.

    ``os.access`` answers yes to root on a read-only mount (sysfs, a
    read-only bind mount), so a real file is made instead.

    Raises:
        WrpIOError: ``d`` does not take new files (``dest`` is named in the message).
    """
    import tempfile  # noqa: PLC0415

    try:
        fd, name = tempfile.mkstemp(prefix=".wrpkit-probe-", dir=d)
    except OSError as e:
        raise _cannot_write(dest, e) from None
    os.close(fd)
    try:
        os.unlink(name)
    except OSError:
        pass


#: Folders :func:`make_parents` and :func:`make_folder` created in this process, oldest first: a command
#: that fails removes the ones still empty (:func:`remove_created_folders`), so that it leaves nothing behind.
_CREATED: list = []


def _is_dir(p: Path) -> bool:
    """``p.is_dir()`` that answers False where the path cannot be looked at (the caller's next step says why)."""
    try:
        return p.is_dir()
    except OSError:
        return False


def _make_parents(path: PathLike):
    """:func:`make_parents`, also returning the folders it created (outermost first)."""
    out = Path(path)
    parent = out.parent if str(out.parent) else Path(".")
    if _is_dir(parent):
        return parent, []
    missing = []
    a = parent
    while True:
        try:
            os.lstat(a)
            break
        except FileNotFoundError:
            missing.append(a)
        except OSError:
            break
        if a.parent == a:
            break
        a = a.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        made = [m for m in reversed(missing) if _is_dir(m)]
        remove_empty_folders(made)
        hint = None
        for a in parent.parents:
            try:
                if a.exists() and not a.is_dir():
                    hint = f"{a} is a file, not a folder; write somewhere else."
                    break
            except OSError:
                break
        err = _cannot_write(missing[-1] if missing else out, e)  # its hint names the nearest existing folder
        raise WrpIOError(f"cannot write {out}: cannot create folder {parent}: {_reason(e)}",
                         hint=hint or err.hint) from None
    made = list(reversed(missing))
    _CREATED.extend(made)
    return parent, made


def make_parents(path: PathLike) -> Path:
    """Create the missing parent folders of an output, as ``cp``, ``tar`` and ``wrp convert`` do.

    The folders it creates are remembered: a command that then fails removes
    them again while they are empty (:func:`remove_created_folders`).

    Returns:
        The parent folder.

    Raises:
        WrpIOError: A folder cannot be created (read-only place, a file in the way).
    """
    return _make_parents(path)[0]


def make_folder(path: PathLike, what: str = "folder") -> list:
    """Create the folder ``path`` and its missing parents unless it exists.

    Remembered as :func:`make_parents` remembers its folders.

    Returns:
        The folders created, outermost first (``path`` last); empty when it existed.

    Raises:
        WrpIOError: It cannot be created, or a file is in the way.
    """
    folder = Path(path)
    if _is_dir(folder):
        return []
    _, made = _make_parents(folder)
    try:
        folder.mkdir()
    except FileExistsError:
        if _is_dir(folder):
            return made
        remove_empty_folders(made)
        raise WrpIOError(f"cannot create {what} {folder}: it is a file, not a folder", hint="Name a folder.") from None
    except OSError as e:
        remove_empty_folders(made)
        raise WrpIOError(f"cannot create {what} {folder}: {_reason(e)}",
                         hint=_cannot_write(folder, e).hint) from None
    _CREATED.append(folder)
    return made + [folder]


def remove_empty_folders(folders) -> None:
    """Remove each of ``folders`` (outermost first, as :func:`make_folder` lists them) that is empty, innermost
    first; never anything else."""
    for f in reversed(list(folders)):
        try:
            os.rmdir(f)
        except OSError:
            pass


def remove_created_folders() -> None:
    """Remove the folders this process created for outputs (:func:`make_parents`, :func:`make_folder`) that are
    still empty: what a command that failed calls, so that it leaves no empty folder behind."""
    made = list(_CREATED)
    del _CREATED[:]
    remove_empty_folders(made)


def check_output_path(path: PathLike, inputs: Iterable = (), *, modules_beside: bool = False) -> Path:
    """Make an output path ready before any long work: every command calls it first.

    Refuses an output that is one of the inputs, creates its missing parent
    folders and checks, with a real temporary file, that its folder takes
    new files.  An output that is a special file (:func:`special_output`:
    a device, a FIFO, ``/dev/stdout``) is written in place, so its folder is
    not probed: it must be open for writing (or writable by this user).

    Args:
        path: The output file.
        inputs: Input paths it must not be.
        modules_beside: The output is a ``.wrp``, written with its
            ``<stem>_modules/`` beside it: a special file is refused.

    Returns:
        The output path.

    Raises:
        WrpError: The output is an input, or a directory.
        WrpUsageError: A ``.wrp`` output (``modules_beside``) names a special file (exit 2).
        WrpIOError: The folder cannot be created or written, or a special file cannot be written (exit 1).
    """
    out = Path(path)
    kind = special_output(out)
    if kind is not None:
        _check_special(out, kind, modules_beside)
        return out
    for i in inputs:
        try:
            if out.exists() and os.path.samefile(out, i):
                raise WrpError(f"output {out} is the same file as input {i}")
        except OSError:
            pass
    if _is_dir(out):
        raise WrpError(f"output {out} is a directory", hint="Name a file inside it.")
    _probe_writable(make_parents(out), out)
    return out


def check_output_dir(path: PathLike) -> Path:
    """Check, before any long work, that a folder output can be written; create nothing.

    For outputs written only when the work succeeds (``wrp trace --dump``):
    the folder itself, or else its nearest existing ancestor, must take new
    files.  The folder is made later, when there is something to write.

    Raises:
        WrpIOError: The folder is a file, or the place cannot be written (exit 1).
    """
    out = Path(path)
    try:
        if out.exists() and not out.is_dir():
            what = special_output(out) or "a file"
            raise WrpIOError(f"cannot write {out}: it is {what}, not a folder", hint="Name a folder.")
        probe = out
        while not probe.exists():
            if probe.parent == probe:
                break
            probe = probe.parent
    except OSError as e:
        raise io_error(e, out, "write") from None
    if not _is_dir(probe):
        raise WrpIOError(f"cannot create folder {out}: {probe} is a file, not a folder",
                         hint="Write somewhere else.")
    _probe_writable(probe, out)
    return out


class _BufferReader:
    """A seekable, read-only file over a buffer (a file's mapping), for :mod:`zipfile`: no copy of it."""

    def __init__(self, buf):
        self._buf = memoryview(buf).cast("B")
        self._pos = 0

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: len(self._buf)}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = len(self._buf) if n is None or n < 0 else min(len(self._buf), self._pos + n)
        out = bytes(self._buf[self._pos:end])
        self._pos = max(self._pos, end)
        return out


def _npy_view(buf):
    """The array an ``.npy``'s bytes hold, as a read-only view of ``buf`` (no copy); no pickles.

    Every size is checked against ``buf`` before the view is made.

    Raises:
        ValueError: Not a readable ``.npy`` (the message says why).
    """
    import io  # noqa: PLC0415
    import math  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    buf = memoryview(buf).cast("B")
    head = io.BytesIO(bytes(buf[:1 << 16]))  # the header only (numpy allows 10,000 bytes of it)
    version = np.lib.format.read_magic(head)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(head)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(head)
    else:  # 3.0 (UTF-8 field names) and later: numpy's own reader, which copies
        arr = np.load(io.BytesIO(bytes(buf)), allow_pickle=False)
        if not isinstance(arr, np.ndarray):
            raise ValueError("it is an .npz archive, not a single array")
        return arr
    if dtype.hasobject:
        raise ValueError("it holds Python objects, which are never unpickled")
    offset = head.tell()
    count = math.prod(int(d) for d in shape)
    if offset + count * dtype.itemsize > len(buf):
        raise ValueError(f"its data is {len(buf) - offset} bytes but its header declares {count * dtype.itemsize}")
    arr = np.frombuffer(buf, dtype=dtype, count=count, offset=offset)
    return arr.reshape(shape[::-1]).transpose() if fortran else arr.reshape(shape)


def npz_arrays(data) -> dict:
    """``{key: array}`` of the bytes of an ``.npz`` (no pickles).

    ``data`` may be a file's mapping: members stored uncompressed (``numpy.savez``)
    come back as read-only views of it, their CRC-32 checked, so that a
    golden or inputs file of many GiB costs no copy; compressed ones
    (``numpy.savez_compressed``) are decompressed into memory.

    Raises:
        ValueError: The bytes are not a readable ``.npz`` (the message says why).
    """
    import struct  # noqa: PLC0415
    import zipfile  # noqa: PLC0415
    import zlib  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    buf = memoryview(data).cast("B")
    try:
        if bytes(buf[:6]) == b"\x93NUMPY":
            raise ValueError("it holds a single array (.npy), not an archive")
        out = {}
        with zipfile.ZipFile(_BufferReader(buf)) as z:
            for info in z.infolist():
                if not info.filename.endswith(".npy"):
                    raise ValueError(f"member {info.filename!r} is not an .npy array")
                key = info.filename[:-len(".npy")]
                if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
                    with z.open(info) as f:
                        out[key] = np.lib.format.read_array(f, allow_pickle=False)
                    continue
                # The member's bytes where the file holds them: past its local header, whose own
                # name and extra-field lengths say where they start.
                at = info.header_offset
                if at + 30 > len(buf) or bytes(buf[at:at + 4]) != b"PK\x03\x04":
                    raise ValueError(f"member {info.filename!r} has no local header at byte {at}")
                name_len, extra_len = struct.unpack_from("<HH", buf, at + 26)
                start = at + 30 + name_len + extra_len
                if start + info.file_size > len(buf):
                    raise ValueError(f"member {info.filename!r} runs past the end of the file")
                member = buf[start:start + info.file_size]
                if zlib.crc32(member) != info.CRC:
                    raise ValueError(f"member {info.filename!r} fails its CRC-32 check (a damaged file)")
                out[key] = _npy_view(member)
        return out
    except Exception as e:  # noqa: BLE001  (any failure: a bad npz)
        raise _unreadable(e) from None


def _npy_array(data):
    try:
        return _npy_view(data)
    except Exception as e:  # noqa: BLE001  (any failure: a bad npy)
        raise _unreadable(e) from None


def _unreadable(e: Exception) -> ValueError:
    """Why numpy's bytes could not be read: our own ValueError as it is, anything else named by its class."""
    return e if isinstance(e, ValueError) else ValueError(f"{type(e).__name__}: {e}")


_NUMPY_FILES = {"npz": (npz_arrays, "Write it with numpy.savez(path, name=array, ...)."),
                "npy": (_npy_array, "Write it with numpy.save(path, array).")}


def _load_numpy_file(path: PathLike, what: str, kind: str):
    """Parse the user's ``.npz``/``.npy`` from its mapping: its arrays are views of it where they can be
    (they keep it mapped), so reading a large golden or inputs file costs no copy."""
    from .errors import WrpBindingError  # noqa: PLC0415

    parse, hint = _NUMPY_FILES[kind]
    try:
        mapped = map_file(path, what, follow_symlinks=True)  # the user's path
    except (WrpIOError, WrpOutOfMemoryError):
        raise  # a file that exists but cannot be read (or mapped: ulimit -v): exit 1 or 3, not a bad input
    except WrpError as e:
        raise WrpBindingError(e.message, hint=e.hint) from None
    try:
        return parse(mapped.buffer)
    except ValueError as e:
        raise WrpBindingError(f"cannot read {what} {path}: not a valid .{kind} ({e})", hint=hint) from None


def load_npz(path: PathLike, what: str = "inputs file") -> dict:
    """``{key: array}`` of an ``.npz`` the user names (no pickles; a symbolic link is followed).

    Args:
        path: The ``.npz``.
        what: What the file is, for messages ("inputs file", "golden file").

    Raises:
        WrpBindingError: The file is missing or not a valid ``.npz`` (exit 2).
        WrpIOError: The file exists but cannot be read (exit 1).
    """
    return _load_numpy_file(path, what, "npz")


def load_npy(path: PathLike, what: str = "input file"):
    """The array (``np.ndarray``) of an ``.npy`` the user names (no pickles; a symbolic link is followed).

    Args:
        path: The ``.npy``.
        what: What the file is, for messages.

    Raises:
        WrpBindingError: The file is missing or not a valid ``.npy`` (exit 2).
        WrpIOError: The file exists but cannot be read (exit 1).
    """
    return _load_numpy_file(path, what, "npy")


__all__ = [
    "MappedFile", "map_file", "set_map_guard", "file_changed_message", "read_file", "read_user_text", "open_regular",
    "atomic_write", "publish_wrp",
    "modules_dir_for", "find_modules_dir", "sibling_modules_dirs",
    "is_plain_basename", "check_output_path", "check_output_dir", "make_parents", "make_folder",
    "remove_empty_folders", "remove_created_folders", "special_output", "output_size", "io_error", "pwrite_all",
    "load_npz", "load_npy", "npz_arrays",
]

