"""Codec for Warp's WRP1 container (``.wrp``, APIC formats 3, 10 and 13 to 18).

:func:`decode_wrp1` turns the bytes of a ``.wrp`` into a
:class:`~wrpkit.model.Program`; :func:`encode_wrp1` turns a program back into
bytes, byte-identical to what was decoded.  The format is described in
``schema/WRP1-FORMAT.md``.  Every format a Warp release wrote (3, 10, 14, 15,
16, 18, and 13, which 1.15 to 1.18 load) decodes into the same model and
encodes back in its own format; what differs between them is described by
the :class:`~wrpkit.formats.wrp1_layout.FormatLayout` of each, whose flags
drive the per-format branches of the section readers
(:mod:`wrpkit.formats.wrp1_decode`) and writers (:mod:`wrpkit.formats.wrp1_encode`).
This module holds the entry points, the file header and the section table;
the decoder's caps are :class:`wrpkit.formats.wrp1_limits.Limits`.

The decoder is fail-closed, in the style of safetensors: every count, length
and offset is checked before it is used, arithmetic cannot overflow (Python
integers) and every error names the field and its absolute byte offset.  It
accepts only the canonical layout Warp writes: one header, the three sections
METADATA, MEMORY and OPERATIONS back to back from byte 160, optionally
followed by wrpkit's ANNOTATIONS section, with nothing after them, zero
reserved bytes, and records of exactly their documented size.

It works over any buffer (``bytes``, ``mmap``, ``memoryview``) without
copying it: region contents and other blobs in the returned model are
``memoryview`` slices of the input, so decoding a 256 MiB file reads only its
records.  Keep the buffer alive while the model is in use.
"""

from __future__ import annotations

import struct
from typing import Callable, Iterator, Optional

from .. import model as m
from ..errors import WrpFormatError, WrpVersionError
from .wrp1_decode import check_zero, decode_memory, decode_metadata, decode_operations
from .wrp1_encode import encode_metadata, encode_ops, iter_memory_section, memory_section_size
from .wrp1_layout import (
    FILE_HEADER,
    FILE_HEADER_SIZE,
    LAYOUTS,
    MAGIC,
    SECTION_ANNOTATIONS,
    SECTION_ENTRY,
    SECTION_ENTRY_SIZE,
    SECTION_MEMORY,
    SECTION_METADATA,
    SECTION_OPERATIONS,
)
from .wrp1_limits import DEFAULT_LIMITS, Limits

_U32 = struct.Struct("<I")
_SECTION_NAMES = {
    SECTION_METADATA: "METADATA",
    SECTION_MEMORY: "MEMORY",
    SECTION_OPERATIONS: "OPERATIONS",
    SECTION_ANNOTATIONS: "ANNOTATIONS",
}


def sniff(buf) -> str:
    """Name the container kind of a buffer from its first bytes.

    Returns:
        ``"wrp"``, ``"wrpk"`` or ``"unknown"``.
    """
    head = bytes(buf[:4])
    if head == MAGIC:
        return "wrp"
    if head == b"WRPK":
        return "wrpk"
    return "unknown"


def decode_wrp1(data, *, limits: Limits = DEFAULT_LIMITS, share_ops: bool = False,
                on_regions: Optional[Callable[[list], None]] = None) -> m.Program:
    """Decode a ``.wrp`` file's bytes into a :class:`~wrpkit.model.Program`.

    Args:
        data: The whole file: ``bytes``, ``bytearray``, ``mmap`` or ``memoryview``.
            Blob fields of the result are zero-copy views into it.
        limits: Caps on counts and sizes (see :class:`Limits`).
        share_ops: Decode byte-identical records of ops other than IF and
            WHILE (a step loop records the same launch many times) into one
            object, whose ``at`` is the first record's offset, as a ``.wrpk``
            decodes shared tables.  Faster for callers that treat the ops as
            read-only and do not report per-op offsets (conversion, loading).
        on_regions: Called with the decoded regions (``Program.regions``)
            before the operations are decoded, so that a caller can start
            work on region data (hashing it, say) while they are.

    Returns:
        The decoded program.

    Raises:
        WrpVersionError: The file is WRP1 but of another format or Warp version
            range than this codec reads.
        WrpFormatError: The bytes are not a well-formed WRP1 file; the message
            names the field and the byte offset.
    """
    buf = memoryview(data).cast("B") if not isinstance(data, memoryview) else data.cast("B")
    size = len(buf)
    if size > limits.max_file_size:
        raise WrpFormatError(f"file is {size} bytes, above the limit of {limits.max_file_size}")
    if size < FILE_HEADER_SIZE:
        raise WrpFormatError(
            f"file is {size} bytes, too small for a WRP1 header ({FILE_HEADER_SIZE} bytes)",
            hint="The file is truncated or is not a Warp capture (.wrp).")
    (magic, version, flags, num_sections, table_off, device_type, reserved_dt, target_arch,
     reserved) = FILE_HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        kind = sniff(buf)
        hint = ("This is a .wrpk bundle; open it with wrpkit.formats.wrpk.reader.decode_wrpk or `wrp inspect`."
                if kind == "wrpk" else "Pass a .wrp file written by wp.capture_save.")
        raise WrpFormatError(f"bad magic {magic!r}, expected {MAGIC!r}: not a WRP1 file",
                             field="header.magic", offset=0, hint=hint)
    layout = LAYOUTS.get(version)
    if layout is None:
        raise WrpVersionError(
            f"WRP1 format version {version} is not supported (this wrpkit reads {sorted(LAYOUTS)})",
            field="header.version", offset=4,
            hint="No released Warp wrote this format; recapture the graph with Warp 1.19.0, which writes "
                 "format 18.")
    if flags != 0:
        raise WrpFormatError(f"flags must be 0, found {flags:#x}", field="header.flags", offset=8)
    if num_sections not in (3, 4):
        raise WrpFormatError(f"expected 3 or 4 sections, found {num_sections}",
                             field="header.num_sections", offset=12)
    if table_off != FILE_HEADER_SIZE:
        raise WrpFormatError(f"section table must start at byte 64, found {table_off}",
                             field="header.section_table_offset", offset=16)
    if device_type not in (0, 1):
        raise WrpFormatError(f"device type must be 0 (CUDA) or 1 (CPU), found {device_type}",
                             field="header.device_type", offset=24)
    check_zero(reserved_dt, "header._reserved_dt", 25)
    if (device_type == m.DeviceType.CPU) != (target_arch == 0) or target_arch > 0x7FFFFFFF:
        raise WrpFormatError(
            f"target arch {target_arch} does not fit device type "
            f"{m.DeviceType(device_type).name} (CPU needs 0, CUDA a positive SM version)",
            field="header.target_arch", offset=28)
    check_zero(reserved, "header._reserved", 32)

    sections = _decode_section_table(buf, num_sections)
    (meta_off, meta_size), (mem_off, mem_size), (ops_off, ops_size) = sections[:3]

    prog = m.Program(format_version=version, warp_version="", device_type=device_type,
                     target_arch=target_arch)
    decode_metadata(buf, meta_off, meta_size, prog, layout, limits)
    decode_memory(buf, mem_off, mem_size, prog, limits)
    if on_regions is not None:
        on_regions(prog.regions)
    decode_operations(buf, ops_off, ops_size, prog, layout, limits, share_ops)
    if len(sections) == 4:
        off, n = sections[3]
        if not 8 <= n <= limits.max_annotations:
            raise WrpFormatError(f"annotations section of {n} bytes is outside 8..{limits.max_annotations}",
                                 field="annotations", offset=off)
        prog.annotations = bytes(buf[off:off + n])
    return prog


def _decode_section_table(buf, num_sections: int) -> list:
    size = len(buf)
    table_end = FILE_HEADER_SIZE + num_sections * SECTION_ENTRY_SIZE
    if table_end > size:
        raise WrpFormatError(f"section table of {num_sections} entries runs past the end of the "
                             f"{size}-byte file", field="section_table", offset=FILE_HEADER_SIZE)
    expected = [SECTION_METADATA, SECTION_MEMORY, SECTION_OPERATIONS, SECTION_ANNOTATIONS]
    pos = table_end
    out = []
    for i in range(num_sections):
        at = FILE_HEADER_SIZE + i * SECTION_ENTRY_SIZE
        stype, sflags, off, n, raw_n = SECTION_ENTRY.unpack_from(buf, at)
        what = f"section_table[{i}]"
        if stype != expected[i]:
            got = _SECTION_NAMES.get(stype, f"unknown type {stype:#x}")
            raise WrpFormatError(f"expected the {_SECTION_NAMES[expected[i]]} section, found {got}",
                                 field=what + ".type", offset=at)
        if sflags != 0:
            raise WrpFormatError(f"section flags must be 0, found {sflags:#x}", field=what + ".flags",
                                 offset=at + 4)
        if off != pos:
            raise WrpFormatError(f"section must start at byte {pos} (right after the previous one), "
                                 f"found {off}", field=what + ".offset", offset=at + 8)
        if n == 0 or n > size - off:
            raise WrpFormatError(f"section size {n} does not fit in the {size}-byte file from byte {off}",
                                 field=what + ".size", offset=at + 16,
                                 hint="The file is truncated or corrupted.")
        if raw_n != n:
            raise WrpFormatError(f"uncompressed size {raw_n} differs from size {n} (compression is not "
                                 f"part of the format)", field=what + ".uncompressed_size", offset=at + 24)
        out.append((off, n))
        pos = off + n
    if pos != size:
        raise WrpFormatError(f"{size - pos} bytes follow the last section", field="file", offset=pos,
                             hint="The file has trailing garbage or was concatenated with another file.")
    return out


def iter_wrp1_chunks(prog: m.Program) -> Iterator:
    """Yield the bytes of the ``.wrp`` encoding of ``prog`` as a sequence of chunks.

    Region data is yielded as the original buffers, so writing a large file
    never holds a second copy of it in memory.

    Raises:
        WrpFormatError: The program cannot be encoded (unknown format version,
            inconsistent region data).
    """
    layout = LAYOUTS.get(prog.format_version)
    if layout is None:
        raise WrpVersionError(f"cannot encode WRP1 format version {prog.format_version}; "
                              f"supported: {sorted(LAYOUTS)}")
    meta = encode_metadata(prog, layout)
    mem_size = memory_section_size(prog)
    ops = bytearray(_U32.pack(len(prog.ops)))
    encode_ops(prog.ops, layout, ops, {})
    sizes = [len(meta), mem_size, len(ops)]
    types = [SECTION_METADATA, SECTION_MEMORY, SECTION_OPERATIONS]
    if prog.annotations:
        sizes.append(len(prog.annotations))
        types.append(SECTION_ANNOTATIONS)
    n = len(sizes)
    yield FILE_HEADER.pack(MAGIC, prog.format_version, 0, n, FILE_HEADER_SIZE, prog.device_type, bytes(3),
                           prog.target_arch, bytes(32))
    off = FILE_HEADER_SIZE + n * SECTION_ENTRY_SIZE
    table = bytearray()
    for t, s in zip(types, sizes):
        table += SECTION_ENTRY.pack(t, 0, off, s, s)
        off += s
    yield bytes(table)
    yield meta
    yield from iter_memory_section(prog)
    yield bytes(ops)
    if prog.annotations:
        yield prog.annotations


def build_image(prog: m.Program) -> tuple:
    """The ``.wrp`` encoding of ``prog`` in one newly allocated buffer.

    Unlike ``b"".join(iter_wrp1_chunks(prog))``, every byte is copied once,
    straight into the final buffer (which Warp's from-bytes loader takes
    as is).

    Returns:
        ``(image, region_offsets)``: a ``numpy.uint8`` array holding the file, and
        ``{region_id: byte offset of its initial data in image}`` for the
        regions that carry data.
    """
    import numpy as np  # noqa: PLC0415  (only loading needs it)

    chunks = [memoryview(c).cast("B") for c in iter_wrp1_chunks(prog)]
    # numpy backs large arrays with transparent huge pages where the OS
    # allows, so filling a fresh buffer takes a few hundred page faults
    # instead of one per 4 KiB; Warp's from-bytes loader takes the array.
    image = np.empty(sum(c.nbytes for c in chunks), dtype=np.uint8)
    view = memoryview(image)
    # Chunk order: header, section table, metadata, region count, then per
    # region its record and (if it has one) its data, then ops, annotations.
    data_chunks = {}
    k = 4
    for r in prog.regions:
        k += 1
        if r.has_initial_data:
            data_chunks[k] = r.region_id
            k += 1
    offsets = {}
    pos = 0
    for i, c in enumerate(chunks):
        if i in data_chunks:
            offsets[data_chunks[i]] = pos
        view[pos:pos + c.nbytes] = c
        pos += c.nbytes
    view.release()
    return image, offsets


def encode_wrp1(prog: m.Program) -> bytes:
    """Encode a program as the bytes of a ``.wrp`` file.

    Args:
        prog: The program; its ``format_version`` selects the layout.

    Returns:
        The whole file.  For large programs prefer :func:`iter_wrp1_chunks`.
    """
    return b"".join(iter_wrp1_chunks(prog))
