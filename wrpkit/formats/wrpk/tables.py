"""The schema of ``.wrpk`` manifests as the codec walks it, and the header's constants.

:data:`TABLES` (each table's fields as ``(name, kind, default)`` in slot
order, which the struct-based builder (:mod:`.builder`) and verifying reader
(:mod:`.reader`) walk) is generated from ``schema/wrp.fbs`` into
:mod:`.schema_tables` by ``tools/gen_wrpk_tables.py``; ``tests/test_wrpk.py``
fails if regenerating changes it, and checks every entry against the
``flatc``-generated Python code.  Hand-written here: the header's layout,
the kinds' struct codes, the fixed layouts of the schema's structs
(LaunchParam, Relocation, LegacyArg, CudaCompileRecipe) and :data:`OP_TABLES`.
"""

from __future__ import annotations

import struct
from operator import itemgetter

from ...model import OpType
from .schema_tables import TABLES  # generated from schema/wrp.fbs

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
_H = struct.Struct("<H")
_PARAM = struct.Struct("<HHIII")
_RELOC = struct.Struct("<IiQB7s")
_LEGACY = struct.Struct("<BBHiQ4q4qI4s")  # LegacyArg: format 3's 88-byte argument descriptor
_ZERO7 = bytes(7)


def _align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


# ---------------------------------------------------------------------------
# The kinds of TABLES' fields.
#
# Scalar kinds carry their struct code; the others are offsets to a string,
# vector, table or union (one slot each; a union's type is its own u8 field).
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


__all__ = ["MAGIC", "CONTAINER_VERSION", "HEADER", "HEADER_SIZE", "ALIGN", "FILE_IDENTIFIER", "CHUNK", "MAX_DEPTH",
           "MAX_MANIFEST", "EXPANSION_FLOOR", "EXPANSION_FACTOR", "TABLES", "OP_TABLES", "field_names"]
