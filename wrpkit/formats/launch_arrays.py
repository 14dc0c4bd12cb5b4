"""Array descriptors inside a kernel launch's argument bytes, and the lint on launch extents.

Warp passes a ``wp.array`` argument as a 56-byte ``array_t`` (its
``warp/native/array.h``): data pointer (+0), grad pointer (+8), ``int32
shape[4]`` (+16), ``int32 strides[4]`` (+32), ``uint16 ndim`` (+48),
``uint16 flags`` (+50).  A ``wp.indexedarray`` is that ``array_t``, four
index-array pointers (+56..+80) and its own ``int32 shape[4]`` (+88): 104
bytes.  wrp1_layout.py (``ARRAY_RECORD``, ``INDEXED_ARRAY_RECORD``) declares these
layouts once; the offsets here are read from it, as the C++ validator's are
from the header generated from it.  In a launch record the pointers are relocated slots, so the
relocations of one argument come in those groups (a ``wp.handle`` is one
HANDLE slot; a struct is its fields in order).  :func:`argument_arrays` walks
them; the validator (:mod:`wrpkit.checks.launch_checks`) checks each descriptor
against its regions, and :func:`exceeded_launches` uses the element counts.

A launch records its thread count but not how the kernel indexes its arrays:
a guarded kernel (``if i < n``) may launch more threads than any array holds.
So a launch whose thread count exceeds the element count of *every* array
argument is a lint (most kernels index ``a[tid]`` unguarded), not proof of an
error; see ``schema/VALIDATION-RULES.md``.
"""

from __future__ import annotations

from typing import Iterator, Optional

from ..records import record
from .. import model as m
from .wrp1_layout import ARRAY_RECORD, INDEXED_ARRAY_RECORD

#: Bytes of an ``array_t`` and of an ``indexedarray_t``.
ARRAY_BYTES = ARRAY_RECORD.size
INDEXED_ARRAY_BYTES = INDEXED_ARRAY_RECORD.size
# Where the fields are (wrp1_layout.py declares the descriptors once; the C++ validator reads the
# same offsets from the header tools/gen_layout.py generates from them).
_NDIM, _SHAPE, _STRIDES = (ARRAY_RECORD.offsets[f] for f in ("ndim", "shape", "strides"))
_READ_NDIM, _READ_4I = ARRAY_RECORD.fields["ndim"], ARRAY_RECORD.fields["shape"]
#: Byte offset of an indexedarray's first index-array pointer, and of its own shape.
INDICES_OFFSET = INDEXED_ARRAY_RECORD.offsets["indices"]
_INDEX_SHAPE = INDEXED_ARRAY_RECORD.offsets["index_shape"]
_READ_INDEX_SHAPE = INDEXED_ARRAY_RECORD.fields["index_shape"]


class DescriptorLayoutError(ValueError):
    """An argument's relocation slots do not follow the layout of Warp's argument types."""


@record(frozen=True)
class ArrayDescriptor:
    """One ``array_t`` (or ``indexedarray_t``) inside a launch argument.

    Attributes:
        offset: Byte offset of the descriptor inside its argument.
        indexed: Whether it is an ``indexedarray_t`` (104 bytes) rather than an ``array_t``.
        relocations: Its pointer slots: data, grad, then the four index arrays when indexed.
    """

    offset: int
    indexed: bool
    relocations: tuple

    @property
    def size(self) -> int:
        return INDEXED_ARRAY_BYTES if self.indexed else ARRAY_BYTES

    def is_none(self) -> bool:
        """A ``None`` array: neither data nor grad points anywhere."""
        return all(r.kind != m.RelocKind.DATA_PTR for r in self.relocations[:2])


def _pointer(rels, i: int) -> bool:
    return i < len(rels) and rels[i].kind in (m.RelocKind.DATA_PTR, m.RelocKind.NULL_PTR)


def argument_arrays(param: m.LaunchParam, rels) -> Iterator[ArrayDescriptor]:
    """The array descriptors of one launch argument, walked from its relocations as Warp's capture wrote them.

    Args:
        param: The argument's parameter record (its ``value_size`` bounds the descriptors).
        rels: The argument's relocations, in table order.

    Yields:
        :class:`ArrayDescriptor` in byte order.

    Raises:
        DescriptorLayoutError: At the first slot that breaks the pattern (unaligned or out of
            order, a data pointer without its grad pointer, a descriptor past the argument);
            descriptors before it have been yielded.
    """
    n = len(rels)
    next_free = 0
    i = 0
    while i < n:
        o = rels[i].value_byte_offset
        if o % 8 or o < next_free:
            raise DescriptorLayoutError(f"relocation slot {o} is not 8-byte aligned or not after the previous "
                                        f"pointer field (which ends at {next_free})")
        if rels[i].kind == m.RelocKind.HANDLE:
            next_free = o + 8
            i += 1
            continue
        if not _pointer(rels, i + 1) or rels[i + 1].value_byte_offset != o + 8:
            raise DescriptorLayoutError(f"an array's data pointer at slot {o} must be followed by its grad "
                                        f"pointer at slot {o + 8}")
        indexed = all(_pointer(rels, i + 2 + d) and rels[i + 2 + d].value_byte_offset == o + INDICES_OFFSET + 8 * d
                      for d in range(4))
        group = INDEXED_ARRAY_BYTES if indexed else ARRAY_BYTES
        if o + group > param.value_size:
            raise DescriptorLayoutError(f"a {group}-byte {'indexedarray' if indexed else 'array'} at byte {o} "
                                        f"does not fit in the {param.value_size}-byte argument")
        take = 6 if indexed else 2
        yield ArrayDescriptor(o, indexed, tuple(rels[i:i + take]))
        next_free = o + group
        i += take


def descriptor_view(blob, base: int) -> tuple:
    """``(ndim, shape[4], strides[4])`` of the ``array_t`` at byte ``base`` of a launch's value data."""
    return _READ_NDIM.unpack_from(blob, base + _NDIM)[0], _READ_4I.unpack_from(blob, base + _SHAPE), \
        _READ_4I.unpack_from(blob, base + _STRIDES)


def index_counts(blob, base: int) -> tuple:
    """The entry counts of an ``indexedarray_t``'s four index arrays (its own shape, ``index_shape``)."""
    return _READ_INDEX_SHAPE.unpack_from(blob, base + _INDEX_SHAPE)


def array_extents(op: m.KernelLaunch) -> list:
    """Element counts of the arrays a launch is given (the view an indexedarray presents).

    Returns:
        ``[(argument number, starting at 1, elements), ...]``; ``None`` arrays,
        malformed descriptors (the validator's to report) and everything after
        them in an argument are left out.
    """
    out = []
    data = op.value_data
    for j, (p, rels) in enumerate(op.param_relocations()):
        if p.value_offset < 0 or p.value_offset + p.value_size > len(data):
            continue  # out-of-range params are the validator's to report
        try:
            for d in argument_arrays(p, rels):
                if d.is_none():
                    continue
                base = p.value_offset + d.offset
                if d.indexed:
                    shape = index_counts(data, base)
                    ndim = sum(1 for s in shape if s > 0)
                else:
                    ndim, shape, _ = descriptor_view(data, base)
                if not 1 <= ndim <= 4 or any(s < 0 for s in shape[:ndim]):
                    continue
                n = 1
                for s in shape[:ndim]:
                    n *= s
                out.append((j + 1, n))
        except DescriptorLayoutError:
            continue
    return out


def exceeded_launches(ops, prefix: str = "ops", _largest: Optional[dict] = None) -> Iterator[tuple]:
    """Launches whose thread count exceeds every array argument's element count.

    Args:
        ops: A list of ops (nested IF/WHILE bodies are walked).
        prefix: Path prefix of the ops, as the validator writes it.

    Yields:
        ``(path, op, largest array's elements)`` like ``("ops[3]", op, 256)``.
    """
    # id(op) -> its largest array (None: no array).  A decoder that shares
    # identical records (share_ops) lists one object many times: measured once.
    largest = {} if _largest is None else _largest
    for i, op in enumerate(ops):
        if isinstance(op, m.KernelLaunch):
            n = largest.get(id(op), -1)
            if n == -1:
                n = largest[id(op)] = max((k for _, k in array_extents(op)), default=None)
            if n is not None and op.size > n:
                yield f"{prefix}[{i}]", op, n
        elif isinstance(op, m.If):
            w = f"{prefix}[{i}]"
            yield from exceeded_launches(op.then_ops, w + ".then", largest)
            yield from exceeded_launches(op.else_ops, w + ".else", largest)
        elif isinstance(op, m.While):
            yield from exceeded_launches(op.body, f"{prefix}[{i}].body", largest)


def exceeded_message(op: m.KernelLaunch, largest: int) -> str:
    """The lint message for one launch found by :func:`exceeded_launches`."""
    return (f"launch of kernel {op.kernel_key!r} runs {op.size} threads but its largest array argument holds "
            f"{largest} elements: unless the kernel guards its indices, threads read and write past the arrays")


__all__ = ["ARRAY_BYTES", "INDEXED_ARRAY_BYTES", "ArrayDescriptor", "DescriptorLayoutError", "argument_arrays",
           "array_extents", "descriptor_view", "exceeded_launches", "exceeded_message", "index_counts"]
