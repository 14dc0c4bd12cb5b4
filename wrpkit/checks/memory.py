"""Memory a capture declares, checked before any of it is allocated.

Warp allocates (and zeroes) every memory region of a graph when it loads
it, so a capture's cost is known from its records alone.  This module
compares that declared memory with what the target device has free
(:func:`check_budget`; CPU: the memory the kernel says is available, bounded
by the process's cgroup; CUDA: the device's free memory, passed in by the
caller that can ask Warp), and finds regions far larger than any op can
reach (:func:`unreached_regions`), the signature of a file edited to make its
replay allocate more than it uses.  No Warp import.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional

from ..errors import WrpBindingError, WrpOutOfMemoryError

#: A region is "far larger than any op reaches" when it is above this many
#: bytes and at least UNREACHED_FACTOR times what the ops and bindings reach.
UNREACHED_MIN_BYTES = 64 << 20
UNREACHED_FACTOR = 16
#: ``wrp replay`` refuses a file whose unreached bytes exceed this (unless
#: ``--allow-unreached``): a warning below it.
UNREACHED_REFUSE_BYTES = 1 << 30


def format_size(n: int) -> str:
    """``1.5 GiB``-style text for a byte count."""
    n = int(n)
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*([kmgtp]?)(i?b?)\s*$", re.IGNORECASE)


def parse_size(text) -> int:
    """Bytes of a size such as ``"512M"``, ``"16GiB"``, ``"1.5g"`` or ``"1000000"`` (powers of 1024).

    Raises:
        WrpBindingError: Not a size.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise WrpBindingError(f"memory size {text} is negative")
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise WrpBindingError(f"{text!r} is not a memory size", hint="Write it as bytes or with a unit: 512M, 16G, "
                                                                    "1.5GiB.")
    value = float(m.group(1)) * (1 << (10 * "kmgtp".find(m.group(2).lower()) + 10) if m.group(2) else 1)
    return int(value)


@dataclass
class DeclaredMemory:
    """What loading a capture allocates.

    Attributes:
        total: Bytes of every region together.
        largest: ``[(region id, bytes)]``, the three largest first.
    """

    total: int
    largest: list

    def describe(self) -> str:
        regs = ", ".join(f"region {rid} {format_size(size)} ({size} bytes)" for rid, size in self.largest)
        return f"{format_size(self.total)} ({self.total} bytes; largest: {regs or 'none'})"


def declared_memory(model) -> DeclaredMemory:
    """The memory a capture's regions declare (:class:`DeclaredMemory`)."""
    sizes = [(r.region_id, int(r.size)) for r in model.regions]
    return DeclaredMemory(sum(s for _, s in sizes), sorted(sizes, key=lambda t: -t[1])[:3])


def host_available() -> Optional[int]:
    """Bytes of host memory a new allocation can take: ``MemAvailable``, bounded by the cgroup's limit."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        avail = None
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit_file) as f:
                limit = f.read().strip()
            with open(usage_file) as f:
                used = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < (1 << 60):
            room = max(0, int(limit) - used)
            avail = room if avail is None else min(avail, room)
        break
    return avail


def check_budget(model, device: str, available: Optional[int], max_memory: Optional[int] = None) -> DeclaredMemory:
    """Refuse a capture whose declared memory exceeds the device's free memory (or ``max_memory``).

    Args:
        model: The decoded program.
        device: The device's name, for the message.
        available: Bytes the device has free (None: unknown, then only ``max_memory`` bounds it).
        max_memory: An explicit budget in bytes that replaces ``available`` (``--max-memory``).

    Returns:
        The :class:`DeclaredMemory` (it fits).

    Raises:
        WrpOutOfMemoryError: It does not fit (exit 3), naming the total, the
            largest regions and the device's figure.
    """
    need = declared_memory(model)
    budget = max_memory if max_memory is not None else available
    if budget is None or need.total <= budget:
        return need
    if max_memory is not None:
        said = f"the budget --max-memory {format_size(max_memory)} ({max_memory} bytes)"
        hint = "Raise --max-memory (max_memory=) if the device has the room."
    else:
        said = f"device {device} has {format_size(available)} ({available} bytes) free"
        hint = ("Free memory or replay on a larger device; --max-memory SIZE (max_memory=) replays it anyway "
                "if you know it fits (e.g. memory that will be freed).")
    return _raise(WrpOutOfMemoryError(
        f"the capture declares {need.describe()} of memory, but {said}; nothing was allocated",
        hint=hint, requested=need.total, device=device, available=available))


def _raise(e):
    raise e


INF = float("inf")


def _op_reach(op, reach: dict, m) -> None:
    """Record in ``reach`` ({region id: first byte no op reaches}) the bytes ``op`` can touch.

    Kernel launches, copies, fills, tiles and conditions are bounded by their
    records; any other kind of op counts every region it names as reached in full.
    """
    from ..formats.launch_arrays import argument_arrays, descriptor_view  # noqa: PLC0415

    def touch(rid, end):
        if isinstance(rid, int) and rid >= 0:
            reach[rid] = max(reach.get(rid, 0), end)

    if isinstance(op, m.KernelLaunch):
        cursor = 0
        for p in list(op.params) + list(op.adjoint_params):
            rels = op.relocations[cursor:cursor + p.num_relocs]
            cursor += p.num_relocs
            try:
                descs = list(argument_arrays(p, rels))
            except Exception:  # noqa: BLE001  (a layout validate reports: count these regions in full)
                descs = None
            if descs is None:
                for r in rels:
                    touch(r.region_id, INF)
                continue
            in_desc = set()
            for d in descs:
                ndim, shape, strides = descriptor_view(op.value_data, p.value_offset + d.offset)
                for k, r in enumerate(d.relocations):
                    in_desc.add(id(r))
                    if r.kind != m.RelocKind.DATA_PTR:
                        continue
                    if k >= 2 or not 1 <= ndim <= 4:  # index arrays, odd descriptors: in full
                        touch(r.region_id, INF)
                        continue
                    dims, steps = shape[:ndim], strides[:ndim]
                    if 0 in dims:
                        continue
                    hi = sum((int(n) - 1) * int(s) for n, s in zip(dims, steps) if int(s) > 0)
                    # the last element's first byte plus its size, bounded by the largest stride (or 64 bytes)
                    touch(r.region_id, r.region_offset + hi + max([abs(int(s)) for s in steps] + [64]))
            for r in rels:
                if id(r) not in in_desc and r.kind == m.RelocKind.DATA_PTR:
                    touch(r.region_id, INF)
        return
    if isinstance(op, m.MemcpyH2D):
        touch(op.dst_region_id, op.dst_offset + memoryview(op.data).nbytes)
    elif isinstance(op, m.MemcpyD2D):
        touch(op.dst_region_id, op.dst_offset + op.size)
        touch(op.src_region_id, op.src_offset + op.size)
    elif isinstance(op, m.Memset):
        touch(op.region_id, op.offset + op.size)
    elif isinstance(op, m.Memtile):
        touch(op.region_id, op.offset + op.count * memoryview(op.value).nbytes)
    elif isinstance(op, (m.If, m.While)):
        touch(op.cond_region_id, op.cond_offset + 8)
        for sub in (list(op.then_ops) + list(op.else_ops)) if isinstance(op, m.If) else list(op.body):
            _op_reach(sub, reach, m)
    else:
        for k in dir(op):
            if k.endswith("region_id") and not k.startswith("_"):
                touch(getattr(op, k, None), INF)


def region_reach(model) -> dict:
    """``{region id: bytes from its start that some op or binding can touch}`` (inf: the whole region).

    Ops reach what their records say: an array argument its descriptor's
    shape and strides from its pointer's offset, a copy or fill its byte
    range, a condition its flag.  A binding, a mesh, a pointer location or an
    op of a kind this does not model makes its region reached in full.
    """
    from .. import model as m  # noqa: PLC0415

    reach: dict = {}
    for op in model.ops:
        try:
            _op_reach(op, reach, m)
        except Exception:  # noqa: BLE001  (a record this does not model: count its regions as reached)
            for k in dir(op):
                if k.endswith("region_id") and isinstance(getattr(op, k, None), int):
                    reach[getattr(op, k)] = INF
    full = {b.region_id for b in model.bindings}
    for me in getattr(model, "meshes", []) or []:
        full.update(rid for rid in (getattr(me, "points_region_id", -1), getattr(me, "indices_region_id", -1),
                                    getattr(me, "velocities_region_id", -1)) if rid is not None)
    for pl in getattr(model, "pointer_locations", []) or []:
        full.add(getattr(pl, "region_id", -1))
    for rid in full:
        reach[rid] = float("inf")
    return reach


@dataclass
class Unreached:
    """A region far larger than anything the capture does with it."""

    region_id: int
    size: int
    reached: int

    @property
    def unreached(self) -> int:
        return self.size - self.reached

    def message(self) -> str:
        return (f"region {self.region_id} declares {format_size(self.size)} ({self.size} bytes) but no op or binding "
                f"reaches past byte {self.reached}: loading it allocates and zeroes "
                f"{format_size(self.unreached)} that nothing uses (an edited file?)")


def unreached_regions(model) -> list:
    """Regions above :data:`UNREACHED_MIN_BYTES` and at least :data:`UNREACHED_FACTOR` times what reaches them."""
    reach = region_reach(model)
    out = []
    for r in model.regions:
        got = reach.get(r.region_id, 0)
        if r.size >= UNREACHED_MIN_BYTES and got != INF and r.size >= UNREACHED_FACTOR * max(got, 1):
            out.append(Unreached(r.region_id, int(r.size), int(got)))
    return out


def env_max_memory() -> Optional[int]:
    """``$WRP_MAX_MEMORY`` as bytes, or None."""
    v = os.environ.get("WRP_MAX_MEMORY")
    return parse_size(v) if v else None


__all__ = ["declared_memory", "check_budget", "host_available", "parse_size", "format_size", "unreached_regions",
           "region_reach", "DeclaredMemory", "Unreached", "UNREACHED_REFUSE_BYTES"]
