"""Byte layouts of the WRP1 records that differ between APIC format versions.

Warp 1.13 to 1.19 wrote WRP1 formats 3, 10, 14, 15, 16 and 18.  The file
header, the section table, the memory section and the op headers never
changed; the launch record, argument encoding and some metadata records did.
Everything version-specific lives in one :class:`FormatLayout` per format, so
an older format is added as one more entry of :data:`LAYOUTS` (and, where a
record changed shape, one more branch in :mod:`wrpkit.formats.wrp1_decode`
and :mod:`wrpkit.formats.wrp1_encode`).
wrp-replay's C++ validator reads the same tables from
``native/src/wrp1_layouts.h``, which ``tools/gen_layout.py`` generates from
this module (rerun it after any change here; a test fails on drift).

Each fixed-size record is described as a list of ``(field, struct code)``
pairs.  Fields named ``_pad*`` are reserved bytes that must be zero; the
decoder checks them and the encoder writes zeros.  Offsets and sizes are
checked against Warp 1.19.0's ``warp/native/apic_types.h``.
"""

from __future__ import annotations

import struct

from ..records import record, replace
from ..apic_types import OpType

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

    __slots__ = ("name", "names", "struct", "size", "pads", "content", "offsets", "fields")

    def __init__(self, name: str, spec: list):
        self.name = name
        self.names = [f for f, _ in spec]
        self.struct = struct.Struct("<" + "".join(c for _, c in spec))
        self.size = self.struct.size
        self.pads = [i for i, f in enumerate(self.names) if f.startswith("_pad")]
        self.content = [f for f in self.names if not f.startswith("_pad")]
        #: ``{field: byte offset from the record's start}`` (packed: no alignment).
        self.offsets = {}
        #: ``{field: struct.Struct of that field alone}``, to read one field at its offset.
        self.fields = {}
        pos = 0
        for f, code in spec:
            self.offsets[f] = pos
            self.fields[f] = struct.Struct("<" + code)
            pos += self.fields[f].size

    def read(self, name: str, buf, base: int = 0):
        """Field ``name`` of the record at byte ``base`` of ``buf``: one value, or a tuple for an
        array field (``shape``: four int32)."""
        got = self.fields[name].unpack_from(buf, base + self.offsets[name])
        return got[0] if len(got) == 1 else got


def _rec(name, spec):
    return RecordLayout(name, spec)


@record(frozen=True)
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
            (after the 8-byte op header).  Only the op types that exist in
            this format are listed; any other op type is refused.
        releases: The Warp releases that write this format (``""`` if none does).
        loaded_by: The Warp releases whose ``capture_load`` accepts it.
        producer_version: The metadata records the producer's Warp version
            string after the format version (18 and later).
        module_extras: Module records carry binary/source digests, binary
            kind, fallback reason and compile recipe (18 and later).
        legacy_args: Launches describe their arguments with 88-byte
            descriptors (:class:`~wrpkit.model.LegacyArg`) instead of
            bindings, relocations and a value blob (format 3).
        kernels_by_key: Warp's loader keys kernel records by kernel key alone,
            so launches of one key in two modules share one record (3, 10).
        bsr_transpose_tail: BSR_TRANSPOSE records may carry the int32 tail
            (14 and later).
        bsr_nnz_region: BSR_FROM_TRIPLETS may name a ``bsr_nnz`` region
            (-1 if absent) that the replay writes the count into (13 to
            15); from 16 on Warp writes -1/0 there and ignores it.
    """

    version: int
    launch: RecordLayout
    launch_param: struct.Struct
    reloc: RecordLayout
    mesh: RecordLayout
    pointer_location: struct.Struct
    recipe: RecordLayout
    ops: dict
    releases: str = ""
    loaded_by: str = ""
    producer_version: bool = True
    module_extras: bool = True
    legacy_args: bool = False
    kernels_by_key: bool = False
    bsr_transpose_tail: bool = True
    bsr_nnz_region: bool = False

    @property
    def pointer_location_count(self) -> bool:
        """Pointer-location records carry a slot count (18 and later; before, 0 in the model)."""
        return self.pointer_location.size == struct.calcsize("<IQQQ")

    @property
    def launch_fixed_size(self) -> int:
        """Bytes of a launch record before its strings (op header included)."""
        return 8 + self.launch.size


_I, _U, _Q, _B, _H, _D = "i", "I", "Q", "B", "H", "d"

LAYOUT_18 = FormatLayout(
    version=18,
    releases="1.19.0",
    loaded_by="1.19.0",
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



# -- older formats -------------------------------------------------------------
#
# Sources: each release's warp/native/apic_types.h, checked with g++ offsetof
# (see README "Keeping captures across Warp upgrades").  Records not listed
# here are byte-identical to format 18 from the format that introduced them.

def _ops_upto(last_op: int) -> dict:
    return {t: rl for t, rl in LAYOUT_18.ops.items() if t <= last_op}


#: Format 16 (Warp 1.18.0): format 18 without the producer version, the module
#: extras and the pointer-location count.
LAYOUT_16 = replace(
    LAYOUT_18, version=16, releases="1.18.0", loaded_by="1.18.0", producer_version=False,
    module_extras=False, pointer_location=struct.Struct("<IQQ"))

#: Format 15 (Warp 1.16.0, 1.17.0): as 16, but the launch shape is int32 and
#: BSR_FROM_TRIPLETS may name a bsr_nnz region.
LAYOUT_15 = replace(
    LAYOUT_16, version=15, releases="1.16.0, 1.17.0", loaded_by="1.16.0 to 1.18.0", bsr_nnz_region=True,
    launch=_rec("KERNEL_LAUNCH", [("shape", "4i")] + [
        (n, c) for n, c in zip(LAYOUT_18.launch.names[1:], ["i", "Q", "Q", "i", "i", "i", "i", "B", "B", "2s",
                                                            "H", "H", "H", "2s", "I", "I"])]))

#: Format 14 (Warp 1.15.0): ops 1..15 only.
LAYOUT_14 = replace(LAYOUT_15, version=14, releases="1.15.0", loaded_by="1.15.0 to 1.18.0",
                    ops=_ops_upto(OpType.BSR_TRANSPOSE))

#: Format 13: accepted by Warp 1.15 to 1.18, written by no released wheel.
#: As 14, except that BSR_TRANSPOSE has no tail (the tail is "format >= 14").
LAYOUT_13 = replace(LAYOUT_14, version=13, releases="", bsr_transpose_tail=False)

#: Format 10 (Warp 1.14.0): no grid_stride/cluster_dim in launches (76-byte
#: fixed part); ops 1..8; kernel records keyed by kernel key alone.
LAYOUT_10 = replace(
    LAYOUT_14, version=10, releases="1.14.0", loaded_by="1.14.0", kernels_by_key=True, bsr_nnz_region=False,
    ops=_ops_upto(OpType.WHILE),
    launch=_rec("KERNEL_LAUNCH", [
        ("shape", "4i"), ("ndim", _I), ("size", _Q), ("dim", _Q), ("max_blocks", _I), ("block_dim", _I),
        ("smem_bytes", _I), ("is_forward", _B), ("_pad1", "3s"), ("kernel_key_len", _H),
        ("module_hash_len", _H), ("num_params", _H), ("_pad2", "2s"), ("num_relocs", _U),
        ("value_data_size", _U),
    ]))

#: Format 3 (Warp 1.13.0): 68-byte launch fixed part followed by 88-byte
#: argument descriptors and u32 handle offsets; ops 1, 2, 4, 5, 6.
LAYOUT_3 = replace(
    LAYOUT_10, version=3, releases="1.13.0", loaded_by="1.13.0", legacy_args=True,
    ops={t: rl for t, rl in LAYOUT_18.ops.items() if t in (OpType.MEMCPY_H2D, OpType.MEMCPY_D2D, OpType.MEMSET,
                                                            OpType.ALLOC)},
    launch=_rec("KERNEL_LAUNCH", [
        ("shape", "4i"), ("ndim", _I), ("size", _Q), ("dim", _Q), ("max_blocks", _I), ("block_dim", _I),
        ("smem_bytes", _I), ("is_forward", _B), ("_pad1", "3s"), ("kernel_key_len", _H),
        ("module_hash_len", _H), ("num_params", _H), ("num_handle_offsets", _H),
    ]))

#: Format 3's ``APICLaunchParamRecord`` (88 bytes, one per argument).
LEGACY_ARG_RECORD = _rec("legacy_arg", [
    ("is_array", _B), ("ndim", _B), ("param_index", _H), ("region_id", _I), ("byte_offset", _Q),
    ("shape", "4q"), ("strides", "4q"), ("element_size", _U), ("_pad", "4s")])
LEGACY_ARG = LEGACY_ARG_RECORD.struct

#: Warp's ``array_t`` (``warp/native/array.h``, 64-bit hosts) as a launch
#: argument's value bytes hold it: data and grad pointers (relocated slots),
#: ``int32 shape[4]``, ``int32 strides[4]``, ``uint16 ndim``, ``uint16 flags``.
ARRAY_RECORD = _rec("array_t", [
    ("data", _Q), ("grad", _Q), ("shape", "4i"), ("strides", "4i"), ("ndim", _H), ("flags", _H), ("_pad", "4s")])
#: ``indexedarray_t``: that ``array_t``, four index-array pointers and the view's own ``int32 shape[4]``.
INDEXED_ARRAY_RECORD = _rec("indexedarray_t", [
    ("data", _Q), ("grad", _Q), ("shape", "4i"), ("strides", "4i"), ("ndim", _H), ("flags", _H), ("_pad", "4s"),
    ("indices", "4Q"), ("index_shape", "4i")])

#: Layouts by format version: every format a Warp release wrote (3, 10, 14,
#: 15, 16, 18) and 13, which 1.15 to 1.18 load.  Warp 1.19.0 loads only 18.
LAYOUTS = {3: LAYOUT_3, 10: LAYOUT_10, 13: LAYOUT_13, 14: LAYOUT_14, 15: LAYOUT_15, 16: LAYOUT_16, 18: LAYOUT_18}

#: The format this wrpkit writes when it upgrades a capture (what Warp 1.19 loads).
CURRENT_FORMAT = 18


def describe_format(version: int) -> str:
    """``"format 16 (written by Warp 1.18.0)"`` and the like, for messages."""
    layout = LAYOUTS.get(version)
    if layout is None:
        return f"format {version} (no Warp release known to wrpkit)"
    if not layout.releases:
        return f"format {version} (written by no released Warp; loaded by Warp {layout.loaded_by})"
    return f"format {version} (written by Warp {layout.releases})"


def upgrade_message(version: int) -> str:
    """Why a capture of an older format is not replayed, and the command that converts it.

    ``"format 16 (written by Warp 1.18.0): Warp 1.19.0 loads only format 18;
    convert it with `wrp upgrade IN OUT`"``.  wrp-replay says exactly this
    (``upgrade_message`` in native/src/wrp1_validator.cpp).
    """
    layout = LAYOUTS.get(version)
    msg = (f"{describe_format(version)}: Warp {LAYOUTS[CURRENT_FORMAT].loaded_by} loads only format {CURRENT_FORMAT}; "
           "convert it with `wrp upgrade IN OUT")
    if layout is not None and layout.legacy_args:
        return msg + f" --kernels KERNELS.py` (format {version} kernels are rebuilt from their Python source)"
    return msg + "`"

#: Fields stored as u8 0/1 in the file and as ``bool`` in the model.
BOOL_FIELDS = frozenset({"is_forward", "inclusive", "masked_topology", "has_groups", "support_winding_number"})

#: Variable parts that must not be empty, ``{OpType: model field}``: a MEMTILE's value (one
#: element's bytes; its record's ``srcsize`` is nonzero).  wrp-replay's bundle reader refuses an
#: empty one as wrpkit's does (native/src/wrpk_op_writer.h, generated by tools/gen_op_writer.py).
NONEMPTY_PARTS = {OpType.MEMTILE: "value"}
