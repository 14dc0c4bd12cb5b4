"""The schema of ``.wrpk`` manifests as the codec walks it, and the header's constants.

:data:`TABLES` (each table's fields as ``(name, kind, default)`` in slot
order, which the struct-based builder (:mod:`.builder`) and verifying reader
(:mod:`.reader`) walk) is generated from ``schema/wrp.fbs`` into
:mod:`.schema_tables` by ``tools/gen_wrpk_tables.py``; ``tests/formats/test_wrpk.py``
fails if regenerating changes it, and checks every entry against the
``flatc``-generated Python code.  Hand-written here: the header's layout,
the kinds' struct codes, the fixed layouts of the schema's structs
(LaunchParam, Relocation, LegacyArg, CudaCompileRecipe).  :data:`OP_TABLES` is spelled
from the op types' names.
"""

from __future__ import annotations

import struct
from operator import itemgetter

from ...apic_types import OpType
from .schema_tables import TABLES  # generated from schema/wrp.fbs

MAGIC = b"WRPK\r\n\x1a\n"
#: The container version this wrpkit writes (schema/WRPK-FORMAT.md "Versioning").
CONTAINER_VERSION = 2
#: Every container version this wrpkit reads: 1 (every blob 64-byte aligned) and
#: 2 (large region data placed so that a replay maps its file pages, see below).
CONTAINER_VERSIONS = (1, 2)
HEADER = struct.Struct("<8sIIQQQQ32s48s")
HEADER_SIZE = 128
ALIGN = 64
#: Container version 2: a region-data blob of at least MAP_MIN_BLOB bytes starts at
#: the first blob-area offset at or after the previous blob's end that is congruent,
#: modulo MAP_ALIGN, to the offset of that region's data in the WRP1 MEMORY section.
#: Then the data's file pages line up with its place in the WRP1 image (the image is
#: placed in memory to match), and a replay maps them instead of copying them.  16 KiB
#: covers 4 KiB and 16 KiB pages; 256 KiB bounds the padding at 1/16 of the data.
MAP_ALIGN = 16384
MAP_MIN_BLOB = 256 << 10
MAP_FROM_VERSION = 2
#: Chunk digests (``Blob.chunk_length``/``chunk_sha256``): a reader checks that a set
#: chunk_length is a power of two of at least MIN_DIGEST_CHUNK; the writer gives every blob
#: of at least MIN_DIGEST_CHUNKS chunks of DIGEST_CHUNK bytes (16 MiB) a digest per chunk, so
#: that a replay can verify one large region's data on several cores (32 bytes per 4 MiB:
#: 8 KiB of manifest per GiB).
MIN_DIGEST_CHUNK = 64 << 10
DIGEST_CHUNK = 4 << 20
MIN_DIGEST_CHUNKS = 4
#: Header fields: (name, byte offset, size), as HEADER packs them.
HEADER_FIELDS = (("magic", 0, 8), ("container_version", 8, 4), ("flags", 12, 4), ("manifest_offset", 16, 8),
                 ("manifest_size", 24, 8), ("blob_area_offset", 32, 8), ("blob_area_size", 40, 8),
                 ("manifest_sha256", 48, 32), ("reserved", 80, 48))
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
assert [o for _, o, _ in HEADER_FIELDS] == [sum(n for _, _, n in HEADER_FIELDS[:i]) for i in range(len(HEADER_FIELDS))]
assert sum(n for _, _, n in HEADER_FIELDS) == HEADER_SIZE

_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_H = struct.Struct("<H")
_PARAM = struct.Struct("<HHIII")
_RELOC = struct.Struct("<IiQB7s")
_LEGACY = struct.Struct("<BBHiQ4q4qI4s")  # LegacyArg: format 3's 88-byte argument descriptor
_ZERO7 = bytes(7)


def _align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def memory_data_offsets(regions) -> dict:
    """``{region_id: offset of its initial data in the WRP1 MEMORY section}`` for the regions with data.

    The MEMORY section is a u32 count, then per region its 24-byte record and, when it has
    initial data, ``size`` bytes (schema/WRP1-FORMAT.md).
    """
    out, pos = {}, 4
    for r in regions:
        pos += 24
        if r.has_initial_data:
            out[r.region_id] = pos
            pos += r.size
    return out


def chunk_count(length: int, chunk_length: int) -> int:
    """How many chunk digests a blob of ``length`` bytes has (0 when ``chunk_length`` is 0)."""
    return -(-length // chunk_length) if chunk_length else 0


def place_blob(end: int, length: int, memory_offset, version: int = CONTAINER_VERSION) -> int:
    """Blob-area offset of the next blob, given where the previous one ended (the tiling rule).

    Args:
        end: End of the previous blob (0 for the first).
        length: The blob's length.
        memory_offset: For region data, its offset in the WRP1 MEMORY section
            (:func:`memory_data_offsets`); None for any other blob.
        version: The container version whose rule applies.
    """
    if version >= MAP_FROM_VERSION and memory_offset is not None and length >= MAP_MIN_BLOB:
        return end + (memory_offset - end) % MAP_ALIGN
    return _align(end)


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

def _table_name(t: OpType) -> str:
    """The schema table of an op type: its name in CamelCase, a word with a digit kept upper case."""
    return "".join(w.upper() if any(c.isdigit() for c in w) else w.capitalize() for w in t.name.split("_"))


#: Schema table name of each op type (union member order = Warp op number), spelled from its name
#: as the schema spells it (tests/formats/test_wrpk.py holds each to the op's model fields).
OP_TABLES = {t: _table_name(t) for t in OpType}


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


__all__ = ["MAGIC", "CONTAINER_VERSION", "CONTAINER_VERSIONS", "MAP_ALIGN", "MAP_MIN_BLOB", "MAP_FROM_VERSION",
           "MIN_DIGEST_CHUNK", "DIGEST_CHUNK", "MIN_DIGEST_CHUNKS", "chunk_count",
           "HEADER_FIELDS", "memory_data_offsets", "place_blob", "HEADER", "HEADER_SIZE", "ALIGN", "FILE_IDENTIFIER", "CHUNK", "MAX_DEPTH",
           "MAX_MANIFEST", "EXPANSION_FLOOR", "EXPANSION_FACTOR", "TABLES", "OP_TABLES", "field_names"]
