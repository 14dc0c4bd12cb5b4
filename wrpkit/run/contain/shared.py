"""Shared memory and a control socket between wrpkit and its replay children.

A contained replay (:mod:`wrpkit.run.contain.worker`) hands its child everything
through memory, never through files: the capture is the user's own file
(an open descriptor of the very file that was validated), module files and
bindings travel in anonymous shared memory files (``memfd_create``), and
requests and answers are length-prefixed JSON messages on a Unix socket
pair that also carries the descriptors (``SCM_RIGHTS``).  Nothing is
written to disk, and a binding is never serialised: the parent writes an
input's bytes into a shared mapping once and the child copies them into
Warp's memory from there (results the other way).
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import select
import socket
import struct
from typing import Iterable, Mapping, Optional

#: Byte alignment of the bindings laid out in one shared area.
ALIGN = 64

_HEAD = struct.Struct("<Q")
#: Largest message accepted (a report of many timings stays far below).
MAX_MESSAGE = 1 << 30


class ChannelClosed(Exception):
    """The other end of the control socket is gone (the child ended or crashed)."""


class ChannelTimeout(Exception):
    """No answer came before the deadline."""


def memory_file(name: str) -> int:
    """A new anonymous shared memory file (``memfd``), close-on-exec; its fd.

    Falls back to an unlinked temporary file where the system has no
    ``memfd_create`` (it still holds no name on disk).
    """
    create = getattr(os, "memfd_create", None)
    if create is not None:
        return create(name, getattr(os, "MFD_CLOEXEC", 0))
    import tempfile  # noqa: PLC0415

    f = tempfile.TemporaryFile()  # pragma: no cover  (non-Linux)
    fd = os.dup(f.fileno())
    f.close()
    return fd


def layout(sizes: Mapping[str, int]) -> tuple:
    """``({name: (offset, size)}, total)``: ``sizes`` laid out one after the other, each at a multiple of 64."""
    at, out = 0, {}
    for name, size in sizes.items():
        out[name] = (at, int(size))
        at += -(-int(size) // ALIGN) * ALIGN
    return out, at


class SharedArea:
    """A shared memory file mapped read-write in this process.

    Args:
        size: Bytes.
        name: Its name in ``/proc/PID/fd`` (for people reading ``ls -l``).
        fd: An existing memory file to map (the child side), or None to create one.
    """

    def __init__(self, size: int, name: str = "wrpkit-bindings", fd: Optional[int] = None):
        self.size = int(size)
        try:
            self.fd = memory_file(name) if fd is None else fd
        except OSError as e:
            from ...limits import is_resource_error, resource_error  # noqa: PLC0415

            if is_resource_error(e):
                raise resource_error(e, f"create a shared memory file ({name})") from None
            raise
        try:
            if fd is None and self.size:
                os.ftruncate(self.fd, self.size)
            self._mm = mmap.mmap(self.fd, self.size) if self.size else None
        except (OSError, OverflowError) as e:
            if fd is None:
                os.close(self.fd)
            from ...errors import WrpOutOfMemoryError  # noqa: PLC0415
            from ...limits import is_resource_error, resource_error  # noqa: PLC0415

            if isinstance(e, OSError) and is_resource_error(e) and e.errno != errno.ENOMEM:
                raise resource_error(e, f"map {self.size} bytes of shared memory ({name})") from None

            raise WrpOutOfMemoryError(f"out of memory on the host: cannot map {self.size} bytes of shared memory "
                                      f"({name}): {getattr(e, 'strerror', None) or e}", requested=self.size,
                                      device="cpu", hint="Free memory, or ask for fewer bindings back "
                                                         "(run(outputs=...)).") from None

    def view(self, offset: int = 0, nbytes: Optional[int] = None):
        """A ``uint8`` numpy array over ``nbytes`` bytes at ``offset`` (no copy)."""
        import numpy as np  # noqa: PLC0415  (imported here: a prestarted child is spawned before numpy is loaded)

        n = self.size - offset if nbytes is None else nbytes
        if not n:
            return np.zeros(0, dtype=np.uint8)
        return np.frombuffer(self._mm, dtype=np.uint8, count=n, offset=offset)

    def close(self) -> None:
        """Unmap and close (views still in use keep the mapping alive until they go)."""
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:
                pass  # a view is still alive: the GC unmaps it with the last one
            self._mm = None
        if self.fd is not None and self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def map_readonly(fd: int) -> tuple:
    """``(mmap or None, size)``: the whole file behind ``fd`` mapped read-only, every page up front."""
    size = os.fstat(fd).st_size
    if not size:
        return None, 0
    flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
    try:
        return mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ), size
    except OSError as e:
        from ...limits import is_resource_error, resource_error  # noqa: PLC0415

        if is_resource_error(e):  # no address space for it (ulimit -v): exit 3 with the numbers, not a traceback
            raise resource_error(e, "map the capture in the replay process", requested=size) from None
        raise


def send(sock: socket.socket, message: dict, fds: Iterable[int] = ()) -> None:
    """Send one JSON message (and file descriptors with its first byte)."""
    data = json.dumps(message).encode()
    payload = _HEAD.pack(len(data)) + data
    fds = [f for f in fds if f is not None and f >= 0]
    sent = socket.send_fds(sock, [payload], fds) if fds else sock.send(payload)
    if sent < len(payload):
        sock.sendall(payload[sent:])


def receive(sock: socket.socket, deadline=None, max_fds: int = 16) -> tuple:
    """``(message, [fds])``: the next message.

    Raises:
        ChannelClosed: The other end closed before a whole message came.
        ChannelTimeout: ``deadline`` (a :class:`~wrpkit.deadline.Deadline`, or None) passed first.
    """
    buf, fds = bytearray(), []
    need = _HEAD.size
    while len(buf) < need:
        left = None if deadline is None else deadline.left()
        if left is not None:
            if deadline.passed():
                raise ChannelTimeout()
            ready, _, _ = select.select([sock], [], [], left)
            if not ready:
                continue
        data, got, _, _ = socket.recv_fds(sock, min(need - len(buf), 1 << 20), max_fds)
        fds.extend(got)
        if not data:
            for f in fds:
                os.close(f)
            raise ChannelClosed()
        buf += data
        if need == _HEAD.size and len(buf) >= _HEAD.size:
            (n,) = _HEAD.unpack_from(buf)
            if n > MAX_MESSAGE:
                raise ChannelClosed()
            need = _HEAD.size + n
    return json.loads(bytes(buf[_HEAD.size:])), fds


__all__ = ["SharedArea", "memory_file", "layout", "map_readonly", "send", "receive", "ChannelClosed",
           "ChannelTimeout"]
