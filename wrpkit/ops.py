"""The operations of a captured program and the op table they declare.

One class per op type, field for field as Warp's APIC record (and ``schema/wrp.fbs``), each with
its entry of the op table as class data: ``REGIONS``, the region references of its record (a
:class:`RegionRef` each: which fields name the region and offset, the bytes spanned as a
:class:`~wrpkit.region_lengths.Length`, read or written).  :func:`op_table` returns the whole
table as data; :func:`walk_ops` walks an op list with its nested bodies.
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple, Optional, Union

from .records import field, fields, record
from .apic_types import ApicReductionKind, ApicScalarType, OpType
from .region_lengths import Adjacent, Field, Fixed, IfEq, Len, Length, Max, ScalarSize, Strided, TailLast

Bytes = Union[bytes, bytearray, memoryview]


class LaunchParam(NamedTuple):
    """One kernel argument's slice of ``value_data`` (``APICLaunchParamRecord``)."""

    param_index: int
    num_relocs: int
    value_offset: int
    value_size: int
    value_align: int


class LegacyArg(NamedTuple):
    """One argument of a format-3 launch (Warp 1.13's 88-byte ``APICLaunchParamRecord``).

    Format 3 describes each argument instead of recording its bytes: an array
    by region, offset, shape and strides; a scalar (struct, vector, handle)
    by its size in ``byte_offset`` and its bytes in ``shape`` and ``strides``
    (read here as eight little-endian int64).  Formats 10 and later record
    ``params``/``relocations``/``value_data`` instead.
    """

    is_array: int
    ndim: int
    param_index: int
    region_id: int
    byte_offset: int
    shape: tuple
    strides: tuple
    element_size: int

    def scalar_bytes(self) -> bytes:
        """The bytes of a scalar argument (``byte_offset`` of them, at most 64)."""
        import struct  # noqa: PLC0415

        raw = struct.pack("<8q", *self.shape, *self.strides)
        return raw[:min(self.byte_offset, 64)]


class Relocation(NamedTuple):
    """An 8-byte argument slot patched at replay (``APICLaunchPtrLocation``)."""

    value_byte_offset: int
    region_id: int
    region_offset: int
    kind: int


#: Op types whose regions no ``Length`` describes, and why: the only exceptions to the table.
LENGTHS_ELSEWHERE = {
    OpType.KERNEL_LAUNCH: "its regions are its array arguments: each range is the array descriptor's "
                          "shape and strides in the argument bytes (wrpkit.checks.effects, launch checks)",
}


#: What an op does to the bytes a region reference names.
ACCESS_MODES = ("read", "write", "readwrite")


class RegionRef(NamedTuple):
    """One region an op record points at, the bytes it spans and what the op does there.

    This is the op table's entry for one region reference: every tool that asks
    what an op reads or writes (``wrpkit.checks.effects``) reads these.  The
    byte sizes are the spans Warp's replayer resolves (``warp/native/apic.cpp``,
    ``resolve_ptr``); ``tests/formats/test_effects.py`` holds the validator's bounds
    checks to them.

    Attributes:
        role: Short name of the reference (``"dst"``, ``"keys"``), its fields' common prefix.
        region: Name of the field holding the region id.
        offset: Name of the field holding the byte offset in the region.
        length: How many bytes from ``offset`` the op touches, a :class:`Length` (data, so that
            the C++ validator's table is generated from it).
        access: ``"read"``, ``"write"`` or ``"readwrite"``, or a function of the op giving one.
        optional: A region id of -1 means the reference is absent.
    """

    role: str
    region: str
    offset: Optional[str]
    length: Length
    access: object
    optional: bool = False

    @property
    def nbytes(self):
        """``nbytes(op)``: how many bytes from ``offset`` this reference spans in ``op`` (its
        length's compiled function: ``wrp trace`` calls it for every op).

        Raises:
            LengthError: (from the call) An operand is negative or the length passes 64 bits.
        """
        return self.length.function

    def mode(self, op) -> str:
        """The access of this reference in ``op``."""
        return self.access(op) if callable(self.access) else self.access


@record(slots=True)
class Op:
    """Base of every operation; ``op_type`` is the Warp op number.

    Every op class also declares, as class data, its entry of the op table:
    ``REGIONS``, a tuple of :class:`RegionRef` (the region-id fields of its
    record, the byte range each spans, and whether the op reads or writes
    there).  A kernel launch instead takes its regions from its arguments
    (``ARGUMENT_REGIONS``).  ``tests/formats/test_op_table.py`` fails when an op type
    lacks any part of its entry.
    """

    op_type: ClassVar[OpType]
    #: The op's region references (None: not declared -- a test refuses that).
    REGIONS: ClassVar[Optional[tuple]] = None
    #: Regions come from the kernel arguments' relocations (KERNEL_LAUNCH only).
    ARGUMENT_REGIONS: ClassVar[bool] = False
    #: Record fields that hold an enum, ``{field: IntEnum}`` (tools print them by name).
    ENUM_FIELDS: ClassVar[dict] = {"dtype": ApicScalarType}
    #: The op rebuilds every region it writes from scratch, past the bytes its
    #: ranges name (BSR assembly: a region's initial bytes there are never
    #: read, so ``wrp diff`` does not count them as a difference).
    REBUILDS_OUTPUTS: ClassVar[bool] = False

    @property
    def name(self) -> str:
        return self.op_type.name


@record(slots=True)
class KernelLaunch(Op):
    """The ``KERNEL_LAUNCH`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.KERNEL_LAUNCH
    REGIONS: ClassVar[tuple] = ()
    ARGUMENT_REGIONS: ClassVar[bool] = True
    shape: tuple
    ndim: int
    size: int
    dim: int
    max_blocks: int
    block_dim: int
    smem_bytes: int
    grid_stride: int
    is_forward: bool
    cluster_dim: int
    kernel_key: str
    module_hash: str
    params: list
    adjoint_params: list
    relocations: list
    value_data: Bytes = field(repr=False)
    #: Format 3 only: the per-argument descriptors (empty in 10 and later).
    legacy_args: list = field(default_factory=list)
    #: Format 3 only: ``num_handle_offsets`` u32 entries (Warp 1.13 writes none).
    handle_offsets: list = field(default_factory=list)
    at: int = field(default=-1, compare=False, repr=False)

    def param_relocations(self, adjoint: bool = False):
        """Yield ``(param, [Relocation, ...])`` pairs in table order.

        Args:
            adjoint: Walk the adjoint bindings instead of the forward ones.
        """
        start = 0
        if adjoint:
            start = sum(p.num_relocs for p in self.params)
        for p in self.adjoint_params if adjoint else self.params:
            yield p, self.relocations[start : start + p.num_relocs]
            start += p.num_relocs


@record(slots=True)
class MemcpyH2D(Op):
    """The ``MEMCPY_H2D`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.MEMCPY_H2D
    REGIONS: ClassVar[tuple] = (
        RegionRef("dst", "dst_region_id", "dst_offset", Len("data", "size"), "write"),)
    dst_region_id: int
    dst_offset: int
    data: Bytes = field(repr=False)
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class MemcpyD2D(Op):
    """The ``MEMCPY_D2D`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.MEMCPY_D2D
    REGIONS: ClassVar[tuple] = (
        RegionRef("dst", "dst_region_id", "dst_offset", Field("size"), "write"),
        RegionRef("src", "src_region_id", "src_offset", Field("size"), "read"))
    dst_region_id: int
    src_region_id: int
    dst_offset: int
    src_offset: int
    size: int
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class Memset(Op):
    """The ``MEMSET`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.MEMSET
    REGIONS: ClassVar[tuple] = (RegionRef("region", "region_id", "offset", Field("size"), "write"),)
    region_id: int
    value: int
    offset: int
    size: int
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class Alloc(Op):
    """The ``ALLOC`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.ALLOC
    REGIONS: ClassVar[tuple] = (RegionRef("region", "region_id", None, Field("size"), "write"),)
    region_id: int
    size: int
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class If(Op):
    """The ``IF`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.IF
    REGIONS: ClassVar[tuple] = (RegionRef("cond", "cond_region_id", "cond_offset", Fixed(4), "read"),)
    cond_region_id: int
    cond_offset: int
    then_ops: list
    else_ops: list
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class While(Op):
    """The ``WHILE`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.WHILE
    REGIONS: ClassVar[tuple] = (RegionRef("cond", "cond_region_id", "cond_offset", Fixed(4), "read"),)
    cond_region_id: int
    cond_offset: int
    body: list
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class Scan(Op):
    """The ``SCAN`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.SCAN
    REGIONS: ClassVar[tuple] = (
        RegionRef("src", "src_region_id", "src_offset",
                  Strided(Field("length"), Field("in_stride"), Field("type_len"), ScalarSize("dtype")), "read"),
        RegionRef("dst", "dst_region_id", "dst_offset",
                  Strided(Field("length"), Field("out_stride"), Field("type_len"), ScalarSize("dtype")),
                  "write"))
    dst_region_id: int
    src_region_id: int
    dst_offset: int
    src_offset: int
    length: int
    in_stride: int
    out_stride: int
    type_len: int
    dtype: int
    inclusive: bool
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class Memtile(Op):
    """The ``MEMTILE`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.MEMTILE
    REGIONS: ClassVar[tuple] = (
        RegionRef("region", "region_id", "offset", Field("count") * Len("value", "srcsize"), "write"),)
    region_id: int
    offset: int
    count: int
    value: Bytes
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class SegmentedSort(Op):
    """The ``SEGMENTED_SORT`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.SEGMENTED_SORT
    # keys and values hold 2 x count elements: the second half is the sort's scratch.
    REGIONS: ClassVar[tuple] = (
        RegionRef("keys", "keys_region_id", "keys_offset", 8 * Field("count"), "readwrite"),
        RegionRef("values", "values_region_id", "values_offset", 8 * Field("count"), "readwrite"),
        # ends inferred from starts alias the starts one int32 later: the starts then span one more
        RegionRef("segstart", "segstart_region_id", "segstart_offset",
                  4 * (Field("num_segments") + Adjacent("segstart", "segend", 4)), "read"),
        RegionRef("segend", "segend_region_id", "segend_offset", 4 * Field("num_segments"), "read"))
    keys_region_id: int
    values_region_id: int
    segstart_region_id: int
    segend_region_id: int
    keys_offset: int
    values_offset: int
    segstart_offset: int
    segend_offset: int
    count: int
    num_segments: int
    dtype: int
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class RadixSort(Op):
    """The ``RADIX_SORT`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.RADIX_SORT
    REGIONS: ClassVar[tuple] = (
        RegionRef("keys", "keys_region_id", "keys_offset",
                  2 * Field("count") * ScalarSize("dtype"), "readwrite"),
        RegionRef("values", "values_region_id", "values_offset", 2 * Field("count") * Field("value_size"),
                  "readwrite"))
    keys_region_id: int
    values_region_id: int
    keys_offset: int
    values_offset: int
    count: int
    begin_bit: int
    end_bit: int
    value_size: int
    dtype: int
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class RunlengthEncode(Op):
    """The ``RUNLENGTH_ENCODE`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.RUNLENGTH_ENCODE
    REGIONS: ClassVar[tuple] = (
        RegionRef("values", "values_region_id", "values_offset", 4 * Field("value_count"), "read"),
        RegionRef("run_values", "run_values_region_id", "run_values_offset", 4 * Field("value_count"),
                  "write"),
        RegionRef("run_lengths", "run_lengths_region_id", "run_lengths_offset", 4 * Field("value_count"),
                  "write"),
        RegionRef("run_count", "run_count_region_id", "run_count_offset", Fixed(4), "write"))
    values_region_id: int
    run_values_region_id: int
    run_lengths_region_id: int
    run_count_region_id: int
    values_offset: int
    run_values_offset: int
    run_lengths_offset: int
    run_count_offset: int
    value_count: int
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class BsrFromTriplets(Op):
    """The ``BSR_FROM_TRIPLETS`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.BSR_FROM_TRIPLETS
    REBUILDS_OUTPUTS: ClassVar[bool] = True
    # A masked topology reads the destination's offsets and columns as the mask before rewriting them.
    REGIONS: ClassVar[tuple] = (
        RegionRef("tpl_nnz", "tpl_nnz_region_id", "tpl_nnz_offset", Fixed(4), "read", True),
        RegionRef("tpl_rows", "tpl_rows_region_id", "tpl_rows_offset", 4 * Field("nnz_upper_bound"), "read"),
        RegionRef("tpl_columns", "tpl_columns_region_id", "tpl_columns_offset", 4 * Field("nnz_upper_bound"),
                  "read"),
        RegionRef("tpl_values", "tpl_values_region_id", "tpl_values_offset",
                  Field("nnz_upper_bound") * Field("block_size") * Field("scalar_size_in_bytes"), "read", True),
        RegionRef("summed_block_offsets", "summed_block_offsets_region_id", "summed_block_offsets_offset",
                  4 * Field("nnz_upper_bound"), "write"),
        RegionRef("summed_block_indices", "summed_block_indices_region_id", "summed_block_indices_offset",
                  4 * Field("nnz_upper_bound"), "write"),
        RegionRef("bsr_offsets", "bsr_offsets_region_id", "bsr_offsets_offset", 4 * (Field("row_count") + 1),
                  lambda op: "readwrite" if op.masked_topology else "write"),
        RegionRef("bsr_row_counts", "bsr_row_counts_region_id", "bsr_row_counts_offset",
                  4 * Field("row_count"), "read", True),
        RegionRef("bsr_columns", "bsr_columns_region_id", "bsr_columns_offset", 4 * Field("nnz_upper_bound"),
                  lambda op: "readwrite" if op.masked_topology else "write"),
        # formats 13-15 only: where the replay writes the block count (-1 from 16 on)
        RegionRef("bsr_nnz", "bsr_nnz_region_id", "bsr_nnz_offset", Fixed(4), "write", True))
    block_size: int
    scalar_size_in_bytes: int
    row_count: int
    col_count: int
    nnz_upper_bound: int
    masked_topology: bool
    scalar_zero_mask: int
    tpl_nnz_region_id: int
    tpl_rows_region_id: int
    tpl_columns_region_id: int
    tpl_values_region_id: int
    summed_block_offsets_region_id: int
    summed_block_indices_region_id: int
    bsr_offsets_region_id: int
    bsr_row_counts_region_id: int
    bsr_columns_region_id: int
    bsr_nnz_region_id: int
    tpl_nnz_offset: int
    tpl_rows_offset: int
    tpl_columns_offset: int
    tpl_values_offset: int
    summed_block_offsets_offset: int
    summed_block_indices_offset: int
    bsr_offsets_offset: int
    bsr_row_counts_offset: int
    bsr_columns_offset: int
    bsr_nnz_offset: int
    at: int = field(default=-1, compare=False, repr=False)


#: A BSR transpose's destination capacity in blocks: the last of the capacity offsets a padded
#: destination records (from format 14), else the source's nnz bound.
_TRANSPOSE_CAPACITY = TailLast("padded_tail", Field("nnz_upper_bound"))


@record(slots=True)
class BsrTranspose(Op):
    """The ``BSR_TRANSPOSE`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.BSR_TRANSPOSE
    REBUILDS_OUTPUTS: ClassVar[bool] = True
    # A padded destination (transposed row counts given) sizes its columns by the recorded capacity tail.
    REGIONS: ClassVar[tuple] = (
        RegionRef("bsr_offsets", "bsr_offsets_region_id", "bsr_offsets_offset", 4 * (Field("row_count") + 1),
                  "read"),
        RegionRef("bsr_row_counts", "bsr_row_counts_region_id", "bsr_row_counts_offset",
                  4 * Field("row_count"), "read", True),
        RegionRef("bsr_columns", "bsr_columns_region_id", "bsr_columns_offset", 4 * Field("nnz_upper_bound"),
                  "read"),
        RegionRef("transposed_offsets", "transposed_offsets_region_id", "transposed_offsets_offset",
                  4 * (Field("col_count") + 1), "write"),
        RegionRef("transposed_row_counts", "transposed_row_counts_region_id", "transposed_row_counts_offset",
                  4 * Field("col_count"), "write", True),
        RegionRef("transposed_columns", "transposed_columns_region_id", "transposed_columns_offset",
                  4 * _TRANSPOSE_CAPACITY, "write"),
        RegionRef("block_indices", "block_indices_region_id", "block_indices_offset",
                  4 * Max(Field("nnz_upper_bound"), _TRANSPOSE_CAPACITY), "write"),
        RegionRef("status", "status_region_id", "status_offset", Fixed(4), "write", True))
    row_count: int
    col_count: int
    nnz_upper_bound: int
    bsr_offsets_region_id: int
    bsr_row_counts_region_id: int
    bsr_columns_region_id: int
    transposed_offsets_region_id: int
    transposed_row_counts_region_id: int
    transposed_columns_region_id: int
    block_indices_region_id: int
    status_region_id: int
    bsr_offsets_offset: int
    bsr_row_counts_offset: int
    bsr_columns_offset: int
    transposed_offsets_offset: int
    transposed_row_counts_offset: int
    transposed_columns_offset: int
    block_indices_offset: int
    status_offset: int
    padded_tail: tuple
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class Reduction(Op):
    """The ``REDUCTION`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.REDUCTION
    ENUM_FIELDS: ClassVar[dict] = {"dtype": ApicScalarType, "kind": ApicReductionKind}
    # SUM (kind 1) has no second input (region -1) and writes type_len scalars; INNER writes one.
    REGIONS: ClassVar[tuple] = (
        RegionRef("input_a", "input_a_region_id", "input_a_offset",
                  Strided(Field("count"), Field("input_a_stride"), Field("type_len"), ScalarSize("dtype")),
                  "read"),
        RegionRef("input_b", "input_b_region_id", "input_b_offset",
                  Strided(Field("count"), Field("input_b_stride"), Field("type_len"), ScalarSize("dtype")),
                  "read", True),
        RegionRef("output", "output_region_id", "output_offset",
                  IfEq("kind", ApicReductionKind.SUM, Field("type_len"), Fixed(1)) * ScalarSize("dtype"), "write"))
    input_a_region_id: int
    input_b_region_id: int
    output_region_id: int
    count: int
    input_a_offset: int
    input_b_offset: int
    output_offset: int
    input_a_stride: int
    input_b_stride: int
    type_len: int
    kind: int
    dtype: int
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class BvhRefit(Op):
    """The ``BVH_REFIT`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.BVH_REFIT
    #: A BVH refit works on process-local handles, not regions.
    REGIONS: ClassVar[tuple] = ()
    bvh_id: int
    constructor_type: int
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class BvhRebuild(Op):
    """The ``BVH_REBUILD`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.BVH_REBUILD
    #: A BVH rebuild works on process-local handles, not regions.
    REGIONS: ClassVar[tuple] = ()
    bvh_id: int
    constructor_type: int
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class HashGridUpdate(Op):
    """The ``HASH_GRID_UPDATE`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.HASH_GRID_UPDATE
    # Points are vec3f (12 bytes) every points_stride bytes; groups int32 every groups_stride bytes.  The
    # grid itself is a process-local handle, not a region: the op writes no region.
    REGIONS: ClassVar[tuple] = (
        RegionRef("points", "points_region_id", "points_offset",
                  Strided(Field("point_count"), Field("points_stride"), Fixed(1), Fixed(12)), "read"),
        RegionRef("groups", "groups_region_id", "groups_offset",
                  IfEq("has_groups", 0, Fixed(0), Strided(Field("point_count"), Field("groups_stride"), Fixed(1), Fixed(4))),
                  "read", True))
    grid_id: int
    cell_width: float
    points_region_id: int
    groups_region_id: int
    points_offset: int
    groups_offset: int
    point_count: int
    points_stride: int
    groups_stride: int
    grid_type: int
    has_groups: bool
    at: int = field(default=-1, compare=False, repr=False)


#: Model class of each op type that a file may hold (3 is reserved by Warp).
OP_CLASSES: dict = {
    cls.op_type: cls
    for cls in (
        KernelLaunch,
        MemcpyH2D,
        MemcpyD2D,
        Memset,
        Alloc,
        If,
        While,
        Scan,
        Memtile,
        SegmentedSort,
        RadixSort,
        RunlengthEncode,
        BsrFromTriplets,
        BsrTranspose,
        Reduction,
        BvhRefit,
        BvhRebuild,
        HashGridUpdate,
    )
}


def op_table() -> dict:
    """The op table, as data: for each op type its record fields and region references.

    Returns:
        ``{OpType: {"class": cls, "fields": [names], "regions": [RegionRef, ...],
        "argument_regions": bool, "reads": [region fields], "writes": [region fields]}}``;
        a reference whose access depends on the record (a masked BSR topology)
        is listed under both.
    """
    out = {}
    for t, cls in OP_CLASSES.items():
        refs = tuple(cls.REGIONS or ())
        reads, writes = [], []
        for r in refs:
            modes = {"readwrite"} if callable(r.access) else {r.access}
            if modes & {"read", "readwrite"}:
                reads.append(r.region)
            if modes & {"write", "readwrite"}:
                writes.append(r.region)
        out[t] = {"class": cls, "fields": op_fields(cls), "regions": list(refs),
                  "argument_regions": cls.ARGUMENT_REGIONS, "reads": reads, "writes": writes}
    return out


def op_fields(cls) -> list:
    """Names of an op class's content fields, in schema order (``at`` excluded)."""
    return [f.name for f in fields(cls) if f.name != "at"]


def nested_bodies(op: Op) -> list:
    """The nested op lists of a conditional op (empty for other ops)."""
    if isinstance(op, If):
        return [op.then_ops, op.else_ops]
    if isinstance(op, While):
        return [op.body]
    return []


def walk_ops(ops, depth: int = 0):
    """Yield ``(depth, op)`` for every op, nested bodies included, in stream order."""
    stack = [(depth, iter(ops))]
    conditional = (If, While)
    while stack:
        d, it = stack[-1]
        # The ops of one list in a loop of its own (no generator step per op beyond the yield): a
        # conditional's bodies are pushed and walked first, then this list goes on where it stopped.
        for op in it:
            if op is None:  # as next(it, None) read it: the end of this list
                break
            yield d, op
            if isinstance(op, conditional):
                # Pushed in reverse so that the first body is walked first.
                for body in reversed(nested_bodies(op)):
                    stack.append((d + 1, iter(body)))
                break
        else:
            stack.pop()
            continue
        if op is None:
            stack.pop()


__all__ = ["Bytes", "LaunchParam", "LegacyArg", "Relocation", "LENGTHS_ELSEWHERE", "ACCESS_MODES", "RegionRef",
           "Op", *(cls.__name__ for cls in OP_CLASSES.values()), "OP_CLASSES", "op_table", "op_fields",
           "nested_bodies", "walk_ops"]
