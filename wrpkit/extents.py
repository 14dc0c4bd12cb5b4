"""Launch extents: do a kernel launch's threads fit the arrays it is given?

A kernel launch records its thread count (``size``) and the bytes of its
arguments.  An array argument is an ``array_t`` descriptor whose data pointer
(+0) and grad pointer (+8) are relocated slots; its shape is four ``int32``
at +16 and its ``ndim`` at +48 (an ``indexedarray_t`` adds four index
pointers at +56..+80 and its own shape at +88).  The records say how many
elements each array holds, but not how the kernel indexes them: a guarded
kernel (``if i < n``) may launch more threads than any array has.  So a launch
whose thread count exceeds the element count of *every* array argument is a
lint (most kernels index ``a[tid]`` unguarded), not proof of an error; see
``schema/VALIDATION-RULES.md``.
"""

from __future__ import annotations

import struct
from typing import Iterator

from . import model as m


def array_extents(op: m.KernelLaunch) -> list:
    """Element counts of the array descriptors among a launch's arguments.

    Returns:
        ``[(argument number, starting at 1, elements), ...]``; arguments that
        are not arrays (or whose descriptor is malformed) are left out.
    """
    out = []
    data = op.value_data
    for j, (p, rels) in enumerate(op.param_relocations()):
        slots = {r.value_byte_offset for r in rels}
        handles = {r.value_byte_offset for r in rels if r.kind == m.RelocKind.HANDLE}
        used: set = set()
        for o in sorted(slots):
            # As the validators walk them: a data and a grad pointer start an array_t; four
            # more pointers right after its 56 bytes make it an indexedarray_t.
            if o in used or o in handles or o + 8 not in slots:
                continue
            indexed = all(o + 56 + 8 * d in slots for d in range(4))
            used.update(range(o, o + (104 if indexed else 56), 8))
            shape_at = o + (88 if indexed else 16)
            end = shape_at + 16 if indexed else o + 52
            base = p.value_offset
            # Out-of-range params are the validator's to report; here they are only skipped.
            if end > p.value_size or base < 0 or base + end > len(data):
                continue
            shape = struct.unpack_from("<4i", data, base + shape_at)
            ndim = 0
            if indexed:
                ndim = sum(1 for s in shape if s > 0)
            else:
                ndim = struct.unpack_from("<i", data, base + o + 48)[0]
            if not 1 <= ndim <= 4 or any(s < 0 for s in shape[:ndim]):
                continue
            n = 1
            for s in shape[:ndim]:
                n *= s
            out.append((j + 1, n))
    return out


def exceeded_launches(ops, prefix: str = "ops") -> Iterator[tuple]:
    """Launches whose thread count exceeds every array argument's element count.

    Args:
        ops: A list of ops (nested IF/WHILE bodies are walked).
        prefix: Path prefix of the ops, as the validator writes it.

    Yields:
        ``(path, op, largest array's elements)`` like ``("ops[3]", op, 256)``.
    """
    for i, op in enumerate(ops):
        w = f"{prefix}[{i}]"
        if isinstance(op, m.KernelLaunch):
            arrays = array_extents(op)
            if arrays and op.size > max(n for _, n in arrays):
                yield w, op, max(n for _, n in arrays)
        elif isinstance(op, m.If):
            yield from exceeded_launches(op.then_ops, w + ".then")
            yield from exceeded_launches(op.else_ops, w + ".else")
        elif isinstance(op, m.While):
            yield from exceeded_launches(op.body, w + ".body")


def exceeded_message(op: m.KernelLaunch, largest: int) -> str:
    """The lint message for one launch found by :func:`exceeded_launches`."""
    return (f"launch of kernel {op.kernel_key!r} runs {op.size} threads but its largest array argument holds "
            f"{largest} elements: unless the kernel guards its indices, threads read and write past the arrays")


__all__ = ["array_extents", "exceeded_launches", "exceeded_message"]
