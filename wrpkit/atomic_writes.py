"""Atomic, durable writes, and publishing a ``.wrp`` with its module files.

:func:`atomic_write` writes to a temporary file in the destination directory, checks every write
and the close, fsyncs and publishes with one ``os.replace``; a crash leaves the old file or the
new one, never a torn one, and no temporary file behind.  :func:`publish_wrp` publishes a ``.wrp``
and its ``<stem>_modules/`` so that a reader never sees a ``.wrp`` whose modules are missing.  A
special destination (:mod:`wrpkit.special_outputs`) is written in place instead.

Every failure to write is a :class:`~wrpkit.errors.WrpIOError` (exit 1) naming the path and the
operating system's reason in words, and a failed write leaves nothing behind: no temporary file,
no folder it made.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Iterable, Mapping, Union

from .errors import WrpError, WrpModuleError
from .io_errors import cannot_write
from .module_dirs import is_plain_basename, modules_dir_for
from .output_paths import create_parents, remove_empty_folders
from .special_outputs import refuse_wrp_beside, special_output, write_in_place

#: A path as callers pass it.
PathLike = Union[str, os.PathLike]


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
    ``/dev/stdout``: :func:`~wrpkit.special_outputs.special_output`) is written in place, never
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
        return write_in_place(dest, kind, chunks, progress, finish, before_publish, durable)
    d, made = create_parents(dest)
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
            raise cannot_write(dest, e) from None
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
        raise cannot_write(dest, e) from None
    finally:
        if hints is not None:
            hints.close()
        os.close(fd)
    if durable:
        _fsync_dir(d)
    return total


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
        raise refuse_wrp_beside(dest, kind)
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
                raise cannot_write(mdir, e) from None
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


__all__ = ["atomic_write", "publish_wrp", "pwrite_all"]
