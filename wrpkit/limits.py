"""Resource limits: what the machine, the process's cgroup and its rlimits leave, and their errors.

* :func:`host_memory`: bytes a new host allocation can take: the kernel's ``MemAvailable``,
  the room under the process's memory cgroup (v2 ``memory.max`` - ``memory.current``, v1
  ``memory.limit_in_bytes`` - ``memory.usage_in_bytes``, the smallest over the cgroup and its
  ancestors) and the room under ``RLIMIT_AS`` (``ulimit -v``: the limit less ``VmSize``),
  whichever is smallest, with the bound named (``native/src/program.cpp`` computes the same).
* :func:`resource_error`: an ``OSError`` (or a failed thread start) from a resource limit as a
  worded error: too many open files, no process or thread can be started (exit 1), out of
  memory (exit 3).  Never "interrupted", never an internal error.

No numpy, no Warp: the parent of every command imports it.
"""

from __future__ import annotations

import errno
import os
import resource
from typing import Optional

from .errors import WrpError, WrpIOError, WrpOutOfMemoryError
from .records import record

#: A cgroup limit at or above this is "no limit" (v1 writes 2**63 - page size).
_NO_LIMIT = 1 << 60


class WrpResourceError(WrpIOError):
    """A resource other than memory ran out (file descriptors, processes, threads): exit 1, where an
    I/O error is (a layer that lets an I/O error through lets this through)."""


def _size(n: int) -> str:
    """``1.5 GiB (1610612736 bytes)`` (as :func:`wrpkit.checks.memory.format_size_exact`, imported by
    nothing here: the error paths of a process out of files must not import)."""
    n = int(n)
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit} ({n} bytes)"
    return f"{n} bytes"


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _mounts(proc: str):
    """``[(mount root, mount point, fstype, super options)]`` of the cgroup file systems."""
    out = []
    text = _read(os.path.join(proc, "self/mountinfo")) or ""
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if not sep or len(f) < 5 or len(r) < 3 or r[0] not in ("cgroup", "cgroup2"):
            continue
        out.append((f[3], f[4].replace("\\040", " "), r[0], set(r[2].split(","))))
    return out


def _cgroup_dirs(proc: str):
    """``[(version, folder of this process's memory cgroup, mount point)]``, v2 first."""
    paths = {}
    for line in (_read(os.path.join(proc, "self/cgroup")) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            paths[parts[1]] = parts[2]
            for c in parts[1].split(","):
                paths.setdefault(c, parts[2])
    found = []
    for root, point, fstype, opts in _mounts(proc):
        if fstype == "cgroup2" and "" in paths:
            version, path = 2, paths[""]
        elif fstype == "cgroup" and "memory" in opts and "memory" in paths:
            version, path = 1, paths["memory"]
        else:
            continue
        rel = os.path.relpath(path, root) if path.startswith(root) else "."
        folder = os.path.normpath(os.path.join(point, rel)) if rel != "." else point
        if not os.path.isdir(folder):  # another cgroup namespace: the mount's root is ours
            folder = point
        found.append((version, folder, point))
    return sorted(found, key=lambda t: -t[0])


def _inactive_file(folder: str, version: int) -> int:
    key = "inactive_file" if version == 2 else "total_inactive_file"
    for line in (_read(os.path.join(folder, "memory.stat")) or "").splitlines():
        k, _, v = line.partition(" ")
        if k == key and v.strip().isdigit():
            return int(v)
    return 0


@record
class CgroupMemory:
    """The tightest memory limit over this process's cgroup and its ancestors (``usage``: less the
    inactive page cache of ``memory.stat``, which the kernel reclaims before it kills)."""

    limit: int
    usage: int
    folder: str

    @property
    def room(self) -> int:
        return max(0, self.limit - self.usage)


def cgroup_memory(proc: str = "/proc") -> Optional[CgroupMemory]:
    """The memory cgroup limit that leaves the least room, or None where none is set."""
    best = None
    for version, folder, point in _cgroup_dirs(proc):
        names = ("memory.max", "memory.current") if version == 2 else ("memory.limit_in_bytes",
                                                                        "memory.usage_in_bytes")
        at = folder
        while True:
            limit, usage = _read(os.path.join(at, names[0])), _read(os.path.join(at, names[1]))
            if limit and limit.isdigit() and usage and usage.isdigit() and int(limit) < _NO_LIMIT:
                # Page cache the kernel reclaims first (inactive files) is room, as the OOM killer sees it.
                cand = CgroupMemory(int(limit), max(0, int(usage) - _inactive_file(at, version)), at)
                if best is None or cand.room < best.room:
                    best = cand
            if os.path.normpath(at) == os.path.normpath(point) or len(at) <= len(point):
                break
            at = os.path.dirname(at)
        if best is not None:
            return best
    return best


@record
class AddressSpace:
    """``RLIMIT_AS`` (``ulimit -v``) and this process's address space in use (``VmSize``)."""

    limit: int
    used: int

    @property
    def room(self) -> int:
        return max(0, self.limit - self.used)


def address_space(proc: str = "/proc") -> Optional[AddressSpace]:
    """This process's address-space limit and use, or None where it has no limit."""
    try:
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    used = 0
    for line in (_read(os.path.join(proc, "self/status")) or "").splitlines():
        if line.startswith("VmSize:"):
            try:
                used = int(line.split()[1]) * 1024
            except (IndexError, ValueError):
                pass
            break
    return AddressSpace(int(soft), used)


@record
class HostMemory:
    """Bytes a new host allocation can take, and what bounds them.

    Attributes:
        available: The smallest of the figures below (None: none is known).
        meminfo: The kernel's ``MemAvailable``.
        cgroup: The memory cgroup's limit and usage, where one is set.
        address_space: ``RLIMIT_AS`` and ``VmSize``, where a limit is set.
    """

    available: Optional[int]
    meminfo: Optional[int] = None
    cgroup: Optional[CgroupMemory] = None
    address_space: Optional[AddressSpace] = None

    @property
    def bound(self) -> str:
        """Words for what set :attr:`available` when it is not the machine's free memory ("" otherwise)."""
        if self.available is None:
            return ""
        if self.address_space is not None and self.address_space.room == self.available:
            a = self.address_space
            return (f"the address-space limit (ulimit -v, RLIMIT_AS) of {_size(a.limit)}, of which this process "
                    f"uses {_size(a.used)}")
        if self.cgroup is not None and self.cgroup.room == self.available and self.cgroup.room != self.meminfo:
            c = self.cgroup
            return f"the memory cgroup {c.folder} limit of {_size(c.limit)}, of which {_size(c.usage)} is in use"
        return ""


def host_memory(proc: str = "/proc") -> HostMemory:
    """:class:`HostMemory` now: ``MemAvailable``, the cgroup's room and ``RLIMIT_AS``'s room, the least."""
    meminfo = None
    for line in (_read(os.path.join(proc, "meminfo")) or "").splitlines():
        if line.startswith("MemAvailable:"):
            try:
                meminfo = int(line.split()[1]) * 1024
            except (IndexError, ValueError):
                pass
            break
    cg, asp = cgroup_memory(proc), address_space(proc)
    figures = [x for x in (meminfo, cg.room if cg else None, asp.room if asp else None) if x is not None]
    return HostMemory(min(figures) if figures else None, meminfo, cg, asp)


def _fd_limit() -> str:
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return "" if soft == resource.RLIM_INFINITY else f" (this process may open {soft}: ulimit -n)"
    except (OSError, ValueError):
        return ""


def _from_spawn(e: BaseException) -> bool:
    """Whether ``e`` came from starting a process or thread (``EAGAIN`` there is the process limit; from
    a non-blocking read or write it is not)."""
    tb = e.__traceback__
    while tb is not None:
        if os.path.basename(tb.tb_frame.f_code.co_filename) in ("subprocess.py", "popen_fork.py", "threading.py",
                                                                "popen_spawn_posix.py", "forkserver.py"):
            return True
        tb = tb.tb_next
    return False


def is_resource_error(e: BaseException) -> bool:
    """Whether ``e`` says a resource limit ran out (what :func:`resource_error` words)."""
    if isinstance(e, RuntimeError) and "can't start new thread" in str(e):
        return True
    if not isinstance(e, OSError):
        return False
    return e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM) or (e.errno == errno.EAGAIN and _from_spawn(e))


def resource_error(e: BaseException, doing: str = "", requested: Optional[int] = None) -> WrpError:
    """The worded error of a resource limit ``e`` met while ``doing`` (e.g. "start the replay process");
    ``requested``: the bytes asked for, where out of memory."""
    what = f"cannot {doing}: " if doing else ""
    if isinstance(e, RuntimeError) or (isinstance(e, OSError) and e.errno == errno.EAGAIN):
        kind = "thread" if isinstance(e, RuntimeError) else "process"
        return WrpResourceError(
            f"{what}no new {kind} can be started: the limit on processes is reached (ulimit -u, RLIMIT_NPROC, "
            f"or the cgroup's pids.max)",
            hint="Raise the process limit, or end other processes of this user or cgroup.")
    if e.errno == errno.EMFILE:
        return WrpResourceError(f"{what}too many open files{_fd_limit()}",
                                hint="Raise the limit on open files (ulimit -n).")
    if e.errno == errno.ENFILE:
        return WrpResourceError(f"{what}too many open files in the system (the kernel's file table is full)",
                                hint="Close files elsewhere, or raise fs.file-max.")
    hm = host_memory()
    bound = hm.bound
    return WrpOutOfMemoryError(
        f"out of memory on the host: {what}{e.strerror or e}"
        + (f" ({_size(requested)} asked for)" if requested is not None else "")
        + (f"; {_size(hm.available)} free" if hm.available is not None else "")
        + (f", bounded by {bound}" if bound else ""),
        hint="Free memory, or raise the limit (ulimit -v, the cgroup's memory.max).", device="cpu",
        requested=requested, available=hm.available)


__all__ = ["host_memory", "HostMemory", "cgroup_memory", "CgroupMemory", "address_space", "AddressSpace",
           "resource_error", "is_resource_error", "WrpResourceError"]
