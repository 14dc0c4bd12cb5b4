"""The schema of ``.wrpk`` manifests, table by table, and the header's constants.

A hand-written mirror of ``schema/wrp.fbs`` (not generated): each table is
its fields as ``(name, kind, default)`` in slot order, which is what the
struct-based builder (:mod:`.builder`) and verifying reader (:mod:`.reader`)
walk.  ``tests/test_wrpk.py`` checks every entry against the
``flatc``-generated Python code in ``wrpkit/formats/fbs/``, so a schema
change that is not mirrored here fails the tests.

Scalar kinds carry their struct code; the others are offsets to a string,
vector, table or union (one slot each; a union's type is its own u8 field).
"""

from __future__ import annotations

import struct
from operator import itemgetter

from ...model import OpType

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
