"""Codec for Warp's WRP1 container (``.wrp``, APIC formats 3, 10 and 13 to 18).

:func:`decode_wrp1` turns the bytes of a ``.wrp`` into a
:class:`~wrpkit.model.Program`; :func:`encode_wrp1` turns a program back into
bytes, byte-identical to what was decoded.  The format is described in
``schema/WRP1-FORMAT.md``.  Every format a Warp release wrote (3, 10, 14, 15,
16, 18, and 13, which 1.15 to 1.18 load) decodes into the same model and
encodes back in its own format; what differs between them is described by
the :class:`~wrpkit.formats.wrp1_layout.FormatLayout` of each, and the
per-format branches below are driven by its flags.

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
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from .. import model as m
from ..errors import WrpFormatError, WrpVersionError
from ..model import OpType
from .wrp1_layout import (
    BOOL_FIELDS,
    CURRENT_FORMAT,
    FILE_HEADER,
    FILE_HEADER_SIZE,
    LAYOUTS,
    MAGIC,
    OP_HEADER,
    REGION_RECORD,
    SECTION_ANNOTATIONS,
    SECTION_ENTRY,
    SECTION_ENTRY_SIZE,
    SECTION_MEMORY,
    SECTION_METADATA,
    SECTION_OPERATIONS,
    LEGACY_ARG,
    FormatLayout,
)

_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_SECTION_NAMES = {
    SECTION_METADATA: "METADATA",
    SECTION_MEMORY: "MEMORY",
    SECTION_OPERATIONS: "OPERATIONS",
    SECTION_ANNOTATIONS: "ANNOTATIONS",
}


@dataclass(frozen=True)
class Limits:
    """Caps the decoder applies before it allocates or loops.

    The defaults are far above anything a real capture needs and far below
    what would exhaust memory or time.  Raise them explicitly for unusual
    files.
    """

    # Files, regions and their total are bounded by 64-bit arithmetic, a
    # region with data by the file's own size, and the memory a load would
    # allocate by the device's free memory (wrpkit.checks.memory.check_budget),
    # not by a fixed cap: an H200 capture holds over 100 GiB.
    max_file_size: int = (1 << 63) - 1
    max_string: int = 4096
    max_modules: int = 1 << 16
    max_kernels: int = 1 << 20
    max_bindings: int = 1 << 16
    max_meshes: int = 1 << 16
    max_pointer_locations: int = 1 << 20
    max_regions: int = 1 << 20
    max_region_size: int = (1 << 63) - 1
    max_memory: int = (1 << 63) - 1
    max_ops: int = 1 << 26
    max_depth: int = 64
    max_annotations: int = 64 << 20


#: Tighter caps of single strings (the C++ validator's, wrp1_validator.cpp read_metadata).
MAX_HASH = 256
MAX_FILENAME = 255
MAX_DIGEST = 64
MAX_VERSION = 64


DEFAULT_LIMITS = Limits()


class _Cursor:
    """Bounds-checked sequential reads from ``buf[pos:end]``.

    Every read names the field it reads so that a failure says which field
    and at which absolute offset.
    """

    __slots__ = ("buf", "pos", "end", "section")

    def __init__(self, buf, pos: int, end: int, section: str):
        self.buf, self.pos, self.end, self.section = buf, pos, end, section

    def need(self, n: int, what: str) -> int:
        if n < 0 or self.pos + n > self.end:
            raise WrpFormatError(
                f"needs {n} bytes but only {self.end - self.pos} remain in the {self.section} section",
                field=what, offset=self.pos)
        p = self.pos
        self.pos += n
        return p

    def unpack(self, st: struct.Struct, what: str) -> tuple:
        p = self.need(st.size, what)
        return st.unpack_from(self.buf, p)

    def u32(self, what: str) -> int:
        return self.unpack(_U32, what)[0]

    def u8(self, what: str) -> int:
        p = self.need(1, what)
        return self.buf[p]

    def string(self, what: str, limits: Limits, cap: int = None) -> str:
        at = self.pos
        n = self.u32(what + ".length")
        cap = limits.max_string if cap is None else min(cap, limits.max_string)
        if n > cap:
            raise WrpFormatError(f"string length {n} exceeds the limit of {cap}", field=what, offset=at)
        p = self.need(n, what)
        raw = bytes(self.buf[p:p + n])
        if b"\0" in raw:
            raise WrpFormatError("string contains a NUL byte", field=what, offset=at)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise WrpFormatError(f"string is not valid UTF-8 ({e.reason})", field=what, offset=p) from None


def _check_zero(raw: bytes, what: str, offset: int) -> None:
    if any(raw):
        raise WrpFormatError("reserved bytes must be zero", field=what, offset=offset)


def _check_count(n: int, cap: int, what: str, offset: int) -> None:
    if n > cap:
        raise WrpFormatError(f"count {n} exceeds the limit of {cap}", field=what, offset=offset)


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------


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
    _check_zero(reserved_dt, "header._reserved_dt", 25)
    if (device_type == m.DeviceType.CPU) != (target_arch == 0) or target_arch > 0x7FFFFFFF:
        raise WrpFormatError(
            f"target arch {target_arch} does not fit device type "
            f"{m.DeviceType(device_type).name} (CPU needs 0, CUDA a positive SM version)",
            field="header.target_arch", offset=28)
    _check_zero(reserved, "header._reserved", 32)

    sections = _decode_section_table(buf, num_sections)
    (meta_off, meta_size), (mem_off, mem_size), (ops_off, ops_size) = sections[:3]

    prog = m.Program(format_version=version, warp_version="", device_type=device_type,
                     target_arch=target_arch)
    _decode_metadata(buf, meta_off, meta_size, prog, layout, limits)
    _decode_memory(buf, mem_off, mem_size, prog, limits)
    if on_regions is not None:
        on_regions(prog.regions)
    _decode_operations(buf, ops_off, ops_size, prog, layout, limits, share_ops)
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


def check_strings(prog: m.Program, limits: Limits = DEFAULT_LIMITS) -> None:
    """Apply the WRP1 string rules to a program decoded from any form (``.wrpk``, ``.json``).

    A ``.wrp``'s strings are checked as they are decoded (``_Cursor.string``
    and the producer version rule below); a bundle or JSON file carries the
    same strings in another container, and wrp-replay checks them on the
    WRP1 image it builds, so they are held to the same rules here: no NUL
    byte, the length caps, and a producer version of printable ASCII.
    Without this a bundle could pass ``wrp validate`` and then be refused by
    wrp-replay, or convert to a ``.wrp`` that ``wrp validate`` refuses.

    Raises:
        WrpFormatError: The first string that breaks a rule, named by its field.
    """
    layout = LAYOUTS.get(prog.format_version)

    def one(value, what: str, cap=None) -> None:
        if value is None:
            return
        raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else bytes(value)
        limit = limits.max_string if cap is None else min(cap, limits.max_string)
        if len(raw) > limit:
            raise WrpFormatError(f"string length {len(raw)} exceeds the limit of {limit}", field=what)
        if b"\0" in raw:
            raise WrpFormatError("string contains a NUL byte", field=what)

    if layout is None or layout.producer_version:
        one(prog.warp_version, "metadata.warp_version", MAX_VERSION)
        if not prog.warp_version or not all(0x20 < ord(ch) < 0x7F for ch in prog.warp_version):
            raise WrpFormatError("producer Warp version must be non-empty printable ASCII",
                                 field="metadata.warp_version")
    for i, mod in enumerate(prog.modules):
        w = f"metadata.modules[{i}]"
        one(mod.module_hash, w + ".module_hash", MAX_HASH)
        one(mod.module_name, w + ".module_name")
        one(mod.binary_filename, w + ".binary_filename", MAX_FILENAME)
        one(mod.binary_digest, w + ".binary_digest", MAX_DIGEST)
        one(mod.source_filename, w + ".source_filename", MAX_FILENAME)
        one(mod.source_digest, w + ".source_digest", MAX_DIGEST)
    for i, k in enumerate(prog.kernels):
        w = f"metadata.kernels[{i}]"
        one(k.kernel_key, w + ".kernel_key")
        one(k.module_hash, w + ".module_hash", MAX_HASH)
        one(k.forward_name, w + ".forward_name")
        one(k.backward_name, w + ".backward_name")
    for i, b in enumerate(prog.bindings):
        one(b.name, f"metadata.bindings[{i}].name")


def _decode_metadata(buf, off: int, n: int, prog: m.Program, layout: FormatLayout, limits: Limits):
    c = _Cursor(buf, off, off + n, "METADATA")
    at = c.pos
    version = c.u32("metadata.format_version")
    if version != prog.format_version:
        raise WrpFormatError(f"metadata format version {version} differs from the header's "
                             f"{prog.format_version}", field="metadata.format_version", offset=at)
    at = c.pos
    if layout.producer_version:
        prog.warp_version = c.string("metadata.warp_version", limits, MAX_VERSION)
        if not prog.warp_version or not all(0x20 < ord(ch) < 0x7F for ch in prog.warp_version):
            raise WrpFormatError("producer Warp version must be non-empty printable ASCII",
                                 field="metadata.warp_version", offset=at)
    at = c.pos
    arch = c.u32("metadata.target_arch")
    if arch != prog.target_arch:
        raise WrpFormatError(f"metadata target arch {arch} differs from the header's {prog.target_arch}",
                             field="metadata.target_arch", offset=at)
    counts = []
    caps = [limits.max_modules, limits.max_kernels, limits.max_bindings, limits.max_meshes,
            limits.max_pointer_locations]
    for name, cap in zip(("num_modules", "num_kernels", "num_bindings", "num_meshes",
                          "num_pointer_locations"), caps):
        at = c.pos
        v = c.u32("metadata." + name)
        _check_count(v, cap, "metadata." + name, at)
        counts.append(v)
    n_mod, n_ker, n_bind, n_mesh, n_ptr = counts

    rec = layout.recipe
    for i in range(n_mod):
        w = f"modules[{i}]"
        mh = c.string(w + ".module_hash", limits, MAX_HASH)
        mn = c.string(w + ".module_name", limits)
        bf = c.string(w + ".binary_filename", limits, MAX_FILENAME)
        arch = c.u32(w + ".target_arch")
        if not layout.module_extras:
            prog.modules.append(m.Module(mh, mn, bf, arch))
            continue
        bd = c.string(w + ".binary_digest", limits, MAX_DIGEST)
        sf = c.string(w + ".source_filename", limits, MAX_FILENAME)
        sd = c.string(w + ".source_digest", limits, MAX_DIGEST)
        kind = c.u8(w + ".binary_kind")
        reason = c.u8(w + ".fallback_reason")
        at = c.pos
        vals = c.unpack(rec.struct, w + ".recipe")
        _check_zero(vals[-1], w + ".recipe._reserved", at + 7)
        prog.modules.append(m.Module(mh, mn, bf, arch, bd, sf, sd, kind, reason,
                                     m.CudaCompileRecipe(*vals[:-1])))
    for i in range(n_ker):
        w = f"kernels[{i}]"
        k = m.Kernel(c.string(w + ".kernel_key", limits), c.string(w + ".module_hash", limits, MAX_HASH),
                     c.string(w + ".forward_name", limits), c.string(w + ".backward_name", limits),
                     c.u32(w + ".forward_smem_bytes"), c.u32(w + ".backward_smem_bytes"),
                     c.u32(w + ".block_dim"))
        prog.kernels.append(k)
    for i in range(n_bind):
        w = f"bindings[{i}]"
        prog.bindings.append(m.Binding(c.string(w + ".name", limits), c.u32(w + ".region_id")))
    mesh = layout.mesh
    for i in range(n_mesh):
        at = c.pos
        v = c.unpack(mesh.struct, f"meshes[{i}]")
        if v[2] > 1:
            raise WrpFormatError(f"must be 0 or 1, found {v[2]}", field=f"meshes[{i}].support_winding_number",
                                 offset=at + 8)
        prog.meshes.append(m.Mesh(v[0], v[1], bool(v[2]), *v[3:]))
    for i in range(n_ptr):
        v = c.unpack(layout.pointer_location, f"pointer_locations[{i}]")
        # Before format 18 there is no count: stride 0 is one slot, else
        # every stride to the end of the region.  0 stands for "not recorded".
        prog.pointer_locations.append(m.PointerLocation(*v) if len(v) == 4 else m.PointerLocation(*v, 0))
    if c.pos != c.end:
        raise WrpFormatError(f"{c.end - c.pos} bytes follow the last metadata record",
                             field="metadata", offset=c.pos)


def _decode_memory(buf, off: int, n: int, prog: m.Program, limits: Limits):
    c = _Cursor(buf, off, off + n, "MEMORY")
    count = c.u32("memory.region_count")
    _check_count(count, limits.max_regions, "memory.region_count", off)
    last_id = 0
    total = 0
    for i in range(count):
        at = c.pos
        w = f"regions[{i}]"
        rid, esize, rsize, has, pad = c.unpack(REGION_RECORD, w)
        _check_zero(pad, w + "._pad", at + 17)
        if rid <= last_id:
            raise WrpFormatError(f"region id {rid} is not above the previous id {last_id} (ids must be "
                                 f"unique, ascending and >= 1)", field=w + ".region_id", offset=at)
        if has > 1:
            raise WrpFormatError(f"initial-data flag must be 0 or 1, found {has}",
                                 field=w + ".has_initial_data", offset=at + 16)
        if rsize > limits.max_region_size:
            raise WrpFormatError(f"region size {rsize} exceeds the limit of {limits.max_region_size}",
                                 field=w + ".size", offset=at + 8)
        total += rsize
        if total > limits.max_memory:
            raise WrpFormatError(f"regions add up to more than the limit of {limits.max_memory} bytes",
                                 field=w + ".size", offset=at + 8)
        data = None
        if has:
            p = c.need(rsize, w + ".initial_data")
            data = buf[p:p + rsize]
        prog.regions.append(m.Region(rid, esize, rsize, bool(has), data, at))
        last_id = rid
    if c.pos != c.end:
        raise WrpFormatError(f"{c.end - c.pos} bytes follow the last region record", field="memory",
                             offset=c.pos)


def _decode_operations(buf, off: int, n: int, prog: m.Program, layout: FormatLayout, limits: Limits,
                       share_ops: bool = False):
    if n < 4:
        raise WrpFormatError("operations section is shorter than its 4-byte op count",
                             field="operations.op_count", offset=off)
    count = _U32.unpack_from(buf, off)[0]
    _check_count(count, limits.max_ops, "operations.op_count", off)
    # Remaining op budget, launch-tail cache, and (share_ops) record bytes -> decoded op.
    budget = [limits.max_ops, {}, {} if share_ops else None]
    end = _decode_op_list(buf, off + 4, off + n, count, "ops", 0, prog.ops, layout, limits, budget)
    if end != off + n:
        raise WrpFormatError(f"{off + n - end} bytes follow the last operation", field="operations",
                             offset=end)


def _decode_op_list(buf, pos, end, count, path, depth, out, layout, limits, budget) -> int:
    if depth > limits.max_depth:
        raise WrpFormatError(f"conditional nesting deeper than {limits.max_depth} levels", field=path,
                             offset=pos)
    append = out.append
    cache, shared = budget[1], budget[2]
    for i in range(count):
        w = f"{path}[{i}]"
        if end - pos < 8:
            raise WrpFormatError("truncated op header", field=w, offset=pos)
        budget[0] -= 1
        if budget[0] < 0:
            raise WrpFormatError(f"more than {limits.max_ops} operations in total", field=w, offset=pos)
        op_type, total = OP_HEADER.unpack_from(buf, pos)
        if total < 8 or total > end - pos:
            raise WrpFormatError(f"op size {total} does not fit the {end - pos} bytes left",
                                 field=w + ".total_size", offset=pos + 4)
        if shared is not None and total <= _SHARE_MAX and op_type != OpType.IF and op_type != OpType.WHILE:
            # Records are checked as they decode, so a repeat of a record
            # that decoded cleanly is itself clean.
            rec = bytes(buf[pos:pos + total])
            op = shared.get(rec)
            if op is None:
                op = _decode_leaf(buf, pos, total, op_type, w, layout, cache)
                shared[rec] = op
            append(op)
        elif (op_type == OpType.IF or op_type == OpType.WHILE) and op_type in layout.ops:
            append(_decode_cond(buf, pos, total, op_type, w, depth, layout, limits, budget))
        else:
            append(_decode_leaf(buf, pos, total, op_type, w, layout, cache))
        pos += total
    return pos


#: Records up to this size are shared by ``decode_wrp1(share_ops=True)``;
#: larger ones (MEMCPY_H2D payloads) are rare and cost their bytes to key.
_SHARE_MAX = 4096


def _decode_leaf(buf, pos, total, op_type, w, layout, cache):
    """One op other than IF and WHILE."""
    if op_type == OpType.KERNEL_LAUNCH:
        return _decode_launch(buf, pos, total, w, layout, cache)
    if op_type in layout.ops:
        return _decode_fixed(buf, pos, total, op_type, w, layout)
    if op_type == OpType.MEMCPY_D2H:
        what = "reserved by Warp (MEMCPY_D2H)"
    elif op_type in LAYOUTS[18].ops:
        what = f"{OpType(op_type).name}, which format {layout.version} does not have"
    else:
        what = "unknown"
    raise WrpFormatError(f"op type {op_type} is {what}", field=w + ".op_type", offset=pos)


def _fixed_values(buf, pos, total, rl, w, exact=True):
    if total < 8 + rl.size or (exact and total != 8 + rl.size):
        raise WrpFormatError(f"{rl.name} record must be {8 + rl.size} bytes, header says {total}",
                             field=w + ".total_size", offset=pos + 4)
    vals = rl.struct.unpack_from(buf, pos + 8)
    for i in rl.pads:
        _check_zero(vals[i], f"{w}.{rl.names[i]}", pos + 8)
    return {k: v for k, v in zip(rl.names, vals) if not k.startswith("_pad")}


def _bools(d, w, pos):
    for k in BOOL_FIELDS.intersection(d):
        v = d[k]
        if v > 1:
            raise WrpFormatError(f"must be 0 or 1, found {v}", field=f"{w}.{k}", offset=pos)
        d[k] = bool(v)


def _decode_fixed(buf, pos, total, op_type, w, layout):
    rl = layout.ops[op_type]
    if op_type == OpType.MEMCPY_H2D:
        d = _fixed_values(buf, pos, total, rl, w, exact=False)
        size = d.pop("size")
        if total != 8 + rl.size + size:
            raise WrpFormatError(f"MEMCPY_H2D of {size} bytes needs a record of {8 + rl.size + size} bytes, "
                                 f"header says {total}", field=w + ".total_size", offset=pos + 4)
        start = pos + 8 + rl.size
        return m.MemcpyH2D(d["dst_region_id"], d["dst_offset"], buf[start:start + size], at=pos)
    if op_type == OpType.MEMTILE:
        d = _fixed_values(buf, pos, total, rl, w, exact=False)
        srcsize = d.pop("srcsize")
        if srcsize == 0 or total != 8 + rl.size + srcsize:
            raise WrpFormatError(f"MEMTILE with a {srcsize}-byte value needs a record of "
                                 f"{8 + rl.size + srcsize} bytes (and a non-zero value size), header says "
                                 f"{total}", field=w + ".total_size", offset=pos + 4)
        start = pos + 8 + rl.size
        return m.Memtile(d["region_id"], d["offset"], d["count"], bytes(buf[start:start + srcsize]), at=pos)
    if op_type == OpType.BSR_TRANSPOSE:
        d = _fixed_values(buf, pos, total, rl, w, exact=False)
        tail = total - 8 - rl.size
        if tail and not layout.bsr_transpose_tail:
            raise WrpFormatError(f"BSR_TRANSPOSE has no tail in format {layout.version}, found {tail} bytes",
                                 field=w + ".total_size", offset=pos + 4)
        if tail % 4:
            raise WrpFormatError(f"BSR_TRANSPOSE tail of {tail} bytes is not a whole number of int32",
                                 field=w + ".total_size", offset=pos + 4)
        start = pos + 8 + rl.size
        d["padded_tail"] = struct.unpack_from(f"<{tail // 4}i", buf, start)
        return m.BsrTranspose(**d, at=pos)
    d = _fixed_values(buf, pos, total, rl, w)
    _bools(d, w, pos)
    return m.OP_CLASSES[op_type](**d, at=pos)


def _decode_cond(buf, pos, total, op_type, w, depth, layout, limits, budget):
    rl = layout.ops[op_type]
    if depth + 1 > limits.max_depth:
        raise WrpFormatError(f"conditional nesting deeper than {limits.max_depth} levels", field=w, offset=pos)
    d = _fixed_values(buf, pos, total, rl, w, exact=False)
    a_size, a_count = d["branch_a_size"], d["branch_a_op_count"]
    b_size, b_count = d["branch_b_size"], d["branch_b_op_count"]
    if 8 + rl.size + a_size + b_size != total:
        raise WrpFormatError(f"branch sizes {a_size} + {b_size} do not add up to the record size {total}",
                             field=w + ".total_size", offset=pos + 4)
    for size, cnt, name in ((a_size, a_count, "branch_a"), (b_size, b_count, "branch_b")):
        if (size == 0) != (cnt == 0):
            raise WrpFormatError(f"{name} has {size} bytes but {cnt} ops", field=f"{w}.{name}_size",
                                 offset=pos + 24)
    if op_type == OpType.WHILE and b_size:
        raise WrpFormatError("WHILE must have an empty second branch", field=w + ".branch_b_size",
                             offset=pos + 32)
    a_start = pos + 8 + rl.size
    branches = []
    for start, size, cnt, name in ((a_start, a_size, a_count, "then" if op_type == OpType.IF else "body"),
                                   (a_start + a_size, b_size, b_count, "else")):
        ops: list = []
        if cnt:
            end = _decode_op_list(buf, start, start + size, cnt, f"{w}.{name}", depth + 1, ops, layout,
                                  limits, budget)
            if end != start + size:
                raise WrpFormatError(f"{start + size - end} bytes follow the last op of the {name} branch",
                                     field=f"{w}.{name}", offset=end)
        branches.append(ops)
    if op_type == OpType.IF:
        return m.If(d["cond_region_id"], d["cond_offset"], branches[0], branches[1], at=pos)
    return m.While(d["cond_region_id"], d["cond_offset"], branches[0], at=pos)


def _decode_launch(buf, pos, total, w, layout, cache):
    if layout.version < 13:
        return _decode_launch_legacy(buf, pos, total, w, layout)
    lr = layout.launch
    if total < 8 + lr.size:
        raise WrpFormatError(f"KERNEL_LAUNCH record must be at least {8 + lr.size} bytes, header says {total}",
                             field=w + ".total_size", offset=pos + 4)
    (s0, s1, s2, s3, ndim, size, dim, max_blocks, block_dim, smem, grid_stride, is_fwd, cluster, pad1,
     key_len, hash_len, n_params, pad2, n_relocs, vsize) = lr.struct.unpack_from(buf, pos + 8)
    if pad1 != b"\0\0":
        _check_zero(pad1, w + "._pad1", pos + 62)
    if pad2 != b"\0\0":
        _check_zero(pad2, w + "._pad2", pos + 70)
    if is_fwd > 1:
        raise WrpFormatError(f"must be 0 or 1, found {is_fwd}", field=w + ".is_forward", offset=pos + 60)
    n_blocks = 1 if is_fwd else 2
    head = 8 + lr.size
    tail = key_len + hash_len + n_blocks * n_params * 16 + n_relocs * 24
    if head + tail + vsize != total:
        raise WrpFormatError(f"record size {total} differs from the {head + tail + vsize} bytes its strings, "
                             f"{n_blocks * n_params} params, {n_relocs} relocations and {vsize} value bytes "
                             f"need", field=w + ".total_size", offset=pos + 4)
    p = pos + head
    # Launches of one kernel with the same arguments repeat the same strings,
    # bindings and relocations byte for byte; decode each distinct tail once.
    key = (is_fwd, key_len, hash_len, n_params, bytes(buf[p:p + tail]))
    parts = cache.get(key)
    if parts is None:
        parts = _decode_launch_tail(buf, p, key_len, hash_len, n_params, n_relocs, is_fwd, w)
        cache[key] = parts
    kkey, mh, params, adj, relocs = parts
    p += tail
    return m.KernelLaunch((s0, s1, s2, s3), ndim, size, dim, max_blocks, block_dim, smem, grid_stride,
                          bool(is_fwd), cluster, kkey, mh, list(params), list(adj), list(relocs),
                          buf[p:p + vsize], at=pos)


def _decode_launch_legacy(buf, pos, total, w, layout):
    """A launch of format 3 or 10 (no grid_stride/cluster_dim; format 3: argument descriptors).

    The model gets what 1.15+ write on CPU for the missing fields:
    ``grid_stride`` 0 and ``cluster_dim`` 1.
    """
    lr = layout.launch
    head = 8 + lr.size
    if total < head:
        raise WrpFormatError(f"KERNEL_LAUNCH record must be at least {head} bytes, header says {total}",
                             field=w + ".total_size", offset=pos + 4)
    vals = lr.struct.unpack_from(buf, pos + 8)
    d = dict(zip(lr.names[1:], vals[4:]))
    d["shape"] = vals[:4]
    for i in lr.pads:
        _check_zero(d[lr.names[i]], f"{w}.{lr.names[i]}", pos + 8)
    if d["is_forward"] > 1:
        raise WrpFormatError(f"must be 0 or 1, found {d['is_forward']}", field=w + ".is_forward",
                             offset=pos + 56)
    if layout.legacy_args and d["is_forward"] == 0:
        # Refused on the way in, as wrp-replay's decoder refuses it: decoded, it would convert to
        # .wrpk/.json but never back (format 3 records no adjoint block).
        raise WrpFormatError(f"format {layout.version} cannot hold a backward launch (Warp {layout.releases} refuses "
                             "adjoint launches in capture)", field=w + ".is_forward", offset=pos + 56)
    key_len, hash_len, n_params = d["kernel_key_len"], d["module_hash_len"], d["num_params"]
    p = pos + head
    if layout.legacy_args:
        n_handles = d["num_handle_offsets"]
        need = head + key_len + hash_len + LEGACY_ARG.size * n_params + 4 * n_handles
        if need != total:
            raise WrpFormatError(f"record size {total} differs from the {need} bytes its strings, {n_params} "
                                 f"argument descriptors and {n_handles} handle offsets need",
                                 field=w + ".total_size", offset=pos + 4)
        kkey, mh, _, _, _ = _decode_launch_tail(buf, p, key_len, hash_len, 0, 0, True, w)
        p += key_len + hash_len
        args = []
        for j, v in enumerate(LEGACY_ARG.iter_unpack(buf[p:p + LEGACY_ARG.size * n_params])):
            at = p + j * LEGACY_ARG.size
            if v[-1] != b"\0\0\0\0":
                _check_zero(v[-1], f"{w}.legacy_args[{j}]._pad", at + 84)
            if v[0] > 1:
                raise WrpFormatError(f"must be 0 or 1, found {v[0]}", field=f"{w}.legacy_args[{j}].is_array",
                                     offset=at)
            args.append(m.LegacyArg(v[0], v[1], v[2], v[3], v[4], tuple(v[5:9]), tuple(v[9:13]), v[13]))
        p += LEGACY_ARG.size * n_params
        handles = list(struct.unpack_from(f"<{n_handles}I", buf, p))
        return m.KernelLaunch(tuple(d["shape"]), d["ndim"], d["size"], d["dim"], d["max_blocks"], d["block_dim"],
                              d["smem_bytes"], 0, bool(d["is_forward"]), 1, kkey, mh, [], [], [], b"",
                              legacy_args=args, handle_offsets=handles, at=pos)
    n_relocs, vsize, is_fwd = d["num_relocs"], d["value_data_size"], d["is_forward"]
    n_blocks = 1 if is_fwd else 2
    tail = key_len + hash_len + n_blocks * n_params * 16 + n_relocs * 24
    if head + tail + vsize != total:
        raise WrpFormatError(f"record size {total} differs from the {head + tail + vsize} bytes its strings, "
                             f"{n_blocks * n_params} params, {n_relocs} relocations and {vsize} value bytes "
                             f"need", field=w + ".total_size", offset=pos + 4)
    kkey, mh, params, adj, relocs = _decode_launch_tail(buf, p, key_len, hash_len, n_params, n_relocs, is_fwd, w)
    p += tail
    return m.KernelLaunch(tuple(d["shape"]), d["ndim"], d["size"], d["dim"], d["max_blocks"], d["block_dim"],
                          d["smem_bytes"], 0, bool(is_fwd), 1, kkey, mh, list(params), list(adj), list(relocs),
                          buf[p:p + vsize], at=pos)


def _decode_launch_tail(buf, p, key_len, hash_len, n_params, n_relocs, is_fwd, w):
    try:
        key = bytes(buf[p:p + key_len]).decode("utf-8")
        mh = bytes(buf[p + key_len:p + key_len + hash_len]).decode("utf-8")
    except UnicodeDecodeError:
        raise WrpFormatError("kernel key or module hash is not valid UTF-8", field=w + ".kernel_key",
                             offset=p) from None
    p += key_len + hash_len
    params = tuple(map(m.LaunchParam._make, struct.iter_unpack("<HHIII", buf[p:p + n_params * 16])))
    p += n_params * 16
    adj = ()
    if not is_fwd:
        adj = tuple(map(m.LaunchParam._make, struct.iter_unpack("<HHIII", buf[p:p + n_params * 16])))
        p += n_params * 16
    relocs = []
    for j, (vbo, rid, roff, kind, rpad) in enumerate(struct.iter_unpack("<IiQB7s", buf[p:p + n_relocs * 24])):
        if rpad != b"\0\0\0\0\0\0\0":
            _check_zero(rpad, f"{w}.relocations[{j}]._pad", p + j * 24 + 17)
        relocs.append(m.Relocation(vbo, rid, roff, kind))
    return key, mh, params, adj, tuple(relocs)


# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return _U32.pack(len(b)) + b


def metadata_outside_format(prog: m.Program, layout: FormatLayout) -> list:
    """``[(where, message)]`` for metadata that ``layout``'s format cannot hold.

    Only a model built in memory or read from a ``.wrpk`` can carry them: a
    producer version, module extras or a pointer-location count in a format
    without them.  :func:`encode_metadata` refuses them (instead of dropping
    them) and :mod:`wrpkit.checks.legacy` reports them.
    """
    out = []
    v = prog.format_version
    if not layout.producer_version and prog.warp_version:
        out.append(("metadata", f"format {v} records no producer version, found {prog.warp_version!r}"))
    if not layout.module_extras:
        for i, mod in enumerate(prog.modules):
            if (mod.binary_digest or mod.source_filename or mod.source_digest or mod.binary_kind != 0
                    or mod.fallback_reason != 1 or mod.recipe != m.CudaCompileRecipe()):
                out.append((f"modules[{i}]", f"format {v} module records carry no binary digest, source, binary "
                                             "kind, fallback reason or compile recipe"))
    if not layout.pointer_location_count:
        for i, pl in enumerate(prog.pointer_locations):
            if pl.count:
                out.append((f"pointer_locations[{i}]", f"format {v} pointer locations record no slot count, "
                                                       f"found {pl.count}"))
    return out


def encode_metadata(prog: m.Program, layout: FormatLayout) -> bytes:
    """The METADATA section's bytes.

    Raises:
        WrpFormatError: The metadata holds what the format cannot (see :func:`metadata_outside_format`).
    """
    for where, message in metadata_outside_format(prog, layout)[:1]:
        raise WrpFormatError(message, field=where)
    out = bytearray()
    out += _U32.pack(prog.format_version)
    if layout.producer_version:
        out += _str(prog.warp_version)
    out += _U32.pack(prog.target_arch)
    for n in (len(prog.modules), len(prog.kernels), len(prog.bindings), len(prog.meshes),
              len(prog.pointer_locations)):
        out += _U32.pack(n)
    for mod in prog.modules:
        r = mod.recipe
        if not layout.module_extras:
            out += (_str(mod.module_hash) + _str(mod.module_name) + _str(mod.binary_filename)
                    + _U32.pack(mod.target_arch))
            continue
        out += (_str(mod.module_hash) + _str(mod.module_name) + _str(mod.binary_filename)
                + _U32.pack(mod.target_arch) + _str(mod.binary_digest) + _str(mod.source_filename)
                + _str(mod.source_digest) + bytes((mod.binary_kind, mod.fallback_reason))
                + layout.recipe.struct.pack(r.debug, r.optimization_level, r.verify_fp, r.fast_math, r.fuse_fp,
                                            r.lineinfo, r.arch_suffix, bytes(9)))
    for k in prog.kernels:
        out += (_str(k.kernel_key) + _str(k.module_hash) + _str(k.forward_name) + _str(k.backward_name)
                + struct.pack("<III", k.forward_smem_bytes, k.backward_smem_bytes, k.block_dim))
    for b in prog.bindings:
        out += _str(b.name) + _U32.pack(b.region_id)
    for me in prog.meshes:
        out += layout.mesh.struct.pack(me.num_points, me.num_tris, int(me.support_winding_number),
                                       me.bvh_constructor, me.bvh_leaf_size, me.points_region_id,
                                       me.indices_region_id, me.velocities_region_id, me.original_ptr)
    for pl in prog.pointer_locations:
        vals = (pl.region_id, pl.offset, pl.stride, pl.count)
        out += layout.pointer_location.pack(*vals[:4 if layout.producer_version else 3])
    return bytes(out)


def iter_memory_section(prog: m.Program) -> Iterator:
    """Yield the MEMORY section as chunks (region data is yielded as-is, uncopied)."""
    yield _U32.pack(len(prog.regions))
    for r in prog.regions:
        yield REGION_RECORD.pack(r.region_id, r.element_size, r.size, int(r.has_initial_data), bytes(7))
        if r.has_initial_data:
            if r.data is None or len(r.data) != r.size:
                raise WrpFormatError(f"region {r.region_id} is marked as having initial data but carries "
                                     f"{0 if r.data is None else len(r.data)} of its {r.size} bytes")
            yield r.data


def memory_section_size(prog: m.Program) -> int:
    """Byte size of the MEMORY section, computed without building it."""
    return 4 + sum(REGION_RECORD.size + (r.size if r.has_initial_data else 0) for r in prog.regions)


def encode_ops(ops: list, layout: FormatLayout, out: bytearray, memo: dict | None = None) -> None:
    """Append the records of ``ops`` (no count word) to ``out``.

    ``memo`` maps ``id(op)`` to that op's record, so that an op object listed
    many times (a ``.wrpk`` decodes identical ops into one object) is encoded
    once; pass one dict for the whole program.
    """
    if memo is None:
        memo = {}
    for op in ops:
        t = op.op_type
        if t != OpType.IF and t != OpType.WHILE:
            done = memo.get(id(op))
            if done is not None:
                if type(done) is tuple:  # (buffer, start, end) of its first encoding
                    done = memo[id(op)] = bytes(done[0][done[1]:done[2]])
                out += done
                continue
            start = len(out)
        if t != OpType.KERNEL_LAUNCH and t not in layout.ops:  # only a .wrpk can hold one
            raise WrpFormatError(f"op type {int(t)} is {OpType(t).name}, which format {layout.version} does not "
                                 "have, so it cannot be written as a .wrp of that format")
        if t == OpType.KERNEL_LAUNCH:
            _encode_launch(op, layout, out)
        elif t in (OpType.IF, OpType.WHILE):
            a, b = bytearray(), bytearray()
            first = op.then_ops if t == OpType.IF else op.body
            encode_ops(first, layout, a, memo)
            if t == OpType.IF:
                encode_ops(op.else_ops, layout, b, memo)
            rl = layout.ops[t]
            out += OP_HEADER.pack(t, 8 + rl.size + len(a) + len(b))
            n_b = len(op.else_ops) if t == OpType.IF else 0
            out += rl.struct.pack(op.cond_region_id, bytes(4), op.cond_offset, len(a), len(first), len(b), n_b)
            out += a
            out += b
        else:
            rl = layout.ops[t]
            vals = []
            extra = b""
            for name in rl.names:
                if name.startswith("_pad"):
                    vals.append(b"")  # "Ns" packs as N zero bytes
                elif name == "srcsize":
                    vals.append(len(op.value))
                    extra = bytes(op.value)
                elif name == "size" and t == OpType.MEMCPY_H2D:
                    vals.append(len(op.data))
                    extra = bytes(op.data)
                else:
                    v = getattr(op, name)
                    vals.append(int(v) if isinstance(v, bool) else v)
            if t == OpType.BSR_TRANSPOSE:
                extra = struct.pack(f"<{len(op.padded_tail)}i", *op.padded_tail)
            out += OP_HEADER.pack(t, 8 + rl.size + len(extra))
            out += rl.struct.pack(*vals)
            out += extra
        if t != OpType.IF and t != OpType.WHILE:
            memo[id(op)] = (out, start, len(out))


def _leaf_record_size(op, layout: FormatLayout) -> int:
    t = op.op_type
    if t == OpType.KERNEL_LAUNCH:
        if layout.legacy_args:
            return (8 + layout.launch.size + len(op.kernel_key.encode("utf-8"))
                    + len(op.module_hash.encode("utf-8")) + LEGACY_ARG.size * len(op.legacy_args)
                    + 4 * len(op.handle_offsets))
        blocks = len(op.params) + (0 if op.is_forward else len(op.adjoint_params))
        return (8 + layout.launch.size + len(op.kernel_key.encode("utf-8")) + len(op.module_hash.encode("utf-8"))
                + 16 * blocks + 24 * len(op.relocations) + len(op.value_data))
    extra = 0
    # An op the format does not have (only a .wrpk can hold one; validation refuses it) is sized as
    # the format that has it writes it: those records never changed.
    rl = layout.ops.get(t) or LAYOUTS[CURRENT_FORMAT].ops[t]
    if t == OpType.BSR_TRANSPOSE:
        extra = 4 * len(op.padded_tail)
    elif t == OpType.MEMCPY_H2D:
        extra = len(op.data)
    elif "srcsize" in rl.names:
        extra = len(op.value)
    return 8 + rl.size + extra


def ops_section_size(prog: m.Program, layout: FormatLayout) -> int:
    """Byte size of the OPERATIONS section, computed without building it.

    Each distinct op object is sized once, so a program whose op lists
    repeat one object many times (as a ``.wrpk`` decodes) costs time in
    proportion to its distinct ops, whatever size it expands to.
    """
    sizes: dict = {}

    def size(ops) -> int:
        total = 0
        for op in ops:
            n = sizes.get(id(op))
            if n is None:
                t = op.op_type
                if t == OpType.IF:
                    n = 8 + LAYOUTS[CURRENT_FORMAT].ops[t].size + size(op.then_ops) + size(op.else_ops)
                elif t == OpType.WHILE:
                    n = 8 + LAYOUTS[CURRENT_FORMAT].ops[t].size + size(op.body)
                else:
                    n = _leaf_record_size(op, layout)
                sizes[id(op)] = n
            total += n
        return total

    return 4 + size(prog.ops)


def metadata_section_size(prog: m.Program, layout: FormatLayout) -> int:
    """Byte size of the METADATA section, computed without building it."""

    def strs(*values) -> int:
        return sum(4 + len(v.encode("utf-8")) for v in values)

    n = 4 + (strs(prog.warp_version) if layout.producer_version else 0) + 4 + 5 * 4
    for mod in prog.modules:
        if not layout.module_extras:
            n += strs(mod.module_hash, mod.module_name, mod.binary_filename) + 4
            continue
        n += (strs(mod.module_hash, mod.module_name, mod.binary_filename, mod.binary_digest, mod.source_filename,
                   mod.source_digest) + 4 + 2 + layout.recipe.struct.size)
    for k in prog.kernels:
        n += strs(k.kernel_key, k.module_hash, k.forward_name, k.backward_name) + 12
    for b in prog.bindings:
        n += strs(b.name) + 4
    n += len(prog.meshes) * layout.mesh.struct.size + len(prog.pointer_locations) * layout.pointer_location.size
    return n


def _check_launch_fits(op: m.KernelLaunch, layout: FormatLayout) -> None:
    """Refuse to encode a launch whose content the format cannot hold."""
    if layout.legacy_args:
        if op.params or op.adjoint_params or op.relocations or len(op.value_data) or not op.is_forward:
            raise WrpFormatError(f"launch of {op.kernel_key!r} has bindings or value data, which format "
                                 f"{layout.version} cannot hold (it records argument descriptors)")
    elif op.legacy_args or op.handle_offsets:
        raise WrpFormatError(f"launch of {op.kernel_key!r} has format-3 argument descriptors, which format "
                             f"{layout.version} cannot hold", hint="Use `wrp upgrade` to re-encode them.")
    if layout.version < 13 and (op.grid_stride != 0 or op.cluster_dim != 1):
        raise WrpFormatError(f"launch of {op.kernel_key!r} has grid_stride {op.grid_stride} and cluster_dim "
                             f"{op.cluster_dim}; format {layout.version} records neither (only 0 and 1 fit)")


def _encode_launch_legacy(op: m.KernelLaunch, layout: FormatLayout, out: bytearray) -> None:
    _check_launch_fits(op, layout)
    key = op.kernel_key.encode("utf-8")
    mh = op.module_hash.encode("utf-8")
    out += OP_HEADER.pack(OpType.KERNEL_LAUNCH, _leaf_record_size(op, layout))
    common = (*op.shape, op.ndim, op.size, op.dim, op.max_blocks, op.block_dim, op.smem_bytes, int(op.is_forward),
              b"", len(key), len(mh))
    if layout.legacy_args:
        out += layout.launch.struct.pack(*common, len(op.legacy_args), len(op.handle_offsets))
        out += key
        out += mh
        for a in op.legacy_args:
            out += LEGACY_ARG.pack(a.is_array, a.ndim, a.param_index, a.region_id, a.byte_offset, *a.shape,
                                   *a.strides, a.element_size, b"")
        out += struct.pack(f"<{len(op.handle_offsets)}I", *op.handle_offsets)
        return
    out += layout.launch.struct.pack(*common, len(op.params), b"", len(op.relocations), len(op.value_data))
    _encode_launch_tail(op, layout, out, key, mh)


def _encode_launch(op: m.KernelLaunch, layout: FormatLayout, out: bytearray) -> None:
    if layout.version < 13 or op.legacy_args or op.handle_offsets:
        _encode_launch_legacy(op, layout, out)
        return
    key = op.kernel_key.encode("utf-8")
    mh = op.module_hash.encode("utf-8")
    n_params = len(op.params)
    blocks = op.params if op.is_forward else op.params + op.adjoint_params
    total = (8 + layout.launch.size + len(key) + len(mh) + 16 * len(blocks) + 24 * len(op.relocations)
             + len(op.value_data))
    out += OP_HEADER.pack(OpType.KERNEL_LAUNCH, total)
    out += layout.launch.struct.pack(*op.shape, op.ndim, op.size, op.dim, op.max_blocks, op.block_dim,
                                     op.smem_bytes, op.grid_stride, int(op.is_forward), op.cluster_dim,
                                     b"\0\0", len(key), len(mh), n_params, b"\0\0", len(op.relocations),
                                     len(op.value_data))
    _encode_launch_tail(op, layout, out, key, mh)


def _encode_launch_tail(op: m.KernelLaunch, layout: FormatLayout, out: bytearray, key: bytes, mh: bytes) -> None:
    blocks = op.params if op.is_forward else op.params + op.adjoint_params
    out += key
    out += mh
    pack_param = layout.launch_param.pack
    for p in blocks:
        out += pack_param(*p)
    pack_reloc = layout.reloc.struct.pack
    for r in op.relocations:
        out += pack_reloc(r.value_byte_offset, r.region_id, r.region_offset, r.kind, b"")
    out += op.value_data


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
