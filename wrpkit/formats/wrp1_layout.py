"""Byte layouts of the WRP1 records that differ between APIC format versions.

Warp 1.13 to 1.19 wrote WRP1 formats 3, 10, 14, 15, 16 and 18.  The file
header, the section table, the memory section and the op headers never
changed; the launch record, argument encoding and some metadata records did.
Everything version-specific lives in one :class:`FormatLayout` per format, so
an older format is added as one more entry of :data:`LAYOUTS` (and, where a
record changed shape, one more branch in :mod:`wrpkit.formats.wrp1`).

Each fixed-size record is described as a list of ``(field, struct code)``
pairs.  Fields named ``_pad*`` are reserved bytes that must be zero; the
decoder checks them and the encoder writes zeros.  Offsets and sizes are
checked against Warp 1.19.0's ``warp/native/apic_types.h``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..model import OpType

# -- constant across versions ------------------------------------------------

MAGIC = b"WRP1"
FILE_HEADER = struct.Struct("<4sIIIQB3sI32s")  # 64 bytes
FILE_HEADER_SIZE = 64
SECTION_ENTRY = struct.Struct("<IIQQQ")  # type, flags, offset, size, uncompressed_size
SECTION_ENTRY_SIZE = 32
OP_HEADER = struct.Struct("<II")  # op_type, total_size
REGION_RECORD = struct.Struct("<IIQB7s")  # region_id, element_size, size, has_initial_data, pad

SECTION_METADATA = 1
SECTION_MEMORY = 2
SECTION_OPERATIONS = 3
#: wrpkit's annotations section ("WRPA" in file bytes).  Warp's loader skips
#: section types it does not know, so stock Warp still loads such files.
SECTION_ANNOTATIONS = 0x41505257


class RecordLayout:
    """A packed little-endian record: named fields, pads and one ``struct``.

    Args:
        name: Record name for messages.
        spec: ``[(field, struct code), ...]`` in file order, after the op header.
    """

    __slots__ = ("name", "names", "struct", "size", "pads", "content")

    def __init__(self, name: str, spec: list):
        self.name = name
        self.names = [f for f, _ in spec]
        self.struct = struct.Struct("<" + "".join(c for _, c in spec))
        self.size = self.struct.size
        self.pads = [i for i, f in enumerate(self.names) if f.startswith("_pad")]
        self.content = [f for f in self.names if not f.startswith("_pad")]


def _rec(name, spec):
    return RecordLayout(name, spec)


@dataclass(frozen=True)
class FormatLayout:
    """Everything in the WRP1 byte layout that is specific to one format version.

    Attributes:
        version: APIC format version.
        launch: The fixed part of ``APICLaunchRecord`` after the op header.
        launch_param: ``APICLaunchParamRecord``.
        reloc: ``APICLaunchPtrLocation``.
        mesh: ``APICMeshRecord``.
        pointer_location: The metadata pointer-location record.
        recipe: ``APICCudaCompileRecipe``.
        ops: ``{OpType: RecordLayout}`` for the fixed part of every other op
            (after the 8-byte op header).
    """

    version: int
    launch: RecordLayout
    launch_param: struct.Struct
    reloc: RecordLayout
    mesh: RecordLayout
    pointer_location: struct.Struct
    recipe: RecordLayout
    ops: dict


_I, _U, _Q, _B, _H, _D = "i", "I", "Q", "B", "H", "d"

LAYOUT_18 = FormatLayout(
    version=18,
    launch=_rec("KERNEL_LAUNCH", [
        ("shape", "4I"), ("ndim", _I), ("size", _Q), ("dim", _Q), ("max_blocks", _I),
        ("block_dim", _I), ("smem_bytes", _I), ("grid_stride", _I), ("is_forward", _B),
        ("cluster_dim", _B), ("_pad1", "2s"), ("kernel_key_len", _H), ("module_hash_len", _H),
        ("num_params", _H), ("_pad2", "2s"), ("num_relocs", _U), ("value_data_size", _U),
    ]),
    launch_param=struct.Struct("<HHIII"),
    reloc=_rec("relocation", [
        ("value_byte_offset", _U), ("region_id", _I), ("region_offset", _Q), ("kind", _B), ("_pad", "7s"),
    ]),
    mesh=_rec("mesh", [
        ("num_points", _I), ("num_tris", _I), ("support_winding_number", _B), ("bvh_constructor", _B),
        ("bvh_leaf_size", _H), ("points_region_id", _U), ("indices_region_id", _U),
        ("velocities_region_id", _U), ("original_ptr", _Q),
    ]),
    pointer_location=struct.Struct("<IQQQ"),
    recipe=_rec("recipe", [
        ("debug", _B), ("optimization_level", _B), ("verify_fp", _B), ("fast_math", _B), ("fuse_fp", _B),
        ("lineinfo", _B), ("arch_suffix", _B), ("_pad", "9s"),
    ]),
    ops={
        OpType.MEMCPY_H2D: _rec("MEMCPY_H2D", [
            ("dst_region_id", _I), ("_pad", "4s"), ("dst_offset", _Q), ("size", _Q)]),
        OpType.MEMCPY_D2D: _rec("MEMCPY_D2D", [
            ("dst_region_id", _I), ("src_region_id", _I), ("dst_offset", _Q), ("src_offset", _Q), ("size", _Q)]),
        OpType.MEMSET: _rec("MEMSET", [("region_id", _I), ("value", _I), ("offset", _Q), ("size", _Q)]),
        OpType.ALLOC: _rec("ALLOC", [("region_id", _I), ("_pad", "4s"), ("size", _Q)]),
        OpType.IF: _rec("IF", [
            ("cond_region_id", _I), ("_pad", "4s"), ("cond_offset", _Q), ("branch_a_size", _U),
            ("branch_a_op_count", _U), ("branch_b_size", _U), ("branch_b_op_count", _U)]),
        OpType.SCAN: _rec("SCAN", [
            ("dst_region_id", _I), ("src_region_id", _I), ("dst_offset", _Q), ("src_offset", _Q),
            ("length", _U), ("in_stride", _I), ("out_stride", _I), ("type_len", _I), ("dtype", _B),
            ("inclusive", _B), ("_pad", "2s")]),
        OpType.MEMTILE: _rec("MEMTILE", [("region_id", _I), ("srcsize", _U), ("offset", _Q), ("count", _Q)]),
        OpType.SEGMENTED_SORT: _rec("SEGMENTED_SORT", [
            ("keys_region_id", _I), ("values_region_id", _I), ("segstart_region_id", _I),
            ("segend_region_id", _I), ("keys_offset", _Q), ("values_offset", _Q), ("segstart_offset", _Q),
            ("segend_offset", _Q), ("count", _U), ("num_segments", _U), ("dtype", _B), ("_pad", "3s")]),
        OpType.RADIX_SORT: _rec("RADIX_SORT", [
            ("keys_region_id", _I), ("values_region_id", _I), ("keys_offset", _Q), ("values_offset", _Q),
            ("count", _U), ("begin_bit", _I), ("end_bit", _I), ("value_size", _I), ("dtype", _B),
            ("_pad", "3s")]),
        OpType.RUNLENGTH_ENCODE: _rec("RUNLENGTH_ENCODE", [
            ("values_region_id", _I), ("run_values_region_id", _I), ("run_lengths_region_id", _I),
            ("run_count_region_id", _I), ("values_offset", _Q), ("run_values_offset", _Q),
            ("run_lengths_offset", _Q), ("run_count_offset", _Q), ("value_count", _U), ("_pad", "4s")]),
        OpType.BSR_FROM_TRIPLETS: _rec("BSR_FROM_TRIPLETS", [
            ("block_size", _I), ("scalar_size_in_bytes", _I), ("row_count", _I), ("col_count", _I),
            ("nnz_upper_bound", _I), ("masked_topology", _B), ("_pad", "3s"), ("scalar_zero_mask", _Q),
            ("tpl_nnz_region_id", _I), ("tpl_rows_region_id", _I), ("tpl_columns_region_id", _I),
            ("tpl_values_region_id", _I), ("summed_block_offsets_region_id", _I),
            ("summed_block_indices_region_id", _I), ("bsr_offsets_region_id", _I),
            ("bsr_row_counts_region_id", _I), ("bsr_columns_region_id", _I), ("bsr_nnz_region_id", _I),
            ("tpl_nnz_offset", _Q), ("tpl_rows_offset", _Q), ("tpl_columns_offset", _Q),
            ("tpl_values_offset", _Q), ("summed_block_offsets_offset", _Q),
            ("summed_block_indices_offset", _Q), ("bsr_offsets_offset", _Q), ("bsr_row_counts_offset", _Q),
            ("bsr_columns_offset", _Q), ("bsr_nnz_offset", _Q)]),
        OpType.BSR_TRANSPOSE: _rec("BSR_TRANSPOSE", [
            ("row_count", _I), ("col_count", _I), ("nnz_upper_bound", _I), ("bsr_offsets_region_id", _I),
            ("bsr_row_counts_region_id", _I), ("bsr_columns_region_id", _I),
            ("transposed_offsets_region_id", _I), ("transposed_row_counts_region_id", _I),
            ("transposed_columns_region_id", _I), ("block_indices_region_id", _I), ("status_region_id", _I),
            ("bsr_offsets_offset", _Q), ("bsr_row_counts_offset", _Q), ("bsr_columns_offset", _Q),
            ("transposed_offsets_offset", _Q), ("transposed_row_counts_offset", _Q),
            ("transposed_columns_offset", _Q), ("block_indices_offset", _Q), ("status_offset", _Q)]),
        OpType.REDUCTION: _rec("REDUCTION", [
            ("input_a_region_id", _I), ("input_b_region_id", _I), ("output_region_id", _I), ("count", _U),
            ("input_a_offset", _Q), ("input_b_offset", _Q), ("output_offset", _Q), ("input_a_stride", _I),
            ("input_b_stride", _I), ("type_len", _I), ("kind", _B), ("dtype", _B), ("_pad", "2s")]),
        OpType.BVH_REFIT: _rec("BVH_REFIT", [("bvh_id", _Q), ("constructor_type", _I), ("_pad", "4s")]),
        OpType.HASH_GRID_UPDATE: _rec("HASH_GRID_UPDATE", [
            ("grid_id", _Q), ("cell_width", _D), ("points_region_id", _I), ("groups_region_id", _I),
            ("points_offset", _Q), ("groups_offset", _Q), ("point_count", _I), ("points_stride", _I),
            ("groups_stride", _I), ("grid_type", _B), ("has_groups", _B), ("_pad", "2s")]),
    },
)
# WHILE shares IF's record, BVH_REBUILD shares BVH_REFIT's.
LAYOUT_18.ops[OpType.WHILE] = LAYOUT_18.ops[OpType.IF]
LAYOUT_18.ops[OpType.BVH_REBUILD] = LAYOUT_18.ops[OpType.BVH_REFIT]

#: Layouts by format version.  Warp 1.19.0 reads and writes only 18.
LAYOUTS = {18: LAYOUT_18}

#: Fields stored as u8 0/1 in the file and as ``bool`` in the model.
BOOL_FIELDS = frozenset({"is_forward", "inclusive", "masked_topology", "has_groups", "support_winding_number"})
