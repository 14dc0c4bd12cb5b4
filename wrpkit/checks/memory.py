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
from typing import Optional

from ..records import record
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


def format_size_exact(n: int) -> str:
    """:func:`format_size` with the exact count beside it: ``3.5 KiB (3600 bytes)``, or ``12 bytes`` once."""
    n = int(n)
    return f"{format_size(n)} ({n} bytes)" if n >= 1024 else format_size(n)


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


@record
class DeclaredMemory:
    """What loading a capture allocates.

    Attributes:
        total: Bytes of every region together.
        largest: ``[(region id, bytes)]``, the three largest first.
    """

    total: int
    largest: list

    def describe(self) -> str:
        regs = ", ".join(f"region {rid}: {format_size_exact(size)}" for rid, size in self.largest)
        exact = f"{self.total} bytes; " if self.total >= 1024 else ""
        return f"{format_size(self.total)} ({exact}largest: {regs or 'none'})"


def declared_memory(model) -> DeclaredMemory:
    """The memory a capture's regions declare (:class:`DeclaredMemory`)."""
    sizes = [(r.region_id, int(r.size)) for r in model.regions]
    return DeclaredMemory(sum(s for _, s in sizes), sorted(sizes, key=lambda t: -t[1])[:3])


def host_available() -> Optional[int]:
    """Bytes of host memory a new allocation can take: ``MemAvailable``, bounded by the process's memory
    cgroup (its and its ancestors' ``memory.max`` or ``memory.limit_in_bytes`` less their usage) and by
    ``RLIMIT_AS`` less the address space in use (:func:`wrpkit.limits.host_memory`)."""
    global _last_host
    from ..limits import host_memory  # noqa: PLC0415

    _last_host = host_memory()
    return _last_host.available


#: The last :func:`host_available` reading, so that a refusal names what bounded it.
_last_host = None


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
        said = f"more than the --max-memory budget of {format_size_exact(max_memory)}"
        hint = "Raise --max-memory (max_memory=) if the device has the room."
    else:
        said = f"more than the {format_size_exact(available)} device {device} has free"
        bound = _last_host.bound if device == "cpu" and _last_host is not None and \
            _last_host.available == available else ""
        if bound:
            said += f" (bounded by {bound})"
        hint = ("Free memory or replay on a larger device; --max-memory SIZE (max_memory=) replays it anyway "
                "if you know it fits (e.g. memory that will be freed).")
    return _raise(WrpOutOfMemoryError(
        f"the capture declares {need.describe()} of memory, {said}; nothing was allocated",
        hint=hint, requested=need.total, device=device, available=available))


def _raise(e):
    raise e


INF = float("inf")


def region_reach(model) -> dict:
    """``{region id: bytes from its start that some op or binding can touch}`` (inf: the whole region).

    Ops reach the byte ranges :func:`wrpkit.checks.effects.effects` gives them
    (the one answer to what an op reads and writes: an array argument its
    descriptor's shape and strides from its pointer's offset, a copy or fill
    its byte range, a condition its flag).  A binding, a mesh or a pointer
    location makes its region reached in full, and so does an op whose record
    cannot be measured.
    """
    from .. import model as m  # noqa: PLC0415
    from .effects import effects  # noqa: PLC0415

    reach: dict = {}
    # No kernel signatures: a byte range needs only the descriptors (an element is its innermost
    # stride), and decoding the annotations would cost `wrp upgrade` its light imports.
    no_signatures: dict = {}
    for _, op in m.walk_ops(model.ops):
        try:
            accesses = effects(op, model, no_signatures).accesses
        except Exception:  # noqa: BLE001  (a record validate reports: count its regions as reached)
            for k in dir(op):
                if k.endswith("region_id") and isinstance(getattr(op, k, None), int):
                    reach[getattr(op, k)] = INF
            continue
        for acc in accesses:
            if acc.region_id >= 0:
                reach[acc.region_id] = max(reach.get(acc.region_id, 0), acc.offset + acc.nbytes)
    full = {b.region_id for b in model.bindings}
    for me in getattr(model, "meshes", []) or []:
        full.update(rid for rid in (getattr(me, "points_region_id", -1), getattr(me, "indices_region_id", -1),
                                    getattr(me, "velocities_region_id", -1)) if rid is not None)
    for pl in getattr(model, "pointer_locations", []) or []:
        full.add(getattr(pl, "region_id", -1))
    for rid in full:
        reach[rid] = float("inf")
    return reach


@record
class Unreached:
    """A region far larger than anything the capture does with it."""

    region_id: int
    size: int
    reached: int

    @property
    def unreached(self) -> int:
        return self.size - self.reached

    def message(self) -> str:
        return (f"region {self.region_id} declares {format_size_exact(self.size)} but no op or binding "
                f"reaches past byte {self.reached}: loading it allocates and zeroes "
                f"{format_size(self.unreached)} that nothing uses (an edited file, or launches on a slice "
                f"of an array the capture does not save?)")


#: What to do about an unreached region: the one hint of ``wrp replay``'s refusal and of ``wrp check``.
UNREACHED_FIX = ("Recapture the file, naming the whole array as a binding if a launch uses a slice of it "
                 "(capture_save(..., inputs={...})), or pass --allow-unreached to replay it anyway.")


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
           "region_reach", "DeclaredMemory", "Unreached", "UNREACHED_REFUSE_BYTES", "UNREACHED_FIX"]
