"""Codec for the ``.wrpk`` bundle: one checksummed, mmap-able file per capture.

A ``.wrpk`` holds a whole captured program, module binaries included, as a
FlatBuffer manifest (root ``Program`` of ``schema/wrp.fbs``, identifier
``"WRPK"``) followed by a 64-byte-aligned blob area with every region's
initial data and every module file.  ``schema/WRPK-FORMAT.md`` describes the
layout::

    0     header (128 bytes): magic, version, flags, manifest and blob area
          offsets and sizes, SHA-256 of the manifest, reserved zeros
    128   manifest: the FlatBuffer, then zero padding to a multiple of 64
    ...   blob area: blobs at 64-byte-aligned offsets, zero padding between;
          the file ends with the last blob

The FlatBuffer is written and read by this module directly with ``struct``
(no FlatBuffers runtime needed): one ``struct`` call per table, layouts
cached per vtable, identical strings and vectors shared, so a 10,000-launch
program encodes and decodes in about 0.1 s each.  It also lets the reader
verify as it goes: the Python FlatBuffers runtime has no verifier, so
:func:`decode_wrpk` checks every offset, length and alignment itself before
it reads, bounds the number of tables it visits (so a buffer whose offsets
alias cannot blow up) and the nesting depth.  ``tests/test_wrpk.py`` checks
both directions against the ``flatc``-generated Python code and the output
against the C++ ``flatbuffers::Verifier`` (when a compiler is available).

Large data is never copied: encoding yields region data and module binaries
as the caller's buffers (in slices of at most :data:`CHUNK` bytes), and
decoding returns ``memoryview`` slices of the input buffer.
"""

from __future__ import annotations

import contextlib
import hashlib
import struct
from operator import itemgetter, ne
from typing import Iterator, Mapping, NamedTuple, Optional

from .. import model as m
from ..errors import WrpFormatError, WrpIntegrityError, WrpModuleError, WrpVersionError
from ..model import OpType

MAGIC = b"WRPK\r\n\x1a\n"
CONTAINER_VERSION = 1
HEADER = struct.Struct("<8sIIQQQQ32s48s")
HEADER_SIZE = 128
ALIGN = 64
FILE_IDENTIFIER = b"WRPK"
#: Largest piece in which :func:`iter_wrpk_chunks` yields a blob.
CHUNK = 16 << 20
#: Deepest nesting of IF/WHILE bodies the decoder accepts.
MAX_DEPTH = 64
#: FlatBuffers offsets are 32-bit: the manifest must stay below 2 GiB.
MAX_MANIFEST = (1 << 31) - 8
# A manifest's WRP1 records (metadata and ops) may be at most this much larger
# than the manifest (shared tables expand); wrp-replay applies the same limit.
EXPANSION_FLOOR = 64 << 20
EXPANSION_FACTOR = 64

assert HEADER.size == HEADER_SIZE

_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_HH = struct.Struct("<HH")
_H = struct.Struct("<H")
_PARAM = struct.Struct("<HHIII")
_RELOC = struct.Struct("<IiQB7s")
_LEGACY = struct.Struct("<BBHiQ4q4qI4s")  # LegacyArg: format 3's 88-byte argument descriptor
_ZERO7 = bytes(7)


def _align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


# ---------------------------------------------------------------------------
# The schema, table by table: (field, kind, default) in slot order.
#
# Scalar kinds carry their struct code; the others are offsets to a string,
# vector, table or union (one slot each; a union's type is its own u8 field).
# tests/test_wrpk.py checks every entry against the flatc-generated code.
# ---------------------------------------------------------------------------

_SCALARS = {"bool": "B", "u8": "B", "u16": "H", "i32": "i", "u32": "I", "u64": "Q", "f64": "d",
            "recipe": "7s"}
_SIZES = {"B": 1, "H": 2, "i": 4, "I": 4, "Q": 8, "d": 8, "7s": 7}
_ALIGNS = {"B": 1, "H": 2, "i": 4, "I": 4, "Q": 8, "d": 8, "7s": 1}
#: Offset kinds: "str", "bytes" ([ubyte]), "u32v" ([uint]), "i32v" ([int]), "params" ([LaunchParam]),
#: "relocs" ([Relocation]), "blob" (Blob table), "union" (the Op value), "ops" ([Operation]),
#: "t:<Table>" (a vector of tables), "table:<Table>" (one table), "i64v" ([long]).
#: "legacy" ([LegacyArg], format 3's argument descriptors).
_OFFSET_KINDS = {"str", "bytes", "u32v", "i32v", "i64v", "params", "relocs", "legacy", "blob", "union", "ops"}

_R, _O = "i32", "u64"  # region id, byte offset (the common pair of op fields)

TABLES: dict = {
    "Blob": [("offset", "u64", 0), ("length", "u64", 0), ("sha256", "bytes", None)],
    "Module": [
        ("module_hash", "str", None), ("module_name", "str", None), ("binary_filename", "str", None),
        ("target_arch", "u32", 0), ("binary_digest", "str", None), ("source_filename", "str", None),
        ("source_digest", "str", None), ("binary_kind", "u8", 0), ("fallback_reason", "u8", 1),
        ("recipe", "recipe", _ZERO7), ("binary", "blob", None), ("source", "blob", None)],
    "Kernel": [
        ("kernel_key", "str", None), ("module_hash", "str", None), ("forward_name", "str", None),
        ("backward_name", "str", None), ("forward_smem_bytes", "u32", 0), ("backward_smem_bytes", "u32", 0),
        ("block_dim", "u32", 0)],
    "Binding": [("name", "str", None), ("region_id", "u32", 0)],
    "Mesh": [
        ("num_points", "i32", 0), ("num_tris", "i32", 0), ("support_winding_number", "bool", 0),
        ("bvh_constructor", "u8", 0), ("bvh_leaf_size", "u16", 1), ("points_region_id", "u32", 0),
        ("indices_region_id", "u32", 0), ("velocities_region_id", "u32", 0), ("original_ptr", "u64", 0)],
    "PointerLocation": [("region_id", "u32", 0), ("offset", "u64", 0), ("stride", "u64", 0), ("count", "u64", 0)],
    "Region": [("region_id", "u32", 0), ("element_size", "u32", 1), ("size", "u64", 0),
               ("has_initial_data", "bool", 0), ("data", "blob", None)],
    "KernelLaunch": [
        ("shape", "u32v", None), ("ndim", "i32", 0), ("size", "u64", 0), ("dim", "u64", 0),
        ("max_blocks", "i32", 0), ("block_dim", "i32", 0), ("smem_bytes", "i32", 0), ("grid_stride", "i32", 0),
        ("is_forward", "bool", 1), ("cluster_dim", "u8", 1), ("kernel_key", "str", None),
        ("module_hash", "str", None), ("params", "params", None), ("adjoint_params", "params", None),
        ("relocations", "relocs", None), ("value_data", "bytes", None), ("legacy_args", "legacy", None),
        ("handle_offsets", "u32v", None)],
    "MemcpyH2D": [("dst_region_id", _R, 0), ("dst_offset", _O, 0), ("data", "bytes", None)],
    "MemcpyD2H": [],
    "MemcpyD2D": [("dst_region_id", _R, 0), ("src_region_id", _R, 0), ("dst_offset", _O, 0),
                  ("src_offset", _O, 0), ("size", "u64", 0)],
    "Memset": [("region_id", _R, 0), ("value", "i32", 0), ("offset", _O, 0), ("size", "u64", 0)],
    "Alloc": [("region_id", _R, 0), ("size", "u64", 0)],
    "If": [("cond_region_id", _R, 0), ("cond_offset", _O, 0), ("then_ops", "ops", None),
           ("else_ops", "ops", None)],
    "While": [("cond_region_id", _R, 0), ("cond_offset", _O, 0), ("body", "ops", None)],
    "Scan": [("dst_region_id", _R, 0), ("src_region_id", _R, 0), ("dst_offset", _O, 0), ("src_offset", _O, 0),
             ("length", "u32", 0), ("in_stride", "i32", 0), ("out_stride", "i32", 0), ("type_len", "i32", 0),
             ("dtype", "u8", 0), ("inclusive", "bool", 0)],
    "Memtile": [("region_id", _R, 0), ("offset", _O, 0), ("count", "u64", 0), ("value", "bytes", None)],
    "SegmentedSort": [
        ("keys_region_id", _R, 0), ("values_region_id", _R, 0), ("segstart_region_id", _R, 0),
        ("segend_region_id", _R, 0), ("keys_offset", _O, 0), ("values_offset", _O, 0),
        ("segstart_offset", _O, 0), ("segend_offset", _O, 0), ("count", "u32", 0), ("num_segments", "u32", 0),
        ("dtype", "u8", 0)],
    "RadixSort": [
        ("keys_region_id", _R, 0), ("values_region_id", _R, 0), ("keys_offset", _O, 0), ("values_offset", _O, 0),
        ("count", "u32", 0), ("begin_bit", "i32", 0), ("end_bit", "i32", 0), ("value_size", "i32", 0),
        ("dtype", "u8", 0)],
    "RunlengthEncode": [
        ("values_region_id", _R, 0), ("run_values_region_id", _R, 0), ("run_lengths_region_id", _R, 0),
        ("run_count_region_id", _R, 0), ("values_offset", _O, 0), ("run_values_offset", _O, 0),
        ("run_lengths_offset", _O, 0), ("run_count_offset", _O, 0), ("value_count", "u32", 0)],
    "BsrFromTriplets": [
        ("block_size", "i32", 0), ("scalar_size_in_bytes", "i32", 0), ("row_count", "i32", 0),
        ("col_count", "i32", 0), ("nnz_upper_bound", "i32", 0), ("masked_topology", "bool", 0),
        ("scalar_zero_mask", "u64", 0), ("tpl_nnz_region_id", _R, -1), ("tpl_rows_region_id", _R, 0),
        ("tpl_columns_region_id", _R, 0), ("tpl_values_region_id", _R, -1),
        ("summed_block_offsets_region_id", _R, 0), ("summed_block_indices_region_id", _R, 0),
        ("bsr_offsets_region_id", _R, 0), ("bsr_row_counts_region_id", _R, -1),
        ("bsr_columns_region_id", _R, 0), ("bsr_nnz_region_id", _R, -1), ("tpl_nnz_offset", _O, 0),
        ("tpl_rows_offset", _O, 0), ("tpl_columns_offset", _O, 0), ("tpl_values_offset", _O, 0),
        ("summed_block_offsets_offset", _O, 0), ("summed_block_indices_offset", _O, 0),
        ("bsr_offsets_offset", _O, 0), ("bsr_row_counts_offset", _O, 0), ("bsr_columns_offset", _O, 0),
        ("bsr_nnz_offset", _O, 0)],
    "BsrTranspose": [
        ("row_count", "i32", 0), ("col_count", "i32", 0), ("nnz_upper_bound", "i32", 0),
        ("bsr_offsets_region_id", _R, 0), ("bsr_row_counts_region_id", _R, -1), ("bsr_columns_region_id", _R, 0),
        ("transposed_offsets_region_id", _R, 0), ("transposed_row_counts_region_id", _R, -1),
        ("transposed_columns_region_id", _R, 0), ("block_indices_region_id", _R, 0),
        ("status_region_id", _R, -1), ("bsr_offsets_offset", _O, 0), ("bsr_row_counts_offset", _O, 0),
        ("bsr_columns_offset", _O, 0), ("transposed_offsets_offset", _O, 0),
        ("transposed_row_counts_offset", _O, 0), ("transposed_columns_offset", _O, 0),
        ("block_indices_offset", _O, 0), ("status_offset", _O, 0), ("padded_tail", "i32v", None)],
    "Reduction": [
        ("input_a_region_id", _R, 0), ("input_b_region_id", _R, -1), ("output_region_id", _R, 0),
        ("count", "u32", 0), ("input_a_offset", _O, 0), ("input_b_offset", _O, 0), ("output_offset", _O, 0),
        ("input_a_stride", "i32", 0), ("input_b_stride", "i32", 0), ("type_len", "i32", 0), ("kind", "u8", 0),
        ("dtype", "u8", 0)],
    "BvhRefit": [("bvh_id", "u64", 0), ("constructor_type", "i32", -1)],
    "BvhRebuild": [("bvh_id", "u64", 0), ("constructor_type", "i32", 0)],
    "HashGridUpdate": [
        ("grid_id", "u64", 0), ("cell_width", "f64", 0.0), ("points_region_id", _R, 0),
        ("groups_region_id", _R, -1), ("points_offset", _O, 0), ("groups_offset", _O, 0),
        ("point_count", "i32", 0), ("points_stride", "i32", 0), ("groups_stride", "i32", 0),
        ("grid_type", "u8", 0), ("has_groups", "bool", 0)],
    "Operation": [("op_type", "u8", 0), ("op", "union", None)],
    # wrpkit's annotations (the nested FlatBuffer in Program.annotations); verified, not decoded.
    "DataType": [("name", "str", None), ("scalar", "u8", 0), ("shape", "u32v", None), ("size", "u32", 0),
                 ("fields", "t:StructField", None)],
    "StructField": [("name", "str", None), ("offset", "u32", 0), ("type", "table:DataType", None)],
    "ArraySignature": [("name", "str", None), ("dtype", "table:DataType", None), ("shape", "i64v", None),
                       ("strides", "i64v", None), ("byte_offset", "u64", 0), ("is_input", "bool", 0),
                       ("is_output", "bool", 0)],
    "KernelArgument": [("name", "str", None), ("type", "str", None), ("value_size", "u32", 0),
                       ("dtype", "table:DataType", None), ("ndim", "u32", 0), ("access", "u8", 0)],
    "KernelSignature": [("kernel_key", "str", None), ("module_hash", "str", None),
                        ("arguments", "t:KernelArgument", None)],
    "ModuleDigest": [("binary_filename", "str", None), ("sha256", "bytes", None), ("size", "u64", 0)],
    "Annotations": [("producer", "str", None), ("signature", "t:ArraySignature", None),
                    ("kernel_signatures", "t:KernelSignature", None), ("module_digests", "t:ModuleDigest", None)],
    "Program": [
        ("format_version", "u32", 18), ("warp_version", "str", None), ("device_type", "u8", 1),
        ("target_arch", "u32", 0), ("modules", "t:Module", None), ("kernels", "t:Kernel", None),
        ("bindings", "t:Binding", None), ("meshes", "t:Mesh", None),
        ("pointer_locations", "t:PointerLocation", None), ("regions", "t:Region", None), ("ops", "ops", None),
        ("annotations", "bytes", None)],
}

#: Schema table name of each op type (union member order = Warp op number).
OP_TABLES = {
    OpType.KERNEL_LAUNCH: "KernelLaunch", OpType.MEMCPY_H2D: "MemcpyH2D", OpType.MEMCPY_D2H: "MemcpyD2H",
    OpType.MEMCPY_D2D: "MemcpyD2D", OpType.MEMSET: "Memset", OpType.ALLOC: "Alloc", OpType.IF: "If",
    OpType.WHILE: "While", OpType.SCAN: "Scan", OpType.MEMTILE: "Memtile", OpType.SEGMENTED_SORT: "SegmentedSort",
    OpType.RADIX_SORT: "RadixSort", OpType.RUNLENGTH_ENCODE: "RunlengthEncode",
    OpType.BSR_FROM_TRIPLETS: "BsrFromTriplets", OpType.BSR_TRANSPOSE: "BsrTranspose",
    OpType.REDUCTION: "Reduction", OpType.BVH_REFIT: "BvhRefit", OpType.BVH_REBUILD: "BvhRebuild",
    OpType.HASH_GRID_UPDATE: "HashGridUpdate",
}


def _is_offset(kind: str) -> bool:
    return kind in _OFFSET_KINDS or kind.startswith(("t:", "table:"))


def field_names(table: str) -> list:
    """Field names of a schema table, in slot order."""
    return [f for f, _, _ in TABLES[table]]


# ---------------------------------------------------------------------------
# Encoding: a back-to-front FlatBuffer builder specialised for this schema
# ---------------------------------------------------------------------------

class _NotDefault:
    """A default that no value equals: such fields are always written."""

    def __ne__(self, other):
        return True

    def __eq__(self, other):
        return False

    __hash__ = object.__hash__


_ALWAYS = _NotDefault()


class _EncSpec:
    __slots__ = ("name", "fields", "defaults", "getter", "children", "plans", "unhashable")

    def __init__(self, name: str):
        self.name = name
        self.fields = TABLES[name]
        # Floats are always written so that -0.0 and NaN payloads survive.
        self.defaults = tuple(_ALWAYS if k == "f64" else (None if _is_offset(k) else d)
                              for _, k, d in self.fields)
        names = [f for f, _, _ in self.fields]
        self.getter = _tuple_getter(names, attr=True)
        self.children = [(i, k) for i, (_, k, _) in enumerate(self.fields) if _is_offset(k) and k != "blob"]
        self.plans: dict = {}
        # Fields whose model values are lists or byte views (see _frozen).
        self.unhashable = [i for i, (_, k, _) in enumerate(self.fields) if k in ("bytes", "params", "relocs", "legacy")
                           or k.endswith("v")]


def _tuple_getter(keys, attr=False):
    """A C-speed function returning a tuple of the given attributes or items, whatever their number."""
    if not keys:
        return lambda obj: ()
    if attr:
        from operator import attrgetter  # noqa: PLC0415
        g = attrgetter(*keys)
    else:
        g = itemgetter(*keys)
    if len(keys) == 1:
        return lambda obj: (g(obj),)
    return g


_ENC = {name: _EncSpec(name) for name in TABLES}


class _Plan:
    """The byte layout of one table for one set of present fields."""

    __slots__ = ("struct", "order", "offsets", "size", "align", "vtable")

    def __init__(self, spec: _EncSpec, mask: tuple):
        present = []
        for i, ((_, kind, _), here) in enumerate(zip(spec.fields, mask)):
            if here:
                code = "I" if _is_offset(kind) else _SCALARS[kind]
                present.append((i, code, _is_offset(kind)))
        eights = [p for p in present if _SIZES[p[1]] == 8]
        fours = [p for p in present if _SIZES[p[1]] == 4]
        twos = [p for p in present if _SIZES[p[1]] == 2]
        ones = [p for p in present if _SIZES[p[1]] in (1, 7)]
        layout = []
        fmt = "<i"
        off = 4
        if eights:
            if fours:
                layout.append(fours.pop(0))
            else:
                fmt += "4x"
                off = 8
        layout += eights + fours + twos + ones
        slot_off = {}
        offsets = []
        for k, (i, code, is_off) in enumerate(layout):
            slot_off[i] = off
            if is_off:
                offsets.append((k, off))
            fmt += code
            off += _SIZES[code]
        self.struct = struct.Struct(fmt)
        assert self.struct.size == off
        self.order = _tuple_getter([i for i, _, _ in layout])
        self.offsets = offsets
        self.size = off
        self.align = 8 if eights else 4
        nslots = max(slot_off) + 1 if slot_off else 0
        self.vtable = struct.pack(f"<HH{nslots}H", 4 + 2 * nslots, off,
                                  *(slot_off.get(s, 0) for s in range(nslots)))


class _Builder:
    """Builds a FlatBuffer from the end towards the start, like flatc's builders.

    Objects are kept as chunks in writing order; the buffer is their reverse.
    A position is an object's distance from the end of the buffer ("E"), which
    does not change as more is written before it; alignment of E equals
    alignment of the final absolute position because the finished buffer's
    size is a multiple of 8.
    """

    def __init__(self):
        self.chunks: list = []
        self.size = 0
        self.shared: dict = {}
        self.vtables: dict = {}

    def place(self, data, align: int, rem: int = 0) -> int:
        """Write ``data`` so that its start E is ``rem`` modulo ``align``; return that E."""
        size = self.size + len(data)
        pad = (rem - size) % align
        if pad:
            self.chunks.append(bytes(pad))
        self.chunks.append(data)
        self.size = size + pad
        return self.size

    def vector(self, key, count: int, payload: bytes, align8: bool = False, share: bool = True) -> int:
        """Write ``[u32 count][payload]`` (shared with an identical earlier vector)."""
        if share:
            e = self.shared.get(key)
            if e is not None:
                return e
        e = self.place(_U32.pack(count) + payload, 8 if align8 else 4, 4 if align8 else 0)
        if share:
            self.shared[key] = e
        return e

    def string(self, s: str) -> Optional[int]:
        if not s:
            return None
        e = self.shared.get(s)
        if e is None:
            b = s.encode("utf-8")
            e = self.place(_U32.pack(len(b)) + b + b"\0", 4)
            self.shared[s] = e
        return e

    def bytes_vec(self, data) -> Optional[int]:
        if data is None:
            return None
        b = bytes(data)
        if not b:
            return None
        return self.vector(("b", b), len(b), b)

    def table(self, spec: _EncSpec, vals: list) -> int:
        """Write one table whose field values (child offsets already as E) are ``vals``."""
        mask = tuple(map(ne, vals, spec.defaults))
        plan = spec.plans.get(mask)
        if plan is None:
            plan = spec.plans[mask] = _Plan(spec, mask)
        size = self.size + plan.size
        pad = (-size) % plan.align
        e = size + pad
        ordered = list(plan.order(vals))
        for k, rel in plan.offsets:
            ordered[k] = e - rel - ordered[k]
        vt = plan.vtable
        vpos = self.vtables.get(vt)
        soff = len(vt) if vpos is None else vpos - e
        try:
            data = plan.struct.pack(soff, *ordered)
        except struct.error as exc:
            bad = [f"{spec.fields[i][0]}={vals[i]!r}" for i in range(len(vals))]
            raise WrpFormatError(f"cannot encode a {spec.name} record ({exc}): {', '.join(bad)}") from None
        if pad:
            self.chunks.append(bytes(pad))
        self.chunks.append(data)
        self.size = e
        if vpos is None:
            self.chunks.append(vt)
            self.size = e + len(vt)
            self.vtables[vt] = self.size
        return e

    def finish(self, root: int) -> bytes:
        size = self.size + 8
        pad = (-size) % 8
        e = size + pad
        if pad:
            self.chunks.append(bytes(pad))
        self.chunks.append(_U32.pack(e - root) + FILE_IDENTIFIER)
        self.size = e
        out = b"".join(reversed(self.chunks))
        assert len(out) == e
        return out


def _frozen(v):
    """A hashable stand-in for one field value (lists and byte views compare by content)."""
    if isinstance(v, list):
        return tuple(v)
    if isinstance(v, (memoryview, bytearray)):
        return bytes(v)
    return v


class _Encoder:
    """Writes the model's tables into a :class:`_Builder`."""

    def __init__(self):
        self.b = _Builder()
        self.op_tables: dict = {}  # op content -> E of its shared Operation table
        # id(op) -> E, for op objects listed many times (a shared decode);
        # the program holds every op alive while it is encoded.
        self.op_ids: dict = {}
        # (E of a Blob's sha256 vector, blob offset): where write_wrpk patches digests in.
        self.sha_slots: list = []

    def blob(self, ref) -> Optional[int]:
        if ref is None:
            return None
        off, length, sha = ref
        sha_e = self.b.vector(None, len(sha), sha, share=False) if length else None
        if length:
            self.sha_slots.append((sha_e, off))
        return self.b.table(_ENC["Blob"], [off, length, sha_e])

    def child(self, kind: str, v):
        b = self.b
        if kind == "str":
            return b.string(v)
        if kind == "bytes":
            return b.bytes_vec(v)
        if kind == "ops":
            return self.ops(v)
        if not v:
            return None
        if kind == "u32v":
            return b.vector(("I", tuple(v)), len(v), struct.pack(f"<{len(v)}I", *v))
        if kind == "i32v":
            return b.vector(("i", tuple(v)), len(v), struct.pack(f"<{len(v)}i", *v))
        if kind == "params":
            key = ("p", tuple(v))
            e = b.shared.get(key)
            if e is None:
                payload = b"".join([_PARAM.pack(*p) for p in v])
                e = b.vector(key, len(v), payload)
            return e
        if kind == "relocs":
            key = ("r", tuple(v))
            e = b.shared.get(key)
            if e is None:
                payload = b"".join([_RELOC.pack(r[0], r[1], r[2], r[3], b"") for r in v])
                e = b.vector(key, len(v), payload, align8=True)
            return e
        if kind == "legacy":
            key = ("l", tuple(v))
            e = b.shared.get(key)
            if e is None:
                payload = b"".join([_LEGACY.pack(a[0], a[1], a[2], a[3], a[4], *a[5], *a[6], a[7], b"") for a in v])
                e = b.vector(key, len(v), payload, align8=True)
            return e
        raise AssertionError(kind)

    def annotations(self, data) -> Optional[int]:
        """The nested Annotations FlatBuffer, its first byte 8-aligned so that it can be read in place."""
        if not data:
            return None
        b = bytes(data)
        return self.b.vector(None, len(b), b, align8=True, share=False)

    def offsets_vector(self, es: list) -> Optional[int]:
        """A vector of uoffsets to the tables at E positions ``es``."""
        if not es:
            return None
        n = len(es)
        size = self.b.size + 4 + 4 * n
        e = size + (-size) % 4
        # Element j sits at E = e - 4 - 4j.
        payload = struct.pack(f"<{n}I", *[e - 4 - 4 * j - t for j, t in enumerate(es)])
        got = self.b.place(_U32.pack(n) + payload, 4)
        assert got == e
        return e

    def generic(self, spec: _EncSpec, obj) -> int:
        vals = list(spec.getter(obj))
        for i, kind in spec.children:
            vals[i] = self.child(kind, vals[i])
        return self.b.table(spec, vals)

    def ops(self, ops) -> Optional[int]:
        if not ops:
            return None
        op_spec = _ENC["Operation"]
        memo, ids = self.op_tables, self.op_ids
        es = []
        for op in ops:
            e_op = ids.get(id(op))
            if e_op is not None:
                es.append(e_op)
                continue
            t = op.op_type
            name = OP_TABLES.get(t)
            if name is None or t == OpType.MEMCPY_D2H:
                raise WrpFormatError(f"cannot encode op type {t}")
            spec = _ENC[name]
            # A step loop records the same launch many times: identical ops
            # (bodies excepted) share one Operation table, which readers
            # decode once.  Keys hold every field the table stores.
            key = e_op = None
            if t != OpType.IF and t != OpType.WHILE:
                key = list(spec.getter(op))
                for i in spec.unhashable:
                    key[i] = _frozen(key[i])
                key = (t, *key)
                try:
                    e_op = memo.get(key)
                except TypeError:  # a field value that cannot be hashed: do not share
                    key = None
            if e_op is None:
                if t == OpType.KERNEL_LAUNCH and len(op.shape) != 4:
                    raise WrpFormatError(f"KERNEL_LAUNCH shape must have 4 entries, found {len(op.shape)}")
                e_op = self.b.table(op_spec, [int(t), self.generic(spec, op)])
                if key is not None:
                    memo[key] = e_op
            if t != OpType.IF and t != OpType.WHILE:
                ids[id(op)] = e_op
            es.append(e_op)
        return self.offsets_vector(es)

    def program(self, prog: m.Program, module_refs: list, region_refs: list) -> bytes:
        es = {}
        mods = []
        spec = _ENC["Module"]
        for mod, (bref, sref) in zip(prog.modules, module_refs):
            r = mod.recipe
            recipe = bytes((r.debug, r.optimization_level, r.verify_fp, r.fast_math, r.fuse_fp, r.lineinfo,
                            r.arch_suffix))
            vals = [self.b.string(mod.module_hash), self.b.string(mod.module_name),
                    self.b.string(mod.binary_filename), mod.target_arch, self.b.string(mod.binary_digest),
                    self.b.string(mod.source_filename), self.b.string(mod.source_digest), mod.binary_kind,
                    mod.fallback_reason, recipe, self.blob(bref), self.blob(sref)]
            mods.append(self.b.table(spec, vals))
        es["modules"] = self.offsets_vector(mods)
        for key, table in (("kernels", "Kernel"), ("bindings", "Binding"), ("meshes", "Mesh"),
                           ("pointer_locations", "PointerLocation")):
            spec = _ENC[table]
            es[key] = self.offsets_vector([self.generic(spec, x) for x in getattr(prog, key)])
        spec = _ENC["Region"]
        regs = []
        for r, ref in zip(prog.regions, region_refs):
            regs.append(self.b.table(spec, [r.region_id, r.element_size, r.size, r.has_initial_data,
                                            self.blob(ref)]))
        es["regions"] = self.offsets_vector(regs)
        es["ops"] = self.ops(prog.ops)
        vals = [prog.format_version, self.b.string(prog.warp_version), prog.device_type, prog.target_arch,
                es["modules"], es["kernels"], es["bindings"], es["meshes"], es["pointer_locations"],
                es["regions"], es["ops"], self.annotations(prog.annotations)]
        root = self.b.table(_ENC["Program"], vals)
        return self.b.finish(root)


def _nbytes(data) -> int:
    return data.nbytes if isinstance(data, memoryview) else len(data)


class _Layout:
    """Where every blob of a program goes in the blob area."""

    def __init__(self, prog: m.Program, modules: Optional[Mapping], hashes: bool = True):
        self.items = []  # (data, offset, length) in file order
        self.region_refs = []
        self.module_refs = []
        self.end = 0

        def add(data):
            n = _nbytes(data)
            if n == 0:
                return (0, 0, b"")
            off = _align(self.end)
            sha = hashlib.sha256(data).digest() if hashes else bytes(32)
            self.items.append((data, off, n))
            self.end = off + n
            return (off, n, sha)

        for r in prog.regions:
            if r.has_initial_data:
                if r.data is None or _nbytes(r.data) != r.size:
                    got = 0 if r.data is None else _nbytes(r.data)
                    raise WrpFormatError(f"region {r.region_id} is marked as having initial data but carries "
                                         f"{got} of its {r.size} bytes")
                self.region_refs.append(add(r.data))
            else:
                self.region_refs.append(None)
        for mod in prog.modules:
            if modules is not None:
                binary = modules.get(mod.binary_filename)
                if binary is None:
                    raise WrpModuleError(f"module file {mod.binary_filename!r} (module {mod.module_name}) was "
                                         f"not given", hint="Pass every file of <stem>_modules/ the graph names.")
                source = None
                if mod.source_filename:
                    source = modules.get(mod.source_filename)
                    if source is None:
                        raise WrpModuleError(f"module source file {mod.source_filename!r} was not given")
            else:
                binary, source = mod.binary, (mod.source if mod.source_filename else None)
            self.module_refs.append((None if binary is None else add(binary),
                                     None if source is None else add(source)))


def _manifest(prog: m.Program, layout: _Layout, slots: Optional[list] = None) -> bytes:
    """The manifest; ``slots`` (a list) receives ``(byte offset in the manifest, blob offset)``
    of every blob's SHA-256, for digests filled in later."""
    if prog.annotations:
        try:
            verify_annotations(prog.annotations)
        except WrpFormatError as e:
            raise WrpFormatError(f"the program's annotations are not a valid Annotations FlatBuffer: {e}",
                                 hint="Drop or rewrite the annotations (wrpkit.formats.annotations).") from None
    enc = _Encoder()
    manifest = enc.program(prog, layout.module_refs, layout.region_refs)
    if len(manifest) > MAX_MANIFEST:
        raise WrpFormatError(f"the manifest would be {len(manifest)} bytes, above the FlatBuffers limit of 2 GiB")
    if slots is not None:
        # A vector at E starts len(manifest) - E bytes in; its payload follows the count word.
        slots.extend((len(manifest) - e + 4, off) for e, off in enc.sha_slots)
    return manifest


def _header(manifest: bytes, blob_area_size: int) -> bytes:
    boff = _align(HEADER_SIZE + len(manifest))
    return HEADER.pack(MAGIC, CONTAINER_VERSION, 0, HEADER_SIZE, len(manifest), boff, blob_area_size,
                       hashlib.sha256(manifest).digest(), bytes(48))


def iter_wrpk_chunks(program: m.Program, modules: Optional[Mapping] = None) -> Iterator:
    """The bytes of the ``.wrpk`` encoding of ``program``, as an iterator of chunks.

    The manifest is built by this call (it holds every blob's SHA-256, so
    every blob is hashed once up front, and every error is raised here, before
    anything is written); blobs are then yielded as slices of the
    caller's buffers, never copied, so a file of any size (u64 offsets) can
    be written with constant extra memory.

    Args:
        program: The program.
        modules: ``{file name: bytes-like}`` holding every module binary the
            program names (and every exported ``.cu`` source), e.g.
            :meth:`wrpkit.formats.container.Capture.module_files`.  None: take them
            from ``Module.binary`` / ``Module.source`` (a module without
            them is bundled without them).

    Raises:
        WrpModuleError: ``modules`` lacks a file the program names.
        WrpFormatError: The program cannot be encoded (inconsistent region
            data, a value out of its field's range).
    """
    layout = _Layout(program, modules)
    manifest = _manifest(program, layout)
    return _chunks(_header(manifest, layout.end), manifest, layout)


def _chunks(header: bytes, manifest: bytes, layout: _Layout) -> Iterator:
    yield header
    yield manifest
    pos = HEADER_SIZE + len(manifest)
    base = _align(pos)
    if base > pos:
        yield bytes(base - pos)
    yield from _blob_chunks(layout)


def _blob_chunks(layout: _Layout) -> Iterator:
    """The blob area: every blob at its offset, zeros between."""
    pos = 0
    for data, off, n in layout.items:
        if off > pos:
            yield bytes(off - pos)
        view = data if isinstance(data, memoryview) else memoryview(data)
        view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        if n <= CHUNK:
            yield view
        else:
            for i in range(0, n, CHUNK):
                yield view[i:i + CHUNK]
        pos = off + n


def encode_wrpk(program: m.Program, modules: Optional[Mapping] = None) -> bytes:
    """The whole ``.wrpk`` file as bytes (see :func:`iter_wrpk_chunks`)."""
    return b"".join(iter_wrpk_chunks(program, modules))


class BlobHasher:
    """SHA-256 digests of blobs, computed on worker threads (hashlib releases the GIL).

    A converter can :meth:`start` hashing a blob as soon as its bytes exist,
    before the rest of the program is decoded, and hand the hasher to
    :func:`write_wrpk`, which then waits only for what is still running.
    Blobs are known by object identity, so pass the same buffer objects the
    program holds.  Close it (or use ``with``) before the buffers go away.
    """

    def __init__(self):
        import os  # noqa: PLC0415
        from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

        self._pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="wrpkit-hash")
        self._jobs: dict = {}  # id(data) -> (data, future); data is held so that its id stays unique

    def start(self, data):
        """Start hashing ``data`` (no-op if it is already started); return its future digest."""
        job = self._jobs.get(id(data))
        if job is None:
            job = self._jobs[id(data)] = (data, self._pool.submit(_sha256, data))
        return job[1]

    def start_regions(self, regions) -> None:
        """Start hashing the initial data of ``regions``, largest first (for ``on_regions`` hooks)."""
        for r in sorted(regions, key=lambda r: -r.size):
            if r.has_initial_data and r.data is not None:
                self.start(r.data)

    def close(self) -> None:
        """Cancel what has not started and wait for what has."""
        for _, f in self._jobs.values():
            f.cancel()
        self._pool.shutdown(wait=True)
        self._jobs.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def write_wrpk(path, program: m.Program, modules: Optional[Mapping] = None, progress=None, finish=None,
               hasher: Optional[BlobHasher] = None, durable: bool = True) -> int:
    """Write a ``.wrpk`` atomically (see :func:`wrpkit.fileio.atomic_write`).

    The file holds the bytes of :func:`iter_wrpk_chunks`, but the blobs are
    hashed on worker threads while they are written.

    Args:
        path: Destination.
        program, modules: As for :func:`iter_wrpk_chunks`.
        progress: Optional callable taking the number of bytes just written
            (blobs are written in pieces of at most :data:`CHUNK` bytes).
        finish: Optional check run before the file is published (see
            :func:`wrpkit.fileio.atomic_write`); raise to abandon it.
        hasher: A :class:`BlobHasher` that may already be hashing some of
            the blobs; by default one is made for this call.
        durable: False skips the fsyncs (see :func:`wrpkit.fileio.atomic_write`).

    Returns:
        Bytes written.
    """
    import os  # noqa: PLC0415

    from ..fileio import atomic_write, pwrite_all  # noqa: PLC0415

    # The bytes are those of iter_wrpk_chunks, written in another order: the
    # blob area first while worker threads hash the blobs, then the header
    # and manifest, whose digests were left zero and are filled in once the
    # hashes are done.
    layout = _Layout(program, modules, hashes=False)
    with contextlib.ExitStack() as stack:
        if hasher is None:
            hasher = stack.enter_context(BlobHasher())
        # Largest first, so that the longest hash starts at once, before the
        # manifest is even encoded.
        digests = {off: hasher.start(data) for data, off, _ in sorted(layout.items, key=lambda it: -it[2])}

        def chunks():
            yield bytes(base)  # header and manifest: written by write_head()
            yield from _blob_chunks(layout)

        def write_head(fd: int) -> None:
            if durable:
                os.fsync(fd)  # the blobs go to disk while the last hashes finish
            final = bytearray(manifest)
            for at, off in slots:
                final[at:at + 32] = digests[off].result()
            final = bytes(final)
            pwrite_all(fd, _header(final, layout.end) + final, 0)
            if finish is not None:
                finish(fd)

        slots: list = []
        manifest = _manifest(program, layout, slots)
        base = _align(HEADER_SIZE + len(manifest))
        return atomic_write(path, chunks(), progress, write_head, durable=durable)


def _sha256(data) -> bytes:
    return hashlib.sha256(data).digest()


def bundle_size(program: m.Program, modules: Optional[Mapping] = None) -> int:
    """Size in bytes of the ``.wrpk`` of ``program``, computed without hashing or copying blobs."""
    layout = _Layout(program, modules, hashes=False)
    manifest = _manifest(program, layout)
    return _align(HEADER_SIZE + len(manifest)) + layout.end


def module_files(program: m.Program) -> dict:
    """``{file name: bytes-like}`` of the module binaries and sources a program carries
    (as decoded from a ``.wrpk`` or JSON); modules without them are left out."""
    out = {}
    for mod in program.modules:
        if mod.binary is not None:
            out[mod.binary_filename] = mod.binary
        if mod.source_filename and mod.source is not None:
            out[mod.source_filename] = mod.source
    return out


# ---------------------------------------------------------------------------
# Decoding: a verifying FlatBuffer reader specialised for this schema
# ---------------------------------------------------------------------------

class _Bad(Exception):
    """A structural error at manifest offset ``pos``; ``parts`` is the field path, innermost first."""

    def __init__(self, message: str, pos: int, part: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.pos = pos
        self.parts = [part] if part else []


class _DecSpec:
    __slots__ = ("name", "fields", "defaults", "bools", "children", "slots")

    def __init__(self, name: str):
        self.name = name
        self.fields = TABLES[name]
        self.defaults = tuple(None if _is_offset(k) else (None if k == "recipe" else d)
                              for _, k, d in self.fields)
        self.bools = [i for i, (_, k, _) in enumerate(self.fields) if k == "bool"]
        self.children = [(i, f, k) for i, (f, k, _) in enumerate(self.fields) if _is_offset(k)]


_DEC = {name: _DecSpec(name) for name in TABLES}
_EMPTY = {"str": "", "bytes": b"", "u32v": (), "i32v": (), "i64v": ()}
_LIST_KINDS = {"params", "relocs", "legacy", "ops"}


class _DecPlan:
    __slots__ = ("struct", "getter", "size", "children")


class _Reader:
    def __init__(self, buf, max_depth: int, verifier_depth: bool = False):
        self.buf = buf
        self.n = len(buf)
        # flatbuffers::Verifier semantics (the Annotations buffer, which C++
        # checks with the Verifier): every table entered counts one level,
        # the root included, instead of only table-valued fields.
        self.vdepth = 0 if verifier_depth else None
        self.plans: dict = {}
        self.strings: dict = {}
        self.cache: dict = {}
        # Operation table position -> decoded op: a shared table decodes once,
        # into one object (ops from a .wrpk may alias; treat them as read-only).
        self.op_objects: dict = {}
        # Table visits: the Annotations buffer follows flatbuffers::Verifier
        # (every visit counts, at most size/4 + 1).  In the manifest, tables
        # of identical ops are shared and a step loop visits one per launch;
        # what bounds that walk is op_refs below, and this cap only mirrors
        # the one wrp-replay gives its Verifier (2 x size + 8), which no
        # manifest within op_refs reaches.
        self.budget = self.n // 4 + 1 if verifier_depth else 2 * self.n + 8
        # Operation vector entries walked, in all: a body vector shared by
        # many IF/WHILE tables is walked once per table, so without this a
        # small manifest could take minutes to walk before the expansion
        # limit could refuse it.  wrp-replay applies the same bound.
        self.op_refs = self.n // 4 + 1
        self.depth = 0
        self.max_depth = max_depth
        self.blobs: list = []  # (path, name, offset, length, sha256, manifest pos)

    # -- tables ---------------------------------------------------------------

    def plan(self, spec: _DecSpec, vt: int, mod8: int, pos: int) -> _DecPlan:
        buf, n = self.buf, self.n
        # The rules of flatbuffers::Verifier, which wrp-replay's reader applies (one verdict per
        # file): the vtable's size field and the whole vtable lie in the buffer, at an even
        # offset; a vtable too short to hold a field slot has no fields (every field absent); the
        # table size a vtable declares bounds nothing, each field is bounds-checked on its own.
        if vt < 0 or vt & 1 or vt + 2 > n:
            raise _Bad(f"{spec.name} table's vtable at manifest offset {vt} is out of bounds or misaligned", pos)
        vsize = _H.unpack_from(buf, vt)[0]
        if vsize & 1 or vt + vsize > n:
            raise _Bad(f"{spec.name} vtable size {vsize} is invalid or runs past the manifest", vt)
        nslots = max(0, (vsize - 4) // 2)
        offs = struct.unpack_from(f"<{nslots}H", buf, vt + 4) if nslots else ()
        present = []
        for i, (fname, kind, _) in enumerate(spec.fields):
            off = offs[i] if i < nslots else 0
            if not off:
                continue
            code = "I" if _is_offset(kind) else _SCALARS[kind]
            size = _SIZES[code]
            if off < 4:
                raise _Bad(f"field lies inside its {spec.name} table's vtable offset", vt + 4 + 2 * i, fname)
            if (mod8 + off) % _ALIGNS[code]:
                raise _Bad(f"field is misaligned for its {size}-byte type", vt + 4 + 2 * i, fname)
            present.append((off, i, code, kind))
        present.sort()
        fmt = "<"
        cur = 0
        for off, i, code, _ in present:
            if off < cur:
                raise _Bad(f"fields of a {spec.name} table overlap", vt, spec.fields[i][0])
            fmt += f"{off - cur}x" if off > cur else ""
            fmt += code
            cur = off + _SIZES[code]
        p = _DecPlan()
        p.struct = struct.Struct(fmt)
        where = {i: k for k, (_, i, _, _) in enumerate(present)}
        nraw = len(present)
        p.getter = _tuple_getter([where.get(i, nraw + i) for i in range(len(spec.fields))])
        rel = {i: off for off, i, _, _ in present}
        p.children = [(i, f, k, rel.get(i, 0)) for i, f, k in spec.children]
        p.size = max(4, cur)  # the table's own offset and its fields: what is read, bounds-checked below
        return p

    def table(self, pos: int, spec: _DecSpec) -> list:
        if pos & 3 or pos + 4 > self.n:
            raise _Bad(f"{spec.name} table at manifest offset {pos} is out of bounds or misaligned", pos)
        self.budget -= 1
        if self.budget < 0:
            raise _Bad("the buffer refers to more tables than it can hold (aliased offsets)", pos)
        if self.vdepth is not None:
            self.vdepth += 1
            if self.vdepth > self.max_depth:
                raise _Bad(f"tables are nested deeper than {self.max_depth} levels", pos)
        vt = pos - _I32.unpack_from(self.buf, pos)[0]
        key = (spec.name, vt, pos & 7)
        plan = self.plans.get(key)
        if plan is None:
            plan = self.plans[key] = self.plan(spec, vt, pos & 7, pos)
        if pos + plan.size > self.n:
            raise _Bad(f"{spec.name} table's fields ({plan.size} bytes) run past the manifest", pos)
        vals = list(plan.getter(plan.struct.unpack_from(self.buf, pos) + spec.defaults))
        for i in spec.bools:
            v = vals[i]
            if v is not None and v > 1:
                raise _Bad(f"boolean must be 0 or 1, found {v}", pos, spec.fields[i][0])
            vals[i] = bool(v)
        for i, fname, kind, rel in plan.children:
            if rel:
                try:
                    vals[i] = self.child(pos + rel, vals[i], kind)
                except _Bad as e:
                    e.parts.append(fname)
                    raise
            elif kind in _LIST_KINDS or kind[0] == "t":
                vals[i] = []
            else:
                vals[i] = _EMPTY.get(kind)
        if self.vdepth is not None:
            self.vdepth -= 1
        return vals

    # -- everything an offset can point to -----------------------------------

    def target(self, at: int, u: int, what: str) -> int:
        t = at + u
        if u == 0 or u >= 1 << 31 or t >= self.n:
            raise _Bad(f"offset {u} to the {what} points outside the manifest", at)
        return t

    def vec(self, at: int, u: int, elem: int, align: int = 4, what: str = "vector") -> tuple:
        t = self.target(at, u, what)
        if t & 3 or (t + 4) % align or t + 4 > self.n:
            raise _Bad(f"{what} at manifest offset {t} is misaligned or out of bounds", at)
        count = _U32.unpack_from(self.buf, t)[0]
        if t + 4 + count * elem > self.n:
            raise _Bad(f"{what} of {count} elements runs past the manifest", t)
        return t + 4, count

    def child(self, at: int, u: int, kind: str):
        buf = self.buf
        if kind == "str":
            s = self.strings.get(at + u)
            if s is not None:
                return s
            start, count = self.vec(at, u, 1, what="string")
            end = start + count
            if end >= self.n or buf[end] != 0:
                raise _Bad("string lacks its terminating zero byte", end)
            try:
                s = str(buf[start:end], "utf-8")
            except UnicodeDecodeError as e:
                raise _Bad(f"string is not valid UTF-8 ({e.reason})", start) from None
            self.strings[at + u] = s
            return s
        if kind == "bytes":
            start, count = self.vec(at, u, 1, what="byte vector")
            return buf[start:start + count]
        if kind == "ops":
            return self.ops(at, u)
        if kind == "union":
            return self.target(at, u, "op")
        if kind == "blob":
            pos = self.target(at, u, "Blob table")
            off, length, sha = self.table(pos, _DEC["Blob"])
            return off, length, sha, pos
        if kind.startswith("table:"):
            spec = _DEC[kind[6:]]
            if self.vdepth is not None:  # counted in table()
                self.table(self.target(at, u, f"{spec.name} table"), spec)
                return None
            self.depth += 1
            if self.depth > self.max_depth:
                raise _Bad(f"tables are nested deeper than {self.max_depth} levels", at)
            self.table(self.target(at, u, f"{spec.name} table"), spec)
            self.depth -= 1
            return None
        if kind[0] == "t":
            spec = _DEC[kind[2:]]
            start, count = self.vec(at, u, 4, what=f"{spec.name} vector")
            out = []
            make = _MAKERS.get(spec.name, _discard)
            for j, v in enumerate(struct.unpack_from(f"<{count}I", buf, start)):
                try:
                    p = self.target(start + 4 * j, v, f"{spec.name} table")
                    out.append(make(self, self.table(p, spec), p))
                except _Bad as e:
                    e.parts.append(f"[{j}]")
                    raise
            return out
        key = (kind, at + u)
        got = self.cache.get(key)
        if got is not None:
            return list(got) if isinstance(got, tuple) and kind in _LIST_KINDS else got
        if kind == "u32v" or kind == "i32v":
            start, count = self.vec(at, u, 4, what="vector")
            got = struct.unpack_from(f"<{count}{'I' if kind == 'u32v' else 'i'}", buf, start)
        elif kind == "i64v":
            start, count = self.vec(at, u, 8, 8, what="vector")
            got = struct.unpack_from(f"<{count}q", buf, start)
        elif kind == "params":
            start, count = self.vec(at, u, 16, what="LaunchParam vector")
            got = tuple(map(m.LaunchParam._make, struct.iter_unpack("<HHIII", buf[start:start + 16 * count])))
        elif kind == "relocs":
            start, count = self.vec(at, u, 24, 8, what="Relocation vector")
            got = []
            for j, (vbo, rid, roff, rkind, pad) in enumerate(struct.iter_unpack("<IiQB7s",
                                                                                  buf[start:start + 24 * count])):
                if pad != _ZERO7:
                    raise _Bad("struct padding must be zero", start + 24 * j + 17, f"[{j}]")
                got.append(m.Relocation(vbo, rid, roff, rkind))
            got = tuple(got)
        elif kind == "legacy":
            start, count = self.vec(at, u, 88, 8, what="LegacyArg vector")
            got = []
            for j, v in enumerate(_LEGACY.iter_unpack(buf[start:start + 88 * count])):
                if v[-1] != b"\0\0\0\0":
                    raise _Bad("struct padding must be zero", start + 88 * j + 84, f"[{j}]")
                if v[0] > 1:
                    raise _Bad(f"is_array must be 0 or 1, found {v[0]}", start + 88 * j, f"[{j}]")
                got.append(m.LegacyArg(v[0], v[1], v[2], v[3], v[4], tuple(v[5:9]), tuple(v[9:13]), v[13]))
            got = tuple(got)
        else:  # pragma: no cover
            raise AssertionError(kind)
        self.cache[key] = got
        return list(got) if kind in _LIST_KINDS else got

    def ops(self, at: int, u: int) -> list:
        start, count = self.vec(at, u, 4, what="Operation vector")
        self.depth += 1
        if self.depth > self.max_depth + 1:  # the top-level list is depth 1
            raise _Bad(f"IF/WHILE bodies are nested deeper than {self.max_depth} levels", at)
        self.op_refs -= count
        if self.op_refs < 0:
            raise _Bad(f"the operation lists hold more than {self.n // 4 + 1} entries in all (a quarter of the "
                       "manifest's size; a body shared by several IF/WHILE ops counts each time): tables or "
                       "vectors are referenced over and over", at)
        out = []
        op_spec = _DEC["Operation"]
        for j, v in enumerate(struct.unpack_from(f"<{count}I", self.buf, start)):
            try:
                p = self.target(start + 4 * j, v, "Operation table")
                op = self.op_objects.get(p)
                if op is not None:
                    out.append(op)
                    continue
                t, where = self.table(p, op_spec)
                cls = m.OP_CLASSES.get(t)
                if cls is None:
                    what = "reserved by Warp (MEMCPY_D2H)" if t == OpType.MEMCPY_D2H else (
                        "NONE" if t == 0 else "unknown")
                    raise _Bad(f"op type {t} is {what}", p, "op_type")
                if where is None:
                    raise _Bad(f"op of type {OpType(t).name} has no table", p, "op")
                spec = _DEC[OP_TABLES[t]]
                vals = self.table(where, spec)
                op = _OP_MAKERS.get(t, _make_op)(cls, vals, where)
                if t != OpType.IF and t != OpType.WHILE:  # a body's nesting depth depends on where it is
                    self.op_objects[p] = op
                out.append(op)
            except _Bad as e:
                e.parts.append(f"[{j}]")
                raise
        self.depth -= 1
        return out


# -- model construction, one function per table ------------------------------

def _blob(rd: _Reader, obj, attr: str, ref, name: str) -> None:
    """Note a blob; ``obj.attr`` gets its view of the file once the blob area is checked."""
    if ref is not None:
        off, length, sha, pos = ref
        rd.blobs.append((obj, attr, name, off, length, bytes(sha), pos))


def _make_module(rd: _Reader, v: list, pos: int) -> m.Module:
    recipe = m.CudaCompileRecipe(*v[9]) if v[9] is not None else m.CudaCompileRecipe()
    mod = m.Module(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], recipe)
    if v[11] is not None and not v[5]:
        raise _Bad("module carries a source blob but has no source_filename", pos, "source")
    _blob(rd, mod, "binary", v[10], f"module {v[2]}")
    _blob(rd, mod, "source", v[11], f"module source {v[5]}")
    return mod


def _make_region(rd: _Reader, v: list, pos: int) -> m.Region:
    rid, esize, size, has, data = v
    if has != (data is not None):
        raise _Bad(f"region {rid} has_initial_data is {has} but its data blob is "
                   f"{'present' if data is not None else 'absent'}", pos, "data")
    if data is not None and data[1] != size:
        raise _Bad(f"region {rid} data blob is {data[1]} bytes, the region {size}", data[3], "data")
    r = m.Region(rid, esize, size, has)
    _blob(rd, r, "data", data, f"region {rid} initial data")
    return r


def _make_kernel(rd, v, pos):
    return m.Kernel(*v)


def _make_binding(rd, v, pos):
    return m.Binding(*v)


def _make_mesh(rd, v, pos):
    return m.Mesh(*v)


def _make_ptrloc(rd, v, pos):
    return m.PointerLocation(*v)


def _discard(rd, v, pos):
    return None


_MAKERS = {"Module": _make_module, "Region": _make_region, "Kernel": _make_kernel, "Binding": _make_binding,
           "Mesh": _make_mesh, "PointerLocation": _make_ptrloc}


def _make_op(cls, v, pos):
    return cls(*v, at=pos)


def _make_launch(cls, v, pos):
    if len(v[0]) != 4:
        raise _Bad(f"shape must have 4 entries, found {len(v[0])}", pos, "shape")
    v[0] = tuple(v[0])
    v[17] = list(v[17])
    if v[16] and (v[12] or v[13] or v[14] or len(v[15])):
        raise _Bad("a launch with format-3 argument descriptors has no params, relocations or value data", pos,
                   "legacy_args")
    if v[8]:
        if v[13]:
            raise _Bad("a forward launch must not have adjoint params", pos, "adjoint_params")
    elif len(v[13]) != len(v[12]):
        raise _Bad(f"an adjoint launch needs one adjoint param per param ({len(v[12])}), found {len(v[13])}",
                   pos, "adjoint_params")
    return cls(*v, at=pos)


def _make_memtile(cls, v, pos):
    if not len(v[3]):
        raise _Bad("MEMTILE value must not be empty", pos, "value")
    v[3] = bytes(v[3])
    return cls(*v, at=pos)


def _make_bsr_transpose(cls, v, pos):
    v[-1] = tuple(v[-1])
    return cls(*v, at=pos)


_OP_MAKERS = {OpType.KERNEL_LAUNCH: _make_launch, OpType.MEMTILE: _make_memtile,
              OpType.BSR_TRANSPOSE: _make_bsr_transpose}


def _fail(e: _Bad, base: int, cls=WrpFormatError, root: str = "manifest"):
    path = ""
    for part in reversed(e.parts):
        path += part if part.startswith("[") or not path else "." + part
    hint = ("The bundle is corrupted or was not written by a conforming writer." if root == "manifest" else
            "The annotations are corrupted or were not written by wrpkit; recapture, or convert with wrpkit.")
    raise cls(e.message, field=f"{root}.{path}" if path else root, offset=base + e.pos, hint=hint) from None


class WrpkHeader(NamedTuple):
    """The fields of a ``.wrpk`` header (magic and reserved bytes checked, not kept)."""

    container_version: int
    flags: int
    manifest_offset: int
    manifest_size: int
    blob_area_offset: int
    blob_area_size: int
    manifest_sha256: bytes


def _as_bytes_view(data) -> memoryview:
    buf = memoryview(data)
    if buf.format != "B" or buf.ndim != 1:
        buf = buf.cast("B")
    return buf


def read_header(data) -> WrpkHeader:
    """Read and check the 128-byte header of a ``.wrpk`` (step 1 of the format's reader checks).

    Args:
        data: The whole file (its size is checked against the header).

    Raises:
        WrpVersionError: Another container version.
        WrpFormatError: Any other header field is wrong, or the file's size does
            not match the header (truncated, trailing bytes).
    """
    buf = _as_bytes_view(data)
    size = len(buf)
    hint = "The file is truncated or is not a .wrpk bundle."
    if size < HEADER_SIZE:
        raise WrpFormatError(f"file is {size} bytes, too small for the {HEADER_SIZE}-byte WRPK header",
                             field="header", offset=0, hint=hint)
    magic, version, flags, moff, msize, boff, bsize, msha, reserved = HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        kind = "a WRP1 .wrp capture" if magic[:4] == b"WRP1" else "not a .wrpk bundle"
        raise WrpFormatError(f"bad magic {magic!r}, expected {MAGIC!r}: {kind}", field="header.magic", offset=0,
                             hint="A magic mangled as b'WRPK\\n\\x1a\\n' means a text-mode transfer; copy the "
                                  "file in binary mode." if magic[:4] == b"WRPK" else None)
    if version != CONTAINER_VERSION:
        raise WrpVersionError(f"container version {version} is not supported (this wrpkit reads "
                              f"{CONTAINER_VERSION})", field="header.container_version", offset=8,
                              hint="Upgrade wrpkit, or rebuild the bundle with this one.")
    if flags != 0:
        raise WrpFormatError(f"flags must be 0, found {flags:#x}", field="header.flags", offset=12)
    if any(reserved):
        raise WrpFormatError("reserved bytes must be zero", field="header.reserved", offset=80)
    if moff != HEADER_SIZE:
        raise WrpFormatError(f"manifest must start at byte {HEADER_SIZE}, found {moff}",
                             field="header.manifest_offset", offset=16)
    if msize < 8 or msize > MAX_MANIFEST:
        raise WrpFormatError(f"manifest size {msize} is not between 8 bytes and 2 GiB",
                             field="header.manifest_size", offset=24)
    if boff != _align(HEADER_SIZE + msize):
        raise WrpFormatError(f"blob area must start at byte {_align(HEADER_SIZE + msize)} (the manifest's end "
                             f"rounded up to {ALIGN}), found {boff}", field="header.blob_area_offset", offset=32)
    if boff > size or bsize != size - boff:
        raise WrpFormatError(f"file is {size} bytes but its header describes {boff + bsize} bytes "
                             f"({'truncated' if boff + bsize > size else 'trailing bytes'})",
                             field="header.blob_area_size", offset=40, hint=hint)
    return WrpkHeader(version, flags, moff, msize, boff, bsize, msha)


class DeferredChecksum(NamedTuple):
    """A region-data blob whose SHA-256 the caller of :func:`decode_wrpk` must verify."""

    region_id: int
    name: str  # "region 3 initial data"
    field: str  # "regions[0].data"
    offset: int  # of the blob in the file
    sha256: bytes

    def matches(self, data) -> bool:
        """True when ``data`` (the blob's bytes, or a copy of them) has the recorded SHA-256."""
        return _sha256(data) == self.sha256

    def error(self) -> WrpIntegrityError:
        """The error to raise when :meth:`matches` is False."""
        return _blob_mismatch(self.name, self.field, self.offset)


def _blob_mismatch(name: str, field: str, offset: int) -> WrpIntegrityError:
    """The error for a blob whose bytes do not have their recorded SHA-256."""
    return WrpIntegrityError(f"SHA-256 of {name} does not match: the bundle was altered or corrupted",
                             field=field, offset=offset, hint="Rebuild the bundle from the original capture.")


class BackgroundVerification:
    """Verify :class:`DeferredChecksum` s on a worker thread while the caller
    writes or loads the same data (hashlib releases the GIL).

    Args:
        checks: ``(DeferredChecksum, data)`` pairs; ``data`` is the region's
            bytes as the caller uses them (a copy, ideally).
    """

    def __init__(self, checks):
        import threading  # noqa: PLC0415

        self._failure: Optional[WrpIntegrityError] = None
        self._thread = threading.Thread(target=self._run, args=(list(checks),), name="wrpkit-verify",
                                        daemon=True)
        self._thread.start()

    def _run(self, checks) -> None:
        for check, data in checks:
            if not check.matches(data):
                self._failure = check.error()
                return

    def wait(self) -> None:
        """Wait until every checksum is verified.

        Raises:
            WrpIntegrityError: The first region whose data does not match.
        """
        self._thread.join()
        if self._failure is not None:
            raise self._failure


def decode_wrpk(data, *, verify_checksums: bool = True, max_depth: int = MAX_DEPTH,
                deferred: Optional[list] = None) -> m.Program:
    """Decode a ``.wrpk`` file's bytes into a :class:`~wrpkit.model.Program`.

    Every header field, the manifest's SHA-256, the whole FlatBuffer (every
    offset, length and alignment), the blob area's layout and zero padding
    and, unless ``verify_checksums`` is False, every blob's SHA-256 are
    checked before the program is returned.

    Args:
        data: The whole file (``bytes``, ``mmap``, ``memoryview``...).  Blob
            fields of the result (``Region.data``, ``Module.binary``,
            ``Module.source``) and launch value data are zero-copy views of it.
        verify_checksums: Verify every blob's SHA-256 (default).  False
            skips only those hashes, for trusted files where speed matters;
            the header and manifest are always verified.
        max_depth: Deepest IF/WHILE nesting accepted.
        deferred: A list, for a loader that copies region data anyway:
            region-data blobs that no mesh reads are then not hashed here;
            a :class:`DeferredChecksum` for each is appended instead, and
            the caller must verify them (on its copy, which also closes the
            window in which the file could change) before it uses the
            program.  Module blobs, and regions meshes read, are always
            verified here, before any code can load.

    Operations that share one table in the manifest (wrpkit's writer shares
    identical ops) decode into one shared object: treat decoded programs as
    read-only, or copy an op before changing it.

    Raises:
        WrpIntegrityError: The manifest's or a blob's SHA-256 does not match;
            the message names the blob (e.g. "region 3 initial data").
        WrpVersionError: Another container version, or an APIC format
            version this wrpkit does not read.
        WrpFormatError: Anything else malformed, naming the field and byte.
    """
    buf = _as_bytes_view(data)
    h = read_header(buf)
    msize, boff, bsize, msha = h.manifest_size, h.blob_area_offset, h.blob_area_size, h.manifest_sha256
    mend = HEADER_SIZE + msize
    if any(buf[mend:boff]):
        raise WrpFormatError("padding after the manifest must be zero", field="manifest_padding", offset=mend)
    manifest = buf[HEADER_SIZE:mend]
    if hashlib.sha256(manifest).digest() != msha:
        raise WrpIntegrityError("SHA-256 of the manifest does not match the header: the bundle was altered or "
                                "corrupted", field="manifest", offset=HEADER_SIZE,
                                hint="Rebuild the bundle from the original capture.")
    if bytes(manifest[4:8]) != FILE_IDENTIFIER:
        raise WrpFormatError(f"FlatBuffer identifier is {bytes(manifest[4:8])!r}, expected {FILE_IDENTIFIER!r}",
                             field="manifest.file_identifier", offset=HEADER_SIZE + 4)

    rd = _Reader(manifest, max_depth)
    try:
        root = rd.target(0, _U32.unpack_from(manifest, 0)[0], "Program table")
        prog = _make_program(rd, rd.table(root, _DEC["Program"]), root)
    except _Bad as e:
        _fail(e, HEADER_SIZE)
    except (struct.error, IndexError, ValueError, TypeError, UnicodeDecodeError, OverflowError) as e:
        # Defence in depth: every read above is bounds-checked first.
        raise WrpFormatError(f"malformed manifest ({type(e).__name__}: {e})", field="manifest",
                             offset=HEADER_SIZE) from None
    _check_expansion(prog, msize)
    _check_blobs(rd, prog, buf, boff, bsize, verify_checksums, deferred)
    return prog


def _check_expansion(prog: m.Program, manifest_size: int) -> None:
    """Refuse a manifest whose shared tables would expand into huge WRP1 records.

    A FlatBuffer may reference one table or vector from many places, so a
    small manifest can describe an enormous program.  The records (metadata
    and ops, not region data) may be at most :data:`EXPANSION_FLOOR` plus
    :data:`EXPANSION_FACTOR` times the manifest's size, the limit
    wrp-replay applies too.
    """
    from . import wrp1# noqa: PLC0415

    layout = wrp1.LAYOUTS.get(prog.format_version)
    if layout is None:  # an unsupported version is reported when it is used
        return
    limit = EXPANSION_FLOOR + EXPANSION_FACTOR * manifest_size
    size = wrp1.metadata_section_size(prog, layout) + wrp1.ops_section_size(prog, layout)
    if size > limit:
        raise WrpFormatError(f"the program's records would take {size} bytes as WRP1, more than {limit} "
                             f"(64 MiB + {EXPANSION_FACTOR} times the manifest's size): tables or vectors are "
                             "referenced over and over", field="manifest", offset=HEADER_SIZE,
                             hint="The bundle was not written by wrpkit or was crafted; do not load it.")


def _make_program(rd: _Reader, v: list, pos: int) -> m.Program:
    (fmt, warp_version, device_type, target_arch, modules, kernels, bindings, meshes, ptrs, regions, ops,
     annotations) = v
    from .wrp1_layout import LAYOUTS  # noqa: PLC0415

    if fmt not in LAYOUTS:
        raise WrpVersionError(f"APIC format version {fmt} is not supported (this wrpkit reads {sorted(LAYOUTS)})",
                              field="manifest.format_version",
                              hint="Recapture the graph with Warp 1.19.0, which writes format 18.")
    if device_type not in (0, 1):
        raise _Bad(f"device type must be 0 (CUDA) or 1 (CPU), found {device_type}", pos, "device_type")
    if (device_type == m.DeviceType.CPU) != (target_arch == 0) or target_arch > 0x7FFFFFFF:
        raise _Bad(f"target arch {target_arch} does not fit device type {m.DeviceType(device_type).name}",
                   pos, "target_arch")
    last = 0
    for i, r in enumerate(regions):
        if r.region_id <= last:
            raise _Bad(f"region id {r.region_id} is not above the previous id {last} (ids must be unique, "
                       f"ascending and >= 1)", pos, f"regions[{i}].region_id")
        last = r.region_id
    if len(annotations):
        try:
            _verify_nested(annotations, rd.max_depth)
        except _Bad as e:
            e.parts.append("annotations")
            e.message = f"the nested Annotations FlatBuffer is malformed: {e.message} (at byte {e.pos} of it)"
            e.pos = pos
            raise
    prog = m.Program(fmt, warp_version, device_type, target_arch, modules, kernels, bindings, meshes, ptrs,
                     regions, ops, bytes(annotations))
    # The strings a .wrp's decoder checks, held to the same rules (wrp-replay checks them on the
    # WRP1 image it builds from a bundle): one verdict for a bundle in both routes.
    from . import wrp1  # noqa: PLC0415

    wrp1.check_strings(prog)
    return prog


def _verify_nested(data, max_depth: int) -> None:
    # As wrp-replay's flatbuffers::Verifier (annotations.cpp): tables nest at
    # most max_depth deep, root included, and at most len/4 + 1 tables are
    # visited, so shared tables cannot make a small buffer expensive to read.
    buf = memoryview(data)
    rd = _Reader(buf, max_depth, verifier_depth=True)
    if len(buf) < 8:
        raise _Bad(f"{len(buf)} bytes are too few for a FlatBuffer", 0)
    rd.table(rd.target(0, _U32.unpack_from(buf, 0)[0], "Annotations table"), _DEC["Annotations"])


def encode_annotations_buffer(annotations) -> bytes:
    """Encode wrpkit's annotations as an ``Annotations`` FlatBuffer (identifier ``"WRPK"``).

    The same struct-based builder as the manifest, so that no FlatBuffers
    runtime (nor the numpy it imports, about 0.2 to 1 s) is needed to write
    annotations.  Empty strings and vectors are left out, as absent fields
    read as empty.

    Args:
        annotations: A :class:`wrpkit.formats.annotations.Annotations` (any
            object with the schema's field names as attributes, nested alike).

    Returns:
        The buffer's bytes.

    Raises:
        WrpFormatError: A value does not fit its field.
    """
    enc = _Encoder()
    b = enc.b

    def node(name: str, obj) -> int:
        spec = _ENC[name]
        vals = list(spec.getter(obj))
        for i, kind in spec.children:
            v = vals[i]
            if kind.startswith("t:"):
                vals[i] = enc.offsets_vector([node(kind[2:], x) for x in v]) if v else None
            elif kind.startswith("table:"):
                vals[i] = node(kind[6:], v) if v is not None else None
            elif kind == "i64v":
                vals[i] = b.vector(("q", tuple(v)), len(v), struct.pack(f"<{len(v)}q", *v), align8=True) if v else None
            else:
                vals[i] = enc.child(kind, v)
        return b.table(spec, vals)

    try:
        return b.finish(node("Annotations", annotations))
    except struct.error as e:
        raise WrpFormatError(f"cannot encode the annotations: {e}", field="annotations") from None


def verify_annotations(data, max_depth: int = MAX_DEPTH) -> None:
    """Check that ``data`` is a well-formed ``Annotations`` FlatBuffer, as the C++ verifier would.

    Raises:
        WrpFormatError: It is not; the message names the field.
    """
    try:
        _verify_nested(data, max_depth)
    except _Bad as e:
        _fail(e, 0, root="annotations")
        raise AssertionError from None  # pragma: no cover
    except (struct.error, IndexError, ValueError, TypeError, UnicodeDecodeError, OverflowError) as e:
        raise WrpFormatError(f"malformed Annotations FlatBuffer ({type(e).__name__}: {e})") from None


def _check_blobs(rd: _Reader, prog: m.Program, buf, boff: int, bsize: int, verify: bool,
                 deferred: Optional[list] = None) -> None:
    # Name each blob by its place in the model.
    index = {id(r): f"regions[{i}]" for i, r in enumerate(prog.regions)}
    index.update((id(mod), f"modules[{i}]") for i, mod in enumerate(prog.modules))
    entries = []
    for obj, attr, name, off, length, sha, pos in rd.blobs:
        path = f"{index[id(obj)]}.{attr}"
        at = HEADER_SIZE + pos
        if length == 0:
            if off or sha:
                raise WrpFormatError(f"empty blob of {name} must have offset 0 and no SHA-256", field=path,
                                     offset=at)
        else:
            if len(sha) != 32:
                raise WrpFormatError(f"SHA-256 of {name} must be 32 bytes, found {len(sha)}",
                                     field=path + ".sha256", offset=at)
            if off % ALIGN:
                raise WrpFormatError(f"blob offset {off} of {name} is not a multiple of {ALIGN}",
                                     field=path + ".offset", offset=at)
            if off > bsize or length > bsize - off:
                raise WrpFormatError(f"blob of {name} ({length} bytes at {off}) runs past the "
                                     f"{bsize}-byte blob area", field=path + ".length", offset=at)
            entries.append((off, length, path, name, sha, at))
        setattr(obj, attr, buf[boff + off:boff + off + length])
    # The blobs tile the blob area in offset order: each at the next 64-byte boundary, zeros between.
    entries.sort()
    pos = 0
    for off, length, path, name, _, at in entries:
        if off != _align(pos):
            what = "overlaps the previous blob" if off < pos else "leaves a gap after the previous blob"
            raise WrpFormatError(f"blob of {name} at {off} {what} (expected at {_align(pos)})",
                                 field=path + ".offset", offset=at)
        if any(buf[boff + pos:boff + off]):
            raise WrpFormatError("padding between blobs must be zero", field="blob_area", offset=boff + pos)
        pos = off + length
    if pos != bsize:
        raise WrpFormatError(f"the blobs end at {pos} but the blob area is {bsize} bytes",
                             field="header.blob_area_size", offset=40)
    if verify:
        if deferred is not None:
            mesh_regions = {rid for me in prog.meshes
                            for rid in (me.points_region_id, me.indices_region_id, me.velocities_region_id)}
            ids = {f"regions[{i}].data": r.region_id for i, r in enumerate(prog.regions)
                   if r.region_id not in mesh_regions}
            later = [e for e in entries if e[2] in ids]
            deferred.extend(DeferredChecksum(ids[path], name, path, boff + off, sha)
                            for off, _, path, name, sha, _ in later)
            entries = [e for e in entries if e[2] not in ids]
        for off, length, path, name, sha, at in entries:
            if _sha256(buf[boff + off:boff + off + length]) != sha:
                raise _blob_mismatch(name, path, boff + off)


__all__ = [
    "MAGIC", "CONTAINER_VERSION", "HEADER_SIZE", "ALIGN", "TABLES", "OP_TABLES", "iter_wrpk_chunks",
    "encode_wrpk", "write_wrpk", "BlobHasher", "decode_wrpk", "read_header", "WrpkHeader", "bundle_size", "module_files",
    "verify_annotations", "encode_annotations_buffer", "field_names", "DeferredChecksum", "BackgroundVerification", "EXPANSION_FLOOR", "EXPANSION_FACTOR",
]
